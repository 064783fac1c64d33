"""The kernel behaviours that rest on ipykernel's private API (shell_kernel/compat.py).

.ci/run runs this file twice: with the newest ipykernel (.venv) and with the
oldest that pyproject allows (.venv-oldest, ipykernel 6.29.0). The
kernelspecs that conftest installs run sys.executable, so the kernels under
test run on the ipykernel of the venv that runs pytest.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import sys
import time
from pathlib import Path

import pytest
from jupyter_client import KernelManager

from conftest import install_spec, install_wrapped_spec, kernel_env
from harness import descendants, wait_until


def test_stream_messages_carry_the_cell_as_parent(start_kernel):
    kernel = start_kernel()
    msg_id = kernel.start("echo out; echo err >&2")
    execution = kernel.collect(msg_id)  # the messages whose parent is msg_id
    assert execution.stdout == "out\n" and execution.stderr == "err\n"
    assert not [msg for msg in kernel.stray if msg["msg_type"] == "stream"]


def test_input_request_goes_to_the_stdin_channel_of_the_cell(start_kernel):
    kernel = start_kernel()
    msg_id = kernel.start('read -r -p "name? " name; echo "hello $name"', allow_stdin=True)
    request = kernel.kc.get_stdin_msg(timeout=30)
    assert request["msg_type"] == "input_request"
    assert request["parent_header"]["msg_id"] == msg_id
    assert request["content"] == {"prompt": "name? ", "password": False}
    kernel.kc.input("Ada")
    execution = kernel.collect(msg_id)
    assert execution.status == "ok" and "hello Ada" in execution.stdout


def test_cells_behind_a_shell_that_did_not_start_fail_with_its_error(jupyter_prefix,
                                                                    start_kernel, tmp_path):
    """ipykernel's abort of queued cells, answered by the kernel instead
    (compat.AbortHook): each fails at once with the start's error."""
    from conftest import install_spec
    spec = f"shell-no-bash-{id(tmp_path)}"
    install_spec(jupyter_prefix, spec, ["--bash", str(tmp_path / "no-such-bash")])
    kernel = start_kernel(spec, wait_shell=False)
    first, second = kernel.start("echo one"), kernel.start("echo two")
    failed, queued = kernel.collect(first, timeout=60), kernel.collect(second, timeout=60)
    for execution in (failed, queued):
        assert execution.status == "error", execution.reply
        assert execution.reply["content"]["ename"] == "ShellUnavailable"
        assert execution.meta["exit_code"] is None


def test_shutdown_replies_on_both_channels_and_leaves_no_shell(start_kernel):
    kernel = start_kernel()
    shell_pid = int(kernel.ok("echo $$"))
    assert shell_pid in descendants(kernel.pid)
    msg_id = kernel.kc.shutdown()
    reply = kernel.kc.get_control_msg(timeout=30)
    assert reply["msg_type"] == "shutdown_reply"
    assert reply["content"] == {"status": "ok", "restart": False}
    deadline = time.monotonic() + 30
    broadcast = None
    while broadcast is None and time.monotonic() < deadline:
        try:
            msg = kernel.kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["msg_type"] == "shutdown_reply":
            broadcast = msg
    assert broadcast is not None, "no shutdown_reply on IOPub"
    assert broadcast["parent_header"]["msg_id"] == msg_id
    assert wait_until(lambda: not kernel.km.is_alive(), timeout=30)
    assert wait_until(lambda: not _alive(shell_pid), timeout=10)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


#: A kernel whose ipykernel starts 3 s late (as on a slow disk or a busy
#: machine), with the rest of its start as usual.
LATE_KERNEL = """
import sys, time
from shell_kernel import cli, compat
launch = compat.launch_kernel
def late(*args):
    time.sleep(3)
    launch(*args)
compat.launch_kernel = late
sys.exit(cli.main(["kernel", *sys.argv[1:]]))
"""
ZMTP_SIGNATURE_START, ZMTP_SIGNATURE_END = b"\xff", b"\x7f"


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_a_client_connected_before_ipykernel_binds_is_taken_over(transport, jupyter_prefix,
                                                                 tmp_path):
    """The kernel listens on its ports from its first moment: a client
    connecting while ipykernel is still being imported is held, not
    refused (and then left to retry 100 ms later), and ZeroMQ takes its
    connection over once ipykernel binds."""
    spec = install_spec(jupyter_prefix, "shell-test-late", [])
    spec["argv"] = [sys.executable, "-c", LATE_KERNEL, "-f", "{connection_file}"]
    (jupyter_prefix / "share" / "jupyter" / "kernels" / "shell-test-late" / "kernel.json") \
        .write_text(json.dumps(spec))
    where = {"ip": str(tmp_path / "kernel")} if transport == "ipc" else {}
    km = KernelManager(kernel_name="shell-test-late", transport=transport, **where)
    km.start_kernel(env=kernel_env(tmp_path), cwd=str(tmp_path))
    kc = km.client()
    try:
        info = km.get_connection_info()
        if transport == "tcp":
            family, address = socket.AF_INET, (info["ip"], info["shell_port"])
        else:
            family, address = socket.AF_UNIX, f"{info['ip']}-{info['shell_port']}"
        early = _first_connection(family, address, timeout=10)
        # Held by a listener that is not ZeroMQ yet (which would greet at once).
        early.settimeout(0.5)
        with pytest.raises(socket.timeout):
            early.recv(10)
        early.settimeout(30)
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        greeting = early.recv(10)  # ZeroMQ speaks first on the connection the kernel held
        assert greeting.startswith(ZMTP_SIGNATURE_START) and greeting.endswith(ZMTP_SIGNATURE_END)
        early.close()
        reply = kc.execute_interactive("echo ok", timeout=30)
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    assert not list(tmp_path.glob("kernel-*")), "ipc files left behind"


def _first_connection(family: int, address, timeout: float) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        probe = socket.socket(family, socket.SOCK_STREAM)
        try:
            probe.connect(address)
            return probe
        except OSError:
            probe.close()
            if time.monotonic() > deadline:
                raise
        time.sleep(0.02)


PAUSED_KERNEL = str(Path(__file__).with_name("paused_kernel.py"))


def test_only_a_cell_with_output_waits_for_it_before_its_reply(jupyter_prefix, start_kernel,
                                                              tmp_path):
    """ipykernel pauses before every execute_reply (Kernel._execute_sleep, half a
    millisecond and more) so that what the cell printed reaches the frontend
    first. A cell that sent nothing has nothing to wait for: its reply goes at
    once."""
    name = f"shell-paused-{os.getpid()}"
    install_wrapped_spec(jupyter_prefix, name, [], PAUSED_KERNEL)
    pauses = tmp_path / "pauses"
    pauses.touch()
    kernel = start_kernel(name, SHELL_KERNEL_PAUSES=str(pauses))

    def paused_for(code: str) -> list[str]:
        before = pauses.read_text().splitlines()
        kernel.run(code)
        return pauses.read_text().splitlines()[len(before):]

    assert paused_for("true") == []
    assert paused_for("x=1; cd /") == []
    assert paused_for("echo printed") == ["0.0005"]  # ipykernel's own pause, as configured
    assert paused_for("echo to-stderr >&2") == ["0.0005"]
    assert paused_for("false") == ["0.0005"]  # the error output
    assert paused_for(":") == []
