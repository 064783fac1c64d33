"""A pseudo-terminal on this machine, held by a script running under it."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import threading
from typing import Callable

from .. import BackendError, Terminal, describe_error, start_reader

READ_SIZE = 4096


def _own_terminal() -> None:
    """In the script's process (a new session leader, before exec): make the
    terminal on its standard input its controlling terminal, so that no cell's
    shell can acquire it by opening it, and with every signal at its default."""
    for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class LocalTerminal(Terminal):
    def __init__(self, argv: list[str], on_output: Callable[[bytes], None], env: dict | None):
        master, slave = os.openpty()
        try:
            self._proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                                          start_new_session=True, preexec_fn=_own_terminal,
                                          env=env)
        except (OSError, subprocess.SubprocessError) as err:
            os.close(master)
            raise BackendError(f"could not start {argv[0]} on a terminal: {err}") from err
        finally:
            os.close(slave)
        self._master = master
        self._lock = threading.Lock()
        self._closed = False
        self._wake_read, self._wake_write = os.pipe()  # close() wakes the reader with it
        start_reader("shell-kernel-terminal", lambda: self._read_loop(on_output),
                     lambda err: on_output(b""))

    def _read_loop(self, on_output: Callable[[bytes], None]) -> None:
        try:
            while True:
                ready, _, _ = select.select([self._master, self._wake_read], [], [])
                data = b""
                if self._master in ready and self._wake_read not in ready:
                    try:
                        data = os.read(self._master, READ_SIZE)
                    except OSError:  # EIO: everything that held the terminal ended
                        pass
                on_output(data)
                if not data:
                    return
        finally:
            # Closed here, by the one thread that reads it: a cell still reading
            # the terminal then gets end-of-file.
            with self._lock:
                self._closed = True
                os.close(self._master)
            os.close(self._wake_read)

    def write(self, data: bytes) -> None:
        with self._lock:
            if self._closed:
                raise BackendError("the terminal is gone")
            try:
                while data:
                    data = data[os.write(self._master, data):]
            except OSError as err:
                raise BackendError(f"the terminal is gone ({describe_error(err)})") from err

    def answered(self) -> None:
        with self._lock:
            if self._closed:
                raise BackendError("the terminal is gone")
            try:
                size = fcntl.ioctl(self._master, termios.TIOCGWINSZ, bytes(8))
                rows, columns, x_pixels, y_pixels = struct.unpack("HHHH", size)
                fcntl.ioctl(self._master, termios.TIOCSWINSZ, struct.pack(
                    "HHHH", rows, columns, (x_pixels + 1) % 65536, y_pixels))
            except OSError as err:
                raise BackendError(f"the terminal is gone ({describe_error(err)})") from err

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        if self._wake_write >= 0:
            os.close(self._wake_write)  # the reader wakes, closes the terminal and ends
            self._wake_write = -1
