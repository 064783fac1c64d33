"""What the shell's cells read: the prompt terminal (see prompts.py), or
/dev/null where the host cannot give one.

Opened and closed by whichever thread (re)starts the shell: the caller, or
the I/O worker's reconnect; lines() runs on the I/O worker, as it sends a
cell; was_read() on the pump's; close() also on the closing thread, at
shutdown (the lock: against the I/O worker sending meanwhile). A prompt
is answered on the terminal the cell's lines pointed at (RunningCell.terminal).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from .. import frames, prompts, protocol
from ..backends import BackendError, Contained
from ..prompts import InputTerminal

log = logging.getLogger("shell_kernel.session")

_UNSET = "\0unset"  # not a path: the shell's descriptor is not set up yet


class CellInput:
    def __init__(self):
        self._lock = threading.Lock()  # close() at shutdown, against a send
        self._terminal: InputTerminal | None = None
        self._points_at: str | None = _UNSET  # what the shell's cells read now (caller)
        self._read = False  # a cell read the terminal: reset its modes (the pump sets it)

    def open(self, backend: Contained, token: str, shell_pid: int, state_dir: str,
             on_frame: Callable[[frames.Frame | None], None]) -> bool:
        """Open the terminal for a new shell (or one whose terminal went with a
        connection); False when the host cannot give one. settle() follows."""
        self.forget()
        try:
            terminal = InputTerminal(backend, token, shell_pid, state_dir, on_frame)
        except BackendError as err:
            log.info("cells read /dev/null: %s", err)
            return False
        with self._lock:
            self._terminal = terminal
        return True

    def settle(self) -> None:
        """Wait briefly for the terminal's watcher. Here rather than before a
        cell: a cell must go out at once (a durable session's connection may
        drop a moment later, with the cell running)."""
        terminal = self.terminal
        if terminal is not None and terminal.path(prompts.START_SECONDS) is None:
            log.info("no terminal within %g s: cells read /dev/null until one comes",
                     prompts.START_SECONDS)

    def forget(self) -> None:
        """A new shell, or one whose terminal went with a connection: until a
        terminal opens, its cells read /dev/null."""
        self.close()
        self._points_at = _UNSET

    def forget_sent(self) -> None:
        """The lines that lines() gave never reached the shell: the next ones
        point its descriptor anew."""
        self._points_at = _UNSET

    def close(self) -> None:
        with self._lock:
            terminal, self._terminal = self._terminal, None
        if terminal is not None:
            terminal.close()

    @property
    def terminal(self) -> InputTerminal | None:
        with self._lock:
            return self._terminal

    def lines(self, terminal: InputTerminal | None) -> bytes:
        """What goes before a cell's lines: pointing the shell's descriptor at
        the terminal (or /dev/null) when that changed, else resetting the
        terminal's modes after a cell that read it."""
        stdin = terminal.path(0) if terminal is not None else None
        lines = b""
        if stdin != self._points_at:
            lines = protocol.stdin_line(stdin)
            self._points_at = stdin
        elif self._read:
            lines = protocol.RESET_STDIN_LINE
        self._read = False
        return lines

    def was_read(self) -> None:
        self._read = True

