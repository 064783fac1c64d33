"""Hardening of state and output paths against hostile or busy surroundings."""

from __future__ import annotations

import base64
import os
import pwd
import shutil
import time
from pathlib import Path

import pytest


@pytest.mark.parametrize("spoil", ["writable by others", "owned by another user"])
def test_ephemeral_restore_refuses_a_state_dir_that_is_not_private(server, ssh_kernel, tmp_path,
                                                                   spoil):
    """After a /tmp cleaner, another user may recreate the old state directory:
    sourcing their exports file would run their code as this user."""
    kernel = ssh_kernel(server.write_ssh_config(tmp_path / "cfg"), flags=["--ephemeral"])
    kernel.ok("cd /tmp; export PLANTED=no")
    old_state = Path(kernel.ok('builtin printf %s "$__shell_kernel_dir"'))
    try:
        (old_state / "exports").write_text("declare -x PLANTED=yes\n")
        if spoil == "writable by others":
            old_state.chmod(0o777)
        else:
            os.chown(old_state, pwd.getpwnam("nobody").pw_uid, -1)
        assert server.kill_sessions(), "no SSH session to kill"
        time.sleep(1)  # the kernel notices the drop before the next cell
        execution = kernel.run('echo "${PLANTED-unset}"; pwd', timeout=60)
        assert execution.status == "ok", execution.errors
        assert execution.stdout == "unset\n/tmp\n"
        assert "NOT restored" in execution.stderr and str(old_state) in execution.stderr
        assert (old_state / "exports").exists()  # not ours: left alone
    finally:
        shutil.rmtree(old_state, ignore_errors=True)


def test_ephemeral_restore_still_takes_over_a_private_state_dir(server, ssh_kernel, tmp_path):
    kernel = ssh_kernel(server.write_ssh_config(tmp_path / "cfg"), flags=["--ephemeral"])
    kernel.ok("cd /tmp; export KEPT='a value'")
    assert server.kill_sessions(), "no SSH session to kill"
    time.sleep(1)
    execution = kernel.run('echo "$KEPT"; pwd', timeout=60)
    assert execution.stdout == "a value\n/tmp\n"
    assert "exported variables were restored" in execution.stderr


def test_display_and_queries_are_not_corrupted_by_a_background_job(kernel, tmp_path):
    """A background job printing all the time must neither mix into a displayed
    image nor take its bytes (both backends)."""
    png = b"\x89PNG\r\n\x1a\n" + os.urandom(300_000)
    picture = tmp_path / "picture.png"  # the test sshd runs on this machine too
    picture.write_bytes(png)
    tmp_path.chmod(0o755)
    kernel.ok("while :; do echo noise-noise-noise; done & noisy=$!")
    try:
        for _ in range(3):
            execution = kernel.run(f"display {picture}; echo shown")
            assert execution.status == "ok", execution.errors
            shown = [m["content"]["data"] for m in execution.messages
                     if m["msg_type"] == "display_data"]
            assert len(shown) == 1, execution.stderr[-500:]
            assert base64.b64decode(shown[0]["image/png"]) == png
            # The job's lines may be cut where one cell's output ends and the next begins,
            # but nothing of the picture may be among them.
            assert all(set(word) <= set("noise-shown") for word in execution.stdout.split())
            reply = kernel.request("complete", "ech", 3)
            assert "echo" in reply["content"]["matches"]
    finally:
        kernel.ok("kill $noisy; wait $noisy 2>/dev/null; true")


@pytest.mark.parametrize("flags", [None, [], ["--ephemeral"]], ids=["local", "ssh", "ssh-ephemeral"])
def test_shutdown_never_needs_a_signal(start_kernel, ssh_kernel, sshd, flags):
    """jupyter_client kills a kernel that has not exited 2.5 s after its
    shutdown_request: a clean shutdown exits by itself, every time."""
    statuses = []
    for _ in range(6):
        kernel = start_kernel() if flags is None else ssh_kernel(sshd.ssh_config, flags=flags)
        kernel.ok("echo hi")
        process = kernel.km.provisioner.process
        kernel.shutdown()
        statuses.append(process.returncode)
    assert statuses == [0] * 6


def test_status_file_is_written_before_the_reported_status(kernel):
    """README: the hook writes seq, status and cwd to the status file, then the
    end frame the kernel reports; so when a reply arrives, the file holds that cell."""
    state = Path(kernel.ok('builtin printf %s "$__shell_kernel_dir"'))
    seqs = []
    for code, status in (("true", 0), ("mkdir -p 'dir with space'; cd 'dir with space'; (exit 7)", 7),
                         ("cd ..; false", 1)):
        execution = kernel.run(code)
        seq, file_status, cwd = (state / "status").read_text().split("\n", 2)
        assert int(file_status) == execution.exit_code == status
        assert cwd == execution.meta["cwd"]
        seqs.append(int(seq))
    assert seqs == [seqs[0], seqs[0] + 1, seqs[0] + 2]


def test_durable_kernel_reading_slower_than_the_cell_prints_loses_nothing(ssh_kernel, sshd):
    """The host bounds the spool only once no kernel reads it: a kernel that
    is merely behind (a fast producer, a slow link) gets every byte."""
    kernel = ssh_kernel(sshd.ssh_config, flags=["--output-limit-mb", "8"])
    execution = kernel.run("head -c 100000000 /dev/zero | tr '\\0' x; echo", timeout=180)
    assert execution.status == "ok" and "dropped" not in execution.stderr
    spilled = Path(execution.meta["output_file"]).read_bytes()
    assert len(execution.stdout) + len(spilled) == 100_000_001
    assert spilled.rstrip(b"\n") == b"x" * (len(spilled) - 1)


# ------------------------------------------------------------ side commands
def _side_backend(kind: str, sshd):
    """A backend reaching its host for side commands only (no shell started)."""
    from shell_kernel.backends.local import backend as local
    from shell_kernel.backends.ssh import backend as ssh
    from shell_kernel.backends.ssh.target import resolve
    if kind == "local":
        return local.LocalBackend()
    backend = ssh.SSHBackend(resolve("testhost", str(sshd.ssh_config)), clean=True,
                             durable=kind == "ssh-durable")
    backend.open_connection()
    return backend


@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_a_side_command_that_times_out_is_ended_on_the_host(sshd, kind):
    """Else it goes on (a fetch of a FIFO, a reap stuck on a frozen /proc),
    and over SSH everything after it queues behind it in the side shell."""
    from harness import pids_matching, wait_until
    from shell_kernel.backends import BackendError
    backend = _side_backend(kind, sshd)
    try:
        with pytest.raises(BackendError):
            backend.side_command("sleep 1000.771 & sleep 1000.772; echo late", [], timeout=2)
        assert wait_until(lambda: not pids_matching("1000.771") and not pids_matching("1000.772"),
                          timeout=15)
        assert backend.side_command("echo next", [], timeout=10).stdout.strip() == "next"
    finally:
        backend.close()


def test_an_urgent_side_command_does_not_wait_behind_another(sshd):
    """An interrupt's steps never queue behind a display's fetch or an
    acknowledgement that the host is slow to answer."""
    import threading
    backend = _side_backend("ssh", sshd)
    try:
        backend.side_command("true", [], timeout=10)  # the side shell is open
        slow = threading.Thread(target=backend.side_command,
                                args=("sleep 4; echo slow", [], 20), daemon=True)
        slow.start()
        time.sleep(0.5)
        started = time.monotonic()
        assert backend.side_command("echo urgent", [], timeout=10, urgent=True).stdout \
            .strip() == "urgent"
        assert time.monotonic() - started < 3.0
        slow.join(20)
    finally:
        backend.close()


def test_installed_scripts_run_by_path_not_sent_with_each_call(sshd, monkeypatch):
    """A durable session's reap.sh is in its directory: an interrupt step
    sends its path, not its 16 KB; an acknowledgement is a short line on the
    relay's input."""
    import threading
    from shell_kernel.backends.channel import durable
    from shell_kernel.backends.ssh import backend as ssh
    from shell_kernel.backends.ssh.target import resolve
    from shell_kernel.interrupts import Reaper
    sent: list[bytes] = []
    original = ssh.SSHChannel.send
    monkeypatch.setattr(ssh.SSHChannel, "send",
                        lambda self, data: (sent.append(data), original(self, data))[1])
    backend = ssh.SSHBackend(resolve("testhost", str(sshd.ssh_config)), clean=True,
                             durable=True, idle_timeout=60)
    output = threading.Event()
    started = backend.start(lambda stream, data: b"hello" in data and output.set(),
                            lambda ended: None)
    try:
        del sent[:]  # the launch's (launch.sh itself, and the scripts it installs)
        backend.send(b"echo hello\n")
        assert output.wait(20)
        time.sleep(2)  # the acknowledgement of that output (SPOOL_ACK_INTERVAL)
        acks = [data for data in sent if data.startswith(durable.ACK.encode())]
        assert acks and all(len(data) < 1000 for data in acks), [len(d) for d in acks]
        del sent[:]
        Reaper(backend, 1, started.preset_state_dir).note_tree(1)
        assert sent and all(len(data) < 1000 for data in sent), [len(d) for d in sent]
    finally:
        backend.close()
