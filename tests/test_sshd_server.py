"""Self-test of shell_kernel/testing/sshd.py against real clients (OpenSSH + paramiko)."""

from __future__ import annotations

import os
import subprocess
import time

import paramiko
import pytest

from shell_kernel.testing.sshd import SSHServer


@pytest.fixture
def server(tmp_path):
    srv = SSHServer(tmp_path / "sshd")
    srv.start()
    yield srv
    srv.stop()


def _ssh(cfg, host, command, timeout=30):
    return subprocess.run(
        ["ssh", "-F", str(cfg), "-o", "BatchMode=yes", host, command],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
    )


def _paramiko_client(srv: SSHServer, **kw) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.load_host_keys(str(srv.known_hosts_path))
    params = dict(hostname=srv.host, port=srv.port, username=srv.user,
                  key_filename=str(srv.user_key_path),
                  allow_agent=False, look_for_keys=False, timeout=10)
    params.update(kw)
    client.connect(**params)
    return client


def _exec(client: paramiko.SSHClient, command: str) -> tuple[int, str]:
    _, stdout, _ = client.exec_command(command, timeout=30)
    out = stdout.read().decode()
    return stdout.channel.recv_exit_status(), out


def test_layout(server, tmp_path):
    wd = tmp_path / "sshd"
    for p in (server.host_key_path, server.user_key_path,
              server.user_key_encrypted_path, server.known_hosts_path,
              server.config_path, server.log_path):
        assert p.parent == wd and p.exists(), p
    assert (server.user_key_path.stat().st_mode & 0o777) == 0o600
    assert (server.user_key_encrypted_path.stat().st_mode & 0o777) == 0o600
    assert server.host_public_key.startswith("ssh-ed25519 AAAA")
    assert server.known_hosts_path.read_text() == (
        f"[127.0.0.1]:{server.port} {server.host_public_key}\n")


def test_openssh_client(server, tmp_path):
    cfg = server.write_ssh_config(tmp_path / "ssh_config")
    res = _ssh(cfg, "testhost", "echo ok")
    assert res.returncode == 0, res.stderr + server.log_text()
    assert res.stdout == "ok\n"


def test_paramiko_client(server):
    client = _paramiko_client(server)
    try:
        assert _exec(client, "echo ok") == (0, "ok\n")
    finally:
        client.close()


def test_paramiko_encrypted_key(server):
    # the passphrase-protected key is authorized too ...
    client = _paramiko_client(server, key_filename=str(server.user_key_encrypted_path),
                              passphrase="secret")
    try:
        assert _exec(client, "echo ok") == (0, "ok\n")
    finally:
        client.close()
    # ... but unusable without the passphrase (and without an agent)
    with pytest.raises(paramiko.PasswordRequiredException):
        paramiko.Ed25519Key.from_private_key_file(str(server.user_key_encrypted_path))


def test_kill_sessions_drops_paramiko_connection(server):
    client = _paramiko_client(server)
    try:
        chan = client.get_transport().open_session()
        chan.exec_command("sleep 30")
        sessions = server.wait_for_sessions(1)
        assert len(sessions) == 1
        listener = server.pid

        t0 = time.monotonic()
        killed = server.kill_sessions()
        assert set(sessions) <= set(killed)
        chan.settimeout(10)
        assert chan.recv(1024) == b""  # EOF instead of 30 s of sleep
        deadline = t0 + 5
        while not chan.closed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert chan.closed
        assert time.monotonic() - t0 < 5
        assert not client.get_transport().is_active()

        # the listener survives and accepts new connections
        assert server.running and server.pid == listener
        # (a killed connection's sshd lists until the listener has reaped it)
        deadline = time.monotonic() + 5
        while server.session_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.session_pids() == []
        client2 = _paramiko_client(server)
        try:
            assert _exec(client2, "echo ok") == (0, "ok\n")
        finally:
            client2.close()
    finally:
        client.close()


def test_proxyjump_openssh(tmp_path):
    with SSHServer(tmp_path / "jump", name="jump") as jump, \
            SSHServer(tmp_path / "target", name="target") as target:
        cfg = tmp_path / "ssh_config"
        jump.write_ssh_config(cfg, alias="jump")
        target.write_ssh_config(cfg, alias="target", extra="ProxyJump jump")
        res = _ssh(cfg, "target", "echo ok")
        assert res.returncode == 0, (res.stderr, jump.log_text(), target.log_text())
        assert res.stdout == "ok\n"
        # it really went through the jump host
        assert "Accepted publickey" in jump.log_text()
        assert "Accepted publickey" in target.log_text()


def test_proxyjump_paramiko_direct_tcpip(tmp_path):
    # paramiko has no ProxyJump: tunnel a direct-tcpip channel and use it as sock
    with SSHServer(tmp_path / "jump", name="jump") as jump, \
            SSHServer(tmp_path / "target", name="target") as target:
        outer = _paramiko_client(jump)
        try:
            chan = outer.get_transport().open_channel(
                "direct-tcpip", (target.host, target.port), ("127.0.0.1", 0))
            inner = _paramiko_client(target, sock=chan)
            try:
                assert _exec(inner, "echo ok") == (0, "ok\n")
            finally:
                inner.close()
        finally:
            outer.close()


def test_regenerate_host_key(server, tmp_path):
    old_key, port = server.host_public_key, server.port
    new_key = server.regenerate_host_key()
    assert new_key != old_key and server.port == port and server.running
    assert old_key in server.known_hosts_path.read_text()

    with pytest.raises(paramiko.BadHostKeyException):
        _paramiko_client(server)

    cfg = server.write_ssh_config(tmp_path / "ssh_config")
    res = _ssh(cfg, "testhost", "echo ok")
    assert res.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in res.stderr


def test_stop_is_clean_and_idempotent(tmp_path):
    srv = SSHServer(tmp_path / "sshd").start()
    cfg = srv.write_ssh_config(tmp_path / "ssh_config")
    proc = subprocess.Popen(["ssh", "-F", str(cfg), "-o", "BatchMode=yes",
                             "testhost", "sleep 60"],
                            stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        srv.wait_for_sessions(1)
        tree = srv.session_pids()
        listener = srv.pid
        srv.stop()
        srv.stop()
        assert not srv.running
        assert proc.wait(timeout=5) == 255
        for pid in [listener, *tree]:
            assert not os.path.exists(f"/proc/{pid}"), pid  # gone, not even a zombie
    finally:
        proc.kill()
        proc.wait()
        srv.stop()
