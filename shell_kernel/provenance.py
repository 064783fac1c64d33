"""Where a saved run ran, and runs without time in them.

A run's notebook gets, in ``metadata.shell_kernel``: ``host`` (the run's
name for it: "local", the SSH host, a fleet's host name), ``hostname``,
``user``, ``os`` (``uname -srm``), ``bash_version``, the ``shell_kernel``
version, the ``kernelspec`` name and, unless --no-timing, ``started``. The
host's part comes from shell/where.bash, in the session the notebook runs
in: `run` asks with PROBE, a silent request to the kernel before the first
cell; a `run --hosts` session says it in its ready frame (ShellInfo.where).
No extra connection, and no fork where /proc/sys/kernel tells the os (bash's
`read`); `uname` where it cannot (a host without /proc, or
SHELL_KERNEL_NO_PROC set: see shell/__init__.py).

--no-timing (strip_timing) takes out everything a clock decides: nbclient's
``execution`` timestamps, ``duration_s`` and ``started``, so that two runs
of a deterministic notebook save the same bytes.
"""

from __future__ import annotations

import datetime

from . import __version__, shell

_PREFIX = "shell_kernel.provenance."
#: What ShellInfo.where holds; with bash_version, what PROBE answers.
WHERE = ("user", "hostname", "os")
_FIELDS = (*WHERE, "bash_version")
#: where.bash's function, defined again (the same code as the session's,
#: and there also in a named session that an older version started) and
#: called; builtins by name (a user's function called printf stays out of
#: it); the variables it sets are unset again.
PROBE = (shell.bash_code("where.bash") + "__shell_kernel_where; builtin printf '" + _PREFIX
         + "%s=%s\\n' user \"$__shell_kernel_where_user\" hostname \"$__shell_kernel_where_host\" "
         'bash_version "$BASH_VERSION" os "$__shell_kernel_where_os"; builtin unset -v '
         "__shell_kernel_where_user __shell_kernel_where_host __shell_kernel_where_os")
#: Keys of cell and notebook metadata.shell_kernel that hold times.
TIMING_KEYS = ("duration_s", "started")


def parse_probe(text: str) -> dict[str, str]:
    """PROBE's answer in whatever output it is part of."""
    found = {}
    for line in text.splitlines():
        if line.startswith(_PREFIX):
            key, _, value = line[len(_PREFIX):].partition("=")
            if key in _FIELDS:
                found[key] = value
    return found


def record(host: str, kernelspec: str | None, probed: dict[str, str],
           started: datetime.datetime | None) -> dict:
    """The run's provenance, for metadata.shell_kernel."""
    meta = {"host": host, **{key: probed[key] for key in _FIELDS if key in probed},
            "shell_kernel": __version__, "kernelspec": kernelspec}
    if started is not None:
        meta["started"] = started.astimezone(datetime.timezone.utc).isoformat(timespec="seconds")
    return meta


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def strip_timing(nb) -> None:
    """Take every timestamp and duration out of a run's notebook."""
    for key in TIMING_KEYS:
        nb.metadata.get("shell_kernel", {}).pop(key, None)
    for cell in nb.cells:
        cell.get("metadata", {}).pop("execution", None)
        for key in TIMING_KEYS:
            cell.get("metadata", {}).get("shell_kernel", {}).pop(key, None)
