"""Shell code that the kernel runs in (session.bash) and beside (the .sh files) the shell."""

import functools
import os
import re

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


@functools.lru_cache(maxsize=None)
def script(name: str) -> str:
    """The text of one of the shell files shipped in this package. A line
    "#include FILE" stands for FILE's text: one job of a script, kept in a
    file of its own, or helpers that several scripts share, each carrying
    its own copy (they run as `sh -c TEXT` on a host that has none of these
    files)."""
    # A plain read beside this file (the package is installed as files):
    # importlib.resources would cost the kernel's start a few milliseconds.
    # Read once per process: a fleet starts hundreds of sessions.
    with open(os.path.join(os.path.dirname(__file__), name), encoding="utf-8") as file:
        text = file.read()
    return "".join(script(line.split()[1]) if line.startswith("#include ") else line
                   for line in text.splitlines(keepends=True))


@functools.lru_cache(maxsize=None)
def bash_code(name: str, without: str | None = None) -> str:
    """script(name) without its comment lines, for bash code that every
    session's shell parses as it starts (a sixth of what that costs it);
    without: a file it includes that is left out."""
    text = script(name)
    if without is not None:
        text = text.replace(script(without), "", 1)
    return _COMMENT_LINE.sub("", text)


_COMMENT_LINE = re.compile(r"^[ \t]*#.*\n", re.M)


#: `sh -c RUN_INSTALLED shell_kernel PATH ARG...` runs the script installed on
#: the host at PATH (a session's copy of reap.sh or spool.sh), so that its
#: text is not sent again with every call; it exits NOT_INSTALLED where PATH
#: is no file.
RUN_INSTALLED = 'f=$1; shift; [ -f "$f" ] || exit 125; exec sh "$f" "$@"'
NOT_INSTALLED = 125
#: `sh -c INSTALL_AND_RUN shell_kernel PATH TEXT ARG...`: installs TEXT at
#: PATH unless it is there (its directory the user's own, not a symlink),
#: then runs it as RUN_INSTALLED does; TEXT itself where it cannot.
INSTALL_AND_RUN = '''f=$1 text=$2; shift 2
if [ ! -f "$f" ] && [ -d "${f%/*}" ] && [ ! -L "${f%/*}" ] && [ -O "${f%/*}" ]; then
  (umask 077; printf '%s' "$text" > "$f.new" && mv -f "$f.new" "$f") 2>/dev/null
fi
[ -f "$f" ] && exec sh "$f" "$@"
exec sh -c "$text" shell_kernel "$@"'''
