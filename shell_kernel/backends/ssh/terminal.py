"""A pseudo-terminal on the SSH host, held by a script running under it."""

from __future__ import annotations

import shlex
import threading
from typing import Callable

import paramiko

from .. import BackendError, Terminal, describe_error, start_reader
from .connect import round_trip

READ_SIZE = 4096
COLUMNS, ROWS = 80, 24


class SSHTerminal(Terminal):
    """A session channel with a pty (sshd makes the terminal the script's
    controlling terminal, so no cell's shell can acquire it)."""

    def __init__(self, transport: paramiko.Transport, argv: list[str],
                 on_output: Callable[[bytes], None], timeout: float):
        try:
            self._channel = transport.open_session(timeout=timeout)
            self._channel.get_pty(term="dumb", width=COLUMNS, height=ROWS)
            self._channel.exec_command(shlex.join(argv).encode("utf-8", "surrogateescape"))
        except (paramiko.SSHException, OSError) as err:
            raise BackendError(f"could not open a terminal on the host: {err}") from err
        self._lock = threading.Lock()
        self._answers = 0
        start_reader("shell-kernel-ssh-terminal", lambda: self._read_loop(on_output),
                     lambda err: on_output(b""))

    def _read_loop(self, on_output: Callable[[bytes], None]) -> None:
        while True:
            try:
                data = self._channel.recv(READ_SIZE)
            except (paramiko.SSHException, OSError, EOFError):
                data = b""
            on_output(data)
            if not data:
                return

    def write(self, data: bytes) -> None:
        with self._lock:
            try:
                self._channel.sendall(data)
            except (paramiko.SSHException, OSError) as err:
                raise BackendError(f"the terminal is gone ({describe_error(err)})") from err

    def answered(self) -> None:
        with self._lock:
            self._answers = (self._answers + 1) % 65536
            try:
                # sshd acts on a window change as soon as it reads it, but
                # writes data to the terminal later in its loop: the
                # watcher would count the answer before it could see it.
                # sshd's reply to a request comes after the data sent
                # before the request is written.
                round_trip(self._channel.get_transport())
                self._channel.resize_pty(COLUMNS, ROWS, width_pixels=self._answers)
            except (paramiko.SSHException, OSError) as err:
                raise BackendError(f"the terminal is gone ({describe_error(err)})") from err

    def close(self) -> None:
        # sshd hangs the terminal up: the script ends, a cell still reading gets end-of-file.
        self._channel.close()
