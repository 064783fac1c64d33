"""Local channels (channel/channels.py): child processes of the kernel, read
through their pipes. LocalChannels, the transport of a named local session:
each channel a `/bin/sh -c COMMAND`, whose pipes the kernel's death closes as
a dropped connection closes SSH channels. ShellChannel: the local shell
itself (spawn.SpawnedShell), which LocalBackend's shell reads.
LocalSideCommands: LocalBackend's side commands, a process each.

Threads: a channel is read by one thread at a time (see channel/channels.py).
A read waits for output, the end of the pipes, or the shell's exit (a pidfd),
and for nothing else: an idle kernel's readers wake for no clock, except a
shell's where the system gives no pidfd.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time

from .. import BackendError, SideResult
from ..channel.channels import ChannelExit, NothingSent
from .spawn import END_WAIT_S, SpawnedShell, default_signals, with_launch_environment

READ_SIZE = 1 << 16
#: Where the system gives no pidfd: how often a shell's reader looks whether
#: bash exited (its pipes may stay open after that: see ShellChannel).
EXIT_POLL_SECONDS = 0.2


class ProcessChannel:
    """A child's stdout and stderr, read in turns, its stdin and its exit, as
    a channels.Channel. It ends when both pipes have ended and the child has
    exited, or, with ends_at_exit, when the child has exited and what it left
    in its pipes is read."""

    ends_at_exit = False

    def __init__(self, proc: subprocess.Popen, exit_fd: int | None = None):
        """exit_fd: readable once proc has exited (spawn.exit_descriptor)."""
        self._proc = proc
        self._streams = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
        self._selector = selectors.DefaultSelector()
        for fd in self._streams:
            self._selector.register(fd, selectors.EVENT_READ)
        self._exit_fd = exit_fd
        if exit_fd is not None:
            self._selector.register(exit_fd, selectors.EVENT_READ)
        self._last = ""  # the stream read last: the other goes first when both have bytes
        self._exited = False  # (ends_at_exit) seen: the pipes are read without waiting
        self.closed = False

    def read(self, timeout: float | None = None) -> tuple[str, bytes] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.closed:
            if self.ends_at_exit and self._exit_fd is None and not self._exited:
                self._exited = self._proc.poll() is not None
            if self._exited:
                chunk = self._left_in_pipes()
                if chunk is None:
                    break
                return chunk
            if not self._streams and not self.ends_at_exit:
                self._proc.wait()  # both streams ended: so does the command (a moment later)
                break
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise TimeoutError("nothing to read")
            if self.ends_at_exit and self._exit_fd is None:
                wait = EXIT_POLL_SECONDS if wait is None else min(wait, EXIT_POLL_SECONDS)
            ready = sorted((key.fd for key, _ in self._selector.select(wait)),
                           key=lambda fd: self._streams.get(fd) == self._last)
            for fd in ready:
                if fd == self._exit_fd:
                    self._exited = True
                    continue
                data = os.read(fd, READ_SIZE)
                if data:
                    self._last = self._streams[fd]
                    return self._last, data
                self._end_stream(fd)
        # No more reads: this is the reading thread.
        self._selector.close()
        for pipe in (self._proc.stdout, self._proc.stderr):
            pipe.close()
        return None

    def _left_in_pipes(self) -> tuple[str, bytes] | None:
        """After the exit: the next bytes the pipes hold, without waiting for
        more (a background job may hold them open, and write on)."""
        for fd in sorted(self._streams, key=lambda fd: self._streams[fd] == self._last):
            os.set_blocking(fd, False)
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                data = b""
            if data:
                self._last = self._streams[fd]
                return self._last, data
            self._end_stream(fd)
        return None

    def _end_stream(self, fd: int) -> None:
        self._selector.unregister(fd)
        del self._streams[fd]

    def send(self, data: bytes) -> None:
        if self.closed:
            raise NothingSent("the channel is closed")
        sent = 0
        try:
            while sent < len(data):  # a write cut short by a signal returns what went
                sent += self._proc.stdin.write(data[sent:])
        except (OSError, ValueError) as err:  # ValueError: closed meanwhile
            raise (OSError if sent else NothingSent)(str(err) or "the channel is closed") from err

    def exit(self) -> ChannelExit:
        status = self._proc.poll()
        if status is None:
            return ChannelExit(-1, None)
        if status < 0:
            try:
                name = signal.Signals(-status).name.removeprefix("SIG")
            except ValueError:
                name = str(-status)
            return ChannelExit(128 - status, name)
        return ChannelExit(status, None)


class LocalChannel(ProcessChannel):
    """`/bin/sh -c COMMAND` in a session of its own."""

    def __init__(self, command: bytes):
        super().__init__(subprocess.Popen(
            ["/bin/sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=default_signals, bufsize=0,
            env=with_launch_environment(None)))  # a named session's shell starts through it

    def close(self) -> None:
        """End-of-file on its input (a relay or a side shell then ends, and
        with it a read under way). Its reader closes the output pipes."""
        if self.closed:
            return
        self.closed = True
        try:
            self._proc.stdin.close()
        except OSError:
            pass


class ShellChannel(ProcessChannel):
    """The local shell: bash as the kernel's child. It ends with bash's exit,
    not with its pipes' end: background jobs may hold them after bash is gone.
    Closing it ends the shell (spawn.SpawnedShell.close)."""

    ends_at_exit = True

    def __init__(self, shell: SpawnedShell):
        super().__init__(shell.proc, shell.exit_fd)
        self._shell = shell
        self._reader: threading.Thread | None = None

    def read(self, timeout: float | None = None) -> tuple[str, bytes] | None:
        self._reader = threading.current_thread()
        return super().read(timeout)

    def close(self) -> None:
        """Ends bash and what it started, then waits a moment for the reader
        (whom bash's exit wakes) to finish, before its pipes close under it."""
        self.closed = True
        # A reader that has not started a read by now finds the channel closed.
        reader = self._reader
        if reader is None:
            self._selector.close()
        if reader is None or reader is threading.current_thread():
            self._shell.close()
        else:
            self._shell.close(before_pipes_close=lambda: reader.join(END_WAIT_S))


class LocalChannels:
    """This machine as a channels.Channels."""

    where = "this machine"
    link = "the channel"
    reader_name = "shell-kernel-local-reader"

    def open(self, command: bytes) -> LocalChannel:
        return LocalChannel(command)

    def is_active(self) -> bool:
        return True


class LocalSideCommands:
    """Side commands (channels.SideCommands) each in a process of its own,
    leading a group of its own: none waits behind another, and one that
    times out is ended with what it started. Nothing stays open between them."""

    def run(self, script: str, args: list[str], timeout: float,
            urgent: bool = False) -> SideResult:
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", script, "shell_kernel", *args], stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
                start_new_session=True)
        except OSError as err:
            raise BackendError(f"side command failed: {err}") from err
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as err:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
            proc.stdout.close()  # (a process that left the group may hold it)
            raise BackendError(f"side command failed: {err}") from err
        return SideResult(proc.returncode, stdout)

    def is_open(self) -> bool:
        return False

    def close(self) -> None:
        pass
