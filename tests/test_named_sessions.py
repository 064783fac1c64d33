"""Named sessions (--session NAME): the shell outlives the kernel, and the next
kernel with the same name attaches to it and catches up. (Who gets a
session, and what launch.sh refuses: test_named_session_opening.py.)"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import install_spec
from harness import KernelHarness, pids_matching, wait_until
from named_support import (UID, host, lines, named, read_until,  # noqa: F401 - fixtures
                           sessions_cli, stop_sessions)


# Five lines, a quiet spell until the test creates the file GO (the first
# kernel goes away in it), seven more lines, status 7.


CELL = ("for i in 1 2 3 4 5; do echo line-$i; done; until [ -e '{go}' ]; do sleep 0.05; done; "
        "for i in $(seq 6 12); do echo line-$i; sleep 0.1; done; echo on-stderr >&2; (exit 7)")


def read_stderr_until(kernel: KernelHarness, msg_id: str, text: str, timeout: float = 60) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        msg = kernel.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream" and msg["content"]["name"] == "stderr":
            seen += msg["content"]["text"]
        else:
            kernel.stray.append(msg)
    return seen


def test_a_killed_kernels_running_cell_is_caught_up_exactly_once(named, tmp_path):
    go = tmp_path / "go"
    first = named("build")
    shell_pid = first.ok("echo $$").strip()
    msg_id = first.start(CELL.format(go=go))
    seen = read_until(first, msg_id, "line-5\n")
    os.kill(first.pid, signal.SIGKILL)

    second = named("build")
    msg_id = second.start("echo after $$")
    header = read_stderr_until(second, msg_id, "is still running")
    go.touch()
    execution = second.collect(msg_id, timeout=60)
    assert execution.status == "ok", (execution.errors, execution.stderr)
    assert seen + execution.stdout == lines(1, 12) + f"after {shell_pid}\n"
    stderr = header + execution.stderr
    assert "session build" in stderr and "is still running" in stderr, stderr
    assert stderr.index("still running") < stderr.index("on-stderr") \
        < stderr.index("ended with exit status 7")
    assert execution.exit_code == 0


def shown_until_killed(kernel: KernelHarness, msg_id: str, text: str) -> str:
    """The cell's stdout up to `text`; then the kernel is killed (SIGKILL) at
    once, and what had reached the client by then is added."""
    seen = read_until(kernel, msg_id, text)
    os.kill(kernel.pid, signal.SIGKILL)
    while True:
        try:
            msg = kernel.kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            return seen
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream" \
                and msg["content"]["name"] == "stdout":
            seen += msg["content"]["text"]


def steady_cell(label: str) -> str:
    """40 lines at 10 a second."""
    return f"for i in $(seq 1 40); do echo {label}-$i; sleep 0.1; done"


@pytest.fixture(params=["ssh", "local"])
def named_anywhere(request, named, jupyter_prefix, start_kernel, tmp_path):
    """Start a kernel of the named session NAME, on the test host or on this
    machine (a TMPDIR of the test's own, where the next kernel finds it)."""
    if request.param == "ssh":
        yield named
        return
    shared_tmp = tmp_path / "local tmp"
    shared_tmp.mkdir(mode=0o700)

    def start(name: str) -> KernelHarness:
        spec = f"shell-named-local-{os.getpid()}-{name}"
        install_spec(jupyter_prefix, spec, ["--session", name])
        return start_kernel(spec, TMPDIR=str(shared_tmp))

    yield start
    stop_sessions(shared_tmp / f"shell_kernel-{UID}")


def test_output_shown_before_a_sigkill_is_never_caught_up_again(named_anywhere):
    # What a kernel shows, it has had the host record first: the next kernel's
    # catch-up starts right after it, however soon after a line the kill comes.
    # Three rounds: each kernel catches up the cell of the one killed before
    # it, then runs a cell of its own and is killed in the middle of it.
    shown, expected = "", ""
    kernel = named_anywhere("steady")
    for round_ in range(1, 4):
        msg_id = kernel.start(steady_cell(f"round{round_}"))
        shown += shown_until_killed(kernel, msg_id, f"round{round_}-15\n")
        expected += "".join(f"round{round_}-{i}\n" for i in range(1, 41))
        kernel = named_anywhere("steady")
    execution = kernel.run("echo after", timeout=60)
    assert execution.status == "ok", (execution.errors, execution.stderr)
    assert shown + execution.stdout == expected + "after\n"


def test_the_stop_button_interrupts_the_cell_a_new_kernel_waits_for(named):
    first = named("waited")
    shell_pid = first.ok("echo $$").strip()
    first.start("sleep 1000.917")
    assert wait_until(lambda: pids_matching("1000.917"))
    os.kill(first.pid, signal.SIGKILL)

    second = named("waited")
    msg_id = second.start("echo never")
    read_stderr_until(second, msg_id, "is still running")
    second.km.interrupt_kernel()
    execution = second.collect(msg_id)
    assert execution.reply["content"]["ename"] == "KeyboardInterrupt"
    assert "never" not in execution.stdout
    assert wait_until(lambda: not pids_matching("1000.917"))
    assert second.ok("echo $$").strip() == shell_pid


def test_a_cell_that_ended_after_a_shutdown_reports_its_real_status(named, host, tmp_path):
    go = tmp_path / "go"
    first = named("nightly")
    first.ok("cd /tmp; NIGHTLY=kept")
    shell_pid = first.ok("echo $$").strip()
    msg_id = first.start(CELL.format(go=go).replace("(exit 7)", "(exit 3)"))
    seen = read_until(first, msg_id, "line-5\n")
    first.shutdown()
    go.touch()
    status = host.sessions_dir / "nightly" / "status"
    # The cell ends on the host while no kernel is attached.
    assert wait_until(lambda: status.read_text().split("\n")[1:2] == ["3"], timeout=30)

    second = named("nightly")
    execution = second.run("echo $NIGHTLY $$; pwd", timeout=60)
    assert execution.status == "ok", (execution.errors, execution.stderr)
    assert seen + execution.stdout == lines(1, 12) + f"kept {shell_pid}\n/tmp\n"
    assert "ended with exit status 3" in execution.stderr
    # Exactly once: the next kernel has nothing left to show.
    second.shutdown()
    third = named("nightly")
    execution = third.run("echo again $$")
    assert (execution.stdout, execution.stderr) == (f"again {shell_pid}\n", "")


def test_sessions_are_listed_and_killed(named, host):
    kernel = named("listed")
    shell_pid = int(kernel.ok("echo $$"))
    kernel.ok("sleep 1000.812 &")
    msg_id = kernel.start("sleep 30")
    time.sleep(0.5)
    listing = sessions_cli(host)
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if line.startswith("listed "))
    assert " held " in row and "cell 3 since" in row, listing.stdout
    kernel.km.interrupt_kernel()
    kernel.collect(msg_id)
    kernel.shutdown()
    assert wait_until(lambda: "detached" in sessions_cli(host).stdout)

    killed = sessions_cli(host, "--kill", "listed")
    assert killed.returncode == 0, killed.stderr
    assert wait_until(lambda: not os.path.exists(f"/proc/{shell_pid}"))
    assert not (host.sessions_dir / "listed").exists()
    assert not pids_matching("1000.812")
    assert sessions_cli(host, "--kill", "listed").returncode == 1


@pytest.mark.parametrize("later", [False, True], ids=["at once", "after the watchdog looked"])
def test_a_session_that_ended_meanwhile_is_replaced_and_the_user_told(named, host, later):
    name = "gone-away-later" if later else "gone-away"
    first = named(name)
    shell_pid = int(first.ok("echo $$"))
    os.kill(first.pid, signal.SIGKILL)
    os.kill(shell_pid, signal.SIGKILL)  # e.g. the OOM killer, while nobody is attached
    if later:
        # The wrapper records how the shell ended; the watchdog, which looks
        # every 5 s, keeps the ended session's directory for the next kernel.
        assert wait_until(lambda: (host.sessions_dir / name / "exit_status").exists(), timeout=30)
        time.sleep(6)
        listed = sessions_cli(host).stdout
        assert re.search(rf"^{name}\s+ended\b", listed, re.M), listed
    execution = named(name).run("echo $$")
    assert execution.status == "ok", (execution.errors, execution.stderr)
    assert int(execution.stdout) != shell_pid
    assert f"session {name} on" in execution.stderr and "status 137" in execution.stderr
    assert "this is a new shell" in execution.stderr


def test_a_session_nobody_attaches_to_is_stopped_after_the_idle_timeout(named, host):
    kernel = named("brief", "--remote-idle-timeout", "3")
    shell_pid = int(kernel.ok("echo $$"))
    os.kill(kernel.pid, signal.SIGKILL)
    assert wait_until(lambda: not os.path.exists(f"/proc/{shell_pid}")
                      and not (host.sessions_dir / "brief").exists(), timeout=30)


def test_a_local_named_session_outlives_its_kernel(jupyter_prefix, start_kernel, tmp_path):
    shared_tmp = tmp_path / "local tmp"  # both kernels' TMPDIR: where the session is found
    shared_tmp.mkdir(mode=0o700)
    spec = f"shell-named-local-{os.getpid()}"
    install_spec(jupyter_prefix, spec, ["--session", "here"])
    first = start_kernel(spec, TMPDIR=str(shared_tmp))
    shell_pid = first.ok("cd /tmp; echo $$").strip()
    msg_id = first.start(CELL.format(go=tmp_path / "go"))
    seen = read_until(first, msg_id, "line-5\n")
    os.kill(first.pid, signal.SIGKILL)
    (tmp_path / "go").touch()  # the cell goes on while no kernel is attached

    second = start_kernel(spec, TMPDIR=str(shared_tmp))
    execution = second.run("echo after $$; pwd", timeout=60)
    assert execution.status == "ok", (execution.errors, execution.stderr)
    assert seen + execution.stdout == lines(1, 12) + f"after {shell_pid}\n/tmp\n"
    assert "ended with exit status 7" in execution.stderr

    env = {**os.environ, "TMPDIR": str(shared_tmp)}
    listing = subprocess.run([sys.executable, "-m", "shell_kernel", "sessions"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert listing.stdout.splitlines()[1].split()[:2] == ["here", "held"], listing.stdout
    second.shutdown()
    assert os.path.exists(f"/proc/{shell_pid}")  # the session stays
    killed = subprocess.run([sys.executable, "-m", "shell_kernel", "sessions", "--kill", "here"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert killed.returncode == 0, killed.stderr
    assert wait_until(lambda: not os.path.exists(f"/proc/{shell_pid}"))
