"""Start the shell as early as possible, before the kernel object exists.

A local shell is spawned here, at once: its startup files (a login bash:
profile, bashrc) run while Python imports ipykernel. The session that
drives it (the session package, a good part of the kernel's own code) is
imported and started on the launch thread only once the kernel has sent its
first kernel_info reply, or a request needs the shell, or GO_ANYWAY_S has
passed: imported earlier, it would hold the interpreter while ipykernel is
being imported, and delay that reply. An SSH or named session starts at
once on the launch thread (its connection waits on the network).

Threads: the kernel's main thread makes the launch and calls go(), close()
and the getters; the launch thread ("shell-kernel-start") makes the session
and starts it. `session` is set once, under _lock, unless close() came first.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from typing import TYPE_CHECKING

from .config import KernelConfig

if TYPE_CHECKING:
    from .backends.local.spawn import SpawnedShell
    from .session import SessionError, ShellInfo, ShellSession

log = logging.getLogger("shell_kernel.launch")

#: How long close() waits for a start that it stopped to end.
STOPPED_START_WAIT_S = 3.0
#: A spawned shell's session starts after this long even if nothing asked.
GO_ANYWAY_S = 1.0


class ShellLaunch:
    def __init__(self, config: KernelConfig):
        self.config = config
        self._stream = self._display = self._clear = None
        self.session: ShellSession | None = None
        self.started = threading.Event()
        self.started_at = time.monotonic()
        self._error: SessionError | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._go = threading.Event()
        self._spawned: SpawnedShell | None = None
        self._version_probe: subprocess.Popen | None = None  # see bash_version
        self._bash_version: str | None = None
        if config.spawns_early:
            self._spawn()
        if self._spawned is None:
            self._go.set()
        self._thread = threading.Thread(target=self._start, name="shell-kernel-start", daemon=True)
        self._thread.start()

    def _spawn(self) -> None:
        from .backends import bash_argv
        from .backends.local.spawn import SpawnedShell, bash_version_probe
        try:
            self._spawned = SpawnedShell(bash_argv(self.config.bash, self.config.clean,
                                                   not self.config.no_completion))
            self._version_probe = bash_version_probe(self.config.bash)
        except OSError as err:
            # The session's own start tries again, and says what is wrong.
            log.info("could not spawn the shell early: %s", err)

    def go(self) -> None:
        """Start the session now (see the module's docstring)."""
        self._go.set()

    def _start(self) -> None:
        try:
            self._go.wait(GO_ANYWAY_S)
            from .session import SessionError, ShellSession
            with self._lock:
                if self._closed:
                    return  # close() ended the spawned shell
                self.session = ShellSession(
                    self.config.backend_factory(spawned=self._spawned), self._on_stream,
                    self.config.session_options(), self._on_display, self._on_clear)
            try:
                self.session.start()
            except SessionError as err:
                # The first cell reports it (take_error); the next cell tries
                # again (the user may have fixed known_hosts or the network meanwhile).
                self._error = err
                (log.info if self._closed else log.warning)("%s", err)
        finally:
            self.started.set()

    def close(self) -> None:
        """Close the session, on the kernel's thread at shutdown. A start
        still under way is stopped (closing ends its shell, and with it the
        start's wait) and waited for; what it set up meanwhile (a shell whose
        start had not reached the session yet) is closed after it. The shell
        spawned here is ended here too, whether or not a backend took it over
        (a close during the start may come before that)."""
        with self._lock:
            self._closed = True
            session, spawned = self.session, self._spawned
        probe, self._version_probe = self._version_probe, None
        if probe is not None:  # never asked: the shell was up by the first kernel_info
            probe.kill()
            probe.wait()
        self._go.set()
        if session is None:
            self.started.set()  # nothing starts any more
        else:
            session.close()
        if spawned is not None:
            spawned.close()  # also ends a start still waiting on it
        if session is None or self.started.is_set():
            return
        self._thread.join(STOPPED_START_WAIT_S)
        if self._thread.is_alive():
            log.warning("the shell's start did not end within %g s of the shutdown",
                        STOPPED_START_WAIT_S)
        session.close()

    # ------------------------------------------------ for the kernel thread
    @property
    def info(self) -> ShellInfo | None:
        """The shell's, once it is up."""
        session = self.session
        return session.info if session is not None else None

    @property
    def description(self) -> str:
        """Where the shell runs, for the banner: the backend's words once the
        shell is up (e.g. "ssh alice@db1:22"), the options' before."""
        session = self.session
        if session is not None and session.info is not None:
            return session.description
        where = f"ssh {self.config.ssh}" if self.config.ssh else "local"
        return f"{where} session {self.config.session}" if self.config.session else where

    def bash_version(self) -> str:
        """The version of the bash that a local shell runs, before its session
        is up (kernel_info does not wait for the startup files): that bash
        asked without them (the probe started with the spawn, or one now), so
        that a notebook's saved language_info does not depend on start
        timing. "" over SSH. Called on the kernel's thread only."""
        if self.config.ssh is not None:
            return ""
        if self._bash_version is None:
            from .backends.local.spawn import bash_version_probe
            probe, self._version_probe = self._version_probe, None
            try:
                probe = probe or bash_version_probe(self.config.bash)
                self._bash_version = probe.communicate(timeout=5)[0]
            except (OSError, subprocess.SubprocessError):
                if probe is not None:
                    probe.kill()
                self._bash_version = ""
        return self._bash_version

    def interrupt(self) -> None:
        session = self.session
        if session is not None:
            session.interrupt()

    def query(self, what: str, text: str, timeout: float = 10.0) -> str | None:
        """Ask the shell (ShellSession.query); None before its session is made."""
        self.go()
        session = self.session
        return session.query(what, text, timeout) if session is not None else None

    def bind(self, stream, display, clear=None) -> None:
        """Where output goes from now on (before this, only startup noise flows)."""
        self._stream, self._display, self._clear = stream, display, clear

    def wait_started(self, timeout: float | None = None) -> bool:
        self.go()
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
