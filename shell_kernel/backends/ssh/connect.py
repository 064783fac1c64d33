"""SSH connection set-up, as OpenSSH does it: ssh_config's target (see
target.py), ProxyJump hosts or a ProxyCommand, host keys checked against
known_hosts, public-key login, the transport's preferences, and the
"exit-signal" request that paramiko drops. A connection the host drops
before it says who it is (a busy sshd's MaxStartups, a reset during key
exchange, a banner not read in time) is tried again for up to 30 s, after a
growing, jittered pause; a refused login or host key never is.

Runs on the thread that connects (the session's caller or launch thread).
"""

from __future__ import annotations

import functools
import logging
import random
import signal
import socket
import threading
import time

import paramiko

from .. import BackendError
from . import known_hosts
from .proxy_command import ProxyCommandSocket
from .auth import KeyLogin
from .target import SSHTarget, TargetError

log = logging.getLogger("shell_kernel.ssh")

CONNECT_TIMEOUT = 15.0
#: How long a connection the host drops before login (see _PassingFailure) is
#: tried again: pauses of 0.5 s doubled up to 4 s, jittered, until this many
#: seconds have passed since the first try (within the kernel's start timeout).
RETRY_FOR = 30.0
RETRY_PAUSES = (0.5, 4.0)
#: How often a connection's transport thread wakes when nothing comes
#: (paramiko's own: 0.1 s): each wake takes the interpreter's lock from
#: whichever thread holds it, ten a second per host in a fleet. It only
#: bounds when the thread notices a close: close_client shuts the socket
#: down first, which wakes it at once.
TRANSPORT_WAKE_S = 1.0


class _PassingFailure(BackendError):
    """The connection ended before the host said anything about the user or
    its key: it was dropped or reset during the banner or key exchange, as
    a host (or controller) under load does. Trying again may work."""


def _passing(err: BaseException) -> bool:
    """Whether paramiko's err is a _PassingFailure: an authentication
    error or an unknown peer's protocol never is."""
    if isinstance(err, paramiko.AuthenticationException):
        return False
    # Not a TCP connect that timed out (socket.timeout): a host that is off, or
    # behind a firewall, would cost its timeout again and again.
    if isinstance(err, (EOFError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        return True
    return isinstance(err, paramiko.SSHException) and \
        str(err).startswith("Error reading SSH protocol banner")


def fingerprint(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.fingerprint}"


class _KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """Every host key is checked here, as OpenSSH checks it: paramiko is given no known
    keys, so it hands each one over. A revoked or changed key is refused; an unknown one
    is refused, or recorded when the user opted in."""

    def __init__(self, target: SSHTarget, known: known_hosts.KnownHosts, accept_new: bool):
        self._target = target
        self._known = known
        self._accept_new = accept_new

    def missing_host_key(self, client, hostname, key):
        target, name = self._target, self._target.known_hosts_name
        revoked = self._known.revocation(name, key)
        if revoked:
            raise BackendError(
                f"The SSH host key of {name} ({fingerprint(key)}) is revoked (@revoked in "
                f"{revoked.where}), so it must never be accepted and nothing was sent. The "
                "host's administrator has to give the host a new key; check its fingerprint "
                "with them, then record it in known_hosts.")
        if self._known.entry(name, key):
            return
        expected = self._known.same_type_entries(name, key)
        if expected:
            raise BackendError(
                f"WARNING: the SSH host key of {name} has CHANGED: it is now {fingerprint(key)}, "
                f"but {expected[0].where} holds {expected[0].fingerprint}. This can mean someone "
                "is intercepting the connection, or that the host was reinstalled. Nothing was "
                "sent. If the change is expected, remove the old key with "
                f"`ssh-keygen -R '{name}'` and verify the new one before connecting again.")
        if not self._accept_new:
            files = target.known_hosts_files + target.global_known_hosts_files
            raise BackendError(
                f"The SSH host key of {name} ({fingerprint(key)}) is not in {', '.join(files)}, "
                "so the host cannot be verified and nothing was sent. Check the fingerprint "
                "with the host's administrator, then either connect once with "
                f"`ssh -p {target.port} {target.user}@{target.hostname}` and accept it, or "
                "reinstall this kernelspec with --accept-new-host-key to record it on first "
                "connection.")
        known_hosts.record(target.known_hosts_files[0], name, key, target.hash_known_hosts)
        log.warning("recorded new host key for %s in %s: %s", name, target.known_hosts_files[0],
                    fingerprint(key))


def connect(target: SSHTarget, accept_new_host_key: bool = False,
            resolve_jump=None) -> list[paramiko.SSHClient]:
    """Open an authenticated connection, through ProxyJump hosts or a ProxyCommand if
    configured. Raises only BackendError, whose message is for the user.

    Returns the clients, the last one being the target's (earlier ones
    carry its traffic and must stay open). `resolve_jump` maps a ProxyJump
    entry to an SSHTarget.
    """
    started, (pause, longest) = time.monotonic(), RETRY_PAUSES
    attempt = 1
    while True:
        try:
            return _connect_once(target, accept_new_host_key, resolve_jump)
        except _PassingFailure as err:
            waited = time.monotonic() - started
            if waited >= RETRY_FOR:
                raise BackendError(
                    f"{err} (tried {attempt} times over {waited:.0f} s: the host dropped each "
                    "connection before login; it may be overloaded, e.g. past sshd's "
                    "MaxStartups. Nothing ran there; try again later, or with fewer "
                    "connections at once)") from None
            log.info("connecting to %s, try %d: %s; trying again", target.describe(), attempt, err)
        # Jittered, so that hosts dropped together do not all come back together.
        time.sleep(min(pause * random.uniform(0.5, 1.5), RETRY_FOR - waited))
        pause, attempt = min(pause * 2, longest), attempt + 1


def _connect_once(target: SSHTarget, accept_new_host_key: bool,
                  resolve_jump) -> list[paramiko.SSHClient]:
    try:
        return _connect(target, accept_new_host_key, resolve_jump, [target.alias])
    except BackendError:
        raise
    except Exception as err:  # noqa: BLE001 - the user gets a message, the log the traceback
        log.exception("connecting to %s", target.describe())
        raise BackendError(f"could not connect to {target.describe()}: {err!r}") from None


def _connect(target: SSHTarget, accept_new_host_key: bool, resolve_jump,
             chain: list[str]) -> list[paramiko.SSHClient]:
    clients: list[paramiko.SSHClient] = []
    sock = None
    try:
        if target.proxy_jump:
            clients, sock = _through_jump_hosts(target, accept_new_host_key, resolve_jump, chain)
        elif target.proxy_command:
            sock = ProxyCommandSocket.start(target.proxy_command)
        clients.append(_login(target, accept_new_host_key, sock))
        return clients
    except BaseException:
        if sock is not None:
            sock.close()
        for client in reversed(clients):
            close_client(client)
        raise


def _through_jump_hosts(target: SSHTarget, accept_new_host_key: bool, resolve_jump,
                        chain: list[str]) -> tuple[list[paramiko.SSHClient], paramiko.Channel]:
    """`ProxyJump a,b`: the target through b, and b through `ProxyJump a` whatever b's
    own config says, as OpenSSH does. Returns the hops' clients and the channel to the target."""
    *earlier, last = [hop.strip() for hop in target.proxy_jump.split(",")]
    jump = _jump_host(last, target, resolve_jump, chain)
    if earlier:
        jump.proxy_jump, jump.proxy_command = ",".join(earlier), None
    clients = _connect(jump, accept_new_host_key, resolve_jump, chain + [jump.alias])
    try:
        channel = clients[-1].get_transport().open_channel(
            "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0),
            timeout=CONNECT_TIMEOUT)
    except (paramiko.SSHException, OSError) as err:
        for client in reversed(clients):
            close_client(client)
        raise BackendError(f"the jump host {jump.describe()} could not reach "
                           f"{target.hostname}:{target.port}: {err}") from None
    return clients, channel


def _jump_host(name: str, target: SSHTarget, resolve_jump, chain: list[str]) -> SSHTarget:
    if resolve_jump is None:
        raise BackendError(f"ProxyJump {target.proxy_jump} given but cannot be resolved")
    try:
        jump = resolve_jump(name)
    except TargetError as err:
        raise BackendError(f"the ProxyJump host {name!r} of {target.describe()} cannot be "
                           f"used: {err}") from None
    if jump.alias in chain:
        raise BackendError(f"ProxyJump goes round in a loop ({' -> '.join(chain + [jump.alias])}). "
                           "Fix ProxyJump in your ssh config, e.g. keep the jump host out of a "
                           "`Host *` block that sets it.")
    return jump


def _login(target: SSHTarget, accept_new_host_key: bool, sock) -> paramiko.SSHClient:
    known = known_hosts.KnownHosts.read(target.known_hosts_files + target.global_known_hosts_files)
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(_KnownHostsPolicy(target, known, accept_new_host_key))
    try:
        client.connect(
            target.hostname, port=target.port, username=target.user, sock=sock,
            timeout=CONNECT_TIMEOUT, banner_timeout=CONNECT_TIMEOUT,
            auth_timeout=CONNECT_TIMEOUT, auth_strategy=KeyLogin(target),
            transport_factory=functools.partial(
                _transport_preferring, known.key_types(target.known_hosts_name)),
        )
    except BackendError:
        close_client(client)
        raise
    except (paramiko.SSHException, OSError, EOFError) as err:
        reason = sock.failure() if isinstance(sock, ProxyCommandSocket) else None
        close_client(client)
        kind = _PassingFailure if reason is None and _passing(err) else BackendError
        raise kind(f"could not connect to {target.describe()}: {reason or err}") from None
    return client


# Host key algorithms whose keys known_hosts lists under another type name.
_KEY_TYPE_OF_ALGORITHM = {"rsa-sha2-512": "ssh-rsa", "rsa-sha2-256": "ssh-rsa"}


def _transport_preferring(key_types: set[str], sock, **options) -> paramiko.Transport:
    """A Transport that asks first for the host key types known_hosts holds for the host,
    as OpenSSH does, so a host with several keys shows the one on file."""
    transport = paramiko.Transport(sock, **options)
    if isinstance(sock, socket.socket):  # (a jump host's channel keeps 0.1 s)
        sock.settimeout(TRANSPORT_WAKE_S)
        if sock.family in (socket.AF_INET, socket.AF_INET6):  # (a ProxyCommand's: AF_UNIX)
            # Small writes, often two in a row with no answer between (an
            # acknowledgement, then the next cell): with Nagle's algorithm the
            # second waits for the host's delayed ACK of the first, up to 40 ms.
            # OpenSSH's client sends at once for interactive sessions too.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    security = transport.get_security_options()
    known = [a for a in security.key_types if _KEY_TYPE_OF_ALGORITHM.get(a, a) in key_types]
    security.key_types = known + [a for a in security.key_types if a not in known]
    # AES-GCM first (OpenSSH offers it by default): its tag is checked inside
    # OpenSSL, where paramiko compares a MAC byte by byte in Python for every
    # packet: a large part of the fleet runner's CPU per host.
    aead = [c for c in security.ciphers if c.endswith("-gcm@openssh.com")]
    security.ciphers = aead + [c for c in security.ciphers if c not in aead]
    return transport


def close_client(client: paramiko.SSHClient) -> None:
    """Close a connection now: its socket shut down first, so that the
    transport thread's wait for bytes ends at once (and the FIN goes now,
    not when that wait would have timed out: see TRANSPORT_WAKE_S)."""
    transport = client.get_transport()
    if transport is not None and isinstance(transport.sock, socket.socket):
        try:
            transport.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # not connected (any more)
    client.close()


def _channel_request(channel: paramiko.Channel, message: paramiko.Message) -> None:
    """paramiko drops the "exit-signal" request (RFC 4254, 6.10), so a remote
    shell killed by a signal would have no exit status; record 128+signal."""
    start = message.packet.tell()
    if message.get_text() == "exit-signal":
        message.get_boolean()  # want_reply: never set for exit-signal
        name = message.get_text()
        channel.exit_signal = name
        channel.exit_status = 128 + getattr(signal, f"SIG{name}", 0)
        channel.status_event.set()
        return
    message.packet.seek(start)
    paramiko.Channel._handle_request(channel, message)


def record_exit_signals(transport: paramiko.Transport) -> None:
    # An instance attribute: only this connection's channels are affected.
    transport._channel_handler_table = {
        **paramiko.Transport._channel_handler_table,
        paramiko.common.MSG_CHANNEL_REQUEST: _channel_request,
    }


def round_trip(transport: paramiko.Transport) -> bool:
    """A request the server must answer (keepalive@openssh.com, as OpenSSH's
    ServerAliveInterval sends), waited for: False if the connection is gone.
    paramiko keeps one reply event per connection, which a request sent
    meanwhile replaces (the reply to either then ends both waits): the
    requests on a connection take turns."""
    turn = transport.__dict__.setdefault("_shell_kernel_round_trip", threading.Lock())
    with turn:
        replied = transport.global_request("keepalive@openssh.com", wait=True)
    # OpenSSH refuses the request (None), which is a reply all the same.
    return replied is not None or transport.is_active()
