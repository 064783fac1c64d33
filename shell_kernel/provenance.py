"""Where a saved run ran, and runs without time in them.

A run's notebook gets, in ``metadata.shell_kernel``: ``host`` (the run's
name for it: "local", the SSH host, a fleet's host name), ``hostname``,
``user``, ``os`` (``uname -srm``), ``bash_version``, the ``shell_kernel``
version, the ``kernelspec`` name and, unless --no-timing, ``started``. The
host's part comes from PROBE, run once in the session the notebook runs in
(`run`: a silent request to the kernel before the first cell; `run --hosts`:
in the same hidden first command that sets SHELL_KERNEL_HOST): no extra
connection, and no fork where /proc/sys/kernel tells the os (bash's `read`);
`uname` where it cannot (a host without /proc, or SHELL_KERNEL_NO_PROC set:
see shell/__init__.py).

--no-timing (strip_timing) takes out everything a clock decides: nbclient's
``execution`` timestamps, ``duration_s`` and ``started``, so that two runs
of a deterministic notebook save the same bytes.
"""

from __future__ import annotations

import datetime

from . import __version__

_PREFIX = "shell_kernel.provenance."
_FIELDS = ("user", "hostname", "os", "bash_version")
_OS = "__shell_kernel_probe_os"
_KERNEL = "/proc/sys/kernel/"
#: bash 3.2-safe; builtins by name (a user's function called printf stays out
#: of it); the variables it sets are unset again. The os is what `uname -srm`
#: prints, read from the files uname's three fields come from.
PROBE = (f"if [[ -z ${{SHELL_KERNEL_NO_PROC-}} ]] && {{ builtin read -r {_OS}_s < {_KERNEL}ostype "
         f"&& builtin read -r {_OS}_r < {_KERNEL}osrelease "
         f"&& builtin read -r {_OS}_m < {_KERNEL}arch; }} 2>/dev/null; "
         f"then {_OS}=\"${_OS}_s ${_OS}_r ${_OS}_m\"; "
         f"else {_OS}=$(command uname -srm 2>/dev/null); fi; "
         "builtin printf '" + _PREFIX + "%s=%s\\n' user \"${USER:-${LOGNAME:-$(command id -un "
         "2>/dev/null)}}\" hostname \"${HOSTNAME}\" bash_version \"${BASH_VERSION}\" "
         f"os \"${_OS}\"; builtin unset -v {_OS} {_OS}_s {_OS}_r {_OS}_m")
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
