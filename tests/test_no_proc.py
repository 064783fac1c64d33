"""The switch SHELL_KERNEL_NO_PROC: every script and the session's bash code
do as on a host without /proc (macOS, the BSDs), here on Linux, with real sh
and real kernels on both backends. The suite's variant runs (.ci/run) run
the process, interrupt, durable and prompt tests with it on."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time

import pytest

from conftest import install_spec
from harness import pids_matching, wait_until
from named_support import UID, stop_sessions
from shell_kernel import frames, shell
from shell_kernel.backends.local.terminal import LocalTerminal
from shell_kernel.testing.sshd import SSHServer, setenv_config

PS_RECORD = re.compile(r"^(\d+) (\d+),[A-Z][a-z]{2},[A-Z][a-z]{2},\d{1,2},\d\d:\d\d:\d\d,\d{4}$")


def pids_sh(code: str, no_proc: bool = True) -> str:
    env = dict(os.environ)
    env.pop(shell.NO_PROC, None)
    if no_proc:
        env[shell.NO_PROC] = "1"
    done = subprocess.run(["sh", "-c", shell.script("pids.sh") + code], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def moved(start: str, seconds: int) -> str:
    """START with its lstart moved by SECONDS (within the minute)."""
    fields = start.split(",")
    hours, minutes, secs = fields[4].split(":")
    fields[4] = f"{hours}:{minutes}:{int(secs) + seconds:02d}"
    return ",".join(fields)


def test_records_come_from_ps_and_tell_a_process_by_its_group_and_start(tmp_path):
    record = tmp_path / "record"
    out = pids_sh(f"""sleep 30 >/dev/null 2>&1 & p=$!; sleep 1
        pid_record "$p" '{record}'; read -r pid start < '{record}'; echo "$start"
        pid_is "$p" "$start" && echo same
        pid_gone '{record}' || echo alive
        kill "$p"; wait "$p" 2>/dev/null; pid_gone '{record}' && echo gone""")
    start, *verdicts = out.split()
    assert PS_RECORD.match(f"0 {start}"), start
    assert verdicts == ["same", "alive", "gone"]


@pytest.mark.parametrize("seconds, same", [(0, True), (-1, True), (1, True), (2, False),
                                           (-3, False)])
def test_lstart_may_move_by_a_second(seconds, same):
    """procps computes lstart anew each time: two calls for one process may
    differ by a second, which must not make it a stranger; more does."""
    # The shift stays within the minute of lstart (moved): start it clear of the edges.
    while not 4 <= time.localtime().tm_sec <= 55:
        time.sleep(0.5)
    start = pids_sh("sleep 30 >/dev/null 2>&1 & p=$!; sleep 1; pid_start \"$p\"; echo \" $p\"").split()
    when = start[0]
    if int(when.split(",")[4][-2:]) + seconds not in range(60):
        pytest.skip("the lstart is too close to a minute's edge for this shift")
    out = pids_sh(f"pid_is {start[1]} '{moved(when, seconds)}' && echo same; kill {start[1]}")
    assert (out.strip() == "same") is same


def test_a_process_of_another_group_with_the_same_start_is_a_stranger():
    out = pids_sh("sleep 30 >/dev/null 2>&1 & p=$!; sleep 1; w=$(pid_start \"$p\")\n"
                  "pid_is \"$p\" \"1${w}\" || echo stranger; kill \"$p\"")
    assert out.strip() == "stranger"


def test_a_record_of_the_other_kind_proves_nothing(tmp_path):
    """A /proc record read without /proc (and the reverse) tells neither
    that the process is the same, nor that it is gone."""
    record = tmp_path / "record"
    out = pids_sh(f"""sleep 30 >/dev/null 2>&1 & p=$!
        echo "$p 12345" > '{record}'
        pid_alive '{record}' || echo not-same; pid_gone '{record}' || echo not-gone; kill "$p" """)
    assert out.split() == ["not-same", "not-gone"]


# POSIX zones, far apart (no time zone database needed): ps prints local time.
ZONE, OTHER_ZONE = "XYZ-9", "ABC+5"


def test_a_record_made_in_one_time_zone_is_told_in_another(tmp_path):
    """A host whose rc files set TZ for some of its shells only, or a
    daylight-saving change between a record and its check: the process is
    still the one recorded, and a process recorded is not taken for gone."""
    record, reap = tmp_path / "record", tmp_path / "reap.sh"
    reap.write_text(shell.script("reap.sh"))
    out = pids_sh(f"""sleep 30 >/dev/null 2>&1 & p=$!; sleep 1
        TZ={ZONE}; export TZ; pid_record "$p" '{record}'; token="$p:$(pid_start "$p")"
        TZ={OTHER_ZONE}
        pid_alive '{record}' && echo same
        pid_gone '{record}' || echo alive
        echo "$p" signalled: $(sh '{reap}' orphans TERM $$ '{tmp_path}' "$token")
        sleep 0.2; ! kill "$p" 2>/dev/null || echo but left""")
    words = out.split()
    assert words == ["same", "alive", words[2], "signalled:", words[2]], out


def test_without_the_switch_records_are_procs(tmp_path):
    out = pids_sh("sleep 30 >/dev/null 2>&1 & p=$!; pid_start \"$p\"; kill \"$p\"", no_proc=False)
    assert out.strip().isdigit()


@pytest.mark.parametrize("backend", ["local", "ssh"])
def test_the_kernel_passes_the_switch_to_its_shell(backend, start_kernel, ssh_kernel, sshd):
    env = {shell.NO_PROC: "1"}
    kernel = start_kernel(**env) if backend == "local" else ssh_kernel(sshd.ssh_config, **env)
    record = kernel.ok('cat "$__shell_kernel_dir/shell.start"; echo "$$"').split("\n")
    assert PS_RECORD.match(record[0]), record
    assert record[0].split()[0] == record[1]


@pytest.mark.parametrize("no_proc", [False, True], ids=["/proc", "no /proc"])
def test_answers_are_counted_without_changing_the_terminals_rows_or_columns(
        no_proc, start_kernel):
    """The kernel tells the watcher of each answer by the terminal's size in
    pixels: the rows and columns that programs read stay what they were, and
    three reads in a row by one process are three prompts."""
    kernel = start_kernel(**({shell.NO_PROC: "1"} if no_proc else {}))
    size = kernel.ok("stty size")
    execution = kernel.answering("read a; read b; read c; echo \"$a$b$c\"; stty size",
                                 ["1", "2", "3"])
    assert len(execution.prompts) == 3
    assert execution.stdout == "123\n" + size


def test_a_killed_terminal_holder_is_noticed_without_proc(jupyter_prefix, start_kernel):
    """--tty: the `script` holding a terminal is killed, which leaves the
    holder a zombie where nothing reaps it: without /proc, ps tells (kill -0
    alone takes the zombie for alive, and the cell's end would go to a dead
    terminal: the cell would never end)."""
    install_spec(jupyter_prefix, "shell-test-tty-no-proc", ["--tty"])
    kernel = start_kernel("shell-test-tty-no-proc", **{shell.NO_PROC: "1"})
    execution = kernel.run("KEPT=yes; kill $(ps -o ppid= -p ${__shell_kernel_tty_holders[0]}); "
                           "sleep 0.5", timeout=30)
    assert "a terminal of this shell's output ended" in execution.stderr
    assert kernel.ok("echo $KEPT; [ -t 1 ] || echo pipe") == "yes\npipe\n"


@pytest.mark.parametrize("backend", ["local", "ssh"])
def test_reads_answered_one_after_another_are_each_asked_once(backend, start_kernel, ssh_kernel,
                                                              sshd, busy_cpus):
    """Without /proc, under load: reads in a row, each answered at once, are
    each asked once and get their own answers."""
    env = {shell.NO_PROC: "1"}
    kernel = start_kernel(**env) if backend == "local" else ssh_kernel(sshd.ssh_config, **env)
    count = 30
    execution = kernel.answering(
        f"for i in $(seq {count}); do read -p \"q$i: \" a; echo \"$a\"; done",
        [f"a{i}" for i in range(count)], timeout=120)
    assert [text for text, _ in execution.prompts] == [f"q{i}: " for i in range(1, count + 1)]
    assert execution.stdout == "".join(f"a{i}\n" for i in range(count))


def test_an_answer_that_comes_while_ps_looks_is_not_taken_for_the_next_read(start_kernel, tmp_path):
    """The watcher's ps is slow (0.5 s from its look to its end, as on a
    busy host) and each answer comes 0.3 s after its question, while ps
    looks again: the read that ps saw waiting was the one answered, not a
    new one (else it would be asked again, once the answer has been taken)."""
    slow = tmp_path / "slow-bin"
    slow.mkdir()
    (slow / "ps").write_text(f"#!/bin/sh\n{shutil.which('ps')} \"$@\"; status=$?\n"
                             "sleep 0.5\nexit $status\n")
    (slow / "ps").chmod(0o755)
    kernel = start_kernel(PATH=f"{slow}{os.pathsep}{os.environ['PATH']}", **{shell.NO_PROC: "1"})
    asked = []

    def answer(prompt, password):
        asked.append(prompt)
        time.sleep(0.3)
        return f"a{len(asked)}"

    msg_id = kernel.start("read -p 'q1: ' a; read -p 'q2: ' b; sleep 3; echo \"$a $b\"",
                          allow_stdin=True)
    execution = kernel.collect(msg_id, 60, answer=answer)
    assert asked == ["q1: ", "q2: "]
    assert execution.stdout == "a1 a2\n"


def watch(shell_pid: int, state_dir, env: dict, seconds: float, until=None) -> list:
    """The frames prompts.bash writes in SECONDS, or until UNTIL(frames) is
    true, watching SHELL_PID (a stand-in for the kernel's shell: real bash,
    real ps)."""
    token = "t" * 32
    scanner = frames.FrameScanner(token, "terminal")
    seen, lock = [], threading.Lock()

    def on_output(data: bytes) -> None:
        with lock:
            seen.extend(event for event in scanner.feed(data) if not isinstance(event, bytes))

    terminal = LocalTerminal(["bash", "-c", shell.script("prompts.bash"), "shell_kernel",
                              str(shell_pid), str(state_dir)], on_output, env)
    try:
        terminal.write(token.encode() + b"\n")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with lock:
                if until is not None and until(seen):
                    break
            time.sleep(0.05)
    finally:
        terminal.close()
    with lock:
        return list(seen)


def cell_five_running(tmp_path):
    """A state directory whose shell runs cell 5 (cell 4 ended), and an empty
    directory for stub programs to put first on PATH."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "cell").write_text("5\n")
    (state / "status").write_text("4\n0\n/\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    return state, bin_dir


def test_a_look_that_a_cell_ended_during_is_not_taken_for_the_cell(tmp_path):
    """The watcher found a cell running, then ps looked (slowly: on a busy
    host the cell ended meanwhile) and saw the shell in a read -t: that is
    the shell between cells (its reset of the terminal before the next one
    reads with read -t), not the cell's read (taken for one, it would be
    asked as 'read' and answered with the next cell's input, or end-of-file)."""
    state, bin_dir = cell_five_running(tmp_path)
    # ps as the watcher calls it: the cell ends while it looks, once.
    (bin_dir / "ps").write_text(
        f"#!/bin/sh\nif [ ! -e '{tmp_path}/ended' ]; then : > '{tmp_path}/ended'\n"
        f"  printf '5\\n0\\n/\\n' > '{state}/status'; fi\nexec {shutil.which('ps')} \"$@\"\n")
    (bin_dir / "ps").chmod(0o755)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    stand_in = subprocess.Popen(["bash", "-c", f"exec 9<>'{fifo}'; read -t 30 -u 9 x"])
    try:
        env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                   **{shell.NO_PROC: "1"})
        time.sleep(0.3)  # the stand-in waits in its read -t
        seen = watch(stand_in.pid, state, env, 2.0)
    finally:
        stand_in.kill()
        stand_in.wait()
    assert (tmp_path / "ended").exists()  # ps looked
    assert [frame for frame in seen if isinstance(frame, frames.ReadingFrame)] == []


@pytest.mark.parametrize("no_proc", [False, True], ids=["/proc", "no /proc"])
def test_a_reader_gone_before_its_report_is_not_reported(no_proc, tmp_path):
    """A process found waiting on the terminal ends while the watcher reads
    the terminal's modes (stty, slow on a busy host): its read is over, and
    the modes may be another's (a program's key mode), so it is not reported
    (as a nameless process reading keys, it would be taken for one that
    needs a terminal, and the cell interrupted); a read after it is."""
    state, bin_dir = cell_five_running(tmp_path)
    # stty as report() calls it, the first time: the first reader ends (its
    # parent, the stand-in, reaps it) before stty says the modes.
    (bin_dir / "stty").write_text(
        f"#!/bin/sh\nif [ ! -e '{tmp_path}/ended' ]; then : > '{tmp_path}/ended'\n"
        f"  read -r pid < '{tmp_path}/first'; kill \"$pid\"\n"
        "  while kill -0 \"$pid\" 2>/dev/null; do sleep 0.01; done\nfi\n"
        f"exec {shutil.which('stty')} \"$@\"\n")
    (bin_dir / "stty").chmod(0o755)
    reader = "echo $$ > \"$0/$1\"; exec head -c1"
    # The stand-in shell: its cell's input is the watcher's terminal, once
    # the watcher has said which it is; two readers in a row.
    stand_in = subprocess.Popen(["bash", "-c", f"""
        until [ -s '{state}/tty' ]; do sleep 0.05; done
        exec < "$(cat '{state}/tty')"
        bash -c '{reader}' '{tmp_path}' first
        bash -c '{reader}' '{tmp_path}' second"""])
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env.pop(shell.NO_PROC, None)
    if no_proc:
        env[shell.NO_PROC] = "1"

    def reported(seen) -> list:
        return [(frame.pid, frame.name) for frame in seen
                if isinstance(frame, frames.ReadingFrame)]

    def second() -> int | None:
        written = (tmp_path / "second").read_text() if (tmp_path / "second").exists() else ""
        return int(written) if written.endswith("\n") else None
    try:
        seen = watch(stand_in.pid, state, env, 60,
                     until=lambda seen: (second(), "head") in reported(seen))
    finally:
        stand_in.kill()
        stand_in.wait()
        if second() is not None:
            subprocess.run(["kill", str(second())], stderr=subprocess.DEVNULL)
    assert (tmp_path / "ended").exists()  # the first reader was reported, and ended meanwhile
    assert reported(seen) == [(second(), "head")]


def stop_with_a_cell_running(kernel, marker: str):
    """Stop pressed while a cell sleeps: the cell's end, once its sleep is gone."""
    msg_id = kernel.start(f"sleep {marker}")
    assert wait_until(lambda: pids_matching(marker), timeout=30)
    kernel.km.interrupt_kernel()
    execution = kernel.collect(msg_id, timeout=60)
    assert wait_until(lambda: not pids_matching(marker), timeout=10), execution.stderr
    return execution


@pytest.fixture
def zoned_host(tmp_path):
    """A test sshd whose sessions' HOME sets TZ from HOME/zone in every bash
    (Debian's bash reads ~/.bashrc for each command sshd runs too), and in
    login shells only from .bash_profile where HOME/login-zone exists."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text('[ -r "$HOME/zone" ] && export TZ="$(cat "$HOME/zone")"\n')
    (home / ".bash_profile").write_text('. "$HOME/.bashrc"\n'
                                        '[ -r "$HOME/login-zone" ] && export TZ="$(cat "$HOME/login-zone")"\n')
    remote_tmp = tmp_path / "remote tmp"
    remote_tmp.mkdir(mode=0o700)
    server = SSHServer(tmp_path / "sshd", name="zoned-sshd", extra_config=setenv_config(
        {"HOME": str(home), "TMPDIR": str(remote_tmp)}))
    server.start()
    server.ssh_config = server.write_ssh_config(tmp_path / "ssh_config")
    server.home, server.sessions_dir = home, remote_tmp / f"shell_kernel-{UID}"
    yield server
    stop_sessions(server.sessions_dir, {shell.NO_PROC: "1"})
    server.stop()


@pytest.mark.parametrize("backend", ["local", "ssh"])
def test_stop_ends_the_cell_of_a_shell_whose_rc_files_set_another_time_zone(
        backend, start_kernel, ssh_kernel, zoned_host, tmp_path):
    """The shell's rc files set TZ, the commands that run beside it do not
    (the kernel's own, or an SSH command's): the shell's record, made in
    its zone, still names it (else Stop would signal nothing: "interrupt of
    cell 2 failed", and the sleep would run on)."""
    env = {shell.NO_PROC: "1"}
    if backend == "local":
        home = tmp_path / "local-home"
        home.mkdir()
        (home / ".bash_profile").write_text(f"export TZ={ZONE}\n")
        kernel = start_kernel(HOME=str(home), **env)
    else:
        (zoned_host.home / "login-zone").write_text(ZONE)
        kernel = ssh_kernel(zoned_host.ssh_config, **env)
    assert kernel.ok("echo $TZ") == f"{ZONE}\n"
    execution = stop_with_a_cell_running(kernel, "100.731")
    assert execution.meta.get("interrupted") is True, (execution.errors, execution.stderr)
    assert "failed" not in execution.stderr
    assert kernel.ok("echo next") == "next\n"


@pytest.mark.parametrize("backend", ["local", "ssh"])
def test_a_named_open_finds_its_live_session_after_the_time_zone_changed(
        backend, jupyter_prefix, start_kernel, ssh_kernel, zoned_host, tmp_path):
    """The session was made in one zone and is opened again in another (a
    daylight-saving change meanwhile, or another kernel's TZ): it is the
    same live session, not one taken for ended and replaced."""
    env = {shell.NO_PROC: "1"}
    name = f"zoned-{backend}"
    if backend == "local":
        shared_tmp = tmp_path / "local tmp"
        shared_tmp.mkdir(mode=0o700)
        spec = f"shell-named-zoned-{os.getpid()}"
        install_spec(jupyter_prefix, spec, ["--session", name])

        def open_session(zone: str):
            return start_kernel(spec, TMPDIR=str(shared_tmp), TZ=zone, **env)
        sessions_dir = shared_tmp / f"shell_kernel-{UID}"
    else:
        def open_session(zone: str):
            (zoned_host.home / "zone").write_text(zone)
            return ssh_kernel(zoned_host.ssh_config, flags=["--session", name], **env)
        sessions_dir = zoned_host.sessions_dir
    opened = []
    try:
        opened.append(open_session(ZONE))
        shell_pid = opened[0].ok("echo $$ $TZ").split()
        assert shell_pid[1:] == [ZONE]
        opened[0].shutdown()  # a named session stays
        opened.append(open_session(OTHER_ZONE))
        execution = opened[1].run("echo $$")
        assert execution.status == "ok", (execution.errors, execution.stderr)
        assert (execution.stdout, execution.stderr) == (f"{shell_pid[0]}\n", "")
    finally:
        # Every kernel detached first: one still attached when its session is
        # stopped starts a new shell of that name (the keeper's restart).
        for kernel in opened:
            kernel.shutdown()
        stop_sessions(sessions_dir, env)
