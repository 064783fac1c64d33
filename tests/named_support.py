"""What the named-session test files share: a private test host, kernels
of a named session on it, and reading a cell's output as it streams."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import install_spec
from harness import KernelHarness
from shell_kernel.shell import script
from shell_kernel.testing.sshd import SSHServer, setenv_config


UID = os.getuid()


def lines(first: int, last: int) -> str:
    return "".join(f"line-{i}\n" for i in range(first, last + 1))


def stop_sessions(sessions_dir: Path, env: dict | None = None) -> None:
    """env: what the sessions' kernels had beside this process's environment
    (SHELL_KERNEL_NO_PROC: their records are ps's, which only a stop that
    reads ps matches)."""
    for state in sessions_dir.glob("*"):
        subprocess.run(["sh", "-c", script("launch.sh"), "launch.sh", "stop", str(state)],
                       capture_output=True, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """A private sshd whose sessions have their own TMPDIR (with a space), so
    that the named sessions of these tests are theirs alone."""
    work = tmp_path_factory.mktemp("named")
    remote_tmp = work / "remote tmp"
    remote_tmp.mkdir(mode=0o755)
    server = SSHServer(work / "sshd", name="named-sshd",
                       extra_config=setenv_config({"TMPDIR": str(remote_tmp)}))
    server.start()
    server.ssh_config = server.write_ssh_config(work / "ssh_config")
    server.sessions_dir = remote_tmp / f"shell_kernel-{UID}"
    yield server
    stop_sessions(server.sessions_dir)
    server.stop()


@pytest.fixture
def named(jupyter_prefix, start_kernel, host):
    """Start a kernel whose shell is the named session NAME on the test host."""
    count = [0]

    def start(name: str, *flags: str) -> KernelHarness:
        count[0] += 1
        spec = f"shell-named-{os.getpid()}-{name}-{count[0]}"
        install_spec(jupyter_prefix, spec, ["--ssh", "testhost", "--ssh-config",
                                            str(host.ssh_config), "--session", name, *flags])
        return start_kernel(spec)

    return start


def read_until(kernel: KernelHarness, msg_id: str, text: str, timeout: float = 30) -> str:
    """The cell's stdout as it streams, up to and including `text`."""
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        try:
            msg = kernel.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"{text!r} not seen; got {seen!r}") from None
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream" \
                and msg["content"]["name"] == "stdout":
            seen += msg["content"]["text"]
    return seen


def sessions_cli(host, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shell_kernel", "sessions", "--ssh", "testhost",
                           "--ssh-config", str(host.ssh_config), *args],
                          capture_output=True, text=True, timeout=60)
