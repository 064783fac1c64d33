"""What a durable SSH session costs its host in processes: nothing while it is
idle, nothing for a cell that runs only builtins (bench/host_forks.py counts
them with strace). A process started and ended shows as a new pid, or as the
reaped children's faults (cminflt) of its parent growing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness import KernelHarness
from shell_kernel.testing.processes import descendants
from shell_kernel.testing.sshd import SSHServer
from test_durable_hosts import Host, host  # noqa: F401 - fixture
from named_support import stop_sessions, UID


def children_faults(pid: int) -> int:
    """Minor faults of pid's children that it has reaped (cminflt): it grows
    with every child that ran and ended, however briefly."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[8])
    except (OSError, IndexError, ValueError):
        return -1


def host_processes(server: SSHServer) -> dict[int, int]:
    """Every process of the test host, each with its reaped children's faults:
    the sshd listener is a child subreaper, so the detached sessions are below
    it too, with the relays, the side shells and the connections' sshds."""
    return {pid: children_faults(pid) for pid in descendants([server.pid])}


def assert_same_processes(before: dict[int, int], after: dict[int, int]) -> None:
    """No process started (a new pid) or ended, and none reaped a child."""
    def described(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()[:100].replace(b"\0", b" ").decode()
        except OSError:
            return "(gone)"
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    assert not changed, {p: (before.get(p), after.get(p), described(p)) for p in changed}


NAMED = ["--session", "forks"]


def started(host, tmp_path: Path, flags: list[str]) -> tuple[Host, KernelHarness]:
    """A host whose TMPDIR is the test's (a named session's directory goes
    there), and a kernel of it, past its start."""
    tmpdir = tmp_path / "remote-tmp"
    tmpdir.mkdir()
    shaped = host(TMPDIR=str(tmpdir))
    kernel = shaped.kernel(*flags)
    kernel.ok("true")
    time.sleep(6)  # past the start's own processes (the sweep, in the background)
    return shaped, kernel


def stop_named(kernel: KernelHarness, tmp_path: Path) -> None:
    """A named session outlives its kernel: ended here."""
    kernel.shutdown()
    stop_sessions(tmp_path / "remote-tmp" / f"shell_kernel-{UID}")


def assert_forks_nothing(host, tmp_path: Path, flags: list[str], meanwhile) -> None:
    """No process starts under the test sshd while meanwhile(kernel) runs."""
    shaped, kernel = started(host, tmp_path, flags)
    before = host_processes(shaped.server)
    meanwhile(kernel)
    after = host_processes(shaped.server)
    try:
        assert_same_processes(before, after)
    finally:
        if flags:
            stop_named(kernel, tmp_path)


@pytest.mark.parametrize("flags", [[], NAMED], ids=["durable", "named"])
def test_an_idle_durable_session_forks_nothing_on_its_host(host, tmp_path, flags):
    """The shell, its spool copiers and watchdog, the relay (told by the
    watchdog when the shell ends, instead of looking every second) and the
    side shell start no process while no cell runs."""
    # Two of the watchdog's looks, and heartbeats, at least.
    assert_forks_nothing(host, tmp_path, flags, lambda kernel: time.sleep(12))


@pytest.mark.parametrize("flags", [[], NAMED], ids=["durable", "named"])
def test_trivial_cells_fork_nothing_on_the_host(host, tmp_path, flags):
    """A cell that runs a builtin starts no process on the host, the
    acknowledgements of its output included (they go on the relay's input)."""
    def cells(kernel):
        for _ in range(20):
            assert kernel.ok("true") == ""
        time.sleep(3)  # an acknowledgement comes at most a second after the output
    assert_forks_nothing(host, tmp_path, flags, cells)
