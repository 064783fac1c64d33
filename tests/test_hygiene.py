"""Private state, no leftovers after shutdown or restart, no fd leaks."""

import os
import stat
import time
from pathlib import Path

import pytest

from harness import descendants, pids_matching, wait_until


def open_fds(pid: int) -> int:
    """The process's open fds, once steady: bash restores the fds it saved
    for the end frame's redirection just after writing it, so a count taken
    the moment a reply arrives may include them."""
    counts = [len(os.listdir(f"/proc/{pid}/fd"))]
    while len(counts) < 2 or counts[-1] != counts[-2]:
        time.sleep(0.05)
        counts.append(len(os.listdir(f"/proc/{pid}/fd")))
    return counts[-1]


def test_state_directory_is_private_and_removed_at_shutdown(start_kernel):
    kernel = start_kernel()
    kernel.ok("true")
    [state] = list(Path(kernel.tmpdir).glob("shell_kernel.*"))
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert len(state.name) >= len("shell_kernel.") + 10  # mktemp's random suffix
    for child in state.iterdir():
        assert stat.S_IMODE(child.stat().st_mode) & 0o077 == 0, child
    kernel.shutdown()
    assert not state.exists()


@pytest.mark.parametrize("shell", ["idle", "job control on", "running a cell"])
def test_every_process_is_gone_after_shutdown(start_kernel, shell):
    """An idle shell ends itself and its jobs (one ignores SIGTERM); one with
    job control on, whose orphaned jobs keep groups of their own, or one
    running a cell, is ended by the reaper."""
    kernel = start_kernel()
    if shell == "job control on":
        kernel.ok("set -m")
    kernel.ok("sleep 1000.701 & (sleep 1000.702 &) ; nohup sleep 1000.703 >/dev/null 2>&1 & disown\n"
              "sh -c 'trap \"\" TERM; sleep 1000.704' &")
    markers = ["1000.701", "1000.702", "1000.703", "1000.704"]
    if shell == "running a cell":
        kernel.start("sleep 1000.705")
        markers.append("1000.705")
    assert wait_until(lambda: all(pids_matching(marker) for marker in markers), timeout=10)
    [state] = list(Path(kernel.tmpdir).glob("shell_kernel.*"))
    shell_tree = descendants(kernel.pid)
    kernel.shutdown()
    for marker in markers:
        assert wait_until(lambda: not pids_matching(marker), timeout=10), marker
    assert wait_until(lambda: not any(os.path.exists(f"/proc/{p}") and
                                      open(f"/proc/{p}/stat").read().split()[2] != "Z"
                                      for p in shell_tree), timeout=10)
    assert not state.exists()


def test_restart_leaves_nothing_of_the_old_shell(start_kernel):
    kernel = start_kernel()
    kernel.ok("RESTART_VAR=old; sleep 1000.801 &")
    [old_state] = list(Path(kernel.tmpdir).glob("shell_kernel.*"))
    kernel.km.restart_kernel(now=False)
    kernel.kc.wait_for_ready(timeout=60)
    assert wait_until(lambda: not pids_matching("1000.801"), timeout=10)
    assert not old_state.exists()
    assert kernel.ok("echo ${RESTART_VAR-new}") == "new\n"


@pytest.mark.timeout(600)  # 2,000 cells and their 8,000 IOPub messages on a busy 2-core machine
def test_no_fd_or_file_leak_over_thousands_of_cells(start_kernel):
    # Over TCP: over IPC its final cell's replies did not come within 180 s
    # once the 8,000 IOPub messages had piled up (seen twice in CI and by
    # hand; not explained yet), where TCP passes.
    kernel = start_kernel(transport="tcp")
    kernel.ok("true")
    shell_pid = int(kernel.ok("echo $$"))
    before = (open_fds(kernel.pid), open_fds(shell_pid))
    for i in range(2000):
        msg_id = kernel.kc.execute("(exit $((RANDOM % 2)))", stop_on_error=False)
        reply = kernel.kc.get_shell_msg(timeout=30)
        assert reply["parent_header"]["msg_id"] == msg_id
    # The next request's messages come after the 2000 cells' IOPub messages
    # (about 8000), which it reads past: a liveness wait, for a loaded machine.
    kernel.ok("true", timeout=180)
    after = (open_fds(kernel.pid), open_fds(shell_pid))
    assert after[0] <= before[0] + 2 and after[1] == before[1], (before, after)
    [state] = list(Path(kernel.tmpdir).glob("shell_kernel.*"))
    # The prompt terminal's path, the askpass helper and the FIFO the watcher
    # waits on between cells (see prompts.bash), and the shell's start time
    # (for reap.sh), are written once; nothing grows with the cells.
    assert sorted(p.name for p in state.iterdir()) == ["jobs", "shell.start", "sk-askpass",
                                                       "status", "tty", "wake"]
