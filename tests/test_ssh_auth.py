"""Connecting as OpenSSH does: ssh config values, ProxyCommand, ProxyJump chains,
authentication and known_hosts, against real OpenSSH servers the tests start.

Whatever goes wrong while connecting, the cell gets an error reply written for the
user within seconds, and the kernel answers the next cell.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import wait_until
from shell_kernel.backends import BackendError
from shell_kernel.backends.ssh.connect import connect
from shell_kernel.backends.ssh.target import TargetError, resolve
from shell_kernel.testing.sshd import SSHServer
from test_ssh import config_with_key, fingerprint

REPLY_TIMEOUT = 10  # a connection problem is an error reply within seconds, never a hang


def new_key(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name,
                    "-f", str(path)], check=True, capture_output=True)
    return path


def key_fingerprint(key: Path) -> str:
    return fingerprint(Path(f"{key}.pub").read_text())


def error_reply(kernel, code: str = "echo hello") -> str:
    execution = kernel.run(code, timeout=REPLY_TIMEOUT)
    assert execution.status == "error"
    return execution.errors[0]["evalue"]


def connect_to(config: Path, alias: str = "testhost", accept_new: bool = False) -> None:
    """Connect and log in with the kernel's own connect(), then hang up."""
    clients = connect(resolve(alias, str(config)), accept_new,
                      resolve_jump=lambda hop: resolve(hop, str(config)))
    for client in reversed(clients):
        client.close()


def openssh_accepts(config: Path, alias: str = "testhost") -> bool:
    """Does OpenSSH's own client log in with this config? (The sftp subsystem runs
    inside sshd, so no login shell slows this down.)"""
    done = subprocess.run(["ssh", "-F", str(config), "-o", "BatchMode=yes", "-s", alias, "sftp"],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    return done.returncode == 0


@pytest.fixture
def agent():
    """A real ssh-agent of our own; add(key) loads a key into it."""
    directory = tempfile.mkdtemp(prefix="agent")  # a unix socket path must stay short
    sock = os.path.join(directory, "sock")
    process = subprocess.Popen(["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    assert wait_until(lambda: os.path.exists(sock))

    def add(key: Path) -> None:
        subprocess.run(["ssh-add", str(key)], env={**os.environ, "SSH_AUTH_SOCK": sock},
                       stdin=subprocess.DEVNULL, check=True, capture_output=True)

    yield SimpleNamespace(sock=sock, add=add)
    process.terminate()
    process.wait()
    shutil.rmtree(directory, ignore_errors=True)


# ---------------------------------------------------------------- ssh config values


@pytest.mark.parametrize("line", ["Port abc", "Port 70000", "ServerAliveInterval soon",
                                  "ServerAliveCountMax many"])
def test_unusable_config_value_is_a_target_error_naming_it(tmp_path, line):
    config = tmp_path / "cfg"
    config.write_text(f"Host testhost\n    HostName 127.0.0.1\n    {line}\n")
    with pytest.raises(TargetError) as caught:
        resolve("testhost", str(config))
    option, value = line.split()
    assert option in str(caught.value) and value in str(caught.value)
    assert str(config) in str(caught.value)


def test_unparsable_config_is_a_target_error(tmp_path):
    config = tmp_path / "cfg"
    config.write_text('Host "testhost\n    HostName 127.0.0.1\n')
    with pytest.raises(TargetError, match=str(config)):
        resolve("testhost", str(config))


def test_bad_port_in_config_is_an_error_reply_and_the_next_cell_connects(server, ssh_kernel,
                                                                         tmp_path):
    config = server.write_ssh_config(tmp_path / "cfg", extra="Port abc")
    kernel = ssh_kernel(config)
    message = error_reply(kernel)
    assert "Port" in message and "'abc'" in message and str(config) in message
    # The config is read again at every connection: once fixed, the next cell works.
    config.unlink()
    server.write_ssh_config(config)
    assert kernel.ok("echo fixed") == "fixed\n"


def test_unresolvable_proxyjump_hop_is_a_backend_error(server, tmp_path):
    config = server.write_ssh_config(tmp_path / "cfg", extra="ProxyJump bad!hop")
    with pytest.raises(BackendError, match="bad!hop"):
        connect_to(config)


# ---------------------------------------------------------------- ProxyCommand


def test_proxycommand_tokens_are_expanded_with_the_final_host_port_and_user(tmp_path):
    config = tmp_path / "cfg"
    config.write_text("Host jumpy\n    HostName 127.0.0.9\n    Port 2200\n    User bob\n"
                      "    ProxyCommand exec connect-to %h %p %r %n 100%% ~/x\n")
    target = resolve("alice@jumpy:2222", str(config))
    assert target.proxy_command == "exec connect-to 127.0.0.9 2222 alice jumpy 100% ~/x"


@pytest.mark.parametrize("user", ["x$(id>{mark})", "x`id>{mark}`", "x;id>{mark};", "-oX", "x|y"])
def test_a_user_with_shell_metacharacters_is_refused_before_any_command_runs(user, tmp_path):
    """CVE-2023-51385: %r went unquoted into ProxyCommand, which the shell runs."""
    mark = tmp_path / "mark"
    config = tmp_path / "cfg"
    config.write_text("Host jumped\n    ProxyCommand true %h %p %r\n")
    text = user.format(mark=mark) + "@jumped"
    with pytest.raises(TargetError) as err:
        resolve(text, str(config))
    assert repr(text) in str(err.value) and "shell" in str(err.value)
    with pytest.raises(TargetError, match="'-oProxyCommand': the host '-oProxyCommand' holds"):
        resolve("-oProxyCommand", str(config))  # a host cannot pass for an option either
    assert not mark.exists()


def test_proxycommand_tokens_are_quoted_for_the_shell(tmp_path):
    """Values from the ssh config itself (which OpenSSH does not check) reach the
    command as one word each, whatever they hold."""
    mark = tmp_path / "mark"
    config = tmp_path / "cfg"
    config.write_text(f"Host jumped\n    HostName h$(id>{mark})\n    User x$(id>{mark}) 'y\n"
                      f"    ProxyCommand printf '%%s\\n' %h %p %r %n >&2; exit 3\n")
    target = resolve("jumped", str(config))
    from shell_kernel.backends.ssh.proxy_command import ProxyCommandSocket
    sock = ProxyCommandSocket.start(target.proxy_command)
    try:
        wait_until(lambda: sock.failure() is not None, timeout=REPLY_TIMEOUT)
        said = sock.failure()
    finally:
        sock.close()
    assert f"saying: h$(id>{mark})\n22\nx$(id>{mark}) 'y\njumped." in said
    assert not mark.exists()


def test_proxycommand_runs_in_the_users_shell_with_exec(server, ssh_kernel, tmp_path):
    """`exec`, redirections and quotes work, because the shell runs the command."""
    proxy_log = tmp_path / "proxy log"
    config = server.write_ssh_config(tmp_path / "cfg", alias="jump")
    server.write_ssh_config(config, alias="target", extra=(
        f"ProxyCommand exec ssh -F {config} -o BatchMode=yes -W %h:%p jump 2>>'{proxy_log}'"))
    kernel = ssh_kernel(config, alias="target")
    assert kernel.ok("echo via-proxy") == "via-proxy\n"
    assert proxy_log.exists()


def test_failing_proxycommand_is_an_error_reply_with_what_it_said(server, ssh_kernel, tmp_path):
    config = server.write_ssh_config(tmp_path / "cfg",
                                     extra="ProxyCommand exec no-such-proxy-tool %h %p")
    kernel = ssh_kernel(config)
    message = error_reply(kernel)
    assert "ProxyCommand" in message and "no-such-proxy-tool" in message
    assert "not found" in message  # the shell's own complaint, so the user sees the cause
    assert "ProxyCommand" in error_reply(kernel, "echo again")


# ---------------------------------------------------------------- known_hosts


def host_line(server: SSHServer, names: str | None = None) -> str:
    return f"{names or f'[127.0.0.1]:{server.port}'} {server.host_public_key}\n"


def test_marker_lines_in_known_hosts_are_read_not_fatal(server, ssh_kernel, tmp_path):
    other = tmp_path / "ca"
    new_key(other)
    known = tmp_path / "known_hosts"
    known.write_text(f"@cert-authority *.example.org {Path(f'{other}.pub').read_text()}"
                     f"@revoked other.example.org {Path(f'{other}.pub').read_text()}"
                     + host_line(server))
    config = server.write_ssh_config(tmp_path / "cfg", extra=f"UserKnownHostsFile {known}")
    assert openssh_accepts(config)
    kernel = ssh_kernel(config)
    assert kernel.ok("echo in") == "in\n"


def test_revoked_host_key_is_refused_even_when_listed(server, ssh_kernel, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(host_line(server) + f"@revoked * {server.host_public_key}\n")
    config = server.write_ssh_config(tmp_path / "cfg", extra=f"UserKnownHostsFile {known}")
    assert not openssh_accepts(config)
    kernel = ssh_kernel(config)
    message = error_reply(kernel)
    assert "revoked" in message.lower() and fingerprint(server.host_public_key) in message
    assert str(known) in message and "nothing was sent" in message
    assert "revoked" in error_reply(kernel, "echo again").lower()


def test_global_known_hosts_file_is_read(server, tmp_path):
    user_known, global_known = tmp_path / "user_known_hosts", tmp_path / "global_known_hosts"
    user_known.write_text("")
    global_known.write_text(host_line(server))
    config = server.write_ssh_config(tmp_path / "cfg", extra=(
        f"UserKnownHostsFile {user_known}\nGlobalKnownHostsFile {global_known}"))
    connect_to(config)
    assert user_known.read_text() == ""


def test_global_known_hosts_default_is_etc_ssh(tmp_path):
    config = tmp_path / "cfg"
    config.write_text("Host testhost\n    HostName 127.0.0.1\n")
    target = resolve("testhost", str(config))
    assert target.global_known_hosts_files == ["/etc/ssh/ssh_known_hosts",
                                               "/etc/ssh/ssh_known_hosts2"]


def test_hashed_and_wildcard_entries_are_matched(server, tmp_path):
    hashed, pattern = tmp_path / "hashed", tmp_path / "pattern"
    hashed.write_text(host_line(server))
    subprocess.run(["ssh-keygen", "-H", "-f", str(hashed)], check=True, capture_output=True)
    assert "127.0.0.1" not in hashed.read_text()
    pattern.write_text(host_line(server, f"!db.example.org,[127.0.0.?]:{server.port}"))
    for known in (hashed, pattern):
        config = server.write_ssh_config(tmp_path / f"cfg-{known.name}",
                                         extra=f"UserKnownHostsFile {known}")
        assert openssh_accepts(config)
        connect_to(config)


def test_negated_pattern_does_not_match(server, tmp_path):
    known = tmp_path / "known"
    known.write_text(host_line(server, f"[127.0.0.?]:{server.port},![127.0.0.1]:{server.port}"))
    config = server.write_ssh_config(tmp_path / "cfg", extra=f"UserKnownHostsFile {known}")
    assert not openssh_accepts(config)
    with pytest.raises(BackendError, match="is not in"):
        connect_to(config)


def test_host_with_several_keys_shows_the_type_on_file(tmp_path):
    """Only the host's RSA key is known: it is asked for first, as OpenSSH does."""
    rsa = tmp_path / "rsa_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-N", "", "-f", str(rsa)], check=True)
    srv = SSHServer(tmp_path / "sshd", extra_config=f"HostKey {rsa}").start()
    try:
        known = tmp_path / "known"
        known.write_text(f"[127.0.0.1]:{srv.port} {Path(f'{rsa}.pub').read_text()}")
        connect_to(srv.write_ssh_config(tmp_path / "cfg", extra=f"UserKnownHostsFile {known}"))
    finally:
        srv.stop()


def test_new_host_key_is_recorded_hashed_when_hash_known_hosts_is_set(server, tmp_path):
    known = tmp_path / "known_hosts"
    config = server.write_ssh_config(tmp_path / "cfg",
                                     extra=f"UserKnownHostsFile {known}\nHashKnownHosts yes")
    connect_to(config, accept_new=True)
    recorded = known.read_text()
    assert recorded.startswith("|1|") and "127.0.0.1" not in recorded
    found = subprocess.run(["ssh-keygen", "-F", f"[127.0.0.1]:{server.port}", "-f", str(known)],
                           capture_output=True, text=True)
    assert server.host_public_key.split()[1] in found.stdout  # OpenSSH reads it back
    connect_to(config)  # and so do we, without accepting anything new
    assert known.read_text() == recorded


# ---------------------------------------------------------------- authentication

KEYBOARD_INTERACTIVE = ("UsePAM yes\nKbdInteractiveAuthentication yes\n"
                        "AuthenticationMethods publickey,keyboard-interactive")


@pytest.fixture
def two_factor_server(tmp_path):
    """A host that wants a key and then keyboard-interactive (PAM asks for the password)."""
    srv = SSHServer(tmp_path / "sshd-2fa", name="two-factor-sshd",
                    extra_config=KEYBOARD_INTERACTIVE)
    srv.start()
    yield srv
    srv.stop()


def test_keyboard_interactive_host_is_a_clear_error_reply(two_factor_server, ssh_kernel, tmp_path):
    config = two_factor_server.write_ssh_config(tmp_path / "cfg")
    kernel = ssh_kernel(config)
    message = error_reply(kernel)
    assert f"127.0.0.1:{two_factor_server.port}" in message
    assert "keyboard-interactive" in message and "AuthenticationMethods" in message
    assert "keyboard-interactive" in error_reply(kernel, "echo again")
    assert "Partial publickey" in two_factor_server.log_text()  # the key itself was fine


def test_connect_never_reads_stdin_nor_prompts(two_factor_server, tmp_path):
    """Run connect() in a process whose stdin stays open (as a kernel's does): it must
    fail on its own, not prompt and wait for input."""
    config = two_factor_server.write_ssh_config(tmp_path / "cfg")
    code = ("from shell_kernel.backends.ssh.connect import connect\n"
            "from shell_kernel.backends.ssh.target import resolve\n"
            f"connect(resolve('testhost', {str(config)!r}))\n")
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                   stdout=stdout, stderr=stderr)
    try:
        returncode = process.wait(timeout=REPLY_TIMEOUT)
    finally:
        process.kill()
        process.stdin.close()
    assert out.read_text() == ""  # no "Password:" prompt
    assert returncode != 0
    assert "BackendError" in err.read_text() and "keyboard-interactive" in err.read_text()


def test_identities_only_offers_only_the_configured_key_of_the_agent(server, agent, ssh_kernel,
                                                                      tmp_path):
    strangers = [new_key(tmp_path / f"stranger{i}") for i in range(3)]
    for key in strangers:
        agent.add(key)
    unlocked = tmp_path / "unlocked"  # the encrypted identity file's key, as the agent holds it
    shutil.copy(server.user_key_encrypted_path, unlocked)
    subprocess.run(["ssh-keygen", "-p", "-q", "-P", server.user_key_passphrase, "-N", "",
                    "-f", str(unlocked)], check=True, capture_output=True)
    agent.add(unlocked)
    config = config_with_key(server, tmp_path / "cfg", server.user_key_encrypted_path)
    kernel = ssh_kernel(config, SSH_AUTH_SOCK=agent.sock)
    assert kernel.ok("echo in") == "in\n"
    log = server.log_text()
    assert f"Accepted publickey for {server.user}" in log
    for key in strangers:
        assert key_fingerprint(key) not in log


def test_identities_only_keeps_other_agent_keys_out(server, agent, tmp_path, monkeypatch):
    agent.add(server.user_key_path)  # the host would accept this one...
    stranger = new_key(tmp_path / "stranger")
    config = config_with_key(server, tmp_path / "cfg", stranger)  # ...but the config names this
    monkeypatch.setenv("SSH_AUTH_SOCK", agent.sock)
    assert not openssh_accepts(config)
    with pytest.raises(BackendError, match="refused"):
        connect_to(config)
    assert key_fingerprint(server.user_key_path) not in server.log_text()
    # Without IdentitiesOnly, agent keys are offered after the configured ones.
    config.write_text(config.read_text().replace("IdentitiesOnly yes", "IdentitiesOnly no"))
    assert openssh_accepts(config)
    connect_to(config)


# ---------------------------------------------------------------- ProxyJump chains

DEBUG_LOG = "LogLevel DEBUG1"  # sshd logs each direct-tcpip forward with its target


def test_proxyjump_chain_goes_through_each_hop_in_order(tmp_path, ssh_kernel):
    first = SSHServer(tmp_path / "first", name="first-sshd", extra_config=DEBUG_LOG).start()
    second = SSHServer(tmp_path / "second", name="second-sshd", extra_config=DEBUG_LOG).start()
    target = SSHServer(tmp_path / "target", name="target-sshd").start()
    try:
        config = first.write_ssh_config(tmp_path / "cfg", alias="first")
        second.write_ssh_config(config, alias="second")
        target.write_ssh_config(config, alias="target", extra="ProxyJump first,second")
        kernel = ssh_kernel(config, alias="target")
        assert kernel.ok("echo via-chain") == "via-chain\n"
        first_log, second_log = first.log_text(), second.log_text()
        assert f"target 127.0.0.1 port {second.port}" in first_log
        assert f"target 127.0.0.1 port {target.port}" not in first_log
        assert f"target 127.0.0.1 port {target.port}" in second_log
        for server in (first, second, target):
            assert server.log_text().count("Accepted publickey") == 1
    finally:
        for server in (first, second, target):
            server.stop()


def test_a_key_file_is_loaded_once_per_version_of_it(server, tmp_path, monkeypatch):
    """A fleet's hosts share one key, and loading an RSA key checks it (0.1 s of
    CPU): loaded once, and again only when the file changes."""
    from shell_kernel.backends.ssh import auth
    loaded = []
    real_load = auth._load_private_key
    monkeypatch.setattr(auth, "_load_private_key",
                        lambda path: loaded.append(path) or real_load(path))
    key = new_key(tmp_path / "rotated")
    config = config_with_key(server, tmp_path / "cfg", key)
    for _ in range(2):
        with pytest.raises(BackendError, match="refused the keys"):
            connect_to(config)
    assert loaded == [str(key)]
    # The file now holds the key the host accepts: read again, and the login works.
    shutil.copyfile(server.user_key_path, key)
    shutil.copyfile(f"{server.user_key_path}.pub", f"{key}.pub")
    connect_to(config)
    assert loaded == [str(key), str(key)]
