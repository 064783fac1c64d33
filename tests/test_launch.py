"""The kernel's launcher (launch.py) with a real local bash, no kernel
process: the shell spawned at once, adopted by the session made later, or
ended with nothing left when the kernel closes first."""

from __future__ import annotations

import glob
import logging
import os
import subprocess
import time

from harness import wait_until
from shell_kernel.config import KernelConfig
from shell_kernel import launch as launch_module
from shell_kernel.launch import GO_ANYWAY_S, STOPPED_START_WAIT_S, ShellLaunch
from shell_kernel.testing.processes import alive, argv, children

from conftest import TEST_BASH


def config() -> KernelConfig:
    return KernelConfig(clean=True, bash=TEST_BASH or "bash")


def our_shells() -> set[int]:
    """This process's children that a launch spawns: the interactive bash
    and its guard (`/bin/sh -c GUARD shell_kernel ...`); not the version
    probe, which ends by itself, nor what other fixtures started."""
    def is_launched(pid: int) -> bool:
        args = argv(pid)  # [] once gone
        return b"-i" in args or args[:2] == [b"/bin/sh", b"-c"] and b"shell_kernel" in args
    return {pid for pid in children(os.getpid()) if is_launched(pid)}


def spawned_shells(before: set[int]) -> set[int]:
    """The bash and the guard a launch has just spawned, known by their argv.
    Both are there once ShellLaunch() returns, each past the point of its
    exec that has no way back (Popen returns when it is told so, as the exec
    closes the close-on-exec descriptors); Linux publishes the new argv in
    /proc/PID/cmdline only later in that exec, as it sets up the new stack,
    so a look at once can find a process with none yet."""
    found: set[int] = set()

    def both() -> bool:
        found.clear()
        found.update(our_shells() - before)
        return len(found) >= 2
    wait_until(both, timeout=10, interval=0.01)
    return found


def state_dirs() -> set[str]:
    return set(glob.glob(os.path.join(os.environ.get("TMPDIR") or "/tmp", "shell_kernel.*")))


def test_the_session_adopts_the_shell_spawned_at_launch(monkeypatch):
    # Nothing asks for the shell until wait_started below, however slow the
    # machine: the session is made then, not after GO_ANYWAY_S.
    monkeypatch.setattr(launch_module, "GO_ANYWAY_S", 3600)
    before = our_shells()
    launch = ShellLaunch(config())
    try:
        spawned = spawned_shells(before)  # before anything asked for the shell
        assert len(spawned) == 2, "the bash and its guard"
        assert launch.session is None  # not before the first reply (or GO_ANYWAY_S)
        assert launch.wait_started(30)  # asks for the shell: the session is made now
        assert launch.take_error() is None
        assert launch.info.pid in spawned
        record = launch.session.run("echo $$")
        assert record.exit_code == 0
    finally:
        launch.close()
    assert wait_until(lambda: not our_shells() - before, timeout=10), our_shells() - before


def test_a_launch_closed_before_its_session_was_made_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # other tests' sessions make state dirs too
    monkeypatch.setattr(launch_module, "GO_ANYWAY_S", 3600)  # the session is not made meanwhile
    before, dirs = set(children(os.getpid())), state_dirs()
    launch = ShellLaunch(config())
    # At once, known by pid (their argv may not show yet: see spawned_shells):
    # the bash, its guard and, unless it has ended, the version probe.
    spawned = set(children(os.getpid())) - before
    assert len(spawned) >= 2, "the bash and its guard"
    assert state_dirs() - dirs, "the shell's private directory was made before bash started"
    launch.close()  # the kernel shut down before its first kernel_info reply
    assert launch.session is None
    assert launch.started.is_set()  # a cell still waiting would stop waiting
    assert not any(alive(pid) for pid in spawned)
    assert not state_dirs() - dirs


def test_the_session_starts_unasked_after_a_while():
    """A client that never sends kernel_info still gets its shell ready."""
    launch = ShellLaunch(config())
    try:
        assert launch.started.wait(GO_ANYWAY_S + 30)
        assert launch.info is not None
    finally:
        launch.close()


def test_bash_version_before_the_session_is_that_bashs():
    bash = TEST_BASH or "bash"
    expected = subprocess.run([bash, "-c", 'printf %s "$BASH_VERSION"'], capture_output=True,
                              text=True, check=True).stdout
    launch = ShellLaunch(config())
    try:
        assert launch.info is None
        assert launch.bash_version() == expected
    finally:
        launch.close()


def test_a_close_while_the_session_is_being_made_leaves_nothing(tmp_path, monkeypatch, caplog):
    """The kernel shuts down just after its first reply: the session may be
    made, its backend not yet holding the spawned shell. Tried at several
    moments of that window; the shell and its guard go each time, at once,
    and the start ends with them, quietly (it used to wait for its shell's
    answer until its timeout, and the backend's start could fail on the shell
    its close had just taken)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # other tests' sessions make state dirs too
    before, dirs = our_shells(), state_dirs()
    for delay in (0, 0.001, 0.005, 0.02, 0.05, 0.1):
        launch = ShellLaunch(config())
        launch.go()
        time.sleep(delay)
        started = time.monotonic()
        launch.close()
        assert time.monotonic() - started < 5
        assert wait_until(lambda: not our_shells() - before, timeout=10), (delay, our_shells() - before)
        assert launch.started.wait(STOPPED_START_WAIT_S), delay
    assert not state_dirs() - dirs
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == []
