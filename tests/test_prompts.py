"""Prompts: a cell that waits for input asks the notebook (input_request),
through a real jupyter_client, on both backends; automated runs get
end-of-file and a notice; quiet or slow commands never ask."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import stat
import time

import pytest

from harness import wait_until
from shell_kernel.testing.processes import argv, process_table
from test_prompt_input import timed_out

SECRET = "s3cr3t-Ans-42"


def no_input(kernel, code, timeout=30):
    """Run a cell as an automated run does (allow_stdin=False)."""
    return kernel.collect(kernel.start(code, allow_stdin=False), timeout)


def test_read_with_a_prompt_asks_with_its_text_and_gets_the_answer(kernel):
    execution = kernel.answering("read -p 'Your name: ' name; echo \"hello $name\"", ["Ada"])
    assert execution.prompts == [("Your name: ", False)]
    assert execution.status == "ok"
    # The prompt's text is the input box's, not also output.
    assert execution.stdout == "hello Ada\n"
    assert "Your name" not in execution.stderr
    assert kernel.ok("echo $name") == "Ada\n"


def test_read_without_a_prompt_and_output_before_it(kernel):
    execution = kernel.answering("echo first line; read value; echo \"got [$value]\"",
                                 ["two words"])
    assert execution.prompts == [("", False)]
    assert execution.stdout == "first line\ngot [two words]\n"


def test_hidden_and_password_prompts_are_password_requests(kernel):
    execution = kernel.answering(
        "read -s -p 'Token: ' t; echo; echo ${#t}; read -p 'Password: ' p; echo ${#p}",
        [SECRET, SECRET])
    assert execution.prompts == [("Token: ", True), ("Password: ", True)]
    assert execution.stdout == f"\n{len(SECRET)}\n{len(SECRET)}\n"
    assert SECRET not in json.dumps([m["content"] for m in execution.messages])


def test_python_input_and_two_prompts_in_order(kernel):
    execution = kernel.answering(
        "python3 -c 'print(input(\"value? \") * 2)'; read -p 'a: ' a; read -p 'b: ' b; "
        "echo \"$a-$b\"", ["21", "one", "two"])
    assert [p for p, _ in execution.prompts] == ["value? ", "a: ", "b: "]
    assert execution.stdout == "2121\none-two\n"


def test_empty_answer_is_enter_and_takes_the_default(kernel):
    code = "read -p 'Proceed? [Y/n] ' yn; case ${yn:-y} in [Yy]*) echo proceeding;; *) echo no;; esac"
    execution = kernel.answering(code, [""])
    assert execution.prompts == [("Proceed? [Y/n] ", False)]
    assert execution.stdout == "proceeding\n"


def test_ctrl_d_is_end_of_file(kernel):
    execution = kernel.answering("cat; echo \"cat: $?\"; read v || echo \"read: end-of-file\"",
                                 ["line one", "^D", "^D"])
    assert len(execution.prompts) == 3
    assert execution.stdout == "line one\ncat: 0\nread: end-of-file\n"


def test_head_reads_one_line_from_the_user(kernel):
    execution = kernel.answering("head -n1 | tr a-z A-Z", ["shout"])
    assert execution.stdout == "SHOUT\n"


def test_interrupt_while_prompting_ends_the_cell_and_the_next_one_works(kernel):
    msg_id = kernel.start("read -p 'waiting: ' x; echo after", allow_stdin=True)
    asked = []
    kernel.kc.stdin_channel  # noqa: B018 - started with the client
    deadline = time.monotonic() + 20
    while not asked and time.monotonic() < deadline:
        try:
            asked.append(kernel.kc.get_stdin_msg(timeout=0.1))
        except Exception:  # noqa: BLE001 - queue.Empty
            pass
    assert asked and asked[0]["content"]["prompt"] == "waiting: "
    kernel.km.interrupt_kernel()
    execution = kernel.collect(msg_id)
    assert execution.status == "error"
    assert execution.reply["content"]["ename"] == "KeyboardInterrupt"
    assert "after" not in execution.stdout
    assert kernel.ok("echo next") == "next\n"


def test_a_read_that_times_out_withdraws_its_question(kernel):
    execution = kernel.collect(kernel.start("read -t 1 -p 'quick: ' v; echo \"status $?\"",
                                            allow_stdin=True),
                               answer=lambda prompt, password: None)
    assert execution.prompts == [("quick: ", False)]
    assert execution.stdout == f"status {timed_out(kernel)}\n"
    # A late answer to the withdrawn question reaches nobody.
    kernel.kc.input("too late")
    execution = kernel.collect(kernel.start("read -t 1 v; echo \"[$v]\"", allow_stdin=True),
                               answer=lambda prompt, password: None)
    assert execution.stdout == "[]\n"


def test_automated_runs_get_end_of_file_and_one_notice(kernel):
    execution = no_input(kernel, "read -p 'Name: ' n; echo \"got [$n]\"; head -n1; echo done")
    assert execution.status == "ok"
    assert execution.stdout == "got []\ndone\n"
    # The prompt's text stays output; the notice says which command asked, once.
    assert execution.stderr.startswith("Name: \n[shell_kernel] 'read' asked for input")
    assert execution.stderr.count("[shell_kernel]") == 1
    assert "here-string" in execution.stderr
    execution = no_input(kernel, "python3 -c 'input()'")
    assert execution.exit_code == 1
    assert "'python3' asked for input" in execution.stderr


def test_no_false_prompts_for_slow_quiet_or_redirected_commands(kernel, tmp_path):
    data = kernel.tmpdir / "prompt-data.txt"
    kernel.ok(f"printf 'x1\\ny2\\n' > {shlex.quote(str(data))}")
    code = (f"sleep 1.5; printf 'no newline yet'; sleep 1; echo; cat {shlex.quote(str(data))}; "
            f"grep y < {shlex.quote(str(data))}; echo piped | {{ read v; echo \"[$v]\"; }}; "
            f"timeout 1.5 tail -f {shlex.quote(str(data))} >/dev/null; "
            f"python3 -c 'import time; time.sleep(1)'; echo end")
    execution = kernel.collect(kernel.start(code, allow_stdin=True), timeout=30)
    assert execution.prompts == []  # collect() fails the test on any input_request
    assert execution.stdout == "no newline yet\nx1\ny2\ny2\n[piped]\nend\n"


def test_a_program_waiting_on_the_network_is_not_a_prompt(kernel):
    """Its standard input is the terminal, and Linux shows its wait for a TCP
    socket's data as it shows a read of a terminal (wait_woken): only the
    read of the terminal asks (an ssh client mid-handshake looked like a
    line prompt to the detector without /proc)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # connects, never answers
        port = silent.getsockname()[1]
        code = ("timeout 2 python3 -c 'import socket; "
                f"socket.create_connection((\"127.0.0.1\", {port})).recv(1)'; echo \"status $?\"")
        execution = kernel.collect(kernel.start(code, allow_stdin=True), timeout=30)
    assert execution.prompts == []  # collect() fails the test on any input_request
    assert execution.stdout == "status 124\n"


def prompt_watchers(kernel) -> tuple[list[int], str]:
    """The kernel's prompt watchers (one, unless it died) and the shell's bash
    major version."""
    shell, state_dir, bash = kernel.ok('echo "$$ $__shell_kernel_dir $BASH_VERSINFO"').split()
    # The watcher's arguments end with the shell's pid and state directory; a
    # subshell it forks (the portable detector's `ps | awk`) has them too.
    table = process_table()
    matching = {pid for pid in table if argv(pid)[-3:-1] == [shell.encode(), state_dir.encode()]}
    return [pid for pid in matching if table[pid][0] not in matching], bash


def test_the_watcher_sleeps_between_cells_and_wakes_as_one_starts(kernel):
    """Between cells the prompt watcher waits on its FIFO, not looking at a
    shell that waits for commands five times a second; a cell's start wakes
    it, and it looks at the running cell as often as before. Counted by the
    watcher's read calls (/proc/PID/io), which a slow machine makes fewer,
    never more. (Bash 3.2's read -t takes whole seconds: its watcher pauses
    by sleep, which nothing wakes, and looks every 0.2 s between cells.)"""
    watchers, bash = prompt_watchers(kernel)
    assert len(watchers) == 1

    def reads() -> int:
        with open(f"/proc/{watchers[0]}/io") as io:
            return int(next(line for line in io if line.startswith("syscr:")).split()[1])

    # Its last look at the cell that just ended may still be under way (without
    # /proc a look runs ps, whose reads of every process's files count here once
    # it is reaped: hundreds). Once its count stands still for half a second, it
    # waits.
    before, deadline = reads(), time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if (count := reads()) == before:
            break
        before = count
    time.sleep(3)  # idle: the old watcher looked 15 times
    if int(bash) >= 4:
        assert reads() - before <= 4
    # A cell right after another (the watcher's wait between them just begun):
    # its looks in the cell's first second.
    read_count = (f'while read -r key value; do [[ $key == syscr: ]] && break; done '
                  f'< /proc/{watchers[0]}/io; ')
    looks = kernel.ok("true; " + read_count + "first=$value; sleep 1; " + read_count
                      + "echo $(( value - first ))")
    assert int(looks) >= 6


def test_the_watcher_outlives_a_sigalrm_that_no_read_waits_for(kernel):
    """Bash before 4.4 puts SIGALRM's default action back as a read -t ends,
    before it stops the read's timer: under load the timer could run out in
    between and kill the watcher, after which no prompt of the session asked
    (seen on bash 4.2 in CI: "the prompt watcher's terminal closed" as a cell
    began, then cells waiting for input with no question). A SIGALRM sent
    from outside is that late signal, at any moment (bash 5.2's read -t does
    not use the signal: there any SIGALRM would kill the watcher)."""
    watchers, _ = prompt_watchers(kernel)
    assert len(watchers) == 1
    for _ in range(5):
        with contextlib.suppress(ProcessLookupError):  # (killed by the one before)
            os.kill(watchers[0], signal.SIGALRM)
        time.sleep(0.1)
    assert prompt_watchers(kernel)[0] == watchers, "the watcher died of SIGALRM"
    execution = kernel.answering("read -p 'after the alarms? ' v; echo \"[$v]\"", ["yes"])
    assert execution.prompts == [("after the alarms? ", False)]
    assert execution.stdout == "[yes]\n"


def test_a_password_reaches_no_output_log_or_state_file(start_kernel, ssh_kernel, sshd, tmp_path):
    for backend in ("local", "ssh"):
        log_file = tmp_path / f"kernel-{backend}.log"
        env = {"SHELL_KERNEL_LOG": str(log_file)}
        kernel = start_kernel(**env) if backend == "local" else ssh_kernel(sshd.ssh_config, **env)
        state_dir = kernel.ok("echo \"$__shell_kernel_dir\"").strip()
        execution = kernel.answering(
            "read -s -p 'Password: ' pw; echo \"length ${#pw}\"; sleep 0.2", [SECRET])
        assert execution.stdout == f"length {len(SECRET)}\n"
        assert SECRET not in json.dumps([m["content"] for m in execution.messages])
        found = kernel.ok(f"grep -rlF -- {shlex.quote(SECRET)} {shlex.quote(state_dir)} "
                          "2>/dev/null; true")
        assert found == "", f"{backend}: the password is in {found}"
        kernel.ok("unset pw")
        assert log_file.exists() and SECRET not in log_file.read_text(errors="replace")


@pytest.fixture
def sudo_stand_in(tmp_path):
    """A `sudo` that, like the real one without a terminal, needs -A and asks
    its askpass program (real sudo, run as root here, never asks)."""
    folder = tmp_path / "stand-in-bin"
    folder.mkdir()
    script = folder / "sudo"
    script.write_text(
        "#!/bin/sh\n"
        "[ \"$1\" = -A ] || { echo 'sudo: a terminal is required to read the password' >&2; exit 1; }\n"
        "shift\n"
        "pw=$(\"$SUDO_ASKPASS\" \"[sudo] password for $(id -un): \") || "
        "{ echo 'sudo: no password was provided' >&2; exit 1; }\n"
        f"[ \"$pw\" = {shlex.quote(SECRET)} ] || {{ echo 'Sorry, try again.' >&2; exit 1; }}\n"
        "exec \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    folder.chmod(0o755)
    return folder


def test_sudo_asks_through_askpass(kernel, sudo_stand_in):
    kernel.ok(f"OLD_PATH=$PATH; PATH={shlex.quote(str(sudo_stand_in))}:$PATH")
    try:
        execution = kernel.answering("sudo echo as-root", [SECRET])
        assert execution.prompts == [(f"[sudo] password for {kernel.ok('id -un').strip()}: ", True)]
        assert execution.stdout == "as-root\n"
        # The user's own choices are left alone: -S reads standard input.
        execution = kernel.answering("sudo -S echo x", [])
        assert execution.prompts == [] and "terminal is required" in execution.stderr
        started = time.monotonic()
        execution = no_input(kernel, "sudo echo as-root")
        assert execution.exit_code == 1 and "no password was provided" in execution.stderr
        assert "'sudo' asked for input" in execution.stderr
        assert time.monotonic() - started < 10
    finally:
        kernel.ok("PATH=$OLD_PATH")


def test_ssh_asks_for_a_key_passphrase_through_askpass(kernel, sshd):
    ssh = ("SSH_AUTH_SOCK= ssh -F /dev/null -o IdentitiesOnly=yes -o BatchMode=no "
           f"-o UserKnownHostsFile={shlex.quote(str(sshd.known_hosts_path))} "
           f"-o StrictHostKeyChecking=yes -i {shlex.quote(str(sshd.user_key_encrypted_path))} "
           f"-p {sshd.port} {sshd.user}@127.0.0.1 echo remote-ok")
    execution = kernel.answering(ssh, [sshd.user_key_passphrase])
    assert len(execution.prompts) == 1
    prompt, password = execution.prompts[0]
    assert "passphrase" in prompt and password
    assert execution.stdout == "remote-ok\n"
    execution = no_input(kernel, ssh)
    assert execution.status == "error" and "'ssh' asked for input" in execution.stderr


def test_ephemeral_ssh_and_a_reconnected_durable_session_ask_too(ssh_kernel, server, tmp_path):
    config = server.write_ssh_config(tmp_path / "ssh_config", alias="prompthost")
    ephemeral = ssh_kernel(config, alias="prompthost", flags=["--ephemeral"])
    assert ephemeral.answering("read -p 'e: ' v; echo \"[$v]\"", ["eph"]).stdout == "[eph]\n"
    durable = ssh_kernel(config, alias="prompthost")
    durable.ok("KEEP=me")
    server.kill_sessions()  # the connection drops; the shell lives on at the far end
    assert wait_until(lambda: not server.session_pids(authenticated=True), timeout=10)
    execution = durable.answering("read -p 'again: ' v; echo \"[$v] $KEEP\"", ["back"])
    assert execution.prompts == [("again: ", False)], (
        execution.reply["content"], execution.stdout, execution.stderr)
    assert execution.stdout == "[back] me\n"


def _a_vim() -> str:
    for name in ("vim", "vim.tiny", "vi"):
        if shutil.which(name):
            return name
    pytest.fail("no vim: .ci/run installs vim-tiny", pytrace=False)


@pytest.mark.parametrize("allow_stdin", [True, False])
def test_full_screen_programs_get_a_notice_and_the_cell_stops(kernel, allow_stdin):
    for program in (_a_vim(), "top"):
        started = time.monotonic()
        execution = kernel.collect(kernel.start(program, allow_stdin=allow_stdin), timeout=30)
        assert execution.prompts == []  # never an input box full of screen codes
        assert execution.status == "error"
        assert f"'{program}' needs a terminal" in execution.stderr
        assert time.monotonic() - started < 15
    assert kernel.ok("echo still-here") == "still-here\n"


def test_ssh_without_a_command_needs_a_terminal(kernel, sshd):
    execution = kernel.collect(kernel.start(
        f"ssh -F {shlex.quote(str(sshd.ssh_config))} testhost", allow_stdin=True), timeout=30)
    assert execution.prompts == []
    assert "'ssh' needs a terminal" in execution.stderr


def test_a_repl_is_driven_line_by_line_or_ends_at_once(kernel):
    execution = kernel.answering("python3 -q", ["print(6 * 7)", "^D"])
    assert [p for p, _ in execution.prompts] == [">>> ", ">>> "]
    assert "42" in execution.stdout
    execution = no_input(kernel, "python3 -q; echo \"status $?\"")
    assert execution.stdout.endswith("status 0\n")
    assert "'python3' asked for input" in execution.stderr
