"""SSH backend: bash on a remote host, over one paramiko connection.

One TCP connection and SSH handshake per shell: the shell runs in one
session channel; side commands (the reaper) run in a second, long-lived
`sh` channel, so an interrupt costs no new login and no rc files.
"""

from __future__ import annotations

import logging
import secrets
import select
import shlex
import signal
import socket
import threading
import time

import paramiko

from . import (Backend, BackendError, ExitCallback, OutputCallback, SessionGone, ShellExit,
               SideResult)
from ..shell import script
from .ssh_target import SSHTarget, ensure_file_parent

log = logging.getLogger("shell_kernel.ssh")

CONNECT_TIMEOUT = 15.0
READ_SIZE = 1 << 16
LAUNCH_SCRIPT = script("launch.sh")
RELAY_SCRIPT = script("relay.sh")
REAP_SCRIPT = script("reap.sh")  # installed on the host for the idle watchdog
RELAY_SHELL_ENDED = 4  # relay.sh's status when the shell itself has ended
# A durable session's spool files are emptied between cells once this much
# of them has been delivered, so the host keeps at most one cell's output.
SPOOL_TRIM_BYTES = 8 << 20
TRIM_SCRIPT = """d=$1
[ "$(wc -c < "$d/out")" -eq "$2" ] && [ "$(wc -c < "$d/err")" -eq "$3" ] || exit 1
: > "$d/out" && : > "$d/err" && echo trimmed"""


def fingerprint(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.fingerprint}"


class _KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """Unknown host keys are refused, or recorded when the user opted in."""

    def __init__(self, target: SSHTarget, accept_new: bool):
        self._target = target
        self._accept_new = accept_new

    def missing_host_key(self, client, hostname, key):
        target = self._target
        known = target.known_hosts_files[0]
        if not self._accept_new:
            raise BackendError(
                f"The SSH host key of {target.known_hosts_name} ({fingerprint(key)}) is not in "
                f"{', '.join(target.known_hosts_files)}, so the host cannot be verified and "
                "nothing was sent. Check the fingerprint with the host's administrator, then "
                f"either connect once with `ssh -p {target.port} {target.user}@{target.hostname}` "
                "and accept it, or reinstall this kernelspec with --accept-new-host-key to "
                "record it on first connection.")
        ensure_file_parent(known)
        with open(known, "a") as f:
            f.write(f"{target.known_hosts_name} {key.get_name()} {key.get_base64()}\n")
        log.warning("recorded new host key for %s in %s: %s", target.known_hosts_name, known,
                    fingerprint(key))


def connect(target: SSHTarget, accept_new_host_key: bool = False,
            resolve_jump=None) -> list[paramiko.SSHClient]:
    """Open an authenticated connection, through ProxyJump hosts if configured.

    Returns the clients, the last one being the target's (earlier ones
    carry its traffic and must stay open). `resolve_jump` maps a ProxyJump
    entry to an SSHTarget.
    """
    clients: list[paramiko.SSHClient] = []
    sock = None
    try:
        if target.proxy_jump:
            if resolve_jump is None:
                raise BackendError(f"ProxyJump {target.proxy_jump} given but cannot be resolved")
            jump = resolve_jump(target.proxy_jump.split(",")[-1].strip())
            clients = connect(jump, accept_new_host_key, resolve_jump)
            try:
                sock = clients[-1].get_transport().open_channel(
                    "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0),
                    timeout=CONNECT_TIMEOUT)
            except (paramiko.SSHException, OSError) as err:
                raise BackendError(f"the jump host {jump.describe()} could not reach "
                                   f"{target.hostname}:{target.port}: {err}") from err
        elif target.proxy_command:
            sock = paramiko.ProxyCommand(target.proxy_command)
        clients.append(_login(target, accept_new_host_key, sock))
        return clients
    except BaseException:
        for client in reversed(clients):
            client.close()
        raise


def _login(target: SSHTarget, accept_new_host_key: bool, sock) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    for path in target.known_hosts_files:
        try:
            client.load_host_keys(path)
        except FileNotFoundError:
            pass
        except (OSError, paramiko.SSHException) as err:
            raise BackendError(f"could not read known_hosts file {path}: {err}") from err
    client.set_missing_host_key_policy(_KnownHostsPolicy(target, accept_new_host_key))
    keys = [p for p in target.identity_files]
    try:
        client.connect(
            target.hostname, port=target.port, username=target.user,
            key_filename=keys or None, allow_agent=True,
            look_for_keys=not target.identities_only, sock=sock,
            timeout=CONNECT_TIMEOUT, banner_timeout=CONNECT_TIMEOUT,
            auth_timeout=CONNECT_TIMEOUT,
        )
    except paramiko.BadHostKeyException as err:
        client.close()
        raise BackendError(
            f"WARNING: the SSH host key of {target.known_hosts_name} has CHANGED: it is now "
            f"{fingerprint(err.key)}, but known_hosts ({', '.join(target.known_hosts_files)}) "
            f"holds {fingerprint(err.expected_key)}. This can mean someone is intercepting the "
            "connection, or that the host was reinstalled. Nothing was sent. If the change is "
            f"expected, remove the old key with `ssh-keygen -R '{target.known_hosts_name}'` "
            "and verify the new one before connecting again.") from None
    except paramiko.PasswordRequiredException:
        client.close()
        raise BackendError(
            f"The key for {target.describe()} is encrypted and no ssh-agent offered it. "
            "shell_kernel never asks for or stores passphrases: load the key into your agent "
            "with `ssh-add` (in an environment whose SSH_AUTH_SOCK Jupyter sees), or use an "
            "unencrypted key for this kernel.") from None
    except paramiko.BadAuthenticationType as err:
        client.close()
        raise BackendError(
            f"{target.describe()} does not accept key authentication (it offers: "
            f"{', '.join(err.allowed_types)}). shell_kernel never sends passwords: set up a key "
            "(ssh-copy-id) or an agent.") from None
    except paramiko.AuthenticationException as err:
        client.close()
        tried = ", ".join(target.identity_files) or "default keys"
        raise BackendError(
            f"{target.describe()} refused the keys offered ({tried} and any in ssh-agent): "
            f"{err}. If it wants a password: shell_kernel never sends passwords; set up a key "
            "(ssh-copy-id) or load one into ssh-agent.") from None
    except BackendError:
        client.close()
        raise
    except (paramiko.SSHException, OSError, EOFError) as err:
        client.close()
        raise BackendError(f"could not connect to {target.describe()}: {err}") from None
    return client


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
    after a dropped connection (see shell/launch.sh and shell/relay.sh)."""

    def __init__(self, target: SSHTarget, clean: bool = False, accept_new_host_key: bool = False,
                 resolve_jump=None, bash: str = "bash", durable: bool = False,
                 idle_timeout: float = 3600.0):
        self._target = target
        self.description = f"ssh {target.describe()}"
        self._accept_new = accept_new_host_key
        self._resolve_jump = resolve_jump
        self._bash_argv = [bash] + (["--noprofile", "--norc"] if clean else ["-l"]) + ["-i"]
        self.can_reattach = durable
        self._idle_timeout = idle_timeout
        self._clients: list[paramiko.SSHClient] = []
        self._channel: paramiko.Channel | None = None
        self._side: _SideShell | None = None
        self._side_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._closed = threading.Event()
        self._remote_pid: int | None = None
        # Bytes of each spooled stream delivered so far: where a relay resumes.
        self._offsets = {"stdout": 0, "stderr": 0}
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
                self._launch_durable()
                self._open_relay()
            else:
                channel = self.transport.open_session(timeout=CONNECT_TIMEOUT)
                channel.exec_command("exec " + shlex.join(self._bash_argv))
                self._start_reader(channel)
                # Ready before the first interrupt needs it (its login costs
                # as much as the user's rc files do).
                threading.Thread(target=self._open_side_quietly, daemon=True,
                                 name="shell-kernel-ssh-side").start()
        except (paramiko.SSHException, OSError) as err:
            self.close()
            raise BackendError(f"could not start bash on {self._target.describe()}: {err}") from err

    def _connect(self) -> None:
        self._clients = connect(self._target, self._accept_new, self._resolve_jump)
        _record_exit_signals(self.transport)
        self._side = None
        threading.Thread(target=self._keepalive_loop, args=(self.transport,),
                         name="shell-kernel-ssh-keepalive", daemon=True).start()

    def _launch_durable(self) -> None:
        result = self.side_command(LAUNCH_SCRIPT, [str(int(self._idle_timeout)), REAP_SCRIPT,
                                                   *self._bash_argv], timeout=CONNECT_TIMEOUT)
        fields = result.stdout.split()
        if result.status != 0 or len(fields) < 2 or not fields[-1].isdigit():
            raise BackendError(f"could not start a durable shell: {result.stdout.strip()}")
        self.preset_state_dir, self._remote_pid = fields[-2], int(fields[-1])

    def _open_relay(self) -> None:
        channel = self.transport.open_session(timeout=CONNECT_TIMEOUT)
        channel.exec_command("sh -c " + shlex.quote(RELAY_SCRIPT) + " shell_kernel " + shlex.join(
            [self.preset_state_dir, str(self._remote_pid),
             str(self._offsets["stdout"]), str(self._offsets["stderr"])]))
        self._start_reader(channel)

    def _start_reader(self, channel: paramiko.Channel) -> None:
        self._channel = channel
        threading.Thread(target=self._read_loop, args=(channel, self.transport),
                         name="shell-kernel-ssh-reader", daemon=True).start()

    def reattach(self) -> None:
        self._drop_connection()
        self._connect()
        try:
            alive = self.side_command(
                'd=$1; [ -p "$d/in" ] && kill -0 "$2" 2>/dev/null && echo alive',
                [self.preset_state_dir, str(self._remote_pid)], timeout=CONNECT_TIMEOUT)
            if alive.stdout.strip() != "alive":
                raise SessionGone(f"the session (pid {self._remote_pid}) and its files "
                                  f"({self.preset_state_dir}) are gone from {self._target.describe()}")
            self._open_relay()
        except (paramiko.SSHException, OSError) as err:
            raise BackendError(f"could not reattach: {err}") from err

    def before_cell(self) -> None:
        offsets = self._offsets
        if not self.can_reattach or offsets["stdout"] + offsets["stderr"] < SPOOL_TRIM_BYTES:
            return
        # Only when everything spooled has been delivered (the sizes match),
        # so no byte is lost. A new relay then reads the files from the start
        # (rather than trusting tail -f to notice the truncation).
        result = self.side_command(TRIM_SCRIPT, [self.preset_state_dir, str(offsets["stdout"]),
                                                 str(offsets["stderr"])])
        if result.stdout.strip() == "trimmed":
            old_relay, self._channel = self._channel, None  # its reader ends silently
            if old_relay is not None:
                old_relay.close()
            self._offsets = {"stdout": 0, "stderr": 0}
            try:
                self._open_relay()
            except (paramiko.SSHException, OSError) as err:
                raise BackendError(f"could not reopen the relay: {err}") from err

    def _deliver(self, stream: str, data: bytes) -> None:
        self._offsets[stream] += len(data)
        self._on_output(stream, data)

    def _read_loop(self, channel: paramiko.Channel, transport: paramiko.Transport) -> None:
        while True:
            got = False
            if channel.recv_ready():
                data = channel.recv(READ_SIZE)
                if data:
                    self._deliver("stdout", data)
                    got = True
            if channel.recv_stderr_ready():
                data = channel.recv_stderr(READ_SIZE)
                if data:
                    self._deliver("stderr", data)
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
        self._on_exit(self._how_it_ended(channel))

    def _how_it_ended(self, channel: paramiko.Channel) -> ShellExit:
        # paramiko reports -1 when the channel closed without an exit status.
        status = channel.exit_status if channel.exit_status_ready() else -1
        signame = getattr(channel, "exit_signal", None)
        if self._closed.is_set():
            return ShellExit("closed by the kernel")
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
            result = self.side_command('cat "$1/exit_status" 2>/dev/null', [self.preset_state_dir])
        except BackendError:
            return None
        text = result.stdout.strip()
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
        channel = self._channel
        if channel is None or channel.closed:
            raise BackendError("the shell is not running")
        with self._send_lock:
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

    def _drop_connection(self) -> None:
        if self._side is not None:
            self._side.close()
            self._side = None
        channel, self._channel = self._channel, None  # its reader then ends silently
        if channel is not None:
            channel.close()
        for client in reversed(self._clients):
            client.close()
        self._clients = []

    def close(self) -> None:
        self._closed.set()
        self._drop_connection()


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
        command = (f"sh -c {shlex.quote(script)} shell_kernel {shlex.join(args)} "
                   f"</dev/null 2>&1; printf '\\n{marker} %s\\n' $?\n")
        end = f"\n{marker} ".encode()
        with self._lock:
            try:
                self._channel.sendall(command.encode())
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
        return SideResult(int(status.strip() or 1), body.decode(errors="replace"), "")

    def close(self) -> None:
        self._channel.close()
