"""A shell whose bytes travel on one channel at a time (see channels.py):
the reader thread, sending, and dropping the channel with its connection.
DirectShell is bash itself on the channel (an ephemeral SSH shell; the local
shell, local/backend.py); durable.DurableShell a relay to a detached shell,
replaced after a drop.

Threads: start and detach come from the backend's caller (the session's
caller thread); send from any thread; the reader thread (one per channel,
named by the transport) delivers output and reports the end.
"""

from __future__ import annotations

import threading

from .. import (BackendError, ExitCallback, NotSent, OutputCallback, ShellExit, Started,
                describe_error, start_reader)
from .channels import Channel, Channels, NothingSent, command

#: Why start() failed when close() came first (see ChannelShell._read).
CLOSED_AS_IT_STARTED = "the kernel closed the session as its shell started"


class ChannelShell:
    def __init__(self, channels: Channels):
        self._channels = channels
        self._channel: Channel | None = None
        # Held while output is delivered and while the channel it may come
        # from is replaced: a replaced channel's last bytes are never counted.
        self._output_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._closed = threading.Event()
        self._on_output: OutputCallback | None = None
        self._on_exit: ExitCallback | None = None

    def _read(self, channel: Channel, deliver) -> None:
        """Read channel in a new reader thread: deliver(channel, stream, data)
        for its bytes, then _ended(channel) unless it was replaced. Once the
        shell is closed (close() may run while start() does) it closes the
        channel and raises BackendError: close() marks the shell closed before
        detach() looks for the channel, so one of the two closes it."""
        with self._output_lock:
            closed = self._closed.is_set()
            if not closed:
                self._channel = channel
        if closed:
            channel.close()
            raise BackendError(CLOSED_AS_IT_STARTED)

        def loop() -> None:
            while (chunk := channel.read()) is not None:
                deliver(channel, *chunk)
            if channel is self._channel:  # else replaced (reattach) or dropped
                self._ended(channel)

        start_reader(self._channels.reader_name, loop,
                     lambda err: self._reader_failed(channel, err))

    def _ended(self, channel: Channel) -> None:
        raise NotImplementedError

    def _reader_failed(self, channel: Channel, err: Exception) -> None:
        """A reader that crashed ends the channel, as a lost connection does
        (see _read_failure)."""
        if channel is not self._channel or self._closed.is_set():
            return  # a relay already replaced, or closing: not the shell's end
        self._channel = None
        channel.close()
        self._on_exit(self._read_failure(err))

    def _read_failure(self, err: Exception) -> ShellExit:
        """A lost connection: a durable session reattaches to the same shell;
        an ephemeral one is gone with it."""
        return ShellExit(f"reading the shell's output failed ({describe_error(err)})",
                         connection_lost=True)

    def _lost(self) -> ShellExit:
        channels = self._channels
        return ShellExit(f"{channels.link} to {channels.where} was lost", connection_lost=True)

    def send(self, data: bytes) -> None:
        with self._send_lock:
            channel = self._channel
            if channel is None or channel.closed:
                raise NotSent("the shell is not running")
            try:
                channel.send(data)
            except NothingSent as err:
                # Found gone only as the write began (its end not yet read):
                # as when it was seen closed first.
                raise NotSent(f"{self._channels.link} is gone: {err}") from err
            except OSError as err:
                raise BackendError(f"{self._channels.link} is gone: {err}") from err

    def received(self) -> object | None:
        return None  # the host keeps no count (see Backend.received)

    def acknowledge(self, received: object) -> None:
        pass

    def open_output(self) -> None:
        pass  # start() started it

    def detach(self) -> None:
        """The connection goes: the channel's reader ends without a word."""
        with self._output_lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def close(self) -> None:
        self._closed.set()


class DirectShell(ChannelShell):
    """bash itself on the channel: it ends with its connection."""

    def __init__(self, channels: Channels, bash_argv: list[str]):
        super().__init__(channels)
        self._bash_argv = bash_argv

    def start(self, on_output: OutputCallback, on_exit: ExitCallback) -> Started:
        """Raises OSError (or BackendError) when the channel cannot be opened."""
        self._on_output, self._on_exit = on_output, on_exit
        channel, started = self._open()
        self._read(channel, self._deliver)
        return started

    def _open(self) -> tuple[Channel, Started]:
        """bash on a new channel, and what start() says it did."""
        return self._channels.open(b"exec " + command(*self._bash_argv)), Started()

    def _deliver(self, channel: Channel, stream: str, data: bytes) -> None:
        with self._output_lock:
            if channel is self._channel:
                self._on_output(stream, data)

    def _ended(self, channel: Channel) -> None:
        status, signame = channel.exit()
        if self._closed.is_set():
            self._on_exit(ShellExit("closed by the kernel"))
        elif signame:
            self._on_exit(ShellExit(f"killed by SIG{signame}", status))
        elif status >= 0:
            self._on_exit(ShellExit(f"exited with status {status}", status))
        else:
            self._on_exit(self._lost())
