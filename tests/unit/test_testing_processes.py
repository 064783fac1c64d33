"""The tests' process helpers (shell_kernel/testing/processes.py): a process
that ends while a test looks through /proc is no error. (A test that read
every /proc/PID/cmdline it had just listed failed once a CI run when a
short-lived process ended in between.)"""

from __future__ import annotations

import subprocess
import time

from shell_kernel.testing.processes import argv


def test_the_arguments_of_a_live_process():
    child = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 10  # until its exec is done (its cmdline is empty before)
        while argv(child.pid)[:2] != [b"sleep", b"30"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert argv(child.pid)[:2] == [b"sleep", b"30"]
    finally:
        child.kill()
        child.wait()


def test_a_process_that_ended_has_no_arguments():
    child = subprocess.Popen(["true"])
    child.wait()
    assert argv(child.pid) == []
