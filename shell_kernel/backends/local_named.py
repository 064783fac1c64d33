"""A named local session: bash detached from the kernel, driven as a durable
SSH session (LocalNamedBackend). Runs on the session's threads as the SSH
backend does."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Callable

from . import Terminal
from .local import READ_SIZE, _default_signals, _with_launch_environment
from .local_terminal import LocalTerminal
from .ssh import SSHBackend


class LocalNamedBackend(SSHBackend):
    """A named local session: bash runs detached, as a durable SSH session
    does on its host (launch.sh, spool.sh and relay.sh, run here with
    /bin/sh), so that it outlives the kernel process. SSHBackend's durable
    half drives it, through _LocalClient: each of its "channels" is a local
    `sh -c COMMAND`, and the kernel's death closes their pipes as a dropped
    connection closes channels."""

    def __init__(self, session: str, take_over: bool = False, bash: str = "bash",
                 clean: bool = False, idle_timeout: float = 3600.0):
        super().__init__(_HERE, clean=clean, bash=bash, durable=True, idle_timeout=idle_timeout,
                         session=session, take_over=take_over)
        self.description = f"local session {session}"

    def _connect(self) -> None:
        self._clients = [_LocalClient()]
        self._side = None

    def open_terminal(self, script: str, args: list[str],
                      on_output: Callable[[bytes], None]) -> Terminal:
        return LocalTerminal([self._bash_argv[0], "-c", script, "shell_kernel", *args], on_output,
                             None)


class _Here:
    """This machine, where SSHBackend names its target in messages."""

    @staticmethod
    def describe() -> str:
        return "this machine"


_HERE = _Here()


class _LocalClient:
    """Stands in for a paramiko SSHClient: its transport opens local channels."""

    def __init__(self):
        self._active = True

    def get_transport(self) -> "_LocalClient":
        return self

    def is_active(self) -> bool:
        return self._active

    def open_session(self, timeout: float | None = None) -> "_LocalChannel":
        if not self._active:
            raise OSError("closed")
        return _LocalChannel()

    def close(self) -> None:
        self._active = False


class _LocalChannel:
    """`/bin/sh -c COMMAND` with the methods of a paramiko Channel that
    SSHBackend uses. Reader threads fill a buffer per stream; fileno() is a
    pipe that is readable while there is something to receive (or the
    process ended), for select()."""

    def __init__(self):
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._buffers = {"stdout": bytearray(), "stderr": bytearray()}
        self._wake_read, self._wake_write = os.pipe()
        self._ended = threading.Event()
        self.closed = False
        self.exit_status = -1
        self.exit_signal: str | None = None

    def exec_command(self, command) -> None:
        self._proc = subprocess.Popen(
            ["/bin/sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=_default_signals, bufsize=0,
            env=_with_launch_environment(None))  # a named session's shell starts through it
        readers = [threading.Thread(target=self._read, args=(pipe, name), daemon=True,
                                    name="shell-kernel-local-channel")
                   for pipe, name in ((self._proc.stdout, "stdout"), (self._proc.stderr, "stderr"))]
        for reader in readers:
            reader.start()
        threading.Thread(target=self._wait, args=(readers,), daemon=True,
                         name="shell-kernel-local-channel").start()

    def _read(self, pipe, name: str) -> None:
        while data := pipe.read(READ_SIZE):
            with self._lock:
                self._buffers[name] += data
                os.write(self._wake_write, b"x")

    def _wait(self, readers) -> None:
        for reader in readers:
            reader.join()
        status = self._proc.wait()
        with self._lock:
            if status < 0:
                self.exit_signal = signal.Signals(-status).name.removeprefix("SIG")
                status = 128 - status
            self.exit_status = status
            self._ended.set()
            os.write(self._wake_write, b"x")

    def fileno(self) -> int:
        return self._wake_read

    def _take(self, name: str, size: int) -> bytes:
        with self._lock:
            buffer = self._buffers[name]
            data = bytes(buffer[:size])
            del buffer[:size]
            if not any(self._buffers.values()) and not self._ended.is_set():
                os.set_blocking(self._wake_read, False)
                try:
                    while os.read(self._wake_read, 4096):
                        pass
                except BlockingIOError:
                    pass
            return data

    def recv_ready(self) -> bool:
        return bool(self._buffers["stdout"])

    def recv_stderr_ready(self) -> bool:
        return bool(self._buffers["stderr"])

    def recv(self, size: int) -> bytes:
        return self._take("stdout", size)

    def recv_stderr(self, size: int) -> bytes:
        return self._take("stderr", size)

    def exit_status_ready(self) -> bool:
        return self._ended.is_set()

    def sendall(self, data: bytes) -> None:
        if self._proc is None or self.closed:
            raise OSError("the channel is closed")
        self._proc.stdin.write(data)

    def __del__(self) -> None:
        # Not in close(): a reader may still be waiting in select() on it.
        for fd in (self._wake_read, self._wake_write):
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        """End-of-file on its input (a relay or a side shell then ends)."""
        if self.closed:
            return
        self.closed = True
        if self._proc is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
