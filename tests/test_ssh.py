"""SSH-only behaviour, against real OpenSSH servers that the tests start."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from harness import pids_matching, wait_until
from shell_kernel.testing.sshd import SSHServer


def fingerprint(public_key_line: str) -> str:
    done = subprocess.run(["ssh-keygen", "-lf", "-"], input=public_key_line, text=True,
                          capture_output=True, check=True)
    return done.stdout.split()[1]  # SHA256:...


def config_with_key(server: SSHServer, path: Path, key: Path) -> Path:
    """An ssh config for the server that offers only `key`."""
    path.write_text(f"Host testhost\n    HostName 127.0.0.1\n    Port {server.port}\n"
                    f"    User {server.user}\n    IdentityFile {key}\n    IdentitiesOnly yes\n"
                    f"    UserKnownHostsFile {server.known_hosts_path}\n")
    return path


def first_cell_error(kernel) -> str:
    execution = kernel.run("echo hello")
    assert execution.status == "error"
    return execution.errors[0]["evalue"]


def test_config_alias_with_user_port_and_identity_file(sshd, ssh_kernel):
    kernel = ssh_kernel(sshd.ssh_config)
    assert kernel.ok("whoami") == f"{sshd.user}\n"
    banner = kernel.request("kernel_info")["content"]["banner"]
    assert f"ssh {sshd.user}@127.0.0.1:{sshd.port}" in banner


def test_unknown_host_key_is_refused_with_the_fix(server, ssh_kernel, tmp_path):
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    config = server.write_ssh_config(tmp_path / "cfg", extra=f"UserKnownHostsFile {empty}")
    kernel = ssh_kernel(config)
    message = first_cell_error(kernel)
    assert f"[127.0.0.1]:{server.port}" in message
    assert fingerprint(server.host_public_key) in message
    assert "--accept-new-host-key" in message and "nothing was sent" in message
    assert empty.read_text() == ""
    # Once the user has verified and recorded the key, the next cell connects.
    empty.write_text(server.known_hosts_path.read_text())
    assert kernel.ok("echo verified") == "verified\n"


def test_accept_new_host_key_records_it_and_never_accepts_a_changed_one(server, ssh_kernel,
                                                                        tmp_path):
    known = tmp_path / "known"
    config = server.write_ssh_config(tmp_path / "cfg", extra=f"UserKnownHostsFile {known}")
    kernel = ssh_kernel(config, flags=["--accept-new-host-key"])
    assert kernel.ok("echo in") == "in\n"
    assert server.host_public_key.split()[1] in known.read_text()
    kernel.shutdown()

    server.regenerate_host_key()
    message = first_cell_error(ssh_kernel(config, flags=["--accept-new-host-key"]))
    assert "CHANGED" in message and "ssh-keygen -R" in message


def test_changed_host_key_is_refused(server, ssh_kernel, tmp_path):
    config = server.write_ssh_config(tmp_path / "cfg")
    old = server.host_public_key
    new = server.regenerate_host_key()
    message = first_cell_error(ssh_kernel(config))
    assert "CHANGED" in message
    assert fingerprint(new) in message and fingerprint(old) in message


def test_encrypted_key_without_agent_says_what_to_do(server, ssh_kernel, tmp_path):
    config = config_with_key(server, tmp_path / "cfg", server.user_key_encrypted_path)
    message = first_cell_error(ssh_kernel(config, SSH_AUTH_SOCK=""))  # no agent
    assert "encrypted" in message and "ssh-add" in message
    assert server.user_key_passphrase not in message


def test_host_wanting_a_password_gets_a_clear_error(server, ssh_kernel, tmp_path):
    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    config = config_with_key(server, tmp_path / "cfg", stranger)
    message = first_cell_error(ssh_kernel(config, SSH_AUTH_SOCK=""))
    assert "never sends passwords" in message


def test_proxyjump_through_a_second_server(server, tmp_path, ssh_kernel):
    target = SSHServer(tmp_path / "target-sshd", name="target-sshd")
    target.start()
    try:
        config = server.write_ssh_config(tmp_path / "cfg", alias="jump")
        target.write_ssh_config(config, alias="target", extra="ProxyJump jump")
        accepted_before = server.log_text().count("Accepted publickey")
        kernel = ssh_kernel(config, alias="target")
        assert kernel.ok("echo via-jump") == "via-jump\n"
        assert server.log_text().count("Accepted publickey") == accepted_before + 1
        assert target.log_text().count("Accepted publickey") >= 1
        kernel.shutdown()  # while its host is up: the shell and its files go
    finally:
        target.stop()


def test_proxycommand_is_honoured(server, tmp_path, ssh_kernel):
    config = server.write_ssh_config(tmp_path / "cfg", alias="jump")
    server.write_ssh_config(config, alias="target", extra=(
        f"ProxyCommand ssh -F {config} -o BatchMode=yes -W %h:%p jump"))
    accepted_before = server.log_text().count("Accepted publickey")
    kernel = ssh_kernel(config, alias="target")
    assert kernel.ok("echo via-proxycommand") == "via-proxycommand\n"
    # One login for the ProxyCommand's ssh, one for the kernel through it.
    assert server.log_text().count("Accepted publickey") == accepted_before + 2


def test_unanswered_connection_is_closed_by_keepalive(server, ssh_kernel, tmp_path):
    """A network cut: the connection stays open but nothing answers."""
    config = server.write_ssh_config(tmp_path / "cfg",
                                     extra="ServerAliveInterval 1\nServerAliveCountMax 2")
    kernel = ssh_kernel(config, flags=["--ephemeral"])
    msg_id = kernel.start("sleep 30")
    time.sleep(1.0)
    frozen = server.kill_sessions(signal.SIGSTOP, include_commands=False)
    started = time.monotonic()
    try:
        execution = kernel.collect(msg_id, timeout=30)
        assert time.monotonic() - started < 15
        assert "connection" in execution.errors[0]["evalue"]
        assert "lost" in execution.errors[0]["evalue"]
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGKILL)


def test_one_connection_per_kernel(server, ssh_kernel, tmp_path):
    kernel = ssh_kernel(server.write_ssh_config(tmp_path / "cfg"))
    for i in range(30):
        kernel.ok(f"echo {i}")
    msg_id = kernel.start("sleep 1000.31")
    time.sleep(0.7)
    kernel.km.interrupt_kernel()
    assert kernel.collect(msg_id).reply["content"]["ename"] == "KeyboardInterrupt"
    assert len(server.session_pids()) == 1


def test_ephemeral_connection_drop_ends_the_cell_and_the_next_cell_reconnects(
        server, ssh_kernel, tmp_path):
    """--ephemeral: the shell ends with the connection; what can be restored is."""
    kernel = ssh_kernel(server.write_ssh_config(tmp_path / "cfg"), flags=["--ephemeral"])
    kernel.ok("cd /tmp; export DROP_EXPORT='kept value'; DROP_PLAIN=yes; sleep 1000.41 &")
    old_state = Path(kernel.ok('builtin printf %s "$__shell_kernel_dir"'))
    msg_id = kernel.start("echo running; sleep 1000.42; echo never")
    time.sleep(1.0)
    started = time.monotonic()
    server.kill_sessions()
    execution = kernel.collect(msg_id, timeout=60)
    assert time.monotonic() - started < 20
    assert execution.status == "error"
    assert execution.stdout == "running\n"
    assert "connection" in execution.errors[0]["evalue"] and "lost" in execution.errors[0]["evalue"]

    execution = kernel.run("echo \"$DROP_EXPORT|${DROP_PLAIN-gone}\"; pwd")
    assert execution.status == "ok"
    assert execution.stdout == "kept value|gone\n/tmp\n"
    assert "Reconnected" in execution.stderr
    # Nothing of the old session is left on the host.
    assert wait_until(lambda: not pids_matching("1000.41") and not pids_matching("1000.42"))
    assert not old_state.exists()


def test_no_remote_leftovers_after_shutdown(sshd, ssh_kernel):
    kernel = ssh_kernel(sshd.ssh_config)
    state = Path(kernel.ok('builtin printf %s "$__shell_kernel_dir"'))
    assert state.stat().st_mode & 0o777 == 0o700
    shell_pid = int(kernel.ok("echo $$"))
    kernel.ok("sleep 1000.51 & (sleep 1000.52 &); nohup sleep 1000.53 >/dev/null 2>&1 &")
    kernel.shutdown()
    for marker in ("1000.51", "1000.52", "1000.53"):
        assert wait_until(lambda: not pids_matching(marker)), marker
    assert not os.path.exists(f"/proc/{shell_pid}")
    assert not state.exists()


MINIMAL_TOOLS = ["bash", "sh", "ps", "awk", "cat", "mktemp", "mkfifo", "rm", "mkdir", "sleep",
                 "tail", "head", "wc", "tr", "env", "ls", "id", "dd", "tee", "sort"]  # POSIX, and bash; no setsid


def test_noisy_login_and_minimal_host_without_python(tmp_path, ssh_kernel):
    """A login that prints banners on both streams, and a PATH of POSIX tools and bash only."""
    bin_dir = tmp_path / "minimal-bin"
    bin_dir.mkdir()
    for tool in MINIMAL_TOOLS:
        found = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        (bin_dir / tool).symlink_to(found)
    wrapper = tmp_path / "noisy-login"
    wrapper.write_text(
        "#!/bin/sh\n"
        "echo 'Welcome to a noisy host (motd)'\necho 'last login: never' >&2\n"
        f"PATH={bin_dir}; export PATH\n"
        "exec /bin/sh -c \"$SSH_ORIGINAL_COMMAND\"\n")
    wrapper.chmod(0o755)
    srv = SSHServer(tmp_path / "sshd", name="noisy-sshd", extra_config=f"ForceCommand {wrapper}")
    srv.start()
    try:
        kernel = ssh_kernel(srv.write_ssh_config(tmp_path / "cfg"), flags=["--clean"])
        execution = kernel.run("echo out; echo err >&2; command -v python3 || echo no-python")
        assert execution.stdout == "out\nno-python\n"
        assert execution.stderr == "err\n"
        assert kernel.run("(exit 4)").exit_code == 4
        msg_id = kernel.start("sleep 1000.61")
        time.sleep(0.7)
        kernel.km.interrupt_kernel()
        assert kernel.collect(msg_id).reply["content"]["ename"] == "KeyboardInterrupt"
        assert wait_until(lambda: not pids_matching("1000.61"))
        assert kernel.ok("echo after") == "after\n"
    finally:
        srv.stop()


def test_a_read_after_the_commands_eof_waits_for_its_exit_without_turning(sshd, monkeypatch):
    """Between a command's EOF (its output closed) and its exit status, a read
    waits: paramiko keeps a channel's readiness set from the EOF on, so a wait
    for data there would return at once, over and over, until the status came."""
    import paramiko
    from shell_kernel.backends.ssh.backend import SSHChannel
    from shell_kernel.backends.ssh.connect import connect
    from shell_kernel.backends.ssh.target import resolve
    clients = connect(resolve("testhost", str(sshd.ssh_config)))
    try:
        channel = SSHChannel(clients[-1].get_transport(),
                             b"echo out; exec >&- 2>&-; sleep 1; exit 3")
        looks_after_eof = []  # each turn of the read loop looks whether stdout has data
        real_ready = paramiko.Channel.recv_ready

        def counted(self):
            looks_after_eof.extend([self] if self.eof_received else [])
            return real_ready(self)

        monkeypatch.setattr(paramiko.Channel, "recv_ready", counted)
        assert channel.read(timeout=10) == ("stdout", b"out\n")
        assert channel.read(timeout=10) is None
        assert channel.exit().status == 3
        assert len(looks_after_eof) < 100  # a turn per half second of waiting (a spin: 100,000)
    finally:
        for client in reversed(clients):
            client.close()


def test_a_late_read_gives_the_two_streams_in_the_order_they_came(sshd):
    """A reader that comes late (a busy machine) finds both streams' data
    waiting: it gives them in the order they came, as a terminal shows them
    (an `echo x; job &` printed x before the job's number), not the stream it
    read less recently first."""
    import time
    from shell_kernel.backends.ssh.backend import SSHChannel
    from shell_kernel.backends.ssh.connect import connect
    from shell_kernel.backends.ssh.target import resolve
    clients = connect(resolve("testhost", str(sshd.ssh_config)))
    try:
        channel = SSHChannel(clients[-1].get_transport(),
                             b"echo 0; sleep 0.5; echo a; sleep 0.3; echo b >&2; sleep 0.3; "
                             b"echo c; sleep 0.3; echo d >&2; echo e >&2")
        assert channel.read(timeout=10) == ("stdout", b"0\n")
        time.sleep(3)  # everything else is waiting now
        chunks = []
        while (chunk := channel.read(timeout=10)) is not None:
            chunks.append(chunk)
        merged = [[chunks[0][0], chunks[0][1]]]
        for stream, data in chunks[1:]:  # (d and e may come as one packet or two)
            if stream == merged[-1][0]:
                merged[-1][1] += data
            else:
                merged.append([stream, data])
        assert merged == [["stdout", b"a\n"], ["stderr", b"b\n"], ["stdout", b"c\n"],
                          ["stderr", b"d\ne\n"]]
    finally:
        for client in reversed(clients):
            client.close()


def test_an_idle_connection_wakes_seldom_and_its_close_ends_it_at_once(sshd, monkeypatch):
    """An idle session's threads sleep: the transport's wait for bytes (paramiko
    wakes ten times a second) and the reader's wait for output wake only as a
    safety net. Closing does not wait for the transport's next wake: its
    socket is shut down first, so the thread ends (and the host sees the
    connection go) at once."""
    import threading
    import paramiko
    from shell_kernel.backends.ssh import connect as connect_module
    from shell_kernel.backends.ssh.backend import READ_WAKE_S, SSHChannel
    from shell_kernel.backends.ssh.target import resolve
    monkeypatch.setattr(connect_module, "TRANSPORT_WAKE_S", 60.0)  # a close that waited would show
    clients = connect_module.connect(resolve("testhost", str(sshd.ssh_config)))
    transport = clients[-1].get_transport()
    assert transport.sock.gettimeout() == 60.0
    looks = []  # each turn of the read loop looks whether stdout has data
    real_ready = paramiko.Channel.recv_ready
    monkeypatch.setattr(paramiko.Channel, "recv_ready",
                        lambda self: looks.append(1) or real_ready(self))
    channel = SSHChannel(transport, b"cat")
    reader = threading.Thread(target=lambda: channel.read(timeout=30), daemon=True)
    reader.start()
    time.sleep(2)  # idle
    assert READ_WAKE_S >= 2 and len(looks) <= 2  # the turn before the wait, perhaps one more
    for client in reversed(clients):
        connect_module.close_client(client)
    transport.join(10)
    assert not transport.is_alive()
    reader.join(10)
    assert not reader.is_alive()


def test_a_send_on_a_connection_found_gone_says_none_of_it_went(sshd):
    """The cell's send that meets a dropped connection (before its end was
    read) is NothingSent, which the shell reports as NotSent: a durable
    session then reconnects and sends the cell, as when the loss came first."""
    import pytest
    from shell_kernel.backends.channel.channels import NothingSent
    from shell_kernel.backends.ssh.backend import SSHChannel
    from shell_kernel.backends.ssh.connect import connect
    from shell_kernel.backends.ssh.target import resolve
    clients = connect(resolve("testhost", str(sshd.ssh_config)))
    channel = SSHChannel(clients[-1].get_transport(), b"cat")
    channel.send(b"one\n")
    assert channel.read(timeout=10) == ("stdout", b"one\n")
    for client in reversed(clients):
        client.close()
    with pytest.raises(NothingSent):
        channel.send(b"two\n")


def test_small_writes_go_at_once(sshd):
    """The kernel's writes are small, and often two in a row with no answer
    between (a named session's acknowledgement of a cell's output, then the
    next cell): with Nagle's algorithm on, the second waits for the host's
    delayed ACK of the first, up to 40 ms, which made a named session's
    trivial cell 44 ms instead of 1.4. The connection's socket sends at once,
    as OpenSSH's client's does for an interactive session."""
    import socket
    from shell_kernel.backends.ssh.connect import close_client, connect
    from shell_kernel.backends.ssh.target import resolve
    clients = connect(resolve("testhost", str(sshd.ssh_config)))
    try:
        sock = clients[-1].get_transport().sock
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        for client in reversed(clients):
            close_client(client)
