"""`python -m shell_kernel sessions [--ssh HOST] [--kill NAME]`: this user's
named sessions on this machine or a host, listed or ended (shell/launch.sh
list, kill). Runs on the command's one thread.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from .backends import Backend, BackendError
from .backends.channel.channels import last_line
from .named_sessions import number, when
from .shell import script

LAUNCH_SCRIPT = script("launch.sh")


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
        running = (number(started) or 0) > (number(done) or 0) and state != "ended"
        sessions.append(SessionListing(
            name, state, number(created), number(attached),
            number(started) if running else None, number(since) if running else None,
            number(spooled) or 0))
    return sessions


def kill_session(backend: Backend, name: str) -> bool:
    """End the named session with everything it started, and return once all
    of it has ended; False if there was none. Raises BackendError naming what
    would not end."""
    result = backend.side_command(LAUNCH_SCRIPT, ["kill", name], timeout=30)
    reply = last_line(result.stdout)
    if reply.startswith("refused "):
        raise BackendError(reply.partition(" ")[2])
    if reply.startswith("left "):
        raise BackendError(
            f"the session {escaped(name)} was stopped, but these of its processes still ran 5 s "
            f"after SIGKILL: {reply.partition(' ')[2]} (a process that cannot die, e.g. one "
            "waiting on a hung disk or network file system). Its files are removed; see to "
            "those processes on the host.")
    if reply not in ("killed", "none"):
        raise BackendError(f"could not kill the session {name}: {result.stdout.strip()}")
    return reply == "killed"


def format_listing(sessions: list[SessionListing], where: str) -> str:
    if not sessions:
        return f"No named sessions on {where}.\n"
    rows = [("NAME", "STATE", "STARTED", "LAST ATTACHED", "RUNNING CELL", "SPOOL")]
    for s in sessions:
        running = (f"cell {s.running_seq} since {when(s.running_since)}"
                   if s.running_seq is not None else "-")
        rows.append((escaped(s.name), s.state, when(s.created) if s.created else "-",
                     when(s.attached) if s.attached else "-", running, _size(s.spool_bytes)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                   + "\n" for row in rows)


def escaped(text: str) -> str:
    """Text for a terminal: every character that is not printable (an escape
    sequence in a directory's name, a byte that is not UTF-8) as a Python
    escape, so that what a name holds is shown, never acted on."""
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def _escape(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, kept as a surrogate escape
        return f"\\x{code - 0xDC00:02x}"
    return char.encode("unicode_escape").decode("ascii")


def _size(count: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count} B"


def main_sessions(args) -> int:
    """`python -m shell_kernel sessions [--ssh HOST] [--kill NAME]`."""
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
        from .backends.local.backend import LocalBackend
        return LocalBackend(), "this machine"
    from .backends.ssh.backend import SSHBackend
    from .backends.ssh.target import TargetError, resolve
    try:
        target = resolve(args.ssh, args.ssh_config)
    except TargetError as err:
        raise BackendError(str(err)) from None
    backend = SSHBackend(target, accept_new_host_key=args.accept_new_host_key,
                         resolve_jump=lambda alias: resolve(alias, args.ssh_config))
    backend.open_connection()
    return backend, target.describe()
