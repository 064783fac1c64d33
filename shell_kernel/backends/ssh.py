"""SSH backend: bash on a remote host, over one paramiko connection.

One TCP connection and SSH handshake per shell: the shell runs in one
session channel; side commands (the reaper) run in a second, long-lived
`sh` channel, so an interrupt costs no new login and no rc files.
"""

from __future__ import annotations

import functools
import logging
import secrets
import select
import shlex
import signal
import socket
import threading
import time
from typing import Callable

import paramiko

from . import (Backend, BackendError, ExitCallback, OutputCallback, SessionGone, SessionTaken,
               ShellExit, SideResult, Terminal, describe_error, start_reader)
from .. import named_sessions
from ..shell import host_words, script
from . import known_hosts
from .proxy_command import ProxyCommandSocket
from .ssh_terminal import SSHTerminal
from .ssh_auth import KeyLogin
from .ssh_target import SSHTarget, TargetError

log = logging.getLogger("shell_kernel.ssh")

CONNECT_TIMEOUT = 15.0
READ_SIZE = 1 << 16
LAUNCH_SCRIPT = script("launch.sh")
RELAY_SCRIPT = script("relay.sh")
FETCH_SCRIPT = script("fetch.sh")
SPOOL_SCRIPT = script("spool.sh")
REAP_SCRIPT = script("reap.sh")  # installed on the host for the idle watchdog
# relay.sh's statuses (it is given them): the shell itself has ended; output
# it was to send was dropped meanwhile, so a new relay must resume after the gap.
RELAY_SHELL_ENDED = 4
RELAY_RESTART = 5
RELAY_TAKEN = 6  # a named session's: another kernel took it over
# A durable session spools each stream in files of about this size (see
# spool.sh); the kernel has the host delete those it has received.
SPOOL_GENERATION_BYTES = 4 << 20
# While output arrives, the kernel tells the host at least this often (in
# seconds) that it is reading, and has the received spool files deleted. (A
# named session's kernel does so before it shows output: see acknowledge.)
SPOOL_ACK_INTERVAL = 1.0
# How long a named session's kernel waits for the host to record what it is
# about to show; past it, the output is shown anyway (and may be shown again).
ACK_TIMEOUT = 5.0
# Once no kernel has said so for this long (it is away, or a laptop asleep
# holds up the relay), the host keeps only the newest SPOOL_KEEP_BYTES of each
# stream. A kernel that is reading, however slowly, loses nothing.
SPOOL_STALL_SECONDS = 3
SPOOL_KEEP_BYTES = 16 << 20


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
            client.close()
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
            client.close()
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
        client.close()
        raise
    except (paramiko.SSHException, OSError, EOFError) as err:
        reason = sock.failure() if isinstance(sock, ProxyCommandSocket) else None
        client.close()
        raise BackendError(f"could not connect to {target.describe()}: {reason or err}") from None
    return client


# Host key algorithms whose keys known_hosts lists under another type name.
_KEY_TYPE_OF_ALGORITHM = {"rsa-sha2-512": "ssh-rsa", "rsa-sha2-256": "ssh-rsa"}


def _transport_preferring(key_types: set[str], sock, **options) -> paramiko.Transport:
    """A Transport that asks first for the host key types known_hosts holds for the host,
    as OpenSSH does, so a host with several keys shows the one on file."""
    transport = paramiko.Transport(sock, **options)
    security = transport.get_security_options()
    known = [a for a in security.key_types if _KEY_TYPE_OF_ALGORITHM.get(a, a) in key_types]
    security.key_types = known + [a for a in security.key_types if a not in known]
    # AES-GCM first (OpenSSH offers it by default): its tag is checked inside
    # OpenSSL, where paramiko compares a MAC byte by byte in Python for every
    # packet: a large part of the fleet runner's CPU per host.
    aead = [c for c in security.ciphers if c.endswith("-gcm@openssh.com")]
    security.ciphers = aead + [c for c in security.ciphers if c not in aead]
    return transport


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


def _record_exit_signals(transport: paramiko.Transport) -> None:
    # An instance attribute: only this connection's channels are affected.
    transport._channel_handler_table = {
        **paramiko.Transport._channel_handler_table,
        paramiko.common.MSG_CHANNEL_REQUEST: _channel_request,
    }


class SSHBackend(Backend):
    """The shell in one session channel (ephemeral), or, when durable, a
    detached shell on the host with a relay channel that can be re-opened
    after a dropped connection (see shell/launch.sh, relay.sh and spool.sh).
    A durable session may be named (session): it then outlives the kernel,
    and start() attaches to it when it exists (see named_sessions)."""

    # The shell's output crosses the connection (and, durable, the spool)
    # apart from the prompt terminal's reports.
    output_lag = 0.15

    def __init__(self, target: SSHTarget, clean: bool = False, accept_new_host_key: bool = False,
                 resolve_jump=None, bash: str = "bash", durable: bool = False,
                 idle_timeout: float = 3600.0, session: str | None = None,
                 take_over: bool = False, side_channel_early: bool = True):
        self._target = target
        self.description = f"ssh {target.describe()}"
        self._accept_new = accept_new_host_key
        self._resolve_jump = resolve_jump
        self._bash_argv = [bash] + (["--noprofile", "--norc"] if clean else ["-l"]) + ["-i"]
        self.can_reattach = durable
        self._idle_timeout = idle_timeout
        self._session_name = session
        self._take_over = take_over
        # An ephemeral shell's side channel opened at start, ready for the first
        # interrupt; else when first needed (the fleet: a channel less per host).
        self._side_channel_early = side_channel_early
        # This kernel's claim on a named session (see launch.sh open).
        self._owner = secrets.token_hex(8) if session else ""
        self.outlives_kernel = session is not None
        self._clients: list[paramiko.SSHClient] = []
        self._channel: paramiko.Channel | None = None
        self._side: _SideShell | None = None
        self._side_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._closed = threading.Event()
        self._remote_pid: int | None = None
        # Bytes of each spooled stream delivered so far: where a relay resumes.
        self._offsets = {"stdout": 0, "stderr": 0}
        # Held while output is delivered and while the channel it may come
        # from is replaced: a replaced relay's last bytes are never counted.
        self._output_lock = threading.Lock()
        self._next_ack = 0.0  # when the next _drop_received may run
        self._ack_pending = False  # one is scheduled
        self._on_output: OutputCallback | None = None
        self._on_exit: ExitCallback | None = None

    @property
    def transport(self) -> paramiko.Transport:
        transport = self._clients[-1].get_transport() if self._clients else None
        if transport is None:
            raise BackendError(f"not connected to {self._target.describe()}")
        return transport

    def start(self, on_output: OutputCallback, on_exit: ExitCallback) -> None:
        self._on_output, self._on_exit = on_output, on_exit
        self._connect()
        try:
            if self.can_reattach:
                if self._session_name:
                    self._open_named()
                else:
                    self._launch_durable()
                if self.attached is None:
                    self._open_relay()
            else:
                channel = self.transport.open_session(timeout=CONNECT_TIMEOUT)
                channel.exec_command("exec " + shlex.join([*host_words(), *self._bash_argv]))
                self._start_reader(channel)
                if self._side_channel_early:
                    # Ready before the first interrupt needs it (its login costs
                    # as much as the user's rc files do).
                    threading.Thread(target=self._open_side_quietly, daemon=True,
                                     name="shell-kernel-ssh-side").start()
        except (paramiko.SSHException, OSError) as err:
            self.close()
            raise BackendError(f"could not start bash on {self._target.describe()}: {err}") from err

    def open_terminal(self, script: str, args: list[str],
                      on_output: Callable[[bytes], None]) -> Terminal:
        return SSHTerminal(self.transport, [*host_words(), self._bash_argv[0], "-c", script,
                                            "shell_kernel", *args],
                           on_output, CONNECT_TIMEOUT)

    def open_connection(self) -> None:
        self._connect()

    def _connect(self) -> None:
        self._clients = connect(self._target, self._accept_new, self._resolve_jump)
        _record_exit_signals(self.transport)
        self._side = None
        threading.Thread(target=self._keepalive_loop, args=(self.transport,),
                         name="shell-kernel-ssh-keepalive", daemon=True).start()

    def _launch_arguments(self) -> list[str]:
        return [str(int(self._idle_timeout)), str(SPOOL_GENERATION_BYTES), str(SPOOL_KEEP_BYTES),
                str(SPOOL_STALL_SECONDS), REAP_SCRIPT, SPOOL_SCRIPT, *self._bash_argv]

    def _launch_durable(self) -> None:
        result = self.side_command(LAUNCH_SCRIPT, ["start", *self._launch_arguments()],
                                   timeout=CONNECT_TIMEOUT)
        # "PID DIR": DIR (under the host's TMPDIR) may hold spaces.
        pid, _, state_dir = _last_line(result.stdout).partition(" ")
        if result.status != 0 or not pid.isdigit() or not state_dir:
            raise BackendError(f"could not start a durable shell: {result.stdout.strip()}")
        self.preset_state_dir, self._remote_pid = state_dir, int(pid)

    def _open_named(self) -> None:
        """Attach to the named session, or start it (see launch.sh open)."""
        where = self._target.describe()
        for _ in range(2):
            result = self.side_command(LAUNCH_SCRIPT, [
                "open", self._session_name, self._owner, "yes" if self._take_over else "no",
                *self._launch_arguments()], timeout=CONNECT_TIMEOUT + 10)
            opened = named_sessions.parse_open(result.stdout, self._session_name, where)
            if not opened.unusable:
                break
            # Its setup never finished (the kernel that started it failed to): replace it.
            log.info("replacing the unusable session in %s", opened.state_dir)
            self.side_command(LAUNCH_SCRIPT, ["stop", opened.state_dir], timeout=CONNECT_TIMEOUT)
        else:
            raise BackendError(f"the session {self._session_name} on {where} could not be set up")
        if opened.previous:
            self.start_notice = named_sessions.ended_message(self._session_name, where,
                                                             opened.previous)
        self.preset_state_dir, self._remote_pid = opened.state_dir, opened.pid
        self.attached = opened.attached
        if opened.attached is not None:
            self._offsets = dict(opened.delivered)

    def open_output(self) -> None:
        try:
            self._open_relay()
        except (paramiko.SSHException, OSError) as err:
            raise BackendError(f"could not open the session's output: {err}") from err

    def _open_relay(self) -> None:
        headers = _RelayHeaders()
        channel = self.transport.open_session(timeout=CONNECT_TIMEOUT)
        owner = [self._owner, str(RELAY_TAKEN)] if self._owner else []
        channel.exec_command(_command("sh", "-c", RELAY_SCRIPT, "shell_kernel", self.preset_state_dir,
                                      str(self._remote_pid), headers.marker,
                                      str(self._offsets["stdout"]), str(self._offsets["stderr"]),
                                      str(RELAY_SHELL_ENDED), str(RELAY_RESTART), *owner))
        self._start_reader(channel, headers)

    def _start_reader(self, channel: paramiko.Channel, headers: _RelayHeaders | None = None) -> None:
        with self._output_lock:
            self._channel = channel
        transport = self.transport
        start_reader("shell-kernel-ssh-reader", lambda: self._read_loop(channel, transport, headers),
                     lambda err: self._reader_failed(channel, err))

    def _reader_failed(self, channel: paramiko.Channel, err: Exception) -> None:
        """A reader that crashed is a lost connection: a durable session
        reattaches to the same shell; an ephemeral one is gone with it."""
        if channel is not self._channel or self._closed.is_set():
            return  # a relay already replaced, or closing: not the shell's end
        self._channel = None
        channel.close()
        self._on_exit(ShellExit(f"reading the shell's output failed ({describe_error(err)})",
                                connection_lost=True))

    def reattach(self) -> None:
        self._drop_connection()
        self._connect()
        try:
            alive = self.side_command(LAUNCH_SCRIPT, [
                "alive", self.preset_state_dir, str(self._remote_pid),
                *([self._owner] if self._owner else [])], timeout=CONNECT_TIMEOUT)
            answer = _last_line(alive.stdout)
            if answer.startswith("taken "):
                raise SessionTaken(named_sessions.taken_message(
                    self._session_name, self._target.describe(), answer.partition(" ")[2]))
            if answer != "alive":
                raise SessionGone(f"the session (pid {self._remote_pid}) and its files "
                                  f"({self.preset_state_dir}) are gone from {self._target.describe()}")
            self._open_relay()
        except (paramiko.SSHException, OSError) as err:
            raise BackendError(f"could not reattach: {err}") from err

    def _deliver(self, channel: paramiko.Channel, headers: _RelayHeaders | None, stream: str,
                 data: bytes) -> None:
        with self._output_lock:
            if channel is not self._channel:
                return  # a relay replaced meanwhile: the new one resumes from the offsets
            if headers is not None:
                start, data = headers.feed(stream, data)
                if start is not None:
                    self._resume(stream, start)
            if data:
                self._offsets[stream] += len(data)
                self._on_output(stream, data)
            if self.can_reattach and not self._owner and data and not self._ack_pending:
                # At most one a SPOOL_ACK_INTERVAL, and one after the last output.
                self._ack_pending = True
                delay = max(0.0, self._next_ack - time.monotonic())
                timer = threading.Timer(delay, self._drop_received)
                timer.name, timer.daemon = "shell-kernel-ssh-spool", True
                timer.start()

    def _resume(self, stream: str, start: int) -> None:
        """A relay's output of `stream` begins at offset `start`: later than
        delivered when the host dropped output the kernel had not received."""
        dropped = start - self._offsets[stream]
        if dropped < 0:
            log.warning("the relay resumed %s at %d, before %d", stream, start,
                        self._offsets[stream])
            return
        self._offsets[stream] = start
        if dropped:
            self._on_output("stderr", (
                f"\n[shell_kernel] {dropped:,} bytes of {stream} were dropped on "
                f"{self._target.describe()} before this kernel could receive them: a durable "
                f"session keeps the newest {SPOOL_KEEP_BYTES >> 20} MB of each stream while no "
                "kernel reads it. The output goes on after the gap; to keep all of it, send long "
                "outputs to a file.\n").encode())

    def _drop_received(self) -> None:
        """Has the host delete the spool files this kernel has received in full,
        which also tells the host that this kernel is reading (see spool.sh)."""
        with self._output_lock:
            self._ack_pending = False
            self._next_ack = time.monotonic() + SPOOL_ACK_INTERVAL
            offsets = (self._offsets["stdout"], self._offsets["stderr"])
        try:
            self._drop(offsets)
        except BackendError as err:
            log.info("could not drop the received spool files: %s", err)

    def received(self) -> tuple[int, int] | None:
        """A named session's stream offsets delivered so far (see _deliver)."""
        return (self._offsets["stdout"], self._offsets["stderr"]) if self._owner else None

    def acknowledge(self, received: object) -> None:
        """A named session's: the host records where the next kernel resumes
        (spool.sh drop writes `delivered`, if this kernel still owns it)."""
        if self._owner:
            self._drop(received)

    def _drop(self, offsets) -> None:
        state = self.preset_state_dir
        self.side_command(SPOOL_SCRIPT, [
            "drop", f"{state}/out", str(offsets[0]), f"{state}/err", str(offsets[1]),
            *([self._owner] if self._owner else [])], timeout=ACK_TIMEOUT)

    def _read_loop(self, channel: paramiko.Channel, transport: paramiko.Transport,
                   headers: _RelayHeaders | None) -> None:
        while True:
            got = False
            if channel.recv_ready():
                data = channel.recv(READ_SIZE)
                if data:
                    self._deliver(channel, headers, "stdout", data)
                    got = True
            if channel.recv_stderr_ready():
                data = channel.recv_stderr(READ_SIZE)
                if data:
                    self._deliver(channel, headers, "stderr", data)
                    got = True
            if got:
                continue
            if channel.exit_status_ready() or channel.closed or not transport.is_active():
                if channel.recv_ready() or channel.recv_stderr_ready():
                    continue
                break
            select.select([channel], [], [], 0.5)
        if channel is not self._channel:
            return  # a relay replaced by reattach()
        if self.can_reattach and not self._closed.is_set() and channel.exit_status_ready() \
                and channel.exit_status == RELAY_RESTART:
            self._restart_relay(channel)
            return
        self._on_exit(self._how_it_ended(channel))

    def _restart_relay(self, old: paramiko.Channel) -> None:
        """A new relay, from the offsets delivered so far, for one that lagged
        so far behind that the host dropped output it was to send."""
        try:
            with self._send_lock:  # a cell sent meanwhile goes to the new relay
                self._open_relay()
        except (paramiko.SSHException, OSError, BackendError) as err:
            log.info("could not reopen the relay: %s", err)
            self._on_exit(ShellExit(f"the SSH connection to {self._target.describe()} was lost",
                                    connection_lost=True))
        finally:
            old.close()

    def _how_it_ended(self, channel: paramiko.Channel) -> ShellExit:
        # paramiko reports -1 when the channel closed without an exit status.
        status = channel.exit_status if channel.exit_status_ready() else -1
        signame = getattr(channel, "exit_signal", None)
        if self._closed.is_set():
            return ShellExit("closed by the kernel")
        if self.can_reattach and self._owner and status == RELAY_TAKEN:
            return ShellExit(f"the session {self._session_name} was taken over by another "
                             "kernel", connection_lost=True)
        if self.can_reattach and status == RELAY_SHELL_ENDED:
            status = self._durable_exit_status()
            return ShellExit(f"exited with status {status}" if status is not None else "ended",
                             status)
        if signame:
            return ShellExit(f"killed by SIG{signame}", status)
        if status >= 0 and not self.can_reattach:
            return ShellExit(f"exited with status {status}", status)
        return ShellExit(f"the SSH connection to {self._target.describe()} was lost",
                         connection_lost=True)

    def _durable_exit_status(self) -> int | None:
        try:
            result = self.side_command(LAUNCH_SCRIPT, ["status", self.preset_state_dir])
        except BackendError:
            return None
        text = _last_line(result.stdout)
        return int(text) if text.isdigit() else None

    def _keepalive_loop(self, transport: paramiko.Transport) -> None:
        """ServerAlive semantics: a connection whose server stops answering
        for interval x count-max seconds is closed, so a running cell ends."""
        interval = self._target.keepalive_interval
        limit = interval * self._target.keepalive_count_max
        answered = [time.monotonic()]

        def ping(transport):
            if transport.global_request("keepalive@openssh.com", wait=True) is not None or \
                    transport.is_active():
                answered[0] = time.monotonic()

        while not self._closed.wait(interval):
            if not transport.is_active():
                return
            threading.Thread(target=ping, args=(transport,), daemon=True).start()
            if time.monotonic() - answered[0] > limit + interval:
                log.warning("no answer from %s for %.0f s: closing", self._target.describe(), limit)
                transport.close()
                return

    def send(self, data: bytes) -> None:
        with self._send_lock:
            channel = self._channel
            if channel is None or channel.closed:
                raise BackendError("the shell is not running")
            try:
                channel.sendall(data)
            except (OSError, paramiko.SSHException) as err:
                raise BackendError(f"the SSH connection is gone: {err}") from err

    def _side_shell(self) -> _SideShell:
        with self._side_lock:
            if self._side is None or not self._side.alive:
                try:
                    self._side = _SideShell(self.transport)
                except (paramiko.SSHException, OSError) as err:
                    raise BackendError(f"could not open a side channel: {err}") from err
            return self._side

    def _open_side_quietly(self) -> None:
        try:
            self._side_shell()
        except BackendError as err:
            log.info("side channel not opened in advance: %s", err)

    def side_command(self, script: str, args: list[str], timeout: float = 10.0) -> SideResult:
        return self._side_shell().run(script, args, timeout)

    def fetch(self, path: str) -> bytes:
        result = self.side_command(FETCH_SCRIPT, [path], timeout=30)
        if result.status != 0:
            raise BackendError(f"could not read {path} on {self._target.describe()}: "
                               f"{result.stdout.strip()}")
        # The side shell's text keeps every byte as a surrogate escape.
        return result.stdout.encode("utf-8", "surrogateescape")

    def sweep(self) -> None:
        try:
            self.side_command(LAUNCH_SCRIPT, ["sweep"], timeout=CONNECT_TIMEOUT)
        except BackendError as err:
            log.info("could not look for state directories left on %s: %s",
                     self._target.describe(), err)

    def _drop_connection(self) -> None:
        if self._side is not None:
            self._side.close()
            self._side = None
        with self._output_lock:
            channel, self._channel = self._channel, None  # its reader then ends silently
        if channel is not None:
            channel.close()
        for client in reversed(self._clients):
            client.close()
        self._clients = []

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            if not self.outlives_kernel:
                self._stop_launched_session()
        self._drop_connection()

    def _stop_launched_session(self) -> None:
        """A durable session goes with the backend that launched it: after a
        start that failed once the shell was launched, nothing is left waiting
        for the idle timeout. (At shutdown the session has reaped it already.)"""
        if not self.can_reattach or self.preset_state_dir is None:
            return
        try:
            if not self.transport.is_active():
                return  # out of reach: the watchdog will stop it
            self.side_command(LAUNCH_SCRIPT, ["stop", self.preset_state_dir], timeout=5.0)
        except BackendError as err:
            log.info("could not stop the durable session in %s: %s", self.preset_state_dir, err)


class _SideShell:
    """A remote `sh` on its own channel that runs short scripts on request."""

    def __init__(self, transport: paramiko.Transport):
        self._channel = transport.open_session(timeout=CONNECT_TIMEOUT)
        self._channel.exec_command("exec sh")
        self._lock = threading.Lock()
        # Whatever the login shell's rc files print arrives before this answer.
        self.run("true", [], CONNECT_TIMEOUT)

    @property
    def alive(self) -> bool:
        return not self._channel.closed

    def run(self, script: str, args: list[str], timeout: float) -> SideResult:
        marker = secrets.token_hex(8)
        command = (_command("sh", "-c", script, "shell_kernel", *args)
                   + f" </dev/null 2>&1; printf '\\n{marker} %s\\n' $?\n".encode())
        end = f"\n{marker} ".encode()
        with self._lock:
            try:
                self._channel.sendall(command)
                out = b""
                deadline = time.monotonic() + timeout
                while end not in out or not out.endswith(b"\n"):
                    if self._channel.closed or time.monotonic() > deadline:
                        raise BackendError("the side command did not finish")
                    if self._channel.recv_ready():
                        out += self._channel.recv(READ_SIZE)
                    else:
                        select.select([self._channel], [], [], 0.2)
            except (OSError, paramiko.SSHException, socket.timeout) as err:
                raise BackendError(f"side command failed: {err}") from err
        body, _, status = out.rpartition(end)
        return SideResult(int(status.strip() or 1), body.decode(errors="surrogateescape"), "")

    def close(self) -> None:
        self._channel.close()


class _RelayHeaders:
    """relay.sh puts a header line "MARKER:START" before each stream. What
    comes before it on the channel was printed by the login shell's startup
    files (an echo in .bashrc, a setlocale warning), never by the session;
    START is the stream offset of the bytes that follow it."""

    def __init__(self):
        self.marker = secrets.token_hex(8)
        self._tag = self.marker.encode() + b":"
        self._waiting = {"stdout": b"", "stderr": b""}  # streams before their header

    def feed(self, stream: str, data: bytes) -> tuple[int | None, bytes]:
        """(START, the session's bytes in data) when data completes the
        stream's header, else (None, the session's bytes in data)."""
        if stream not in self._waiting:
            return None, data
        seen = self._waiting[stream] + data
        at = seen.find(self._tag)
        end = seen.find(b"\n", at) if at >= 0 else -1
        if end < 0:
            # Keep only what may be the start of the header.
            self._waiting[stream] = seen[at:] if at >= 0 else seen[-len(self._tag):]
            return None, b""
        del self._waiting[stream]
        if at:
            log.debug("startup noise on the relay's %s: %r", stream, seen[:at])
        start = seen[at + len(self._tag):end]
        return int(start) if start.isdigit() else None, seen[end + 1:]


def _command(*words: str) -> bytes:
    """A command line for the remote shell; words may hold any byte (str
    with surrogate escapes, like the host's paths read back from it)."""
    return shlex.join([*host_words(), *words]).encode("utf-8", "surrogateescape")


def _last_line(text: str) -> str:
    """The line a side command answers with: the last (anything before it
    was not asked for, e.g. output of a job the login shell left behind)."""
    lines = text.strip("\n").rsplit("\n", 1)
    return lines[-1]
