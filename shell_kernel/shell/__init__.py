"""Shell code that the kernel runs in (session.bash) and beside (the .sh files) the shell."""

import os

#: Set (to anything) in the kernel's environment, it makes every script and
#: the session's bash code do as on a host without /proc (see pids.sh): how
#: the portable paths are tested on Linux. A local shell inherits it; on an
#: SSH host, host_words() puts it in each command's environment.
NO_PROC = "SHELL_KERNEL_NO_PROC"


def host_words() -> list[str]:
    """The words that go before every command the kernel runs on an SSH host
    (`env SHELL_KERNEL_NO_PROC=...` when the switch is on, else none): `env`
    works whatever the user's login shell is."""
    value = os.environ.get(NO_PROC)
    return ["env", f"{NO_PROC}={value}"] if value else []


def script(name: str) -> str:
    """The text of one of the shell files shipped in this package. A line
    "#include FILE" stands for FILE's text: helpers that several scripts
    share, each carrying its own copy (they run as `sh -c TEXT` on a host
    that has none of these files)."""
    # A plain read beside this file (the package is installed as files):
    # importlib.resources would cost the kernel's start a few milliseconds.
    with open(os.path.join(os.path.dirname(__file__), name), encoding="utf-8") as file:
        text = file.read()
    return "".join(script(line.split()[1]) if line.startswith("#include ") else line
                   for line in text.splitlines(keepends=True))
