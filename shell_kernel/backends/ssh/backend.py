"""SSH backend: bash on a remote host, over one paramiko connection.

One TCP connection and SSH handshake per shell (connect.py): the shell
runs in one session channel, or, durable, in a detached shell reached through
a relay channel (channel/durable.py); side commands (the reaper) run in a second,
long-lived `sh` channel, so an interrupt costs no new login and no rc files.

Threads: the verbs as Backend says; a keepalive thread per connection (and
a short one per ping); the shell's reader thread reads its channel.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Callable

import paramiko

from .. import (BackendError, Capabilities, ExitCallback, OutputCallback, Started, Terminal,
                bash_argv)
from ..channel.backend import ChannelBackend
from ..channel.shell import DirectShell
from ..channel.channels import ChannelExit, NothingSent, SideShell
from ..channel.durable import DurableShell
from .connect import CONNECT_TIMEOUT, close_client, connect, record_exit_signals, round_trip
from .target import SSHTarget
from ...shell import host_words
from .terminal import SSHTerminal

__all__ = ["SSHBackend", "connect", "CONNECT_TIMEOUT"]

log = logging.getLogger("shell_kernel.ssh")

READ_SIZE = 1 << 16
#: How long a read waits before it looks at the channel again by itself: a
#: safety net only, as paramiko sets the event it waits on for data, the end
#: of output, the exit status and the close (and for a lost connection, which
#: closes its channels). Each look wakes an idle session's reader.
READ_WAKE_S = 5.0


class SSHChannel:
    """A paramiko session channel running a command, as a channels.Channel."""

    def __init__(self, transport: paramiko.Transport, command: bytes):
        try:
            self._channel = transport.open_session(timeout=CONNECT_TIMEOUT)
            self._channel.exec_command(command)
        except paramiko.SSHException as err:
            raise OSError(str(err)) from err
        self._transport = transport
        # The order the streams' data came in, as [stream, bytes] runs, noted
        # as paramiko's thread fills each stream's buffer (it keeps no
        # interleaving): read() takes the oldest first, so a reader that comes
        # late finds both full and still gives them as they were printed.
        self._arrivals: collections.deque = collections.deque()
        channel = self._channel
        for stream, buffer in (("stdout", channel.in_buffer), ("stderr", channel.in_stderr_buffer)):
            buffer.feed = self._noting(stream, buffer.feed)
        self._streams = {"stdout": (channel.recv_ready, channel.recv),
                         "stderr": (channel.recv_stderr_ready, channel.recv_stderr)}
        # One event for both streams, which paramiko sets as data (or the end)
        # comes and clears as a stream is read empty; read() looks at both
        # streams before it waits. (select on the channel would need
        # Channel.fileno's OS pipe: two descriptors per channel, and a write
        # and a read of it per packet.)
        self._arrived = threading.Event()
        self._channel.in_buffer.set_event(self._arrived)
        self._channel.in_stderr_buffer.set_event(self._arrived)

    @property
    def closed(self) -> bool:
        # A connection found dead (a laptop that slept) closes its channels
        # only a moment later: nothing can be sent on them already.
        return self._channel.closed or not self._transport.is_active()

    def _noting(self, stream: str, feed: Callable[[bytes], None]) -> Callable[[bytes], None]:
        arrivals = self._arrivals

        def noted(data: bytes) -> None:  # paramiko's thread
            feed(data)
            arrivals.append([stream, len(data)])  # after: a run noted is in its buffer
        return noted

    def _next(self) -> tuple[str, bytes] | None:
        """The oldest data waiting, up to READ_SIZE bytes of one stream."""
        arrivals, streams = self._arrivals, self._streams
        while arrivals:
            run = arrivals[0]
            ready, recv = streams[run[0]]
            data = recv(min(READ_SIZE, run[1])) if ready() else b""
            run[1] -= len(data)
            if run[1] <= 0 or not data:  # (no data: an earlier read took more than its run)
                arrivals.popleft()
            if data:
                return run[0], data
        # Data fed but not yet noted (the moment between the two), or none.
        for stream, (ready, recv) in streams.items():
            if ready() and (data := recv(READ_SIZE)):
                return stream, data
        return None

    def read(self, timeout: float | None = None) -> tuple[str, bytes] | None:
        channel = self._channel
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if (chunk := self._next()) is not None:
                return chunk
            if channel.exit_status_ready() or channel.closed or not self._transport.is_active():
                if channel.recv_ready() or channel.recv_stderr_ready():
                    continue
                return None
            wait = READ_WAKE_S
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    raise TimeoutError("nothing to read")
            if channel.eof_received:
                # No more data can come, only the exit status or the close,
                # which set status_event. (The streams' event stays set from
                # the EOF on: waiting on it would return at once, over and
                # over, until they come.)
                channel.status_event.wait(wait)
            else:
                self._arrived.wait(wait)

    def send(self, data: bytes) -> None:
        sent = 0  # bytes in packets written whole (a packet that fails is not read there)
        try:
            while sent < len(data):
                written = self._channel.send(data[sent:])
                if not written:  # paramiko's word for a channel closed meanwhile
                    raise OSError("the channel is closed")
                sent += written
        # EOFError: the connection closed; OSError: the channel did.
        except (paramiko.SSHException, EOFError, OSError) as err:
            message = str(err) or "the connection closed"
            raise (OSError if sent else NothingSent)(message) from err

    def exit(self) -> ChannelExit:
        # paramiko reports -1 when the channel closed without an exit status.
        status = self._channel.exit_status if self._channel.exit_status_ready() else -1
        # exit_signal: set by connect.record_exit_signals.
        return ChannelExit(status, getattr(self._channel, "exit_signal", None))

    def close(self) -> None:
        self._channel.close()


class SSHChannels:
    """The connection's channels (channels.Channels); clients set by SSHBackend."""

    link = "the SSH connection"
    reader_name = "shell-kernel-ssh-reader"

    def __init__(self, target: SSHTarget):
        self.where = target.describe()
        self.clients: list[paramiko.SSHClient] = []

    @property
    def transport(self) -> paramiko.Transport:
        transport = self.clients[-1].get_transport() if self.clients else None
        if transport is None:
            raise BackendError(f"not connected to {self.where}")
        return transport

    def open(self, command: bytes) -> SSHChannel:
        return SSHChannel(self.transport, command)

    def is_active(self) -> bool:
        try:
            return self.transport.is_active()
        except BackendError:
            return False


class SSHBackend(ChannelBackend):
    """The shell in one session channel (ephemeral), or, when durable, a
    detached shell on the host with a relay channel that can be re-opened
    after a dropped connection (see channel/durable.py).
    A durable session may be named (session): it then outlives the kernel,
    and start() attaches to it when it exists (see named_sessions)."""

    def __init__(self, target: SSHTarget, clean: bool = False, accept_new_host_key: bool = False,
                 resolve_jump=None, bash: str = "bash", durable: bool = False,
                 idle_timeout: float = 3600.0, session: str | None = None,
                 take_over: bool = False, side_channel_early: bool = True,
                 completion: bool = True):
        self._target = target
        # The shell's output crosses the connection (and, durable, the spool)
        # apart from the prompt terminal's reports.
        self.capabilities = Capabilities(description=f"ssh {target.describe()}",
                                         can_reattach=durable, output_lag=0.15,
                                         outlives_kernel=session is not None)
        self._accept_new = accept_new_host_key
        self._resolve_jump = resolve_jump
        self._bash_argv = bash_argv(bash, clean, completion)
        # An ephemeral shell's side channel opened at start, ready for the first
        # interrupt; else when first needed (the fleet: a channel less per host).
        self._side_channel_early = side_channel_early and not durable
        self._closed = threading.Event()
        channels = SSHChannels(target)
        side = SideShell(channels.open, CONNECT_TIMEOUT)
        shell = (DurableShell(channels, side, self._bash_argv, idle_timeout, session, take_over)
                 if durable else DirectShell(channels, self._bash_argv))
        super().__init__(channels, shell, side)

    @property
    def transport(self) -> paramiko.Transport:
        return self._channels.transport

    def start(self, on_output: OutputCallback, on_exit: ExitCallback) -> Started:
        started = super().start(on_output, on_exit)
        if self._side_channel_early:
            # Ready before the first interrupt needs it (its login costs
            # as much as the user's rc files do).
            threading.Thread(target=self._open_side_quietly, daemon=True,
                             name="shell-kernel-ssh-side").start()
        return started

    def _open_side_quietly(self) -> None:
        try:
            self._side.open()
        except BackendError as err:
            log.info("side channel not opened in advance: %s", err)

    def open_terminal(self, script: str, args: list[str],
                      on_output: Callable[[bytes], None]) -> Terminal:
        return SSHTerminal(self.transport, [*host_words(), self._bash_argv[0], "-c", script,
                                            "shell_kernel", *args],
                           on_output, CONNECT_TIMEOUT)

    def _connect(self) -> None:
        self._side.close()
        self._channels.clients = connect(self._target, self._accept_new, self._resolve_jump)
        record_exit_signals(self.transport)
        threading.Thread(target=self._keepalive_loop, args=(self.transport,),
                         name="shell-kernel-ssh-keepalive", daemon=True).start()

    def _disconnect(self) -> None:
        clients, self._channels.clients = self._channels.clients, []
        for client in reversed(clients):
            close_client(client)

    def _keepalive_loop(self, transport: paramiko.Transport) -> None:
        """ServerAlive semantics: a connection whose server stops answering
        for interval x count-max seconds is closed, so a running cell ends."""
        interval = self._target.keepalive_interval
        limit = interval * self._target.keepalive_count_max
        answered = [time.monotonic()]

        def ping(transport):
            if round_trip(transport):
                answered[0] = time.monotonic()

        while not self._closed.wait(interval):
            if not transport.is_active():
                return
            threading.Thread(target=ping, args=(transport,), daemon=True,
                             name="shell-kernel-ssh-keepalive-ping").start()
            if time.monotonic() - answered[0] > limit + interval:
                log.warning("no answer from %s for %.0f s: closing", self._target.describe(), limit)
                transport.close()
                return

    def close(self) -> None:
        self._closed.set()  # the keepalive thread ends
        super().close()
