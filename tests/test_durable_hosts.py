"""Durable SSH sessions on hosts shaped like real ones, not like the clean test sshd:
noisy rc files, no `setsid -f`, a TMPDIR with spaces, a login that never gets
ready, and a spool that must stay bounded and lose nothing."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import install_spec, kernel_env
from harness import KernelHarness, pids_matching, start_record, wait_until
from shell_kernel.backends.channel import durable
from shell_kernel.backends.ssh import backend as ssh
from shell_kernel.backends.ssh.target import resolve
from shell_kernel.testing.sshd import SSHServer, setenv_config
from test_durable import TICKS, drop_connection_during

TICKS_OUT = "".join(f"line-{i}\n" for i in range(1, 21))


class Host:
    """A private sshd whose sessions get a HOME of their own (with the given rc
    files) and the given environment, and kernels installed for it."""

    def __init__(self, workdir: Path, jupyter_prefix: Path, home_files: dict[str, str],
                 environment: dict[str, str]):
        self.workdir = workdir
        self.jupyter_prefix = jupyter_prefix
        self.home = workdir / "home"
        self.home.mkdir(parents=True)
        for name, text in home_files.items():
            (self.home / name).write_text(text)
        self.server = SSHServer(workdir / "sshd", extra_config=setenv_config(
            {"HOME": str(self.home), **environment}))
        self.server.start()
        self.ssh_config = self.server.write_ssh_config(workdir / "ssh_config")
        self.kernels: list[KernelHarness] = []

    def kernel(self, *flags: str) -> KernelHarness:
        name = f"shell-host-{secrets.token_hex(4)}"
        install_spec(self.jupyter_prefix, name,
                     ["--ssh", "testhost", "--ssh-config", str(self.ssh_config), *flags])
        tmpdir = self.workdir / f"kernel-tmp{len(self.kernels)}"
        tmpdir.mkdir()
        kernel = KernelHarness(name, env=kernel_env(tmpdir), cwd=str(self.workdir))
        self.kernels.append(kernel)
        return kernel

    def close(self) -> None:
        for kernel in self.kernels:
            kernel.shutdown()
        self.server.stop()


@pytest.fixture
def host(jupyter_prefix, tmp_path):
    hosts = []

    def make(home_files: dict[str, str] | None = None, **environment: str) -> Host:
        made = Host(tmp_path / f"host{len(hosts)}", jupyter_prefix, home_files or {}, environment)
        hosts.append(made)
        return made

    yield make
    for made in hosts:
        made.close()


def remote_state(kernel: KernelHarness) -> tuple[Path, int]:
    """The session's state directory (which may hold spaces) and the shell's pid."""
    pid, state = kernel.ok('builtin printf "%s %s" "$$" "$__shell_kernel_dir"').split(" ", 1)
    return Path(state), int(pid)


def spooled_bytes(state: Path) -> int:
    return sum(f.stat().st_size for f in state.iterdir() if f.is_file())


def left_in(tmpdir: Path) -> list[Path]:
    """What sessions left in a host's TMPDIR, but for the user's directory of
    named sessions holding only the sweep's stamp (launch.sh sweep)."""
    own = tmpdir / f"shell_kernel-{os.getuid()}"
    return [path for path in tmpdir.iterdir()
            if path != own or {p.name for p in own.iterdir()} - {".swept"}]


def keys_away(server: SSHServer) -> Path:
    """No way back in until the returned path is renamed back."""
    keys = server.authorized_keys_path
    away = keys.with_suffix(".away")
    keys.rename(away)
    return away


# ------------------------------------------------------------- rc file noise
NOISY_BASHRC = """echo "bashrc noise on stdout"
printf 'bashrc noise on stderr, no newline' >&2
"""


def test_rc_file_noise_on_the_relay_is_not_session_output(host):
    # Debian's bash sources ~/.bashrc for every command sshd runs: the relay's too.
    shaped = host(home_files={".bashrc": NOISY_BASHRC})
    kernel = shaped.kernel()
    assert kernel.ok("echo first") == "first\n"
    execution = drop_connection_during(kernel, shaped.server, TICKS)
    assert execution.exit_code == 0, (execution.errors, execution.stderr)
    assert execution.stdout == TICKS_OUT
    assert "noise" not in execution.stderr
    after = kernel.run("echo after; echo more >&2")
    assert (after.stdout, after.stderr) == ("after\n", "more\n")


# ------------------------------------------------- spool bounds and trimming
def test_spool_stays_bounded_while_no_kernel_is_attached(host):
    shaped = host()
    kernel = shaped.kernel("--output-limit-mb", "1")
    state, _ = remote_state(kernel)
    msg_id = kernel.start("sleep 1; head -c 100000017 /dev/zero | tr '\\0' z; echo; exit 7")
    time.sleep(0.3)
    away = keys_away(shaped.server)
    shaped.server.kill_sessions()
    assert wait_until(lambda: pids_matching("100000017"), timeout=10)
    assert wait_until(lambda: not pids_matching("100000017"), timeout=60)
    time.sleep(0.5)  # the last bytes reach the spool
    spooled = spooled_bytes(state)
    assert 0 < spooled < 50_000_000  # the newest 16 MB of each stream, in files of 4 to 8 MB
    away.rename(shaped.server.authorized_keys_path)
    execution = kernel.collect(msg_id, timeout=120)
    assert execution.exit_code == 7
    assert "bytes of stdout were dropped" in execution.stderr
    assert kernel.ok("echo next") == "next\n"


def test_spool_stays_bounded_while_the_kernel_falls_behind(host, tmp_path):
    # A laptop asleep whose connection survives: the relay is attached, but
    # nothing is read. What it could not send in time is dropped, and a new
    # relay resumes after the gap without the connection being lost.
    shaped = host()
    kernel = shaped.kernel("--output-limit-mb", "1")
    state, _ = remote_state(kernel)
    # 200 MB over about 16 s: the host notices after SPOOL_STALL_SECONDS (10)
    # that nothing is being read any more, while the cell still prints.
    produced = tmp_path / "produced"  # the test host is this machine
    msg_id = kernel.start("sleep 1.0251; for i in $(seq 160); do head -c 1250001 /dev/zero | tr '\\0' z; "
                          f"sleep 0.1; done; echo; touch {produced}; exit 7")
    # Stopped once the shell runs the cell (stopped earlier, the kernel may
    # not have sent it yet: nothing would run).
    assert wait_until(lambda: pids_matching("1.0251"), timeout=30)
    os.kill(kernel.pid, signal.SIGSTOP)
    try:
        # The cell goes on meanwhile: its output reaches the spool. (Not
        # watched as its `head` processes, which live a few milliseconds
        # each: a scan of a busy machine's processes missed all of them.)
        before = spooled_bytes(state)
        assert wait_until(lambda: spooled_bytes(state) > before + 1250001, timeout=30)
        assert wait_until(produced.exists, timeout=60)
        time.sleep(0.5)
        assert 0 < spooled_bytes(state) < 50_000_000
    finally:
        os.kill(kernel.pid, signal.SIGCONT)
    execution = kernel.collect(msg_id, timeout=120)
    assert execution.exit_code == 7
    assert "bytes of stdout were dropped" in execution.stderr
    assert "Connection lost" not in execution.stderr


def test_background_output_written_while_the_spool_is_trimmed_arrives_once(host, monkeypatch):
    # A background job writes while the host trims the spool as often as it
    # can: a new spool file every few kilobytes, received ones deleted as the
    # kernel acknowledges them. (Truncating a file the job appends to loses
    # what it writes between a size check and the cut.)
    monkeypatch.setattr(durable, "SPOOL_GENERATION_BYTES", 4096)
    shaped = host()
    backend = ssh.SSHBackend(resolve("testhost", str(shaped.ssh_config)), clean=True,
                             durable=True, idle_timeout=60)
    received = bytearray()
    arrived = threading.Event()

    def on_output(stream: str, data: bytes) -> None:
        if stream == "stdout":
            received.extend(data)
            if b"bg-done" in received:
                arrived.set()

    backend.start(on_output, lambda ended: arrived.set())
    try:
        backend.send(b"{ for i in $(seq 1 2000); do printf 'bg-%s %090d\\n' $i 0; sleep 0.001; "
                     b"done; echo bg-done; } &\n")
        arrived.wait(60)
        lines = [line.split()[0] for line in received.decode().splitlines()]
        assert lines == [f"bg-{i}" for i in range(1, 2001)] + ["bg-done"]
    finally:
        backend.close()


# ------------------------------------------------ hosts without setsid -f
FAKE_OLD_SETSID = """#!/bin/sh
# util-linux before 2.31 (CentOS 7): no -f
case $1 in -f|--fork) echo "setsid: invalid option -- 'f'" >&2; exit 1 ;; esac
exec /usr/bin/setsid "$@"
"""


def path_with_old_setsid(root: Path) -> str:
    bin_dir = root / "old-setsid-bin"
    bin_dir.mkdir()
    (bin_dir / "setsid").write_text(FAKE_OLD_SETSID)
    (bin_dir / "setsid").chmod(0o755)
    return f"{bin_dir}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


def path_without_setsid(root: Path) -> str:
    """A PATH of one directory holding every standard command but setsid."""
    bin_dir = root / "no-setsid-bin"
    bin_dir.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        for name in os.listdir(directory) if os.path.isdir(directory) else []:
            link = bin_dir / name
            if name != "setsid" and not link.exists():
                link.symlink_to(Path(directory, name))
    return str(bin_dir)


def path_of_busybox(root: Path) -> str:
    """A PATH of BusyBox's commands (its setsid has no -f either), and bash."""
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox is not installed")
    bin_dir = root / "busybox-bin"
    bin_dir.mkdir()
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True)
    for name in applets.stdout.split():
        (bin_dir / name).symlink_to(busybox)
    (bin_dir / "bash").symlink_to(shutil.which("bash"))
    return str(bin_dir)


HOSTS_WITHOUT_SETSID_F = pytest.mark.parametrize(
    "make_path", [path_with_old_setsid, path_without_setsid, path_of_busybox],
    ids=["setsid-without-f", "no-setsid", "busybox"])


@HOSTS_WITHOUT_SETSID_F
def test_shutdown_leaves_nothing_on_a_host_without_setsid_f(host, tmp_path, make_path):
    shaped = host(PATH=make_path(tmp_path))
    kernel = shaped.kernel()
    state, pid = remote_state(kernel)
    watchdog = int((state / "watchdog.pid").read_text().split()[0])
    kernel.ok("sleep 1000.631 & (sleep 1000.632 &)")
    kernel.shutdown()
    assert wait_until(lambda: not pids_matching("1000.631") and not pids_matching("1000.632"))
    assert wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in (pid, watchdog)))
    assert wait_until(lambda: not pids_matching(str(state)))  # copiers, relays
    assert not state.exists()


@HOSTS_WITHOUT_SETSID_F
def test_session_survives_a_drop_on_a_host_without_setsid_f(host, tmp_path, make_path):
    shaped = host(PATH=make_path(tmp_path))
    kernel = shaped.kernel()
    execution = drop_connection_during(kernel, shaped.server, TICKS + "; exit 5")
    assert (execution.stdout, execution.exit_code) == (TICKS_OUT, 5)


# ------------------------------------------------------- TMPDIR and startup
def test_remote_tmpdir_with_spaces_and_quotes(host, tmp_path):
    tmpdir = tmp_path / "remote tmp $HOME 'q' é"
    tmpdir.mkdir()
    shaped = host(TMPDIR=str(tmpdir))
    kernel = shaped.kernel()
    state, _ = remote_state(kernel)
    assert state.parent == tmpdir
    execution = drop_connection_during(kernel, shaped.server, TICKS)
    assert execution.stdout == TICKS_OUT
    kernel.shutdown()
    assert wait_until(lambda: not left_in(tmpdir) and not pids_matching(str(state)))


def test_a_durable_start_that_fails_removes_what_it_launched(host, tmp_path):
    tmpdir = tmp_path / "remote-tmp"
    tmpdir.mkdir()
    # A login that never gets ready: the shell is launched, then given up on.
    shaped = host(TMPDIR=str(tmpdir), PROMPT_COMMAND="sleep 1000.932")
    kernel = shaped.kernel("--start-timeout", "3")
    execution = kernel.run("echo never", timeout=60)
    assert execution.status == "error"
    assert wait_until(lambda: not pids_matching("1000.932"), timeout=15)
    assert wait_until(lambda: not left_in(tmpdir), timeout=5)


# ------------------------------------------------- what a lost host left behind
@pytest.mark.parametrize("kind", [[], ["--ephemeral"]], ids=["durable", "ephemeral"])
def test_the_next_session_removes_only_state_directories_proved_dead(host, tmp_path, kind):
    """A host down for longer than the kernel's 5 s of retries keeps the lost
    shell's state directory. The next session there removes this user's
    directories whose recorded processes are gone (pid and start no longer
    match) and unchanged for a day, and nothing else: a durable one as
    launch.sh starts its shell, an ephemeral one through its side shell."""
    tmpdir = tmp_path / "remote tmp"
    tmpdir.mkdir()
    alive = subprocess.Popen(["sleep", "1000.941"])
    try:
        me, start = alive.pid, start_record(alive.pid, same=True)
        reused = f"{me} {start_record(me, same=False)}\n"  # the pid now names another process
        gone = f"999999999 {start}\n"  # no such process
        layouts = {  # name: ({record: text}, removed)
            "shell_kernel.lost-shell": ({"shell.start": reused}, True),
            # Lost a moment ago: its kernel may yet reconnect and restore from it.
            "shell_kernel.lost-recently": ({"shell.start": reused}, False),
            "shell_kernel.lost-durable": ({"wrapper.pid": gone, "watchdog.pid": reused}, True),
            "shell_kernel.alive": ({"shell.start": f"{me} {start}\n"}, False),
            "shell_kernel.watchdog-alive": ({"wrapper.pid": gone,
                                             "watchdog.pid": f"{me} {start}\n"}, False),
            "shell_kernel.no-start": ({"shell.start": "999999999\n"}, False),
            "shell_kernel.no-record": ({}, False),  # one just being made, maybe
            "shell_kernel.others": ({"shell.start": reused}, False),  # another user's
            "shell_kernel.writable": ({"shell.start": reused}, False),  # not private
            "other.lost": ({"shell.start": reused}, False),
        }
        day_ago = time.time() - 2 * 86400
        for name, (records, _) in layouts.items():
            (tmpdir / name).mkdir(mode=0o700)
            for record, text in records.items():
                (tmpdir / name / record).write_text(text)
                os.utime(tmpdir / name / record, (day_ago, day_ago))
            if name != "shell_kernel.lost-recently":
                os.utime(tmpdir / name, (day_ago, day_ago))
        os.chown(tmpdir / "shell_kernel.others", 65534, 65534)
        (tmpdir / "shell_kernel.writable").chmod(0o777)
        named = tmpdir / f"shell_kernel-{os.getuid()}"
        named.mkdir(mode=0o700)
        (named / "old").mkdir(mode=0o700)
        (named / "old" / "wrapper.pid").write_text(reused)  # a named session's: its own rules

        kernel = host(TMPDIR=str(tmpdir)).kernel(*kind)
        state, _ = remote_state(kernel)
        assert wait_until(lambda: not (tmpdir / "shell_kernel.lost-shell").exists()
                          and not (tmpdir / "shell_kernel.lost-durable").exists(), timeout=30)
        assert state.exists()
        for name, (_, removed) in layouts.items():
            assert (tmpdir / name).exists() != removed, name
        assert (named / "old").exists()
        assert alive.poll() is None
    finally:
        alive.kill()
        alive.wait()


def test_stop_does_not_wait_for_a_sweep_of_other_users_sessions(host, tmp_path):
    """A shared host's TMPDIR holds other users' sessions: the sweep looks at
    this user's only, and nothing waits for it. (3,000 of them once held the
    side shell for 10 s, and a Stop behind it.)"""
    tmpdir = tmp_path / "crowded tmp"
    tmpdir.mkdir()
    day_ago = time.time() - 2 * 86400
    for i in range(3000):
        other = tmpdir / f"shell_kernel.other{i:05d}"
        other.mkdir(mode=0o700)
        (other / "shell.start").write_text("999999999 1\n")
        os.chown(other / "shell.start", 65534, 65534)
        os.chown(other, 65534, 65534)
        os.utime(other, (day_ago, day_ago))
    kernel = host(TMPDIR=str(tmpdir)).kernel()
    assert kernel.ok("echo first") == "first\n"  # the shell is up: its sweep starts
    msg_id = kernel.start("sleep 1000.881")
    assert wait_until(lambda: pids_matching("1000.881"), timeout=30)
    started = time.monotonic()
    kernel.km.interrupt_kernel()
    execution = kernel.collect(msg_id, timeout=60)
    assert execution.status == "error"
    assert time.monotonic() - started < 5.0
    assert len(list(tmpdir.glob("shell_kernel.other*"))) == 3000


@pytest.mark.parametrize("older", [False, True], ids=["watchdog tells", "older session"])
def test_a_relay_ends_with_its_shell_killed_outright(host, older):
    """The relay looks at nothing: the watchdog, woken by the wrapper, tells it
    that the shell ended. A session launched by an older shell_kernel has a
    watchdog that does not (and no DIR/tells_relay): a relay attached to it
    looks for the end itself. Either way the cell gets the shell's status."""
    shaped = host()
    kernel = shaped.kernel()
    state, _ = remote_state(kernel)
    if older:
        (state / "tells_relay").unlink()
        os.kill(int((state / "watchdog.pid").read_text().split()[0]), signal.SIGKILL)
    # The connection drops (the kernel attaches a new relay), then the shell
    # dies without a word (kill -9: the OOM killer): only its end tells.
    execution = drop_connection_during(kernel, shaped.server, TICKS + "; kill -9 $$")
    assert execution.stdout == TICKS_OUT, execution.stderr
    assert execution.status == "error" and "137" in execution.errors[0]["evalue"], execution.errors
