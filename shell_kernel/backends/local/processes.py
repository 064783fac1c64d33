"""LocalChannels, the transport of a named local session (channel/channels.py):
each channel is a `/bin/sh -c COMMAND`, and the kernel's death closes their
pipes as a dropped connection closes SSH channels.

Threads: a channel is read by one thread at a time (see channel/channels.py).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time

from ..channel.channels import ChannelExit
from .spawn import default_signals, with_launch_environment

READ_SIZE = 1 << 16
# How often a read that waits looks whether the channel was closed meanwhile.
POLL_SECONDS = 0.5


class LocalChannel:
    """`/bin/sh -c COMMAND` in a session of its own, as a channels.Channel."""

    def __init__(self, command: bytes):
        self._proc = subprocess.Popen(
            ["/bin/sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=default_signals, bufsize=0,
            env=with_launch_environment(None))  # a named session's shell starts through it
        self._streams = {self._proc.stdout.fileno(): "stdout", self._proc.stderr.fileno(): "stderr"}
        self._selector = selectors.DefaultSelector()
        for fd in self._streams:
            self._selector.register(fd, selectors.EVENT_READ)
        self._last = ""  # the stream read last: the other goes first when both have bytes
        self.closed = False

    def read(self, timeout: float | None = None) -> tuple[str, bytes] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._streams and not self.closed:
            wait = POLL_SECONDS if deadline is None else min(POLL_SECONDS,
                                                              deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError("nothing to read")
            ready = sorted((key.fd for key, _ in self._selector.select(wait)),
                           key=lambda fd: self._streams[fd] == self._last)
            for fd in ready:
                data = os.read(fd, READ_SIZE)
                if data:
                    self._last = self._streams[fd]
                    return self._last, data
                self._selector.unregister(fd)
                del self._streams[fd]
        # Both streams ended: so does the command (a moment later).
        while not self.closed and self._proc.poll() is None:
            try:
                self._proc.wait(POLL_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        self._selector.close()  # no more reads: this is the reading thread
        for pipe in (self._proc.stdout, self._proc.stderr):
            pipe.close()
        return None

    def send(self, data: bytes) -> None:
        if self.closed:
            raise OSError("the channel is closed")
        self._proc.stdin.write(data)

    def exit(self) -> ChannelExit:
        status = self._proc.poll()
        if status is None:
            return ChannelExit(-1, None)
        if status < 0:
            return ChannelExit(128 - status, signal.Signals(-status).name.removeprefix("SIG"))
        return ChannelExit(status, None)

    def close(self) -> None:
        """End-of-file on its input (a relay or a side shell then ends). Its
        reader closes the output pipes (it may still wait on them now)."""
        if self.closed:
            return
        self.closed = True
        try:
            self._proc.stdin.close()
        except OSError:
            pass


class LocalChannels:
    """This machine as a channels.Channels."""

    where = "this machine"
    link = "the channel"
    reader_name = "shell-kernel-local-reader"

    def open(self, command: bytes) -> LocalChannel:
        return LocalChannel(command)

    def is_active(self) -> bool:
        return True
