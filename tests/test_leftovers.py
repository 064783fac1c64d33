""".ci/leftovers.py: the check that fails a test run which leaves processes,
state directories or pyenv's lock behind (pure file and process logic, run
on this machine for real)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

CHECKER = Path(__file__).resolve().parent.parent / ".ci" / "leftovers.py"


def run_checker(mode: str, snapshot: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECKER), mode, str(snapshot)], env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_run_that_leaves_a_detached_process_a_state_dir_and_a_lock_fails(tmp_path):
    mark = secrets.token_hex(8)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    pyenv = tmp_path / "pyenv"
    (pyenv / "shims").mkdir(parents=True)
    env = {**os.environ, "SHELL_KERNEL_TEST_RUN": mark, "TMPDIR": str(tmp),
           "PYENV_ROOT": str(pyenv)}
    (tmp / "shell_kernel.before").mkdir()  # not the run's: left alone
    snapshot = tmp_path / "before.json"
    assert run_checker("snapshot", snapshot, env).returncode == 0

    # What a leaking run leaves: a process in a session of its own (as a
    # durable shell is), a state dir, a named session, pyenv's lock.
    leaked = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
    unmarked = subprocess.Popen(["sleep", "300"], start_new_session=True,
                                env={k: v for k, v in os.environ.items()
                                     if k != "SHELL_KERNEL_TEST_RUN"})
    try:
        (tmp / "shell_kernel.leaked").mkdir()
        (tmp / "sk-ipc-leaked").mkdir()  # a test kernel's IPC directory (tests/harness.py)
        (tmp / f"shell_kernel-{os.getuid()}" / "named").mkdir(parents=True)
        (pyenv / "shims" / ".pyenv-shim").touch()
        result = run_checker("check", snapshot, env)
        assert result.returncode == 1, result
        assert f"{leaked.pid} sleep 300" in result.stderr
        assert str(unmarked.pid) not in result.stderr
        assert "shell_kernel.leaked" in result.stderr and "named" in result.stderr
        assert "sk-ipc-leaked" in result.stderr
        assert ".pyenv-shim" in result.stderr
        # ... and removed, so that a failed run does not leave it either.
        assert leaked.wait(timeout=10) is not None
        assert not (tmp / "shell_kernel.leaked").exists() and not (tmp / "sk-ipc-leaked").exists()
        assert not (pyenv / "shims" / ".pyenv-shim").exists()
        assert (tmp / "shell_kernel.before").exists() and unmarked.poll() is None
        assert run_checker("check", snapshot, env).returncode == 0
    finally:
        for process in (leaked, unmarked):
            process.kill()
            process.wait()


def test_a_clean_run_passes(tmp_path):
    # A pyenv of its own: the machine's may be mid-rehash in another test's login.
    env = {**os.environ, "SHELL_KERNEL_TEST_RUN": secrets.token_hex(8),
           "TMPDIR": str(tmp_path), "PYENV_ROOT": str(tmp_path / "pyenv")}
    snapshot = tmp_path / "before.json"
    run_checker("snapshot", snapshot, env)
    result = run_checker("check", snapshot, env)
    assert result.returncode == 0 and "leftovers: none" in result.stdout, result
