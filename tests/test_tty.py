"""--tty: the cells' stdout and stderr are pseudo-terminals on the shell's
host, through a real jupyter_client, on the local backend and over SSH
(durable and ephemeral); everything else a cell does keeps working."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from conftest import install_spec, kernel_env
from harness import KernelHarness, wait_until

# backend -> install flags (the SSH ones get the test sshd's config too)
TTY_SPECS = {"local": [], "ssh": ["--ssh", "testhost"], "ssh-ephemeral": ["--ssh", "testhost", "--ephemeral"]}


@pytest.fixture(scope="module", params=list(TTY_SPECS))
def tty_kernel(request, jupyter_prefix, sshd, tmp_path_factory):
    flags = TTY_SPECS[request.param]
    if "--ssh" in flags:
        flags = flags + ["--ssh-config", str(sshd.ssh_config)]
    name = f"shell-test-tty-{request.param}"
    install_spec(jupyter_prefix, name, ["--tty", *flags])
    tmpdir = tmp_path_factory.mktemp(f"tty-{request.param}")
    tmpdir.chmod(0o755)
    harness = KernelHarness(name, env=kernel_env(tmpdir), cwd=str(tmpdir))
    harness.backend = request.param
    yield harness
    harness.shutdown()


def test_stdout_and_stderr_are_terminals(tty_kernel):
    code = "python3 -c 'import sys; print(sys.stdout.isatty(), sys.stderr.isatty())'"
    assert tty_kernel.ok(code) == "True True\n"
    # A terminal's settings, without its CR/LF translation.
    assert tty_kernel.ok("echo $TERM $COLUMNS $LINES; tput cols <&1; tput colors") \
        == "xterm-256color 80 24\n80\n256\n"


def test_ls_colours_with_color_auto(tty_kernel):
    stdout = tty_kernel.ok("d=$(mktemp -d) && mkdir $d/subdir && ls --color=auto $d; rm -r $d")
    assert "\x1b[" in stdout and "subdir" in stdout


def test_stdout_and_stderr_stay_separate_streams(tty_kernel):
    execution = tty_kernel.run("echo out; echo err >&2; printf 'a\\nb\\n'; printf 'c\\n' >&2")
    assert execution.status == "ok"
    assert execution.stdout == "out\na\nb\n"
    assert execution.stderr == "err\nc\n"


def test_a_million_lines_arrive_complete(tty_kernel):
    stdout = tty_kernel.ok("seq 1 1000000", timeout=60)
    assert stdout == "".join(f"{n}\n" for n in range(1, 1000001))


def test_failing_command_exit_status_and_display(tty_kernel):
    execution = tty_kernel.run("true\necho hello | grep nomatch")
    assert execution.status == "error"
    assert execution.exit_code == 1
    assert execution.meta.get("command") == "grep nomatch" and execution.meta.get("line") == 2
    assert tty_kernel.run("exit 3").exit_code == 3
    execution = tty_kernel.run("echo '<b>bold</b>' | display --mime text/html")
    assert execution.status == "ok"
    assert [o["content"]["data"]["text/html"] for o in execution.outputs
            if o["msg_type"] == "display_data"] \
        == ["<b>bold</b>\n"]


def test_interrupt_stops_the_cell_and_keeps_the_terminals(tty_kernel):
    msg_id = tty_kernel.start("echo before; sleep 1000.777")
    time.sleep(1.0)
    tty_kernel.km.interrupt_kernel()
    execution = tty_kernel.collect(msg_id, timeout=30)
    assert execution.meta["interrupted"] is True
    assert execution.stdout == "before\n"
    code = "python3 -c 'import sys; print(sys.stdout.isatty(), sys.stderr.isatty())'"
    assert tty_kernel.ok(code) == "True True\n"


def test_a_prompt_is_asked_and_answered(tty_kernel):
    execution = tty_kernel.answering("read -p 'Your name: ' name; echo \"hello $name\"", ["Ada"])
    assert execution.prompts == [("Your name: ", False)]
    assert execution.stdout == "hello Ada\n"


def terminal_processes(kernel) -> list[int]:
    """The processes that hold the shell's terminals, and the `script`s above them."""
    holders = [int(p) for p in kernel.ok("echo ${__shell_kernel_tty_holders[@]}").split()]
    holders += [int(p) for p in kernel.ok(f"ps -o ppid= -p {holders[0]},{holders[1]}").split()]
    assert len(holders) == 4
    return holders


def test_the_terminal_holders_end_with_the_shell(tty_kernel):
    """`kill -9 $$` ends the shell; its terminals' holders must not outlive it
    (they would keep the kernel's channels open), and the new shell has its own."""
    old = terminal_processes(tty_kernel)
    execution = tty_kernel.run("kill -9 $$")
    assert execution.status == "error"
    code = "python3 -c 'import sys; print(sys.stdout.isatty(), sys.stderr.isatty())'"
    assert tty_kernel.ok(code) == "True True\n"
    assert wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in old))
    assert not set(terminal_processes(tty_kernel)) & set(old)


def test_each_terminal_holder_holds_its_own_input_only(tty_kernel):
    """Each holder and its `script` end when the shell closes their input (57
    or 58), whatever becomes of the other: none holds the other's (bash 3.2
    keeps a process substitution's pipe open in the shell until the whole
    start is over, so a second holder started that way held the first's)."""
    out_holder, err_holder, out_script, err_script = terminal_processes(tty_kernel)
    out_input, err_input = tty_kernel.ok("readlink /proc/$$/fd/57 /proc/$$/fd/58").split("\n")[:2]

    def held(pid: int) -> set:
        return {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}

    assert out_input != err_input
    for pid in (out_holder, out_script):
        assert out_input in held(pid) and err_input not in held(pid)
    for pid in (err_holder, err_script):
        assert err_input in held(pid) and out_input not in held(pid)


@pytest.fixture
def durable_tty_kernel(jupyter_prefix, start_kernel, server, tmp_path):
    config = server.write_ssh_config(tmp_path / "cfg-tty")
    name = f"shell-durable-tty-{os.getpid()}"
    install_spec(jupyter_prefix, name, ["--tty", "--ssh", "testhost", "--ssh-config", str(config)])
    return start_kernel(name)


def test_durable_output_while_disconnected_arrives_once_through_the_terminals(
        durable_tty_kernel, server):
    kernel = durable_tty_kernel
    holders = terminal_processes(kernel)
    msg_id = kernel.start("for i in $(seq 1 15); do echo line-$i; sleep 0.2; done; "
                          "[ -t 1 ] && echo tty; (exit 7)")
    time.sleep(1.0)
    assert server.kill_sessions(), "no SSH session to kill"
    execution = kernel.collect(msg_id, timeout=90)
    assert execution.stdout == "".join(f"line-{i}\n" for i in range(1, 16)) + "tty\n"
    assert execution.exit_code == 7
    assert "Reconnected" in execution.stderr
    kernel.shutdown()
    assert wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in holders))


def test_a_killed_terminal_holder_costs_its_output_not_the_shell(tty_kernel):
    """Killing what holds the terminals (`pkill script`) loses what was written
    to them, but the cell still ends and says so, and later cells use pipes."""
    execution = tty_kernel.run("echo kept-state > /dev/null; KEPT=yes; "
                               "kill $(ps -o ppid= -p ${__shell_kernel_tty_holders[0]}); sleep 0.5; echo lost", timeout=30)
    assert execution.exit_code == 0
    assert "a terminal of this shell's output ended" in execution.stderr
    assert tty_kernel.ok("echo $KEPT; [ -t 1 ] || echo pipe; echo $TERM") == "yes\npipe\ndumb\n"


def test_the_terminals_open_and_close_without_losing_the_shells_state(
        jupyter_prefix, start_kernel):
    """The shell opens and gives up its terminals with a plain `exec`: bash
    3.2's `command exec REDIRECTION` inside a function or an eval discards
    the cleanup of every call around it, so the shell lost its place in its
    input and ended at the start, and a function's locals outlived it. A
    user's function named exec (defined in a cell) is set aside meanwhile,
    and is there again after."""
    install_spec(jupyter_prefix, "shell-test-tty-exec", ["--tty"])
    kernel = start_kernel("shell-test-tty-exec")
    execution = kernel.run("[ -t 1 ] && [ -t 2 ] && echo terminals")
    assert (execution.stdout, execution.stderr) == ("terminals\n", "")
    locals_left = "declare -p {} 2>&1 | grep -v 'not found'; echo done"
    assert kernel.ok(locals_left.format("fifo holder holding setsid out err out_pid err_pid")) \
        == "done\n"
    kernel.ok('exec() { echo "user exec $*" >> exec.log; builtin exec "$@"; }')
    execution = kernel.run("kill $(ps -o ppid= -p ${__shell_kernel_tty_holders[0]}); sleep 0.5",
                           timeout=30)
    assert "a terminal of this shell's output ended" in execution.stderr
    # The cells write to the kernel's channels again; the user's exec was not called.
    execution = kernel.run("[ -t 1 ] || echo pipe; echo err >&2; type -t exec; "
                           "cat exec.log 2>/dev/null; " + locals_left.format("pid stat alive"))
    assert (execution.stdout, execution.stderr) == ("pipe\nfunction\ndone\n", "err\n")


def test_the_output_limit_and_coalescing_hold_under_tty(jupyter_prefix, start_kernel):
    install_spec(jupyter_prefix, "shell-test-tty-limit", ["--tty", "--output-limit-mb", "1"])
    kernel = start_kernel("shell-test-tty-limit")
    execution = kernel.run("seq 1 1000000; echo end >&2", timeout=60)
    assert execution.status == "ok"
    assert len(execution.stdout) == 1_000_000
    match = re.search(r"more than 1 MB; output stops here and the rest of it is saved in (\S+)\.",
                      execution.stderr)
    assert match, execution.stderr
    total = len("".join(f"{n}\n" for n in range(1, 1000001)))
    assert len(execution.stdout) + os.path.getsize(match.group(1)) == total + len("end\n")
    # Coalesced: a few messages, not one per line or per terminal read.
    assert len(execution.messages) < 20


def test_without_script_on_the_host_the_first_cell_says_so_and_pipes_are_used(
        jupyter_prefix, start_kernel, tmp_path):
    bin_dir = tmp_path / "bin-without-script"
    bin_dir.mkdir()
    for program in Path("/usr/bin").iterdir():
        if program.name != "script":
            (bin_dir / program.name).symlink_to(program)
    install_spec(jupyter_prefix, "shell-test-tty-clean", ["--tty", "--clean"])
    kernel = start_kernel("shell-test-tty-clean", PATH=str(bin_dir))
    execution = kernel.run("[ -t 1 ] || echo pipe; echo $TERM")
    assert execution.status == "ok"
    assert execution.stdout == "pipe\ndumb\n"
    assert "--tty: util-linux 'script' is not installed on this host" in execution.stderr
    assert "not installed" not in kernel.run("true").stderr  # once


def test_the_two_terminals_output_keeps_the_order_of_the_pipes(tty_kernel):
    """Writes to both streams at once (builtins, microseconds apart) are shown
    as pipes show them, stdout first, whichever `script` copies first; writes
    a few milliseconds apart keep the order they were written in."""
    def streams(code: str) -> list:
        execution = tty_kernel.run(code)
        return [(m["content"]["name"], m["content"]["text"]) for m in execution.outputs
                if m["msg_type"] == "stream"]

    at_once = "echo out1; echo err1 >&2; echo out2; echo err2 >&2"
    for _ in range(10):
        assert streams(at_once) == [("stdout", "out1\nout2\n"), ("stderr", "err1\nerr2\n")]
    apart = "echo out1; sleep 0.1; echo err1 >&2; sleep 0.1; echo out2; sleep 0.1; echo err2 >&2"
    assert streams(apart) == [("stdout", "out1\n"), ("stderr", "err1\n"),
                              ("stdout", "out2\n"), ("stderr", "err2\n")]
