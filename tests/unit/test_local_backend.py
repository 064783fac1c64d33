"""The local backend's shell with a real bash: the channel layer's DirectShell
(LocalShell) reading bash through processes.ShellChannel. Its end is bash's
exit, not its pipes' (a background job may hold them), seen with a pidfd or,
where the system has none, by looking; what bash wrote before it ended is
all read; a death by a signal is named; close() may come while start()
runs; an idle reader wakes for nothing."""

from __future__ import annotations

import os
import secrets
import threading
import time

import pytest

from harness import pids_matching, wait_until
from shell_kernel.backends import BackendError, ShellExit, bash_argv
from shell_kernel.backends.local.backend import LocalBackend
from shell_kernel.backends.local.spawn import SpawnedShell, exit_descriptor
from shell_kernel.testing import received as testing_received
from shell_kernel.testing.processes import alive

WITHIN = testing_received.WITHIN


class Received(testing_received.Received):
    def exit(self) -> ShellExit:
        ended = super().exit()
        assert len(self.exits) == 1  # a local shell's end is reported once
        return ended


def environment(tmp_path, mark: str = "") -> dict:
    """The shell's: its state directory in tmp_path; mark: in the environment
    of each of its processes (see marked)."""
    return {**os.environ, "TMPDIR": str(tmp_path), "SHELL_KERNEL_LOCAL_TEST": mark}


def marked(mark: str) -> list[int]:
    """Live processes whose environment carries mark (see environment)."""
    wanted = f"SHELL_KERNEL_LOCAL_TEST={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if wanted in f.read().split(b"\0") and alive(int(entry)):
                    found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.fixture(params=["pidfd", "looking"])
def backend(request, tmp_path):
    """A started backend and what it received: bash's exit seen through a
    pidfd, or, as where the system has none, by looking."""
    shell = SpawnedShell(bash_argv("bash", True), environment(tmp_path))
    if request.param == "looking":
        if shell.exit_fd is not None:
            os.close(shell.exit_fd)
            shell.exit_fd = None
    elif shell.exit_fd is None:
        shell.close()
        pytest.skip("no pidfd on this system")
    backend = LocalBackend(clean=True, env=environment(tmp_path), spawned=shell)
    received = Received()
    backend.start(received.on_output, received.on_exit)
    yield backend, received
    backend.close()


def test_the_shell_ends_with_its_exit_while_a_job_holds_its_pipes(backend):
    backend, received = backend
    marker = f"1000.{secrets.randbelow(10**6)}"
    backend.send(f"(sleep {marker} &); exit 5\n".encode())
    assert received.exit() == ShellExit("exited with status 5", 5)
    assert wait_until(lambda: pids_matching(marker), timeout=WITHIN)  # it holds the pipes
    backend.close()
    assert wait_until(lambda: not pids_matching(marker), timeout=WITHIN)  # it ends with the shell


def test_what_bash_wrote_before_it_ended_is_all_read(backend):
    """The reader, held back in on_output, finds bash gone with output still
    in the pipe (less than a pipe holds: bash need not wait for the reader)."""
    backend, received = backend
    backend.send(b"echo $$\n")
    received.wait_for("stdout", b"\n")
    pid = int(received.text("stdout"))
    received.hold()
    backend.send(b"echo go; head -c 50000 /dev/zero | tr '\\0' x; exit 7\n")
    assert wait_until(lambda: not alive(pid), timeout=WITHIN)
    received.release()
    assert received.exit() == ShellExit("exited with status 7", 7)
    assert received.text("stdout") == f"{pid}\ngo\n".encode() + b"x" * 50000


def test_a_shell_killed_by_a_signal_says_which(backend):
    backend, received = backend
    backend.send(b"kill -9 $$\n")
    assert received.exit() == ShellExit("killed by SIGKILL", 137)


def test_an_idle_shells_reader_wakes_for_nothing(tmp_path):
    """Its read waits on the pipes and bash's pidfd, with no timeout: an idle
    kernel's reader thread is not woken by a clock (a look every 0.2 s would
    be five wake-ups a second)."""
    pidfd = exit_descriptor(os.getpid())
    if pidfd is None:
        pytest.skip("no pidfd on this system")
    os.close(pidfd)
    threads_before = set(threading.enumerate())
    backend = LocalBackend(clean=True, env=environment(tmp_path))
    received = Received()
    backend.start(received.on_output, received.on_exit)
    try:
        reader, = [thread for thread in set(threading.enumerate()) - threads_before
                   if thread.name == "shell-kernel-local-reader"]
        backend.send(b"echo ready\n")
        received.wait_for("stdout", b"ready\n")
        status = f"/proc/self/task/{reader.native_id}/status"

        def wake_ups() -> int:
            with open(status) as f:
                return int(next(line for line in f if line.startswith("voluntary_ctxt_switches"))
                           .split()[1])

        # Two seconds in a row without output (bash's prompt may come after
        # "ready"), the wake-ups counted over the second: a reader that has just
        # handed over a chunk is still on its way back to its wait (taking the
        # GIL from this thread, as it reads /proc, is a wake-up too), which
        # the first second lets it finish.
        quiet = 0
        while quiet < 2:
            chunks, before = len(received.chunks), wake_ups()
            time.sleep(1.0)
            quiet = quiet + 1 if len(received.chunks) == chunks else 0
        assert wake_ups() == before
    finally:
        backend.close()


def test_close_before_start_starts_nothing(tmp_path):
    mark = secrets.token_hex(8)
    backend = LocalBackend(clean=True, env=environment(tmp_path, mark))
    backend.close()
    with pytest.raises(BackendError, match="closed the session"):
        backend.start(Received().on_output, Received().on_exit)
    assert marked(mark) == []


def test_close_ends_a_spawned_shell_that_no_start_took(tmp_path):
    shell = SpawnedShell(bash_argv("bash", True), environment(tmp_path))
    backend = LocalBackend(clean=True, spawned=shell)
    backend.close()
    assert shell.proc.poll() is not None
    with pytest.raises(BackendError, match="closed the session"):
        backend.start(Received().on_output, Received().on_exit)


def test_a_start_that_finds_its_spawned_shell_closed_says_so(tmp_path):
    """The launcher closes the shell it spawned at shutdown, which may come
    as the backend takes it over."""
    shell = SpawnedShell(bash_argv("bash", True), environment(tmp_path))
    shell.close()
    backend = LocalBackend(clean=True, spawned=shell)
    with pytest.raises(BackendError, match="closed the session"):
        backend.start(Received().on_output, Received().on_exit)
    backend.close()


@pytest.mark.parametrize("delay", [0.0, 0.001, 0.005, 0.02, 0.1])
def test_close_while_start_runs_leaves_no_shell(tmp_path, delay):
    """Whichever comes first, start() returns or says the session closed,
    and no process of the shell is left."""
    mark = secrets.token_hex(8)
    backend = LocalBackend(clean=True, env=environment(tmp_path, mark))
    received = Received()
    outcome = []

    def start():
        try:
            backend.start(received.on_output, received.on_exit)
            outcome.append("started")
        except BackendError as err:
            outcome.append(str(err))

    starter = threading.Thread(target=start)
    starter.start()
    time.sleep(delay)
    backend.close()
    starter.join(WITHIN)
    assert outcome in (["started"], ["the kernel closed the session as its shell started"])
    assert wait_until(lambda: marked(mark) == [], timeout=WITHIN), marked(mark)
    assert list(tmp_path.glob("shell_kernel.*")) == []
