"""Remote sessions that survive a dropped connection (the default for SSH)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import install_spec
from harness import KernelHarness, pids_matching, wait_until
from shell_kernel.backends.channel.durable import (HEARD_WITHIN, REATTACH_GRACE,
                                                   SPOOL_GENERATION_BYTES)
from shell_kernel.testing.processes import alive


@pytest.fixture
def durable_kernel(jupyter_prefix, start_kernel, server, tmp_path):
    def start(*flags, ssh_options: str = ""):
        name = f"shell-durable-{os.getpid()}-{len(list(tmp_path.iterdir()))}"
        config = server.write_ssh_config(tmp_path / f"cfg-{name}", extra=ssh_options)
        install_spec(jupyter_prefix, name, ["--ssh", "testhost", "--ssh-config", str(config), *flags])
        return start_kernel(name)
    return start


def remote_state(kernel: KernelHarness) -> tuple[Path, int]:
    out = kernel.ok('builtin printf "%s %s" "$__shell_kernel_dir" "$$"').split()
    return Path(out[0]), int(out[1])


def drop_connection_during(kernel, server, code, after=1.0):
    msg_id = kernel.start(code)
    time.sleep(after)
    assert server.kill_sessions(), "no SSH session to kill"
    return kernel.collect(msg_id, timeout=90)


TICKS = "for i in $(seq 1 20); do echo line-$i; sleep 0.2; done"


def test_output_produced_while_away_arrives_exactly_once(durable_kernel, server):
    kernel = durable_kernel()
    execution = drop_connection_during(kernel, server, TICKS)
    assert execution.status == "ok", (execution.errors, execution.stderr)
    assert execution.stdout == "".join(f"line-{i}\n" for i in range(1, 21))
    assert execution.exit_code == 0
    assert "Reconnected" in execution.stderr and "reconnecting" in execution.stderr


def test_unanswered_connection_is_replaced_and_the_cell_goes_on(durable_kernel, server):
    kernel = durable_kernel(ssh_options="ServerAliveInterval 1\nServerAliveCountMax 2")
    msg_id = kernel.start(TICKS)
    time.sleep(1.0)
    frozen = server.kill_sessions(signal.SIGSTOP, include_commands=False)
    try:
        execution = kernel.collect(msg_id, timeout=90)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGKILL)
    assert execution.stdout == "".join(f"line-{i}\n" for i in range(1, 21))
    assert execution.exit_code == 0


def test_a_cell_sent_into_a_connection_already_dead_is_sent_again_once(durable_kernel, server):
    """The host's end of the connection died before the cell's lines came
    (frozen, then killed: the lines wait unread in its socket and go with
    it), and the kernel heard of it only after they went: reconnected, it
    sends them again, and the cell runs once."""
    kernel = durable_kernel()
    kernel.ok("KEEP=me RUNS=0")
    frozen = server.kill_sessions(signal.SIGSTOP, include_commands=False)
    assert frozen, "no SSH session to freeze"
    msg_id = kernel.start('RUNS=$((RUNS + 1)); echo "[$KEEP] $RUNS"')
    time.sleep(1.0)  # sent (the frozen host's socket takes them)
    for pid in frozen:
        os.kill(pid, signal.SIGKILL)
    execution = kernel.collect(msg_id, timeout=60)
    assert execution.status == "ok", (execution.errors, execution.stderr)
    assert execution.stdout == "[me] 1\n"
    assert "Reconnected" in execution.stderr
    assert kernel.ok("echo $RUNS") == "1\n"
    # What the host heard: this (fourth) cell's first line; its post line,
    # which the relay may have passed on already, or the last cell's.
    begun, posted = kernel.ok('read -r b p < "$__shell_kernel_dir/cells_heard"; echo "$b $p"').split()
    assert int(begun) == 4 and int(posted) in (3, 4), (begun, posted)


def test_failure_after_the_drop_reports_its_real_status(durable_kernel, server):
    kernel = durable_kernel()
    execution = drop_connection_during(kernel, server, TICKS + "; echo done; (exit 7)")
    assert execution.exit_code == 7
    assert execution.stdout.endswith("line-20\ndone\n")


def test_cell_that_finishes_while_disconnected(durable_kernel, server):
    kernel = durable_kernel()
    msg_id = kernel.start("sleep 1; echo done; exit 3")
    time.sleep(0.3)
    keys = server.authorized_keys_path
    keys.rename(keys.with_suffix(".away"))  # no way back in for a while
    server.kill_sessions()
    time.sleep(3)  # the cell ends meanwhile
    keys.with_suffix(".away").rename(keys)
    execution = kernel.collect(msg_id, timeout=90)
    assert execution.exit_code == 3
    assert execution.stdout == "done\n"


@pytest.mark.parametrize("relay_too", [True, False], ids=["relay-killed", "relay-cut-off"])
def test_drop_while_idle_keeps_the_same_shell(durable_kernel, server, relay_too):
    kernel = durable_kernel()
    kernel.ok("cd /tmp; IDLE_PLAIN=still-here; idle_fn() { echo fn-ok; }")
    _, pid = remote_state(kernel)
    # Cut off, the relay sees its channel close right after the kernel's
    # last heartbeat, as when the kernel dies: the kernel's return within
    # the grace keeps the shell.
    server.kill_sessions(include_commands=relay_too)
    time.sleep(1.0)
    execution = kernel.run("echo $IDLE_PLAIN; idle_fn; pwd; echo $$")
    assert execution.status == "ok", (execution.errors, execution.stderr)
    assert execution.stdout == f"still-here\nfn-ok\n/tmp\n{pid}\n"


def test_interrupt_after_a_reattach(durable_kernel, server):
    kernel = durable_kernel()
    server.kill_sessions()
    time.sleep(0.5)
    kernel.ok("echo reattached")
    msg_id = kernel.start("sleep 1000.71")
    time.sleep(0.7)
    kernel.km.interrupt_kernel()
    assert kernel.collect(msg_id).reply["content"]["ename"] == "KeyboardInterrupt"
    assert wait_until(lambda: not pids_matching("1000.71"))


def test_interrupt_while_disconnected_takes_effect_after_reattaching(durable_kernel, server):
    kernel = durable_kernel()
    msg_id = kernel.start("sleep 1000.76")
    time.sleep(0.7)
    keys = server.authorized_keys_path
    keys.rename(keys.with_suffix(".away"))
    server.kill_sessions()
    time.sleep(0.5)
    kernel.km.interrupt_kernel()  # nothing can be reached now
    time.sleep(2)
    keys.with_suffix(".away").rename(keys)
    execution = kernel.collect(msg_id, timeout=90)
    assert execution.reply["content"]["ename"] == "KeyboardInterrupt"
    assert wait_until(lambda: not pids_matching("1000.76"))
    assert kernel.ok("echo after") == "after\n"


def test_an_interrupted_cell_whose_end_is_slow_to_arrive_keeps_its_shell(durable_kernel):
    """The relay holds the cell's end (its followers stopped here, as a
    BusyBox host's tail -f, which looks once a second, and a loaded host
    hold it) past the escalation's last step: the cell ended at SIGINT on
    the host, so its shell stays, with its state."""
    kernel = durable_kernel()
    kernel.ok("KEPT=yes")
    state, _ = remote_state(kernel)
    msg_id = kernel.start("sleep 1000.81")
    time.sleep(0.7)
    # The tee behind each follower's tail -f (spool.sh live): stopped, it
    # passes nothing on.
    followers = pids_matching(f"{state}/out.count") + pids_matching(f"{state}/err.count")
    assert len(followers) == 2, "no relay followers (spool.sh's tail -f | tee) found"
    for pid in followers:
        os.kill(pid, signal.SIGSTOP)
    try:
        kernel.km.interrupt_kernel()
        time.sleep(4)  # grace (1 s), then SIGTERM and SIGKILL steps: 2 s in all
    finally:
        for pid in followers:
            os.kill(pid, signal.SIGCONT)
    execution = kernel.collect(msg_id, timeout=60)
    assert execution.reply["content"]["ename"] == "KeyboardInterrupt"
    assert kernel.ok("echo ${KEPT-lost}") == "yes\n"


def test_session_gone_on_reconnect(durable_kernel, server):
    kernel = durable_kernel()
    kernel.ok("GONE_VAR=x")
    state, pid = remote_state(kernel)
    msg_id = kernel.start("sleep 1000.72")
    time.sleep(0.7)
    keys = server.authorized_keys_path
    keys.rename(keys.with_suffix(".away"))
    server.kill_sessions()
    # The host "rebooted": the shell, its cell and its files are gone.
    for victim in [pid, *pids_matching("1000.72")]:
        os.kill(victim, signal.SIGKILL)
    shutil.rmtree(state, ignore_errors=True)
    keys.with_suffix(".away").rename(keys)
    execution = kernel.collect(msg_id, timeout=90)
    assert execution.status == "error"
    assert "session is gone" in execution.errors[0]["evalue"]
    assert kernel.ok("echo ${GONE_VAR-new shell}") == "new shell\n"


def vanish_silently(kernel, server) -> None:
    """The kernel goes as behind a dead network: no word from it for longer
    than the host waits for one (durable.HEARD_WITHIN), then sshd's timeouts
    close its channels (here: its sshd processes killed, not its commands)."""
    os.kill(kernel.pid, signal.SIGSTOP)
    time.sleep(HEARD_WITHIN + 3)
    assert server.kill_sessions(include_commands=False), "no SSH session to kill"


def test_idle_reaper_stops_a_session_whose_kernel_vanished(durable_kernel, server):
    kernel = durable_kernel("--remote-idle-timeout", "5")
    state, pid = remote_state(kernel)
    kernel.ok("sleep 1000.73 &")
    vanish_silently(kernel, server)
    os.kill(kernel.pid, signal.SIGKILL)  # no shutdown: the kernel is simply gone
    assert wait_until(lambda: not alive(pid) and not state.exists(), timeout=40)
    assert wait_until(lambda: not pids_matching("1000.73"), timeout=5)


@pytest.mark.parametrize("how", ["SIGKILL", "shutdown_kernel(now=True)"])
def test_a_killed_kernels_shell_ends_within_15_s(durable_kernel, how):
    """nbval, jupyter_client's shutdown_kernel(now=True) and a restart after a
    hung kernel kill it: its connection closes at once, and its shell, cell
    and jobs end within moments, not after --remote-idle-timeout (1 h)."""
    kernel = durable_kernel()
    state, pid = remote_state(kernel)
    kernel.ok("sleep 1000.91 & (sleep 1000.93 &)")
    kernel.start("sleep 1000.92")
    assert wait_until(lambda: pids_matching("1000.92"), timeout=10)
    if how == "SIGKILL":
        os.kill(kernel.pid, signal.SIGKILL)
    else:
        kernel.km.shutdown_kernel(now=True)
    assert wait_until(lambda: not alive(pid) and not any(
        pids_matching(f"1000.9{n}") for n in (1, 2, 3)), timeout=15), "the shell outlived its kernel"
    assert wait_until(lambda: not state.exists(), timeout=5)


def test_a_connection_lost_silently_keeps_its_shell(durable_kernel, server):
    """A dropped network gives the host no word for a long time before sshd
    closes the relay's channel: not a dead kernel, so the shell stays for
    the kernel to come back (after more than the grace a dead one gets)."""
    kernel = durable_kernel()
    kernel.ok("KEPT=yes")
    _, pid = remote_state(kernel)
    try:
        vanish_silently(kernel, server)
        time.sleep(REATTACH_GRACE + 4)
        assert alive(pid), "the shell of a kernel behind a dead network was ended"
    finally:
        os.kill(kernel.pid, signal.SIGCONT)
    assert kernel.ok("echo $KEPT $$") == f"yes {pid}\n"


def spooled_stdout(state: Path) -> int:
    return sum(f.stat().st_size for f in state.glob("out.*") if f.is_file())


def test_spool_on_the_host_is_bounded_and_offsets_survive_a_trim(durable_kernel, server):
    kernel = durable_kernel()
    state, _ = remote_state(kernel)
    big = kernel.run("head -c 12000000 /dev/zero | tr '\\0' z", timeout=120)
    assert len(big.stdout) == 12_000_000
    # The host deletes the spool files the kernel has received (in the
    # background, within a second or so), keeping the one being written.
    assert wait_until(lambda: spooled_stdout(state) < 2 * SPOOL_GENERATION_BYTES, timeout=10)
    assert 2 * SPOOL_GENERATION_BYTES < 12_000_000
    execution = drop_connection_during(kernel, server, TICKS)
    assert execution.stdout == "".join(f"line-{i}\n" for i in range(1, 21))
    assert oct((state).stat().st_mode & 0o777) == "0o700"


def test_shutdown_leaves_nothing_on_the_host(durable_kernel):
    kernel = durable_kernel()
    state, pid = remote_state(kernel)
    watchdog = int((state / "watchdog.pid").read_text().split()[0])
    kernel.ok("sleep 1000.74 & (sleep 1000.75 &)")
    kernel.shutdown()
    assert wait_until(lambda: not pids_matching("1000.74") and not pids_matching("1000.75"))
    assert wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in (pid, watchdog)))
    assert not state.exists()


def test_how_an_ended_shell_ended_outlasts_the_watchdogs_next_look(tmp_path):
    """A kernel asks how its durable shell ended (launch.sh status) once its
    relay has seen the end; on a loaded host that comes after the watchdog's
    next look (every 5 s), so the status must outlast that look (a directory
    removed with the status in it would report `kill -9 $$` as status 1)."""
    from shell_kernel.backends.channel import durable

    def launch(*args):
        return subprocess.run(["sh", "-c", durable.LAUNCH_SCRIPT, "launch.sh", *args],
                              env=dict(os.environ, TMPDIR=str(tmp_path)), capture_output=True,
                              text=True, timeout=30)

    started = launch("start", "600", str(durable.SPOOL_GENERATION_BYTES),
                     str(durable.SPOOL_KEEP_BYTES), str(durable.SPOOL_STALL_SECONDS),
                     durable.REAP_SCRIPT, durable.SPOOL_SCRIPT, "bash", "--norc", "--noprofile", "-i")
    wrapper, _, state = started.stdout.splitlines()[-1].partition(" ")
    try:
        with open(Path(state) / "in", "w") as shell_input:
            shell_input.write("kill -9 $$\n")
        assert wait_until(lambda: not os.path.exists(f"/proc/{wrapper}"), timeout=30)
        time.sleep(6)  # the kernel comes late: the watchdog has looked meanwhile
        assert launch("status", state).stdout.strip() == "137"
    finally:
        launch("stop", state)
    assert not os.path.exists(state)
