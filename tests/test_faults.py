"""Failures injected at the backend boundary of a real kernel (tests/faulty_kernel.py):
every cell still gets a reply within seconds, written for the user, and the
next cell works. Local, durable SSH and ephemeral SSH backends."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest import install_wrapped_spec
from named_support import read_until

FAULTY_KERNEL = str(Path(__file__).with_name("faulty_kernel.py"))
REPLY_WITHIN = 10  # seconds: the bound for an error reply

BACKEND_FLAGS = {"local": [], "ssh": ["--ssh", "testhost"], "ssh-ephemeral": ["--ssh", "testhost", "--ephemeral"]}


@pytest.fixture(params=list(BACKEND_FLAGS))
def faulty(request, jupyter_prefix, start_kernel, sshd, tmp_path):
    """start(**armed): a kernel of this backend, with faults armed before it starts."""
    faults = tmp_path / "faults"
    faults.mkdir()
    flags = list(BACKEND_FLAGS[request.param])
    if "--ssh" in flags:
        flags += ["--ssh-config", str(sshd.ssh_config)]
    name = f"shell-faulty-{request.param}-{os.getpid()}"
    install_wrapped_spec(jupyter_prefix, name, flags, FAULTY_KERNEL)

    def arm(point: str, times: int = 1) -> None:
        (faults / point).write_text(str(times))

    def start(**armed):
        for point, times in armed.items():
            arm(point, times)
        kernel = start_kernel(name, SHELL_KERNEL_FAULTS=str(faults))
        kernel.arm = arm
        kernel.backend = request.param
        return kernel

    return start


def error_reply(kernel, code: str):
    started = time.monotonic()
    execution = kernel.run(code, timeout=REPLY_WITHIN + 20)
    took = time.monotonic() - started
    assert took < REPLY_WITHIN, f"the reply took {took:.1f} s"
    assert execution.status == "error", execution.reply
    return execution


def next_cell_works(kernel) -> None:
    assert kernel.ok("echo still-here") == "still-here\n"


def test_start_failure(faulty):
    kernel = faulty(start=2)  # at launch, and again when the second cell tries again
    execution = error_reply(kernel, "echo hi")  # the launch's failure, reported once
    assert execution.reply["content"]["ename"] == "ShellUnavailable"
    execution = error_reply(kernel, "echo hi")
    assert execution.reply["content"]["ename"] == "ShellUnavailable"
    assert "injected start failure" in execution.reply["content"]["evalue"]
    next_cell_works(kernel)


def test_send_failure(faulty):
    kernel = faulty()
    kernel.ok("x=kept")
    kernel.arm("send")
    execution = error_reply(kernel, "echo hi")
    assert "could not be sent to the shell" in execution.reply["content"]["evalue"]
    assert "injected send failure" in execution.reply["content"]["evalue"]
    next_cell_works(kernel)


def test_side_command_failure_during_an_interrupt(faulty):
    kernel = faulty()
    msg_id = kernel.start("echo started; sleep 60")
    read_until(kernel, msg_id, "started\n")  # the shell is up (kernel_info does not wait for it)
    time.sleep(1.5)  # the cell is running
    kernel.arm("side_command")
    started = time.monotonic()
    kernel.km.interrupt_kernel()
    execution = kernel.collect(msg_id, timeout=REPLY_WITHIN + 20)
    assert time.monotonic() - started < REPLY_WITHIN
    assert execution.status == "error"
    if kernel.backend == "ssh":
        # Durable: the failed channel counts as a dropped connection; once
        # reconnected to the same shell, the interrupt goes through.
        assert execution.reply["content"]["ename"] == "KeyboardInterrupt"
        assert "Reconnected" in execution.stderr
    else:
        assert "could not be interrupted" in execution.reply["content"]["evalue"]
        assert "injected side_command failure" in execution.reply["content"]["evalue"]
    next_cell_works(kernel)


def test_reader_failure(faulty):
    kernel = faulty()
    kernel.ok("true")
    kernel.arm("reader")
    started = time.monotonic()
    execution = kernel.run("sleep 0.5; echo hi", timeout=REPLY_WITHIN + 20)
    assert time.monotonic() - started < REPLY_WITHIN
    if kernel.backend == "ssh":
        # Durable: the same shell is reattached and nothing is lost.
        assert execution.status == "ok" and execution.stdout == "hi\n"
        assert "Reconnected" in execution.stderr
    else:
        assert execution.status == "error"
        assert "injected reader failure" in execution.reply["content"]["evalue"]
    next_cell_works(kernel)


def test_reattach_failure(jupyter_prefix, start_kernel, server, tmp_path):
    faults = tmp_path / "faults"
    faults.mkdir()
    config = server.write_ssh_config(tmp_path / "ssh_config")
    name = f"shell-faulty-reattach-{os.getpid()}"
    install_wrapped_spec(jupyter_prefix, name, ["--ssh", "testhost", "--ssh-config", str(config)],
                         FAULTY_KERNEL)
    kernel = start_kernel(name, SHELL_KERNEL_FAULTS=str(faults))
    shell_pid = kernel.ok("echo $$")
    msg_id = kernel.start("echo started; sleep 3; echo done")
    time.sleep(1.5)  # the cell is running
    (faults / "reattach").write_text("1")
    started = time.monotonic()
    assert server.kill_sessions(), "no SSH session to kill"
    execution = kernel.collect(msg_id, timeout=REPLY_WITHIN + 20)
    assert time.monotonic() - started < REPLY_WITHIN
    assert execution.status == "error"
    assert "Could not reconnect" in execution.reply["content"]["evalue"]
    assert "injected reattach failure" in execution.reply["content"]["evalue"]
    # The next cell reattached the same shell (after the rest of the old cell's output).
    assert kernel.ok("echo $$").split()[-1] == shell_pid.strip()
