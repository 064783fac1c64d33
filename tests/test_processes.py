"""Processes around a cell: earlier cells' background jobs survive interrupts,
an escalation never signals a stranger nor leaves the shell stopped, nothing
outlives a killed kernel, and the shell starts with default signals."""

import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness import pids_matching, start_record, wait_until
from shell_kernel.backends.local.spawn import default_signals
from test_interrupt import interrupt_after

NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name (state, ppid, ...); [] once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def process_state(pid: int) -> str | None:
    """R, S, T (stopped), Z...; None once the process is gone."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


def parent_of(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[1]) if fields else None


def gone(pid: int) -> bool:
    return process_state(pid) in (None, "Z")


def signal_masks(status: str) -> dict:
    """Blocked, ignored and caught signals in a /proc/PID/status text, as integers."""
    return {key: int(value, 16) for key, _, value in
            (line.partition(":") for line in status.splitlines())
            if key in ("SigBlk", "SigIgn", "SigCgt")}


def catches_sigint(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return bool(signal_masks(status)["SigCgt"] & 1 << (signal.SIGINT - 1))


def kill_markers(*markers):
    for marker in markers:
        for pid in pids_matching(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def job(marker: str) -> str:
    """A command that, like many servers, dies of SIGINT even as a background
    job (which bash starts with SIGINT ignored)."""
    return ("python3 -c 'import signal, time; signal.signal(signal.SIGINT, "
            f"signal.default_int_handler); time.sleep({marker})'")


def start_background_jobs(kernel, tag: str) -> list[str]:
    """Every kind of background job: both processes of a pipeline, a nohup'd
    and disowned job, a plainly disowned one."""
    markers = [f"1000.{tag}{n}" for n in range(1, 5)]
    kernel.ok(f"{job(markers[0])} | {job(markers[1])} &\n"
              f"nohup {job(markers[2])} >/dev/null 2>&1 & disown $!\n"
              f"{job(markers[3])} & disown")
    assert wait_until(lambda: all(one_catching_sigint(m) for m in markers), timeout=10)
    return markers


def one_catching_sigint(marker: str) -> bool:
    """One process has the marker, and it catches SIGINT. Looked at once: a
    second look may find none (nohup's exec into python3 shows no command
    line for a moment)."""
    pids = pids_matching(marker)
    return len(pids) == 1 and catches_sigint(pids[0])


def test_every_kind_of_background_job_survives_an_interrupt(kernel):
    markers = start_background_jobs(kernel, "12")
    try:
        # 1000.126 ignores SIGINT: once it is gone, the sweep of what is
        # left of the cell (SIGTERM, after the cell's end) is over too.
        execution = interrupt_after(kernel, "(trap '' INT; exec sleep 1000.126) & sleep 1000.125")
        assert execution.exit_code == 130
        assert wait_until(lambda: not pids_matching("1000.125") and not pids_matching("1000.126"),
                          timeout=10)
        for marker in markers:
            assert pids_matching(marker), f"background job {marker} was killed"
    finally:
        kill_markers(*markers)


def test_background_jobs_survive_the_interrupt_of_a_query_that_hangs(kernel):
    markers = start_background_jobs(kernel, "22")
    # A `man` that never answers: inspecting a command then hangs, and the
    # kernel ends the query with a SIGINT after its timeout.
    kernel.ok("HUNG_BIN=$(mktemp -d) && OLD_PATH=$PATH\n"
              "printf '#!/bin/sh\\nexec sleep 1000.226\\n' > \"$HUNG_BIN/man\"\n"
              "printf '#!/bin/sh\\n' > \"$HUNG_BIN/shellkerneltool\"\n"
              "chmod +x \"$HUNG_BIN/man\" \"$HUNG_BIN/shellkerneltool\"\n"
              "PATH=$HUNG_BIN:$PATH")
    try:
        msg_id = kernel.kc.inspect("shellkerneltool", 3)
        assert wait_until(lambda: pids_matching("1000.226"), timeout=10), "the query did not hang"
        while (reply := kernel.kc.get_shell_msg(timeout=30))["parent_header"]["msg_id"] != msg_id:
            pass
        assert reply["content"]["found"] is False
        assert wait_until(lambda: not pids_matching("1000.226"), timeout=5)
        for marker in markers:
            assert pids_matching(marker), f"background job {marker} was killed"
        assert kernel.ok("PATH=$OLD_PATH; rm -rf \"$HUNG_BIN\"; echo back") == "back\n"
    finally:
        kill_markers(*markers, "1000.226")


def start_with_pid(pid: int, argv: list[str]) -> subprocess.Popen:
    """Start argv as process `pid`, as PID reuse would (ns_last_pid: root).
    Other test files fork meanwhile: one of theirs can take the pid first
    (tried again once it has ended), or take the next free one between the
    write and the fork (tried again at once)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(f"/proc/{pid}"):
            time.sleep(0.01)
            continue
        with open(NS_LAST_PID, "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(argv)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    pytest.fail(f"could not start a process with pid {pid} in 60 s")


@pytest.mark.skipif(not os.access(NS_LAST_PID, os.W_OK), reason="needs root to choose pids")
def test_escalation_never_signals_a_process_that_reused_a_noted_pid(kernel):
    # 1000.132 ignores SIGINT: the sweep after the cell's end (SIGTERM to
    # what is left of the processes noted at the interrupt) must end it.
    msg_id = kernel.start("(trap '' INT; exec sleep 1000.132) & sleep 1000.131")
    assert wait_until(lambda: pids_matching("1000.131") and pids_matching("1000.132"))
    [noted] = pids_matching("1000.131")
    kernel.km.interrupt_kernel()
    assert wait_until(lambda: not os.path.exists(f"/proc/{noted}"), timeout=5)
    stranger = start_with_pid(noted, ["sleep", "1000.133"])
    try:
        assert kernel.collect(msg_id).exit_code == 130
        assert wait_until(lambda: not pids_matching("1000.132"), timeout=10)
        assert not wait_until(lambda: stranger.poll() is not None, timeout=1), \
            "a process that took a noted pid was signalled"
    finally:
        stranger.kill()
        stranger.wait()
        kill_markers("1000.132")


def test_a_side_command_that_hangs_never_leaves_the_shell_stopped(start_kernel, tmp_path):
    # A process table that cannot be read in the SIGTERM round of an
    # interrupt while a flag file exists, as on a host where reading some
    # process's /proc entry hangs: reap.sh's cat of /proc/*/stat (or its ps,
    # where there is no /proc) blocks, that round cannot finish, and the
    # kernel gives up on it after its timeout.
    flag = tmp_path / "ps-hangs"
    flag.touch()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("ps", "cat"):
        fake = bindir / tool
        fake.write_text(
            "#!/bin/sh\n"
            "if tr '\\0' ' ' < /proc/$PPID/cmdline | grep -q 'reap.sh cell TERM'; then\n"
            f"  while [ -e '{flag}' ]; do sleep 0.1; done\n"
            "fi\n"
            f"exec '{shutil.which(tool)}' \"$@\"\n")
        fake.chmod(0o755)
    kernel = start_kernel(PATH=f"{bindir}:{os.environ['PATH']}")
    shell_pid = int(kernel.ok("echo $$"))
    msg_id = kernel.start("bash -c \"trap '' INT; sleep 1000.141\"")
    try:
        assert wait_until(lambda: pids_matching("1000.141"), timeout=10)
        kernel.km.interrupt_kernel()
        # reap.sh's own process (its subshells share its command line).
        term_round = lambda: [p for p in pids_matching("reap.sh cell TERM")  # noqa: E731
                              if parent_of(p) == kernel.pid]
        assert wait_until(term_round, timeout=10)
        # The round hangs: the shell must not be held stopped meanwhile...
        assert wait_until(lambda: pids_matching(str(bindir)), timeout=5)
        assert process_state(shell_pid) != "T", "the shell is stopped while a side command hangs"
        assert wait_until(lambda: not term_round(), timeout=20), \
            "the kernel did not give up on the side command"
        flag.unlink()
        # ...nor left stopped once the kernel gave up on it.
        assert wait_until(lambda: process_state(shell_pid) != "T", timeout=5), \
            "the shell is left stopped"
    finally:
        flag.unlink(missing_ok=True)
        kill_markers("1000.141")
    kernel.collect(msg_id)
    assert kernel.ok("echo alive") == "alive\n"


def test_a_killed_kernel_leaves_no_shell_cell_or_state_behind(start_kernel):
    kernel = start_kernel()
    kernel.ok("sleep 1000.151 &")
    shell_pid = int(kernel.ok("echo $$"))
    [state] = list(Path(kernel.tmpdir).glob("shell_kernel.*"))
    kernel.start("sleep 1000.152")
    try:
        assert wait_until(lambda: pids_matching("1000.152"), timeout=10)
        os.kill(kernel.pid, signal.SIGKILL)
        assert wait_until(lambda: gone(shell_pid), timeout=10), "the shell outlived its kernel"
        for marker in ("1000.151", "1000.152"):
            assert wait_until(lambda: not pids_matching(marker), timeout=10), marker
        assert wait_until(lambda: not state.exists(), timeout=10)
    finally:
        kill_markers("1000.151", "1000.152")


def test_a_killed_kernel_leaves_nothing_that_left_the_shells_session(start_kernel):
    """setsid and nohup setsid jobs lead sessions of their own, and a
    double-forked daemon leaves the shell's tree too: they end with a
    SIGKILLed kernel all the same (the README: everything dies at shutdown)."""
    kernel = start_kernel()
    markers = ("1000.181", "1000.182", "1000.183")
    kernel.ok(f"setsid sleep {markers[0]} &\n"
              f"nohup setsid sleep {markers[1]} >/dev/null 2>&1 &\n"
              f"(setsid sh -c 'sleep {markers[2]} & exit' &)")
    try:
        assert wait_until(lambda: all(pids_matching(m) for m in markers), timeout=10)
        daemon = pids_matching(markers[2])[0]
        assert parent_of(daemon) != int(kernel.ok("echo $$")), "not a daemon: still the shell's child"
        os.kill(kernel.pid, signal.SIGKILL)
        for marker in markers:
            assert wait_until(lambda: not pids_matching(marker), timeout=15), marker
    finally:
        kill_markers(*markers)


def test_a_shutdown_leaves_nothing_that_left_the_shells_session(start_kernel):
    """As after a SIGKILL (above): a shutdown ends the daemons too."""
    kernel = start_kernel()
    markers = ("1000.184", "1000.185")
    kernel.ok(f"setsid sleep {markers[0]} &\n(setsid sh -c 'sleep {markers[1]} & exit' &)")
    try:
        assert wait_until(lambda: all(pids_matching(m) for m in markers), timeout=10)
        kernel.shutdown()
        for marker in markers:
            assert wait_until(lambda: not pids_matching(marker), timeout=10), marker
    finally:
        kill_markers(*markers)


def test_shell_and_cells_start_with_default_signal_dispositions(start_kernel):
    # As after `jupyter lab &` in a script: the kernel inherits SIGINT
    # ignored (and here also a blocked signal).
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    try:
        kernel = start_kernel()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        signal.signal(signal.SIGINT, previous)
    masks = signal_masks(kernel.ok("cat /proc/self/status"))
    assert (masks["SigIgn"], masks["SigBlk"]) == (0, 0)
    ready = kernel.tmpdir / "python-ready"
    msg_id = kernel.start(f"python3 -c 'import pathlib, time; pathlib.Path(\"{ready}\").touch(); "
                          "time.sleep(1000.171)'")
    assert wait_until(ready.exists, timeout=30), "python did not start"
    kernel.km.interrupt_kernel()
    execution = kernel.collect(msg_id)
    assert execution.exit_code == 130
    assert "KeyboardInterrupt" in execution.stderr



def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return ""


def test_reap_tree_reads_any_command_name(tmp_path):
    """reap.sh finds a cell's processes by their parents; a process whose
    command name looks like the rest of a /proc stat line (a ") ", fields,
    a newline) is still placed under its real parent, and so are its children."""
    from shell_kernel.shell import script
    reap = tmp_path / "reap.sh"
    reap.write_text(script("reap.sh"))
    fake_name = "x) S 1 1 1\ny"  # 12 bytes: a name may have 15
    rename_then_sleep = ("import subprocess, sys; open('/proc/self/comm', 'w').write(sys.argv[1]); "
                         "subprocess.run(['sleep', '60'])")
    # root -> renamed python -> sleep
    root = subprocess.Popen(["bash", "-c", f"python3 -c {shlex.quote(rename_then_sleep)} "
                             f"{shlex.quote(fake_name)}; :"])

    def members() -> set[int]:
        out = subprocess.run(["sh", str(reap), "tree", "-", str(root.pid), str(tmp_path), "1"],
                             capture_output=True, text=True, timeout=10).stdout
        return {int(token.split(":")[0]) for token in out.split()}

    try:
        def renamed_with_child() -> bool:  # python renamed itself and started sleep
            found = members()
            return len(found) == 2 and any(_comm(pid) == fake_name + "\n" for pid in found)

        assert wait_until(renamed_with_child, timeout=10), members()
        renamed = [pid for pid in members() if parent_of(pid) == root.pid]
        assert len(renamed) == 1
        assert Path(f"/proc/{renamed[0]}/comm").read_text() == fake_name + "\n"
    finally:
        for pid in members() | {root.pid}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        root.wait()


@pytest.mark.parametrize("same_shell", [True, False], ids=["same shell", "pid reused"])
def test_reap_all_spares_a_process_that_took_a_gone_shells_pid(tmp_path, same_shell):
    """After a host's reboot, the pid a shell had may name someone else's
    process: reap.sh all then removes the state directory and signals
    nothing. The shell's start time, recorded by session.bash, tells."""
    from shell_kernel.shell import script
    reap = tmp_path / "reap.sh"
    reap.write_text(script("reap.sh"))
    # A session leader with a child, as the shell (or the process now at its pid) would be.
    holder = subprocess.Popen(["setsid", "bash", "-c", "sleep 1000.931 & wait"])
    state = tmp_path / "shell_kernel.XXXX"
    state.mkdir(mode=0o700)
    try:
        assert wait_until(lambda: pids_matching("1000.931"), timeout=10)
        (state / "shell.start").write_text(f"{holder.pid} {start_record(holder.pid, same_shell)}\n")
        subprocess.run(["sh", str(reap), "all", "-", str(holder.pid), str(state)],
                       capture_output=True, text=True, timeout=20, check=True)
        assert not state.exists()
        if same_shell:
            holder.wait(timeout=10)
            assert wait_until(lambda: not pids_matching("1000.931"), timeout=10)
        else:
            assert holder.poll() is None and pids_matching("1000.931")
    finally:
        kill_markers("1000.931")
        if holder.poll() is None:
            holder.kill()
        holder.wait()


@pytest.mark.parametrize("jobs", [
    # All in the session's own group: one that ignores SIGTERM, an orphan.
    "sh -c 'trap \"\" TERM; sleep 1000.961' & (sleep 1000.962 &); sleep 1000.963 &",
    # An orphaned job in a group of its own, a child in a session of its own.
    "set -m; (sleep 1000.964 &); sleep 1000.965 & set +m; setsid sleep 1000.966 &",
], ids=["one group", "groups of their own"])
def test_reap_all_stops_every_process_of_the_session(tmp_path, jobs):
    """reap.sh all ends the shell, its descendants and every member of its
    session, however they are grouped (one group is signalled as a whole,
    without listing the processes again), and removes the state directory."""
    from shell_kernel.shell import script
    reap = tmp_path / "reap.sh"
    reap.write_text(script("reap.sh"))
    holder = subprocess.Popen(["setsid", "bash", "-c", f"{jobs}\nwait"], preexec_fn=default_signals)
    markers = [marker for marker in (f"1000.96{n}" for n in range(1, 7)) if marker in jobs]
    state = tmp_path / "shell_kernel.XXXX"
    state.mkdir(mode=0o700)
    try:
        assert wait_until(lambda: all(pids_matching(marker) for marker in markers), timeout=10)
        (state / "shell.start").write_text(f"{holder.pid} {start_record(holder.pid, True)}\n")
        done = subprocess.run(["sh", str(reap), "all", "-", str(holder.pid), str(state)],
                              capture_output=True, text=True, timeout=20, check=True)
        assert "left" not in done.stdout
        holder.wait(timeout=10)
        assert not state.exists()
        for marker in markers:
            assert wait_until(lambda: not pids_matching(marker), timeout=10), marker
    finally:
        kill_markers(*markers)
        if holder.poll() is None:
            holder.kill()
        holder.wait()


@pytest.mark.parametrize("signal_name", ["INT", "TERM"])
@pytest.mark.parametrize("same_shell", [True, False], ids=["same shell", "pid reused"])
def test_reap_cell_signals_only_the_recorded_shells_tree(tmp_path, same_shell, signal_name):
    """An interrupt's reap.sh cell signals the shell and its cell's processes
    only while the shell's pid still names the shell that recorded it; a
    stranger that took a gone shell's pid is neither signalled nor stopped."""
    from shell_kernel.shell import script
    reap = tmp_path / "reap.sh"
    reap.write_text(script("reap.sh"))
    # Signals at their defaults, as the kernel starts its shell: a suite run
    # as a background job (.ci/run's variant passes) inherits SIGINT ignored,
    # and the sleep would shrug the SIGINT off.
    holder = subprocess.Popen(["bash", "-c", "sleep 1000.951; sleep 1000.952"],
                              preexec_fn=default_signals)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    try:
        # The sleep itself (the holder's own command line names it too: a
        # SIGINT while bash still forks reaches no child, and bash waits on).
        assert wait_until(lambda: any(_comm(pid) == "sleep\n" for pid in pids_matching("1000.951")),
                          timeout=10)
        (state / "shell.start").write_text(f"{holder.pid} {start_record(holder.pid, same_shell)}\n")
        subprocess.run(["sh", str(reap), "cell", signal_name, str(holder.pid), str(state), "1"],
                       capture_output=True, text=True, timeout=20, check=True)
        if same_shell:
            assert wait_until(lambda: not pids_matching("1000.951"), timeout=10)
        else:
            assert holder.poll() is None and pids_matching("1000.951")
            assert process_state(holder.pid) != "T"
    finally:
        kill_markers("1000.951", "1000.952")
        holder.kill()
        holder.wait()
