"""pids.sh's process records where /proc is read: made with sh's builtins
alone (no program runs: a durable session records several processes as it
starts, on every host of a fleet), and right for a process whose command
name holds a newline (read takes one line: the whole file is read then).
Real sh, real processes; PATH without a directory shows a program run as
"not found"."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from shell_kernel import shell

SH = shutil.which("sh")


def start_of(pid: int) -> str:
    """Field 22 of /proc/PID/stat (when it started), as Python reads it."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]


def pids_sh(code: str, path: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != shell.NO_PROC}
    env["PATH"] = path
    return subprocess.run([SH, "-c", shell.script("pids.sh") + code], env=env,
                          capture_output=True, text=True, timeout=30)


@pytest.fixture
def sleeper(tmp_path):
    """A process named NAME (its command name: the file it runs), killed at the end."""
    started = []

    def start(name: str) -> int:
        program = tmp_path / name
        program.symlink_to(shutil.which("sleep"))
        proc = subprocess.Popen([str(program), "30"])
        started.append(proc)
        return proc.pid
    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_record_is_made_without_running_a_program(sleeper, tmp_path):
    pid = sleeper("worker")
    record = tmp_path / "record"
    done = pids_sh(f"pid_record {pid} '{record}'; pid_start {pid}", path="/nonexistent")
    assert done.returncode == 0 and "not found" not in done.stderr, done.stderr
    assert record.read_text() == f"{pid} {start_of(pid)}\n"
    assert done.stdout == f"{start_of(pid)}\n"


def test_a_command_name_with_a_newline_is_read_whole(sleeper, tmp_path):
    pid = sleeper("a\n) 1 2 3")
    record = tmp_path / "record"
    done = pids_sh(f"pid_record {pid} '{record}'; pid_is {pid} {start_of(pid)} && echo same",
                   path=os.environ["PATH"])
    assert done.returncode == 0, done.stderr
    assert record.read_text() == f"{pid} {start_of(pid)}\n"
    assert done.stdout == "same\n"


def test_a_process_gone_has_no_start(tmp_path):
    proc = subprocess.Popen(["true"])
    proc.wait()
    done = pids_sh(f"pid_record {proc.pid} '{tmp_path / 'record'}'; pid_start {proc.pid}; "
                   f"pid_is {proc.pid} 1 || echo gone", path="/nonexistent")
    assert (tmp_path / "record").read_text() == f"{proc.pid} \n"
    assert done.stdout == "gone\n"
