"""Start the shell as early as possible, before the kernel object exists.

The shell's startup files (a login bash: profile, bashrc) run while Python
imports ipykernel, instead of after it; the kernel binds its output handlers
when it is created.
"""

from __future__ import annotations

import logging
import threading
import time

from .config import KernelConfig
from .session import SessionError, ShellSession

log = logging.getLogger("shell_kernel.launch")

#: How long close() waits for a start that it stopped to end.
STOPPED_START_WAIT_S = 3.0


class ShellLaunch:
    def __init__(self, config: KernelConfig):
        self.config = config
        self._stream = self._display = self._clear = None
        self.session = ShellSession(config.backend_factory(), self._on_stream,
                                    config.session_options(), self._on_display, self._on_clear)
        self.started = threading.Event()
        self.started_at = time.monotonic()
        self._error: SessionError | None = None
        self._thread = threading.Thread(target=self._start, name="shell-kernel-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            self.session.start()
        except SessionError as err:
            # The first cell reports it (take_error); the next cell tries
            # again (the user may have fixed known_hosts or the network meanwhile).
            self._error = err
            log.warning("%s", err)
        finally:
            self.started.set()

    def close(self) -> None:
        """Close the session, on the kernel's thread at shutdown. A start
        still under way is stopped (closing ends its shell, and with it the
        start's wait) and waited for; what it set up meanwhile (a shell whose
        start had not reached the session yet) is closed after it."""
        self.session.close()
        if self.started.is_set():
            return
        self._thread.join(STOPPED_START_WAIT_S)
        if self._thread.is_alive():
            log.warning("the shell's start did not end within %g s of the shutdown",
                        STOPPED_START_WAIT_S)
        self.session.close()

    def bind(self, stream, display, clear=None) -> None:
        """Where output goes from now on (before this, only startup noise flows)."""
        self._stream, self._display, self._clear = stream, display, clear

    def wait_started(self, timeout: float | None = None) -> bool:
        return self.started.wait(self.config.start_timeout + 5 if timeout is None else timeout)

    def take_error(self) -> SessionError | None:
        """Why the shell did not start, once: the start timeout is paid once,
        by the first cell, which reports it."""
        error, self._error = self._error, None
        return error

    def _on_stream(self, name: str, text: str) -> None:
        if self._stream is not None:
            self._stream(name, text)

    def _on_display(self, mime: str, data: bytes, display_id: str) -> None:
        if self._display is not None:
            self._display(mime, data, display_id)

    def _on_clear(self) -> None:
        if self._clear is not None:
            self._clear()
