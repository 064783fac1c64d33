"""The kernel behaviours that rest on ipykernel's private API (shell_kernel/compat.py).

.ci/run runs this file twice: with the newest ipykernel (.venv) and with the
oldest that pyproject allows (.venv-oldest, ipykernel 6.29.0). The
kernelspecs that conftest installs run sys.executable, so the kernels under
test run on the ipykernel of the venv that runs pytest.
"""

from __future__ import annotations

import queue
import time

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
