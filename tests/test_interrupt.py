"""Interrupts become kills of the cell's process tree; the shell survives."""

import os
import signal
import time

from harness import pids_matching, wait_until


def interrupt_after(kernel, code, delay=0.7, timeout=30):
    msg_id = kernel.start(code)
    time.sleep(delay)
    kernel.km.interrupt_kernel()
    return kernel.collect(msg_id, timeout=timeout)


def test_interrupt_kills_a_sleep_and_keeps_output_and_state(kernel):
    kernel.ok("INT_VAR=kept")
    execution = interrupt_after(kernel, "echo before; sleep 1000.111")
    assert execution.status == "error"
    assert execution.reply["content"]["ename"] == "KeyboardInterrupt"
    assert execution.exit_code == 130
    assert execution.meta["interrupted"] is True
    assert execution.stdout == "before\n"
    assert wait_until(lambda: not pids_matching("sleep 1000.111"), timeout=5)
    assert kernel.ok("echo $INT_VAR") == "kept\n"


def test_interrupt_stops_a_pure_shell_loop(kernel):
    kernel.ok("LOOP_N=0")
    execution = interrupt_after(kernel, "while :; do LOOP_N=$((LOOP_N+1)); done")
    assert execution.reply["content"]["ename"] == "KeyboardInterrupt"
    assert int(kernel.ok("echo $LOOP_N")) > 0


def test_interrupt_kills_grandchildren_and_programs_ignoring_sigint_and_sigterm(kernel):
    code = ("bash -c 'sleep 1000.222 & sleep 1000.223 & wait' & "
            "python3 -c \"import signal, time\n"
            "for s in (signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_IGN)\n"
            "time.sleep(1000.224)\" & wait")
    msg_id = kernel.start(code)
    markers = ("1000.222", "1000.223", "1000.224")
    assert wait_until(lambda: all(pids_matching(m) for m in markers), timeout=10)
    time.sleep(0.3)  # python has set its signal dispositions
    kernel.km.interrupt_kernel()
    execution = kernel.collect(msg_id)
    assert execution.status == "error"
    for marker in markers:
        assert wait_until(lambda: not pids_matching(marker), timeout=5), marker
    assert kernel.ok("echo alive") == "alive\n"


def test_program_ignoring_sigint_in_the_foreground_is_killed(kernel):
    code = ("python3 -c \"import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "time.sleep(1000.333)\"; sleep 1000.334; echo after-sleep")
    started = time.monotonic()
    execution = interrupt_after(kernel, code)
    assert time.monotonic() - started < 15
    assert execution.status == "error"
    # Killing the program does not let the rest of the cell run on.
    assert "after-sleep" not in execution.stdout
    assert wait_until(lambda: not pids_matching("1000.333") and not pids_matching("1000.334"),
                      timeout=5)


def test_background_jobs_of_earlier_cells_survive_an_interrupt(kernel):
    kernel.ok("sleep 1000.444 & BG_PID=$!")
    interrupt_after(kernel, "sleep 1000.555")
    assert pids_matching("1000.444")
    assert not pids_matching("1000.555")
    kernel.ok("kill $BG_PID; wait $BG_PID 2>/dev/null; true")


def test_shell_ignoring_sigint_is_replaced_with_a_notice(kernel):
    kernel.ok("TRAP_VAR=old")
    execution = interrupt_after(kernel, "trap '' INT; while :; do :; done", timeout=30)
    assert execution.status == "error"
    assert execution.errors[0]["ename"] == "ShellExited"
    assert "did not stop" in execution.errors[0]["evalue"]
    assert kernel.ok("echo ${TRAP_VAR-gone}") == "gone\n"


def test_interrupting_an_idle_kernel_is_harmless(kernel):
    kernel.ok("IDLE_VAR=idle")
    for _ in range(2):
        kernel.km.interrupt_kernel()
        # The interrupt travels on the control channel: give it time to land
        # before the next execute, or it would (rightly) interrupt that.
        time.sleep(0.5)
    assert kernel.ok("echo $IDLE_VAR") == "idle\n"


def test_sigint_to_the_kernel_process_interrupts_instead_of_killing(kernel):
    msg_id = kernel.start("sleep 1000.666")
    time.sleep(0.7)
    os.kill(kernel.pid, signal.SIGINT)
    execution = kernel.collect(msg_id)
    assert execution.reply["content"]["ename"] == "KeyboardInterrupt"
    assert kernel.km.is_alive()
    os.kill(kernel.pid, signal.SIGINT)  # idle: nothing happens
    assert kernel.ok("echo still") == "still\n"
