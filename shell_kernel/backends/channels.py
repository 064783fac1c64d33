"""Commands running next to the shell, whatever carries them: what a transport
(an SSH connection, or local child processes) gives the shells built on it
(channel_shell.py, durable.py), and the side shell they run scripts in.

A Channel is read by one thread at a time (a shell's reader thread, or the
caller of SideShell.run); send and close may come from any thread.
"""

from __future__ import annotations

import secrets
import shlex
import threading
import time
from typing import Callable, NamedTuple, Protocol

from . import BackendError, SideResult
from ..shell import host_words


class ChannelExit(NamedTuple):
    status: int  # -1 while unknown (still running, or gone without one)
    signal: str | None  # the signal that ended it ("KILL"), if one did


class Channel(Protocol):
    """One command on the shell's host, with its stdin, stdout and stderr."""

    @property
    def closed(self) -> bool:
        """close() was called, or the transport closed it."""

    def read(self, timeout: float | None = None) -> tuple[str, bytes] | None:
        """The next bytes the command wrote, as ("stdout" | "stderr", data),
        the two streams taking turns when both have some; None once it has
        ended and everything it wrote was read, or the channel is closed.
        Raises TimeoutError when nothing came within timeout seconds."""

    def send(self, data: bytes) -> None:
        """Write all of data to the command's stdin; raises OSError when it cannot."""

    def exit(self) -> ChannelExit:
        """How the command ended (status -1 while that is not known)."""

    def close(self) -> None:
        """End-of-file on its stdin and no more reading (a relay or a side
        shell then ends); idempotent."""


class Channels(Protocol):
    """A transport to the shell's host: opens channels, and names itself."""

    #: The host, for messages: "alice@db1:22", "this machine".
    where: str
    #: What carries the channels, for messages: "the SSH connection".
    link: str
    #: The name of the threads that read a shell's channel.
    reader_name: str

    def open(self, command: bytes) -> Channel:
        """Run command (a POSIX sh command line) on the host, in a new channel.
        Raises OSError when the transport cannot, BackendError when it is
        not connected."""

    def is_active(self) -> bool:
        """The transport still reaches the host."""


def command(*words: str) -> bytes:
    """A command line for the host's shell; words may hold any byte (str
    with surrogate escapes, like the host's paths read back from it). The
    no-/proc switch goes first (see shell.host_words)."""
    return shlex.join([*host_words(), *words]).encode("utf-8", "surrogateescape")


def last_line(text: str) -> str:
    """The line a side command answers with: the last (anything before it
    was not asked for, e.g. output of a job the login shell left behind)."""
    return text.strip("\n").rsplit("\n", 1)[-1]


class SideShell:
    """A `sh` on a channel of its own that runs short scripts on request, so
    that an interrupt costs no new login and no rc files. Opened when first
    needed and again after its channel closed. Thread-safe."""

    def __init__(self, open_channel: Callable[[bytes], Channel], open_timeout: float):
        self._open_channel = open_channel
        self._open_timeout = open_timeout
        self._channel: Channel | None = None
        self._open_lock = threading.Lock()  # held while the channel is replaced
        self._run_lock = threading.Lock()  # one script at a time on the channel

    def open(self) -> None:
        """Open the channel now unless it is open; raises BackendError when it cannot."""
        with self._open_lock:
            if self._channel is not None and not self._channel.closed:
                return
            try:
                channel = self._open_channel(b"exec " + command("sh"))
            except OSError as err:
                raise BackendError(f"could not open a side channel: {err}") from err
            # Whatever the login shell's rc files print arrives before this answer.
            self._run(channel, "true", [], self._open_timeout)
            self._channel = channel

    def run(self, script: str, args: list[str], timeout: float) -> SideResult:
        self.open()
        return self._run(self._channel, script, args, timeout)

    def _run(self, channel: Channel, script: str, args: list[str], timeout: float) -> SideResult:
        marker = secrets.token_hex(8)
        line = (command("sh", "-c", script, "shell_kernel", *args)
                + f" </dev/null 2>&1; printf '\\n{marker} %s\\n' $?\n".encode())
        end = f"\n{marker} ".encode()
        with self._run_lock:
            try:
                channel.send(line)
                out = bytearray()
                at = -1  # where the end line starts, once it came
                deadline = time.monotonic() + timeout
                while at < 0 or not out.endswith(b"\n"):
                    left = deadline - time.monotonic()
                    if channel.closed or left <= 0:
                        raise BackendError("the side command did not finish")
                    try:
                        chunk = channel.read(timeout=left)
                    except TimeoutError:
                        continue
                    if chunk is None:
                        raise BackendError("the side command did not finish")
                    if chunk[0] == "stdout":
                        # Only the new bytes (and the end line's length before
                        # them) are searched: linear in the output's size (a
                        # display's fetch is a side command's output).
                        searched = max(0, len(out) - len(end))
                        out += chunk[1]
                        if at < 0:
                            at = out.find(end, searched)
            except OSError as err:
                raise BackendError(f"side command failed: {err}") from err
        body, status = bytes(out[:at]), bytes(out[at + len(end):])
        return SideResult(int(status.strip() or 1), body.decode(errors="surrogateescape"))

    def close(self) -> None:
        with self._open_lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
