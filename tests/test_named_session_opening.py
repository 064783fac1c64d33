"""Who gets a named session: one kernel at a time, one shell however many
open it at once, a stale lock taken over, bad names and open directories
refused, and no pid signalled that outlived its process. This is launch.sh's
logic on the host (the shell's bash plays no part in it): the old-bash
variants of .ci/run leave this file out."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import TEST_BASH, install_spec, kernel_env
from harness import KernelHarness, pids_matching, wait_until
from named_support import UID, host, named, sessions_cli  # noqa: F401 - fixtures
from shell_kernel.shell import script


def test_two_kernels_never_drive_one_session(named):
    first = named("shared")
    shell_pid = first.ok("echo $$").strip()
    second = named("shared")
    refused = second.run("echo never")
    assert refused.status == "error" and "never" not in refused.stdout
    assert "session shared" in refused.errors[0]["evalue"]
    assert "in use by another kernel" in refused.errors[0]["evalue"]

    third = named("shared", "--take-over")
    assert third.ok("echo $$").strip() == shell_pid
    told = first.run("echo first")
    assert told.status == "error" and "first" not in told.stdout
    assert "taken over by another kernel" in told.errors[0]["evalue"]
    assert third.ok("echo still $$").strip() == f"still {shell_pid}"


def test_bad_names_are_refused_before_anything_runs(jupyter_prefix, host):
    # A name starting with '.' would never be listed (nor clash with a lock).
    for name in ("a/b", "..", "with space", "-x", "é", ".hidden", "."):
        done = subprocess.run([sys.executable, "-m", "shell_kernel", "install", "--prefix",
                               str(jupyter_prefix), "--name", "never", "--ssh", "testhost",
                               f"--session={name}"], capture_output=True, text=True)
        assert done.returncode == 2 and "cannot name a session" in done.stderr, done.stderr
    for mode in ("open", "kill"):  # the host refuses them too, whoever asks
        done = subprocess.run(["sh", "-c", script("launch.sh"), "launch.sh", mode, ".hidden",
                               "owner", "no"], capture_output=True, text=True, timeout=30,
                              env={**os.environ, "TMPDIR": str(host.sessions_dir.parent)})
        assert done.stdout.startswith("refused '.hidden' cannot name a session"), done.stdout
    assert not (host.sessions_dir / ".hidden").exists()


def test_a_session_directory_others_can_write_is_refused(named, host):
    host.sessions_dir.mkdir(mode=0o700, exist_ok=True)
    planted = host.sessions_dir / "planted"
    planted.mkdir()
    planted.chmod(0o777)
    kernel = named("planted")
    execution = kernel.run("echo never")
    assert execution.status == "error"
    assert "not a private directory" in execution.errors[0]["evalue"]
    assert list(planted.iterdir()) == []  # nothing was run there

    host.sessions_dir.chmod(0o777)  # the user's directory of sessions itself
    try:
        execution = named("other").run("echo never")
    finally:
        host.sessions_dir.chmod(0o700)
    assert execution.status == "error"
    assert "not a private directory" in execution.errors[0]["evalue"]
    assert not (host.sessions_dir / "other").exists()


# ------------------------------------- processes: only ever signal what the session started


def first_word(path: Path) -> int:
    return int(path.read_text().split()[0])


def kill_gone(*pids: int) -> None:
    """SIGKILL, as the OOM killer, `kill -9 -1` or logind do, and wait for the end."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert wait_until(lambda: all(stat_state(pid) in (None, "Z") for pid in pids), timeout=30)


def stat_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


@pytest.mark.parametrize("how", ["sessions --kill", "a new open"])
def test_a_pid_that_outlived_its_process_is_never_signalled(named, host, how):
    """The session's shell, wrapper and watchdog were SIGKILLed, and an
    unrelated process (of its own session) now has the pid its records
    name: neither `sessions --kill` nor the next kernel that opens the
    session signals it (as root that could be any process on the host)."""
    name = "stale-kill" if how == "sessions --kill" else "stale-open"
    kernel = named(name)
    shell_pid = int(kernel.ok("echo $$"))
    state = host.sessions_dir / name
    wrapper, watchdog = first_word(state / "wrapper.pid"), first_word(state / "watchdog.pid")
    kill_gone(kernel.pid)
    kill_gone(shell_pid, wrapper, watchdog)
    stranger = subprocess.Popen(["setsid", "sh", "-c", "sleep 600.611 & sleep 600.612"])
    try:
        assert wait_until(lambda: pids_matching("600.611") and pids_matching("600.612"))
        for record in ("wrapper.pid", "watchdog.pid", "holder", "relay.pid"):
            (state / record).write_text(f"{stranger.pid}\n")
        if how == "sessions --kill":
            killed = sessions_cli(host, "--kill", name)
            assert killed.returncode == 0, killed.stderr
            assert not state.exists()
        else:
            execution = named(name).run("echo $$")
            assert execution.status == "ok", (execution.errors, execution.stderr)
            assert int(execution.stdout) != shell_pid
            assert "had ended while no kernel was attached" in execution.stderr
        assert stranger.poll() is None
        assert pids_matching("600.611") and pids_matching("600.612")
    finally:
        os.killpg(stranger.pid, signal.SIGKILL)
        stranger.wait()
        sessions_cli(host, "--kill", name)


def processes_with_tmpdir(tmpdir: Path) -> dict[int, str]:
    """Live processes whose environment has TMPDIR=tmpdir, with their command lines."""
    wanted = b"\0TMPDIR=" + str(tmpdir).encode() + b"\0"
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or stat_state(int(entry)) in (None, "Z"):
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = b"\0" + f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if wanted in environ:
            found[int(entry)] = cmdline
    return found


def new_processes(tmpdir: Path, before: dict[int, str]) -> dict[int, str]:
    """Processes with TMPDIR=tmpdir that neither were there before nor
    descend from one that was (the idle watchdogs of earlier sessions)."""
    def parent(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return 0

    def old(pid: int) -> bool:
        while pid > 1:
            if pid in before:
                return True
            pid = parent(pid)
        return False

    return {pid: cmdline for pid, cmdline in processes_with_tmpdir(tmpdir).items()
            if not old(pid)}


@pytest.mark.parametrize("where", ["ssh", "local"])
def test_kernels_opening_one_name_at_once_get_one_shell(jupyter_prefix, host, tmp_path, where):
    """Three kernels open the same name at the same moment: one shell is
    started; each kernel is attached to it or refused with an error naming
    the session; nothing is left once they and the session are gone."""
    name = f"crowd-{where}"
    spec = f"shell-named-{os.getpid()}-{name}"
    if where == "ssh":
        install_spec(jupyter_prefix, spec, ["--ssh", "testhost", "--ssh-config",
                                            str(host.ssh_config), "--session", name])
        tmpdir = host.sessions_dir.parent  # every process of the host's sessions has it
        sessions_dir, env = host.sessions_dir, {}
    else:
        install_spec(jupyter_prefix, spec, ["--session", name])
        tmpdir = tmp_path / "local tmp"
        tmpdir.mkdir(mode=0o700)
        sessions_dir, env = tmpdir / f"shell_kernel-{UID}", {"TMPDIR": str(tmpdir)}
    before = processes_with_tmpdir(tmpdir)
    kernels: list[KernelHarness] = []

    def start(index: int) -> KernelHarness:
        kernel_tmp = tmp_path / f"kernel{index}"
        kernel_tmp.mkdir()
        return KernelHarness(spec, env=kernel_env(kernel_tmp, **env), cwd=str(tmp_path))

    try:
        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(start, i) for i in range(3)]
            kernels.extend(future.result(timeout=120) for future in futures)
        with ThreadPoolExecutor(3) as pool:
            executions = list(pool.map(lambda kernel: kernel.run("echo $$", timeout=60), kernels))
        attached = [e for e in executions if e.status == "ok"]
        refused = [e for e in executions if e.status != "ok"]
        assert attached, [(e.errors, e.stderr) for e in executions]
        assert len({e.stdout for e in attached}) == 1, [e.stdout for e in attached]
        for execution in refused:
            assert f"session {name}" in execution.errors[0]["evalue"], execution.errors
        shell_pid = int(attached[0].stdout)
        # The shell's command line names the bash the kernelspec runs
        # (SHELL_KERNEL_TEST_BASH gives a path: backends.shell_argv).
        shells = [pid for pid, cmdline in new_processes(tmpdir, before).items()
                  if cmdline == f"{TEST_BASH or 'bash'} -l -i +o history"]
        assert shells == [shell_pid]
        assert not list(sessions_dir.glob(f".{name}.lock*"))
    finally:
        for kernel in kernels:
            kernel.shutdown()
        subprocess.run([sys.executable, "-m", "shell_kernel", "sessions", "--kill", name,
                        *(["--ssh", "testhost", "--ssh-config", str(host.ssh_config)]
                          if where == "ssh" else [])],
                       env={**os.environ, **env}, capture_output=True, timeout=60)
    assert wait_until(lambda: not new_processes(tmpdir, before), timeout=30), \
        new_processes(tmpdir, before)
    assert not (sessions_dir / name).exists()


def test_opens_of_one_name_at_the_same_moment_start_one_shell(tmp_path):
    """launch.sh open, three at a time for one name, as kernels on other
    connections run it: one starts the session, the others find it held
    (their holder, this test, is alive), every round; one shell each time."""
    launch = script("launch.sh")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    for round in range(5):
        marker = f"600.8{round}"
        opens = [subprocess.Popen(
            ["sh", "-c", launch, "launch.sh", "open", "race", f"owner{n}", "no", "60", "1000000",
             "1000000", "30", script("reap.sh"), script("spool.sh"), "bash", "-c", f"exec sleep {marker}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            for n in range(3)]
        try:
            outputs = [p.communicate(timeout=60)[0] for p in opens]
            answers = sorted(text.strip().rsplit("\n", 1)[-1].split(" ")[0] for text in outputs)
            assert answers == ["held", "held", "new"], (round, outputs)
            assert len([pid for pid in pids_matching(marker)
                        if Path(f"/proc/{pid}/comm").read_text() == "sleep\n"]) == 1
        finally:
            subprocess.run(["sh", "-c", launch, "launch.sh", "kill", "race"], env=env,
                           capture_output=True, timeout=60)
            kill_markers_now(marker)
        assert wait_until(lambda: not pids_matching(str(tmp_path)))
        # (.swept: when launch.sh last swept this host's state directories)
        assert os.listdir(tmp_path / f"shell_kernel-{UID}") in ([], [".swept"])


def kill_markers_now(marker: str) -> None:
    for pid in pids_matching(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_stale_lock_is_taken_over(named, host):
    """A kernel killed while it opened the session left its lock: the next
    one, seeing the lock's holder gone, takes it over."""
    host.sessions_dir.mkdir(mode=0o700, exist_ok=True)
    lock = host.sessions_dir / ".unlocked.lock"
    holder = subprocess.Popen(["sleep", "600.63"])
    start = Path(f"/proc/{holder.pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
    holder.kill()
    holder.wait()
    lock.mkdir()
    (lock / "pid").write_text(f"{holder.pid} {start}\n")
    try:
        execution = named("unlocked").run("echo here")
        assert execution.status == "ok", (execution.errors, execution.stderr)
        assert execution.stdout == "here\n"
        assert not list(host.sessions_dir.glob(".unlocked.lock*"))
    finally:
        sessions_cli(host, "--kill", "unlocked")
        shutil.rmtree(lock, ignore_errors=True)


def launch_sh(tmpdir: Path, *args: str, timeout: float = 60) -> str:
    """launch.sh run as a kernel runs it on a host whose TMPDIR is tmpdir: its last line."""
    done = subprocess.run(["sh", "-c", script("launch.sh"), "launch.sh", *args],
                          env={**os.environ, "TMPDIR": str(tmpdir)}, capture_output=True,
                          text=True, timeout=timeout)
    return done.stdout.strip().rsplit("\n", 1)[-1]


def open_session(tmpdir: Path, name: str, *shell: str, timeout: float = 60) -> str:
    return launch_sh(tmpdir, "open", name, "owner", "no", "60", "1000000", "1000000", "30",
                     script("reap.sh"), script("spool.sh"), *shell, timeout=timeout)


def record_of_a_gone_process() -> str:
    gone = subprocess.Popen(["sleep", "600.64"])
    start = Path(f"/proc/{gone.pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
    gone.kill()
    gone.wait()
    return f"{gone.pid} {start}\n"


def a_minute_ago(path: Path) -> None:
    then = time.time() - 120
    os.utime(path, (then, then))


@pytest.mark.parametrize("left", ["a lock without its record, a minute old",
                                  "a break left by a kernel that was killed",
                                  "a break without its record, a minute old"])
def test_what_a_killed_open_left_is_taken_over(tmp_path, left):
    """An open killed between making the lock and writing its record, or a
    waiter killed while it broke a stale lock (.lock.break): the next open
    takes them over once their maker is provably gone, or they are older
    than any open takes (before, every later open was refused until they
    were removed by hand)."""
    sessions = tmp_path / f"shell_kernel-{UID}"
    sessions.mkdir(mode=0o700)
    lock = sessions / ".left.lock"
    lock.mkdir()
    if left.startswith("a lock"):
        a_minute_ago(lock)
    else:
        (lock / "pid").write_text(record_of_a_gone_process())
        (sessions / ".left.lock.break").mkdir()
        if "killed" in left:
            (sessions / ".left.lock.break" / "pid").write_text(record_of_a_gone_process())
        else:
            a_minute_ago(sessions / ".left.lock.break")
    try:
        answer = open_session(tmp_path, "left", "bash", "-c", "exec sleep 600.65")
        assert answer.startswith("new - "), answer
        assert (sessions / "left").is_dir() and not list(sessions.glob(".left.lock*"))
    finally:
        launch_sh(tmp_path, "kill", "left")
    assert not pids_matching("600.65")


def test_a_lock_whose_maker_may_be_writing_its_record_is_waited_for(tmp_path):
    """A lock without its record yet, made a moment ago: its maker may be
    about to write it, so the open waits (and goes on once it is gone)."""
    sessions = tmp_path / f"shell_kernel-{UID}"
    sessions.mkdir(mode=0o700)
    lock = sessions / ".young.lock"
    lock.mkdir()
    opening = subprocess.Popen(
        ["sh", "-c", script("launch.sh"), "launch.sh", "open", "young", "owner", "no", "60",
         "1000000", "1000000", "30", script("reap.sh"), script("spool.sh"), "bash", "-c",
         "exec sleep 600.66"], env={**os.environ, "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        assert opening.poll() is None and not (sessions / "young").exists()
        lock.rmdir()
        assert opening.communicate(timeout=60)[0].startswith("new - ")
    finally:
        opening.kill()
        opening.wait()
        launch_sh(tmp_path, "kill", "young")


def session_members(sid: int) -> list[int]:
    """The processes of session sid that have not ended."""
    members = []
    for entry in os.listdir("/proc"):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(entry))
    return members


def test_a_killed_session_is_gone_once_kill_says_so(tmp_path, busy_cpus):
    """Its processes fork as they are killed (a chain: each starts the next,
    ignoring SIGTERM), under load: `launch.sh kill` says "killed" only once
    none of them runs (it said so while the chain went on: what was forked
    after its last look at the process table was in no listing)."""
    chain = ("chain() { trap '' TERM; [ $1 -gt 0 ] || exec sleep 600.67; sleep 0.02; "
             "chain $(($1 - 1)) & exec sleep 600.67; }; chain 400")
    for round_ in range(3):
        answer = open_session(tmp_path, "chain", "bash", "-c", chain)
        assert answer.startswith("new - "), answer
        session = int(answer.split()[2])  # the wrapper leads it
        try:
            assert wait_until(lambda: len(session_members(session)) > 20, timeout=30)
            assert launch_sh(tmp_path, "kill", "chain") == "killed"
            assert session_members(session) == [], round_
        finally:
            try:
                os.killpg(session, signal.SIGKILL)  # (a group: every link of the chain)
            except ProcessLookupError:
                pass


# ------------------------------------------------ pure logic: launch.sh's answers


def test_launch_answers_are_parsed_with_startup_noise_before_them():
    from shell_kernel.backends import SessionTaken
    from shell_kernel.named_sessions import parse_open

    new = parse_open("motd\nnew 0 123 /tmp/a dir/x\n", "x", "h")
    assert (new.pid, new.state_dir, new.attached, new.previous) == (123, "/tmp/a dir/x", None, "0")
    attached = parse_open("attached 9 10 tok 5.2(1) 100 7 150 7 4 1700000000 3 0 /t/s p/x", "x", "h")
    assert attached.delivered == {"stdout": 100, "stderr": 7}
    info = attached.attached
    assert (info.shell_pid, info.token, info.last_seq, info.running, info.backlog) == \
        (10, "tok", 4, True, True)
    assert info.state_dir == "/t/s p/x"
    assert parse_open("attached 9 - - - 0 0 0 0 0 - 0 - /t/x", "x", "h").unusable
    with pytest.raises(SessionTaken, match="session x on h is in use by another kernel"):
        parse_open("held 1700000000", "x", "h")


def test_a_kill_that_left_processes_running_names_them():
    from shell_kernel.backends import BackendError, SideResult
    from shell_kernel.sessions_command import kill_session

    class Host:
        def side_command(self, script, args, timeout=10.0, urgent=False):
            return SideResult(0, "rc noise\nleft 123 456\n")

    with pytest.raises(BackendError, match="still ran 5 s after SIGKILL: 123 456 "):
        kill_session(Host(), "x")
