"""What a notebook frontend is told, through real jupyter_client clients, in
the cases a person met in JupyterLab: cells Run All never reached, a kernel
shut down while its named session runs a cell, a shell slow to start.
(The browser side of the same cases is in test_jupyterlab.py.)"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import install_spec
from harness import pids_matching, wait_until
from named_support import read_until

SLOW_MARK = "1000.55"  # the sleep of the slow startup file; unique in /proc


def test_cells_queued_behind_a_failure_get_no_record(start_kernel):
    """Run All after a failed cell: ipykernel aborts the cells behind it, and
    their replies carry no shell_kernel record (the extension would show and
    save one as "no exit status")."""
    kernel = start_kernel()
    failing = kernel.start("sleep 0.5; false")
    queued = kernel.start("echo never-reached")
    failed = kernel.collect(failing)
    assert failed.status == "error" and failed.exit_code == 1
    aborted = kernel.collect(queued)
    assert aborted.status == "aborted"
    assert "shell_kernel" not in aborted.reply["metadata"], aborted.reply["metadata"]
    assert "never-reached" not in aborted.stdout
    assert kernel.run("true").meta["exit_code"] == 0  # and a later cell has its record


def test_a_kernel_shut_down_mid_cell_says_its_session_runs_on(jupyter_prefix, start_kernel,
                                                              tmp_path):
    shared_tmp = tmp_path / "named tmp"  # both kernels' TMPDIR: where the session is found
    shared_tmp.mkdir(mode=0o700)
    name = f"detach-{os.getpid()}"
    spec = f"shell-detach-{os.getpid()}"
    install_spec(jupyter_prefix, spec, ["--session", name])
    env = {**os.environ, "TMPDIR": str(shared_tmp)}
    go = tmp_path / "go"
    first = start_kernel(spec, TMPDIR=str(shared_tmp))
    try:
        shell_pid = first.ok("echo $$").strip()
        msg_id = first.start(f"echo started; until [ -e '{go}' ]; do sleep 0.05; done; "
                             "echo rest $$")
        read_until(first, msg_id, "started\n")
        first.kc.shutdown()
        execution = first.collect(msg_id)
        error = execution.reply["content"]
        assert error["ename"] == "Detached", error
        assert f"detached from session {name}, which keeps running this cell" in error["evalue"]
        # Numbered as the session numbers it, as the next kernel's catch-up says it.
        assert f"(cell 2 of session {name})" in error["evalue"], error
        assert "ended" not in error["evalue"], error
        assert execution.meta.get("detached") is True and execution.meta["session"] == name
        assert execution.meta["exit_code"] is None and "shell_restarted" not in execution.meta
        first.shutdown()
        second = start_kernel(spec, TMPDIR=str(shared_tmp))
        threading.Timer(3, go.touch).start()  # the cell goes on 3 s into the catch-up
        caught_up = second.run("true", timeout=60)
        assert f"rest {shell_pid}\n" in caught_up.stdout, (caught_up.stdout, caught_up.stderr)
        assert f"cell 2 of session {name} (started" in caught_up.stderr, caught_up.stderr
        # The badge says how long the request took, the wait for cell 2 included.
        assert caught_up.meta["duration_s"] >= 2.5, caught_up.meta
    finally:
        go.touch()
        subprocess.run([sys.executable, "-m", "shell_kernel", "sessions", "--kill", name],
                       env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("paused", [False, True], ids=["", "paused"])
def test_a_slow_start_is_shown_and_paid_once(paused, jupyter_prefix, start_kernel, tmp_path):
    """Startup files that hang: kernel_info is answered while they run, the
    first cell says it waits (with the time so far) and fails once the start
    timeout is over, and the cells queued behind it fail at once with the
    same error, without starting the shell again. Also when the kernel gets
    no CPU for longer than the start timeout and more (a busy host: here
    SIGSTOP): it resumes with the timeout long over and the failed start
    still ending (its hung shell given END_WAIT_S to exit), and the cells
    wait for that end, not start the shell again."""
    home = tmp_path / "home"
    home.mkdir()
    starts = tmp_path / "starts"
    (home / ".bash_profile").write_text(f"echo start >> '{starts}'\nsleep {SLOW_MARK}\n")
    spec = f"shell-slow-{os.getpid()}"
    install_spec(jupyter_prefix, spec, ["--start-timeout", "4"])
    kernel = start_kernel(spec, wait_shell=False, HOME=str(home))
    assert pids_matching(SLOW_MARK), "kernel_info waited for the startup files"
    first, second, third = (kernel.start(f"echo cell-{i}") for i in range(3))
    if paused:
        os.kill(kernel.pid, signal.SIGSTOP)
        try:
            time.sleep(4 + 5 + 1)  # the start timeout, and more
        finally:
            os.kill(kernel.pid, signal.SIGCONT)
    failed = kernel.collect(first, timeout=60)
    assert failed.status == "error", failed.stdout
    error = failed.reply["content"]
    assert error["ename"] == "ShellUnavailable"
    assert "did not start (no answer within 4 s)" in error["evalue"], error
    assert "~/.bash_profile" in error["evalue"] and "--clean" in error["evalue"], error
    shown = [m["content"]["data"]["text/plain"] for m in failed.messages
             if m["msg_type"] in ("display_data", "update_display_data")]
    assert shown and all("is still starting" in text for text in shown), shown
    assert any(" s so far" in text and "0 s so far" not in text for text in shown), shown
    for queued in (second, third):
        execution = kernel.collect(queued, timeout=10)
        assert execution.status == "error"
        assert execution.reply["content"]["evalue"] == error["evalue"]
        assert [e["evalue"] for e in execution.errors] == [error["evalue"]]
        assert execution.meta["exit_code"] is None
    assert starts.read_text() == "start\n"  # one start, one timeout
    assert wait_until(lambda: not pids_matching(SLOW_MARK), timeout=10)


def test_a_prompt_given_up_on_keeps_its_text_in_the_output(kernel):
    """As a terminal shows it: the question's text, then what came after."""
    execution = kernel.collect(kernel.start("read -t 1 -p 'quick? ' q; echo \"status=$?\"",
                                            allow_stdin=True),
                               answer=lambda prompt, password: None)
    assert execution.prompts == [("quick? ", False)]
    streams = [(m["content"]["name"], m["content"]["text"]) for m in execution.outputs]
    assert streams == [("stderr", "quick? "), ("stdout", "status=142\n")]  # read -p: stderr
    # An answered one is not repeated: the frontend shows it with its answer.
    execution = kernel.answering("read -p 'name? ' n; echo \"hi $n\"", ["Ann"])
    assert execution.stdout == "hi Ann\n"


def test_end_of_file_in_a_repl_leaves_nothing_empty(kernel):
    execution = kernel.answering("python3 -q", ["print(6 * 7)", "^D"])
    assert len(execution.prompts) == 2
    assert "42" in execution.stdout
    empty = [m["content"] for m in execution.outputs
             if m["msg_type"] == "stream" and not m["content"]["text"].strip()]
    assert empty == [], execution.outputs


def test_a_key_mode_program_shows_no_screen_and_stops_with_130(kernel):
    """vim draws its screen, then reads keys: the cell shows the notice, not
    the screen (nor vim's last words), and ends as Stop ends it: status 130."""
    vim = next((name for name in ("vim", "vim.tiny", "vi") if shutil.which(name)), None)
    assert vim, "no vim: .ci/run installs vim-tiny"
    execution = kernel.collect(kernel.start(vim, allow_stdin=True), timeout=60)
    assert execution.prompts == []
    assert f"'{vim}' needs a terminal" in execution.stderr
    shown = execution.stdout + execution.stderr
    assert "\x1b[" not in shown and "~   " not in shown and "Vim: Finished" not in shown, shown
    assert execution.reply["content"]["ename"] == "KeyboardInterrupt"
    assert execution.exit_code == 130 and execution.meta["interrupted"] is True
    assert kernel.ok("echo still-here") == "still-here\n"


def test_stop_while_the_shell_starts_ends_the_waiting_cell(jupyter_prefix, start_kernel,
                                                           tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bash_profile").write_text(f"sleep {SLOW_MARK}\n")
    spec = f"shell-slow-stop-{os.getpid()}"
    install_spec(jupyter_prefix, spec, ["--start-timeout", "120"])
    kernel = start_kernel(spec, wait_shell=False, HOME=str(home))
    msg_id = kernel.start("echo never-ran")
    # The cell says that it waits, then Stop ends the wait.
    while True:
        msg = kernel.kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "display_data":
            assert "is still starting" in msg["content"]["data"]["text/plain"]
            break
    kernel.km.interrupt_kernel()
    execution = kernel.collect(msg_id, timeout=30)
    assert execution.reply["content"]["ename"] == "KeyboardInterrupt"
    assert "did not run" in execution.reply["content"]["traceback"][0]
    assert execution.meta["exit_code"] == 130 and "never-ran" not in execution.stdout
    kernel.shutdown()
    assert wait_until(lambda: not pids_matching(SLOW_MARK), timeout=10)
