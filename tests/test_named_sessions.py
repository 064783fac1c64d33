"""Named sessions (--session NAME): the shell outlives the kernel, and the next
kernel with the same name attaches to it and catches up."""

from __future__ import annotations

import os
import queue
import re
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
from shell_kernel.shell import script
from shell_kernel.testing.sshd import SSHServer, setenv_config

UID = os.getuid()


def lines(first: int, last: int) -> str:
    return "".join(f"line-{i}\n" for i in range(first, last + 1))


def stop_sessions(sessions_dir: Path) -> None:
    for state in sessions_dir.glob("*"):
        subprocess.run(["sh", "-c", script("launch.sh"), "launch.sh", "stop", str(state)],
                       capture_output=True)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """A private sshd whose sessions have their own TMPDIR (with a space), so
    that the named sessions of these tests are theirs alone."""
    work = tmp_path_factory.mktemp("named")
    remote_tmp = work / "remote tmp"
    remote_tmp.mkdir(mode=0o755)
    server = SSHServer(work / "sshd", name="named-sshd",
                       extra_config=setenv_config({"TMPDIR": str(remote_tmp)}))
    server.start()
    server.ssh_config = server.write_ssh_config(work / "ssh_config")
    server.sessions_dir = remote_tmp / f"shell_kernel-{UID}"
    yield server
    stop_sessions(server.sessions_dir)
    server.stop()


@pytest.fixture
def named(jupyter_prefix, start_kernel, host):
    """Start a kernel whose shell is the named session NAME on the test host."""
    count = [0]

    def start(name: str, *flags: str) -> KernelHarness:
        count[0] += 1
        spec = f"shell-named-{os.getpid()}-{name}-{count[0]}"
        install_spec(jupyter_prefix, spec, ["--ssh", "testhost", "--ssh-config",
                                            str(host.ssh_config), "--session", name, *flags])
        return start_kernel(spec)

    return start


def read_until(kernel: KernelHarness, msg_id: str, text: str, timeout: float = 30) -> str:
    """The cell's stdout as it streams, up to and including `text`."""
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        try:
            msg = kernel.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"{text!r} not seen; got {seen!r}") from None
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream" \
                and msg["content"]["name"] == "stdout":
            seen += msg["content"]["text"]
    return seen


def sessions_cli(host, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shell_kernel", "sessions", "--ssh", "testhost",
                           "--ssh-config", str(host.ssh_config), *args],
                          capture_output=True, text=True, timeout=60)


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
    first.start("sleep 1000.91")
    assert wait_until(lambda: pids_matching("1000.91"))
    os.kill(first.pid, signal.SIGKILL)

    second = named("waited")
    msg_id = second.start("echo never")
    read_stderr_until(second, msg_id, "is still running")
    second.km.interrupt_kernel()
    execution = second.collect(msg_id)
    assert execution.reply["content"]["ename"] == "KeyboardInterrupt"
    assert "never" not in execution.stdout
    assert wait_until(lambda: not pids_matching("1000.91"))
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
    kernel.ok("sleep 1000.81 &")
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
    assert not pids_matching("1000.81")
    assert sessions_cli(host, "--kill", "listed").returncode == 1


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
        assert os.listdir(tmp_path / f"shell_kernel-{UID}") == []


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
