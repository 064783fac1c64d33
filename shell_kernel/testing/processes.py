"""Process-table helpers for the test sshd and the tests (Linux /proc, with
a ``ps`` fallback), and the local TCP port helpers. Any thread."""

from __future__ import annotations

import getpass
import os
import signal
import socket
import subprocess



def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, state) for every visible process."""
    table: dict[int, tuple[int, str]] = {}
    if os.path.isdir("/proc/self"):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    data = f.read().decode("ascii", "replace")
            except OSError:  # vanished meanwhile
                continue
            # "pid (comm) state ppid ..."; comm may contain spaces/parens
            rest = data[data.rfind(")") + 2 :].split()
            if len(rest) >= 2:
                table[int(entry)] = (int(rest[1]), rest[0])
        return table
    out = subprocess.run(
        ["ps", "-A", "-o", "pid=,ppid=,stat="],
        capture_output=True, text=True, check=False,
    ).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            table[int(parts[0])] = (int(parts[1]), parts[2][0])
    return table


def argv(pid: int) -> list[bytes]:
    """A process's arguments (/proc/PID/cmdline); [] once it has ended."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().split(b"\0")
    except OSError:  # gone meanwhile
        return []


def children(pid: int, table: dict[int, tuple[int, str]] | None = None) -> list[int]:
    table = process_table() if table is None else table
    return sorted(p for p, (pp, st) in table.items() if pp == pid and st != "Z")


def descendants(roots: list[int]) -> set[int]:
    table = process_table()
    found: set[int] = set()
    todo = [r for r in roots if r in table and table[r][1] != "Z"]
    while todo:
        p = todo.pop()
        if p in found:
            continue
        found.add(p)
        todo.extend(children(p, table))
    return found


def send_signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def freeze(roots: list[int]) -> list[int]:
    """SIGSTOP ``roots`` and all their descendants, repeating until the tree
    is complete (a stopped process cannot fork, so this converges).
    Returns all frozen pids."""
    frozen: set[int] = set()
    for _ in range(100):
        new = descendants(roots) - frozen
        new.update(r for r in roots if r not in frozen and alive(r))
        if not new:
            break
        for p in new:
            send_signal(p, signal.SIGSTOP)
        frozen |= new
    return sorted(frozen)


def freeze_and_signal(roots: list[int], sig: int) -> list[int]:
    """Freeze the trees below ``roots``, then deliver ``sig`` to all of them
    (followed by SIGCONT so that catchable signals get handled)."""
    frozen = freeze(roots)
    for p in frozen:
        send_signal(p, sig)
    if sig != signal.SIGKILL:
        for p in frozen:
            send_signal(p, signal.SIGCONT)
    return frozen


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
        return data[data.rfind(")") + 2 :].split()[0] != "Z"
    except OSError:
        pass
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


try:
    import ctypes

    _libc = ctypes.CDLL(None, use_errno=True)
    _prctl = _libc.prctl
except (OSError, AttributeError):  # not Linux / no prctl
    _prctl = None
_PR_SET_CHILD_SUBREAPER = 36


def make_subreaper() -> None:
    """preexec_fn for sshd (the attribute survives execve)."""
    if _prctl is not None:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def current_user() -> str:
    """Name of the effective uid -- the only user an unprivileged sshd can
    log in.  (getpass.getuser() trusts $USER/$LOGNAME, which can be stale,
    e.g. after su without -l, so it is only the fallback.)"""
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return getpass.getuser()


def tcp_listening(host: str, port: int) -> bool:
    """Is some socket LISTENing on host:port (IPv4)?  Reads /proc/net/tcp."""
    want = "%s:%04X" % ("".join(f"{int(b):02X}" for b in reversed(host.split("."))), port)
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            return any(line.split()[1] == want and line.split()[3] == "0A" for line in f)
    except (OSError, StopIteration, IndexError):
        return False


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def config_quote(value: object) -> str:
    """Quote a value for sshd_config / ssh_config if it needs it."""
    s = str(value)
    return f'"{s}"' if any(c.isspace() for c in s) else s


