"""Named sessions on a host: what shell/launch.sh says when a kernel opens
one (durable.DurableShell), and what the kernel tells the user about them.
`python -m shell_kernel sessions` (list, kill) is sessions_command.py.

A named session is a durable session (see shell/launch.sh) found by its name
in the user's private directory on the host; it outlives the kernel, and the
next kernel started with the same name attaches to it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .backends import Attached, BackendError, SessionTaken
from .backends.channel.channels import last_line


def when(epoch: float | None) -> str:
    """Seconds since the epoch as people read them (UTC, to the second)."""
    if epoch is None:
        return "unknown time"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))
    except (ValueError, OverflowError, OSError):  # a record past what time_t holds
        return "unknown time"


def number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


@dataclass
class Opened:
    """What `launch.sh open` did."""
    pid: int  # the session's wrapper process, alive as long as its shell
    state_dir: str
    attached: Attached | None  # None: a new shell was started
    delivered: dict  # stream offsets the last kernel received (attached only)
    previous: str | None = None  # a new one replaced an ended one: how that had ended
    #: Attached to a shell that never finished its setup (the start of the
    #: kernel that launched it failed): it is to be replaced.
    unusable: bool = False


def parse_open(text: str, name: str, where: str) -> Opened:
    """The answer of `launch.sh open NAME ...` on host `where`; raises
    SessionTaken or BackendError (with a message for the user)."""
    kind, _, rest = last_line(text).partition(" ")
    if kind == "new":
        previous, pid, state_dir = (rest.split(" ", 2) + ["", ""])[:3]
        if pid.isdigit() and state_dir:
            return Opened(int(pid), state_dir, None, {}, None if previous == "-" else previous)
    elif kind == "attached":
        fields = rest.split(" ", 12)
        if len(fields) == 13 and fields[0].isdigit():
            (pid, shell, token, version, out_delivered, err_delivered, out_end, err_end,
             started_seq, started_at, done_seq, _done_status, state_dir) = fields
            delivered = {"stdout": number(out_delivered) or 0,
                         "stderr": number(err_delivered) or 0}
            ends = {"stdout": number(out_end) or 0, "stderr": number(err_end) or 0}
            if not shell.isdigit() or token == "-":
                return Opened(int(pid), state_dir, None, delivered, unusable=True)
            started, done = number(started_seq) or 0, number(done_seq) or 0
            attached = Attached(
                name=name, shell_pid=int(shell), token=token, bash_version=version,
                state_dir=state_dir, last_seq=max(started, done), running=started > done,
                started_at=number(started_at),
                backlog=any(ends[s] > delivered[s] for s in ends))
            return Opened(int(pid), state_dir, attached, delivered)
    elif kind == "held":
        raise SessionTaken(
            f"the session {name} on {where} is in use by another kernel (attached since "
            f"{when(number(rest))}): two kernels never drive one session. Close that "
            f"kernel, or start this one with --take-over to take the session from it (it is "
            "told so in its next cell). Nothing was run.")
    elif kind == "refused":
        raise BackendError(f"the session {name} on {where} cannot be used: {rest}")
    raise BackendError(f"could not open the session {name} on {where}: {text.strip()}")


def ended_message(name: str, where: str, previous: str) -> str:
    how = (f"its shell exited with status {previous}" if previous.isdigit()
           else "its shell was gone")
    return (f"The session {name} on {where} had ended while no kernel was attached ({how}), so "
            "this is a new shell: the old one's working directory, variables and jobs are gone.")


def taken_message(name: str, where: str, since: str) -> str:
    return (f"the session {name} on {where} was taken over by another kernel (at "
            f"{when(number(since))}), so this kernel no longer drives it. To take it back, "
            f"start a kernel with --session {name} --take-over")


def session_cell(seq: int, name: str) -> str:
    """A cell as the user is told about it: numbered as the session numbers
    its cells, across kernels (a kernel's execution count starts at 1)."""
    return f"cell {seq} of session {name}"


def catch_up_header(attached: Attached) -> str:
    """The stderr line before a named session's output that no kernel received."""
    cell = f"{session_cell(attached.last_seq, attached.name)} (started {when(attached.started_at)})"
    if attached.running:
        return (f"[shell_kernel] Attached to session {attached.name}: {cell} is still running; "
                "its output since the previous kernel left follows, and this cell's own code "
                "runs once it ends.\n")
    return (f"[shell_kernel] Attached to session {attached.name}: output of {cell} and of its "
            "background jobs that the previous kernel did not receive follows.\n")


def catch_up_end(attached: Attached, status: int) -> str:
    return (f"[shell_kernel] Cell {attached.last_seq} of session {attached.name} ended with "
            f"exit status {status}. This cell's own code follows.\n")
