"""Named sessions on a host: what shell/launch.sh says about them, for the
backends (open, attach) and for `python -m shell_kernel sessions` (list, kill).

A named session is a durable session (see shell/launch.sh) found by its name
in the user's private directory on the host; it outlives the kernel, and the
next kernel started with the same name attaches to it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .backends import Attached, Backend, BackendError, SessionTaken
from .shell import script

LAUNCH_SCRIPT = script("launch.sh")


def when(epoch: float | None) -> str:
    """Seconds since the epoch as people read them (UTC, to the second)."""
    if epoch is None:
        return "unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def _number(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _answer(text: str) -> str:
    """launch.sh's answer: its last line (rc-file noise may come before it)."""
    return text.strip("\n").rsplit("\n", 1)[-1]


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
    kind, _, rest = _answer(text).partition(" ")
    if kind == "new":
        previous, pid, state_dir = (rest.split(" ", 2) + ["", ""])[:3]
        if pid.isdigit() and state_dir:
            return Opened(int(pid), state_dir, None, {}, None if previous == "-" else previous)
    elif kind == "attached":
        fields = rest.split(" ", 12)
        if len(fields) == 13 and fields[0].isdigit():
            (pid, shell, token, version, out_delivered, err_delivered, out_end, err_end,
             started_seq, started_at, done_seq, _done_status, state_dir) = fields
            delivered = {"stdout": _number(out_delivered) or 0,
                         "stderr": _number(err_delivered) or 0}
            ends = {"stdout": _number(out_end) or 0, "stderr": _number(err_end) or 0}
            if not shell.isdigit() or token == "-":
                return Opened(int(pid), state_dir, None, delivered, unusable=True)
            started, done = _number(started_seq) or 0, _number(done_seq) or 0
            attached = Attached(
                name=name, shell_pid=int(shell), token=token, bash_version=version,
                state_dir=state_dir, last_seq=max(started, done), running=started > done,
                started_at=_number(started_at),
                backlog=any(ends[s] > delivered[s] for s in ends))
            return Opened(int(pid), state_dir, attached, delivered)
    elif kind == "held":
        raise SessionTaken(
            f"the session {name} on {where} is in use by another kernel (attached since "
            f"{when(_number(rest))}): two kernels never drive one session. Close that "
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
            f"{when(_number(since))}), so this kernel no longer drives it. To take it back, "
            f"start a kernel with --session {name} --take-over")


def catch_up_header(attached: Attached) -> str:
    """The stderr line before a named session's output that no kernel received."""
    cell = (f"cell {attached.last_seq} of session {attached.name} "
            f"(started {when(attached.started_at)})")
    if attached.running:
        return (f"[shell_kernel] Attached to session {attached.name}: {cell} is still running; "
                "its output since the previous kernel left follows, and this cell's own code "
                "runs once it ends.\n")
    return (f"[shell_kernel] Attached to session {attached.name}: output of {cell} and of its "
            "background jobs that the previous kernel did not receive follows.\n")


def catch_up_end(attached: Attached, status: int) -> str:
    return (f"[shell_kernel] Cell {attached.last_seq} of session {attached.name} ended with "
            f"exit status {status}. This cell's own code follows.\n")


@dataclass
class SessionListing:
    name: str
    state: str  # held (a kernel is attached), detached, starting (a kernel opens it) or ended
    created: int | None
    attached: int | None
    running_seq: int | None  # the cell running, if any
    running_since: int | None
    spool_bytes: int


def list_sessions(backend: Backend) -> list[SessionListing]:
    """This user's named sessions on the backend's host."""
    result = backend.side_command(LAUNCH_SCRIPT, ["list"], timeout=30)
    if result.status != 0:
        raise BackendError(f"could not list the sessions: {result.stdout.strip()}")
    sessions = []
    for line in result.stdout.splitlines():
        fields = line.split(" ")
        if line.startswith("refused "):
            raise BackendError(line.partition(" ")[2])
        if len(fields) != 8 or fields[1] not in ("held", "detached", "starting", "ended"):
            continue  # rc-file noise
        name, state, created, attached, started, since, done, spooled = fields
        running = (_number(started) or 0) > (_number(done) or 0) and state != "ended"
        sessions.append(SessionListing(
            name, state, _number(created), _number(attached),
            _number(started) if running else None, _number(since) if running else None,
            _number(spooled) or 0))
    return sessions


def kill_session(backend: Backend, name: str) -> bool:
    """End the named session with everything it started; False if there was none."""
    result = backend.side_command(LAUNCH_SCRIPT, ["kill", name], timeout=30)
    answer = _answer(result.stdout)
    if answer.startswith("refused "):
        raise BackendError(answer.partition(" ")[2])
    if answer not in ("killed", "none"):
        raise BackendError(f"could not kill the session {name}: {result.stdout.strip()}")
    return answer == "killed"


def format_listing(sessions: list[SessionListing], where: str) -> str:
    if not sessions:
        return f"No named sessions on {where}.\n"
    rows = [("NAME", "STATE", "STARTED", "LAST ATTACHED", "RUNNING CELL", "SPOOL")]
    for s in sessions:
        running = (f"cell {s.running_seq} since {when(s.running_since)}"
                   if s.running_seq is not None else "-")
        rows.append((s.name, s.state, when(s.created) if s.created else "-",
                     when(s.attached) if s.attached else "-", running, _size(s.spool_bytes)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                   + "\n" for row in rows)


def _size(count: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count} B"


def main_sessions(args) -> int:
    """`python -m shell_kernel sessions [--ssh HOST] [--kill NAME]`."""
    import sys

    try:
        backend, where = _side_backend(args)
    except BackendError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    try:
        if args.kill is None:
            sys.stdout.write(format_listing(list_sessions(backend), where))
        elif kill_session(backend, args.kill):
            print(f"Ended the session {args.kill} on {where}, with everything it started.")
        else:
            print(f"There is no session {args.kill} on {where}.", file=sys.stderr)
            return 1
    except BackendError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        backend.close()
    return 0


def _side_backend(args) -> tuple[Backend, str]:
    """A backend that can run side commands where the sessions are."""
    if not args.ssh:
        from .backends.local import LocalBackend
        return LocalBackend(), "this machine"
    from .backends.ssh import SSHBackend
    from .backends.ssh_target import TargetError, resolve
    try:
        target = resolve(args.ssh, args.ssh_config)
    except TargetError as err:
        raise BackendError(str(err)) from None
    backend = SSHBackend(target, accept_new_host_key=args.accept_new_host_key,
                         resolve_jump=lambda alias: resolve(alias, args.ssh_config))
    backend.open_connection()
    return backend, target.describe()
