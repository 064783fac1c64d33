"""Commands running next to the shell, whatever carries them: what a transport
(an SSH connection, or local child processes) gives the shells built on it
(shell.py, durable.py), and the side shell they run scripts in.

A Channel is read by one thread at a time (a shell's reader thread, or the
caller of SideShell.run); send and close may come from any thread.
"""

from __future__ import annotations

import logging
import secrets
import shlex
import threading
import time
from typing import Callable, NamedTuple, Protocol

from .. import BackendError, SideResult
from ...shell import host_words, script

log = logging.getLogger("shell_kernel.backends")


class NothingSent(OSError):
    """Channel.send failed before any of the data went (the channel or its
    transport was found gone as the write began)."""


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
        in the order they came where the transport keeps it (SSH), else the
        two streams taking turns when both have some (two pipes); None once it has
        ended and everything it wrote was read, or the channel is closed.
        Raises TimeoutError when nothing came within timeout seconds."""

    def send(self, data: bytes) -> None:
        """Write all of data to the command's stdin; raises OSError when it
        cannot (NothingSent when none of it went)."""

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


class SideCommands(Protocol):
    """Where a backend's side commands run: a SideShell, or (local) a
    process each."""

    def run(self, script: str, args: list[str], timeout: float,
            urgent: bool = False) -> SideResult:
        """Run script with args; raises BackendError when it fails or does not
        finish within timeout (it is then ended). An urgent one never waits
        behind another."""

    def is_open(self) -> bool:
        """Something stays open between commands (a side shell's channel)."""

    def close(self) -> None:
        """Close what stays open; idempotent."""


def command(*words: str) -> bytes:
    """A command line for the host's shell; words may hold any byte (str
    with surrogate escapes, like the host's paths read back from it). The
    no-/proc switch goes first (see shell.host_words)."""
    return shlex.join([*host_words(), *words]).encode("utf-8", "surrogateescape")


def last_line(text: str) -> str:
    """The line a side command answers with: the last (anything before it
    was not asked for, e.g. output of a job the login shell left behind)."""
    return text.strip("\n").rsplit("\n", 1)[-1]


# The side shell's first script: "PID START" of the side shell itself (see
# _Lane._give_up), after whatever the rc files print.
SIDE_PID_SCRIPT = script("pids.sh") + 'echo "$PPID $(pid_start "$PPID")"\n'
REAP_SCRIPT = script("reap.sh")


class _Lane:
    """One `sh` on a channel of its own, running one script at a time."""

    def __init__(self, open_channel: Callable[[bytes], Channel], open_timeout: float):
        self._open_channel = open_channel
        self._open_timeout = open_timeout
        self._channel: Channel | None = None
        self._record: list[str] = []  # the sh's "PID START", when it told
        self.lock = threading.Lock()  # held while it opens or runs a script

    def is_open(self) -> bool:
        return self.lock.locked() or (self._channel is not None and not self._channel.closed)

    def open(self) -> None:
        """Open the channel unless it is open (the caller holds the lock)."""
        if self._channel is not None and not self._channel.closed:
            return
        try:
            channel = self._open_channel(b"exec " + command("sh"))
        except OSError as err:
            raise BackendError(f"could not open a side channel: {err}") from err
        # Whatever the login shell's rc files print arrives before this answer.
        self._channel = channel
        record = last_line(self.run(SIDE_PID_SCRIPT, [], self._open_timeout).stdout).split()
        self._record = record if len(record) == 2 and record[0].isdigit() else []

    def run(self, script: str, args: list[str], timeout: float) -> SideResult:
        """(The caller holds the lock.) A script that does not finish within
        timeout is ended on the host, with this side shell (see _give_up)."""
        channel = self._channel
        marker = secrets.token_hex(8)
        line = (command("sh", "-c", script, "shell_kernel", *args)
                + f" </dev/null 2>&1; printf '\\n{marker} %s\\n' $?\n".encode())
        end = f"\n{marker} ".encode()
        out = bytearray()
        at = -1  # where the end line starts, once it came
        try:
            channel.send(line)
            deadline = time.monotonic() + timeout
            while at < 0 or not out.endswith(b"\n"):
                left = deadline - time.monotonic()
                if channel.closed or left <= 0:
                    self._give_up(timed_out=left <= 0)
                    raise BackendError("the side command did not finish")
                try:
                    chunk = channel.read(timeout=left)
                except TimeoutError:
                    continue
                if chunk is None:
                    self._give_up(timed_out=False)
                    raise BackendError("the side command did not finish")
                if chunk[0] == "stdout":
                    # Only the new bytes (and the end line's length before
                    # them) are searched: linear in the output's size.
                    searched = max(0, len(out) - len(end))
                    out += chunk[1]
                    if at < 0:
                        at = out.find(end, searched)
        except OSError as err:
            self._give_up(timed_out=False)
            raise BackendError(f"side command failed: {err}") from err
        body, status = bytes(out[:at]), bytes(out[at + len(end):])
        return SideResult(int(status.strip() or 1), body.decode(errors="surrogateescape"))

    def _give_up(self, timed_out: bool) -> None:
        """The channel goes (the next script opens another). A script that
        timed out would keep its side shell busy, and whatever it waits on
        held: the side shell and what it runs (its descendants: what a script
        left running in the background, such as a session's watchdog, has
        left them) get SIGKILL on the host, from a channel of their own, in
        the background: the host may be out of reach, which is often why the
        script did not finish."""
        channel, self._channel = self._channel, None
        record, self._record = self._record, []
        if channel is not None:
            channel.close()
        if record and timed_out:
            threading.Thread(target=self._end, args=(record,), daemon=True,
                             name="shell-kernel-side-end").start()

    def _end(self, record: list[str]) -> None:
        pid, start = record
        try:
            ender = self._open_channel(command("sh", "-c", REAP_SCRIPT, "shell_kernel", "orphans",
                                               "KILL", "0", "-", f"{pid}:{start}"))
        except (OSError, BackendError) as err:
            log.info("could not end the side command that timed out: %s", err)
            return
        try:
            deadline = time.monotonic() + self._open_timeout
            while time.monotonic() < deadline:
                try:
                    if ender.read(timeout=deadline - time.monotonic()) is None:
                        break
                except TimeoutError:
                    break
        except OSError as err:
            log.info("could not end the side command that timed out: %s", err)
        finally:
            ender.close()

    def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()


class SideShell:
    """A `sh` on a channel of its own that runs short scripts on request, so
    that an interrupt costs no new login and no rc files. Opened when first
    needed and again after its channel closed. Thread-safe: scripts take
    turns, except an urgent one (an interrupt's), which never waits behind
    another (a display's fetch, an acknowledgement): it runs in a second
    side shell, opened when first needed so, while the first is busy."""

    def __init__(self, open_channel: Callable[[bytes], Channel], open_timeout: float):
        self._main = _Lane(open_channel, open_timeout)
        self._spare = _Lane(open_channel, open_timeout)

    def open(self) -> None:
        """Open the channel now unless it is open; raises BackendError when it cannot."""
        with self._main.lock:
            self._main.open()

    def is_open(self) -> bool:
        """The side shell's channel is open (or being opened)."""
        return self._main.is_open()

    def run(self, script: str, args: list[str], timeout: float,
            urgent: bool = False) -> SideResult:
        lane = self._main
        if urgent and not lane.lock.acquire(blocking=False):
            lane = self._spare
            lane.lock.acquire()
        elif not urgent:
            lane.lock.acquire()
        try:
            lane.open()
            return lane.run(script, args, timeout)
        finally:
            lane.lock.release()

    def close(self) -> None:
        for lane in (self._main, self._spare):
            lane.close()
