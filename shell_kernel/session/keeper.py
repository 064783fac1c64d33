"""The current shell and its backend's lifecycle: start, adopt (a named
session's shell), restart, reattach (all on the session's I/O worker: the
caller waits for them), clean-up at close (on the closing thread), and
what the user is told when a shell is lost.

Which thread writes what (the package docstring has the whole table):
- the I/O worker, as it starts, restarts or reattaches the shell: backend,
  info, token, generation, output, start_notice, catch_up_due, the cell
  input; the caller (waiting for those steps, not meanwhile): last_cwd,
  and takes start_notice and catch_up_due before a cell. A start takes
  over backend, generation and output under the event queue's condition,
  atomically with its close() (clean_up reads them after it);
- the pump, and only the pump: up/down, lost and attachments (whether the
  shell is up, why not, how many reattaches). The pump changes them as it
  sees the shell's frames and end; another thread's change (an adopted
  shell, a restart, a reattach) is a KeeperChange request that the pump
  applies while that thread waits (_change). All may be read anywhere;
- the pump answers a start (ShellStarting's future);
- a started shell's readers call its ShellOutput, which has scanners of
  its own (the pump flushes them when the shell ends).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Callable

from .. import frames, protocol
from ..backends import (Attached, Backend, BackendError, BackendFault, CellsHeard, Contained,
                        SessionGone, ShellExit, describe_error)
from ..interrupts import Reaper
from ..startup import not_started
from .cell_input import CellInput
from .events import (CellLost, EventQueue, Exited, FrameSeen, KeeperChange, Notice, Output,
                     Reattached, SelfCloseAsked, ShellStarting, StartEnded)
from .types import Options, RunningCell, SHUTTING_DOWN, SessionError, ShellInfo

log = logging.getLogger("shell_kernel.session")

# How long a shell asked to end itself (close) may take before the reaper does it.
SELF_CLOSE_TIMEOUT = 3.0
# How long close() keeps trying to reach a host whose connection was lost, to
# clean up after the shell (a host that restarts), and the pause between tries.
CLEANUP_RECONNECT_SECONDS = 5.0
CLEANUP_RECONNECT_PAUSE = 0.5


class ShellOutput:
    """One started shell's output, on its backend's reader threads: frames
    found, output and frames pushed to the pump. Its scanners are its own
    (each reader feeds its stream's); flush() is the pump's, once the shell
    has ended and its readers with it."""

    def __init__(self, events: EventQueue, generation: int, token: str, backend: Contained):
        self._events = events
        self._generation = generation
        self._backend = backend
        self._scanners = {name: frames.FrameScanner(token, name) for name in protocol.STREAMS}

    def retoken(self, token: str) -> None:
        """An adopted named session's shell has the token an earlier kernel
        gave it: set before its output flows (catch_up.py opens it)."""
        self._scanners = {name: frames.FrameScanner(token, name) for name in protocol.STREAMS}

    def on_output(self, stream: str, data: bytes) -> None:
        mark = self._backend.received()
        for item in self._scanners[stream].feed(data):
            if isinstance(item, bytes):
                self._events.push(Output(self._generation, stream, item, mark), len(item))
            else:
                self._events.push(FrameSeen(self._generation, item, mark))

    def flush(self) -> list[tuple[str, bytes]]:
        """What the scanners held back (a partial frame) when the shell ended."""
        return [(stream, scanner.flush()) for stream, scanner in self._scanners.items()]


class Keeper:
    def __init__(self, backend_factory: Callable[[], Backend], options: Options,
                 events: EventQueue, say: Callable[[str], None],
                 terminal_opened: Callable[[], None]):
        self._backend_factory = backend_factory
        self.options = options
        self._events = events
        self._say = say  # a line for the waiting cell's stderr
        self._terminal_opened = terminal_opened  # the pump holds partial lines from now on
        self.input = CellInput()
        # the caller's (see the module docstring)
        self.backend: Contained | None = None
        self.info: ShellInfo | None = None
        self.generation = 0
        self.token = ""  # the current shell's frame token
        self.output: ShellOutput | None = None  # the current shell's
        self.start_notice: str | None = None  # the backend's, for the next cell
        self.catch_up_due: Attached | None = None  # attached to a named session's shell
        self.last_cwd: str | None = None  # of the last cell: what a new shell restores
        # the pump's (see _change)
        self._pump_thread: threading.Thread | None = None
        self.up = threading.Event()
        self.down = threading.Event()  # the opposite of up, to wait for
        self.lost: ShellExit | None = None  # why the shell is gone, until replaced
        self.attachments = 0  # successful reattaches: an interrupt waits for the next

    def owned_by(self, pump_thread: threading.Thread) -> None:
        """The thread that applies every change of up, lost and attachments."""
        self._pump_thread = pump_thread

    # ------------------------------------------ the backend's capabilities
    @property
    def description(self) -> str:
        return self.backend.capabilities.description if self.backend else "shell"

    @property
    def can_reattach(self) -> bool:
        return self.backend is not None and self.backend.capabilities.can_reattach

    @property
    def outlives_kernel(self) -> bool:
        return self.backend is not None and self.backend.capabilities.outlives_kernel

    @property
    def output_lag(self) -> float:
        return self.backend.capabilities.output_lag if self.backend else 0.0

    # ----------------------------------------------------------- liveness
    def _change(self, apply: Callable[[], None]) -> None:
        """Apply a change of up, lost or attachments on the pump's thread, the
        one writer: from another thread, as a request it waits for, but not
        while the session closes (close() reads none of them after; the pump
        may be slow to take it). Once the pump handles no more requests,
        nobody else reads them: applied here."""
        if threading.current_thread() is self._pump_thread:
            apply()
            return
        applied = threading.Event()
        if not self._events.push_unless_finished(KeeperChange(apply, applied)):
            apply()
        elif not self._events.closed:  # (closing: nobody reads them after; the pump applies it)
            applied.wait()

    def shell_lost(self, ended: ShellExit) -> bool:
        """The pump saw the shell end; False if it was already lost (a second
        report of the same end). The pump's thread."""
        if self.lost is not None and not self.up.is_set():
            return False
        self._mark_up(False)
        self.lost = ended
        return True

    def set_lost(self, lost: ShellExit | None) -> None:
        def apply() -> None:
            self.lost = lost
        self._change(apply)

    def shell_up(self, up: bool = True) -> None:
        """The shell answered its start (or was adopted), or it is given up."""
        self._change(lambda: self._mark_up(up))

    def _mark_up(self, up: bool) -> None:
        if up:
            self.down.clear()
            self.up.set()
        else:
            self.up.clear()
            self.down.set()

    def _reattached(self) -> None:
        def apply() -> None:
            self.lost = None
            self.attachments += 1
            self._mark_up(True)
        self._change(apply)

    # -------------------------------------------------------------- start
    def start(self, restore: tuple[str, str | None] | None = None) -> ShellInfo:
        """Start a shell and wait until it is ready for cells (see ShellSession.start)."""
        token = secrets.token_hex(8)
        try:
            backend = Contained(self._backend_factory())
        except Exception as err:  # noqa: BLE001 - e.g. an ssh config that cannot be used
            raise SessionError(f"Could not start the shell: {_as_text(err)}") from None
        generation = self.generation + 1
        output = ShellOutput(self._events, generation, token, backend)

        def take_over() -> None:
            self.generation, self.output, self.backend = generation, output, backend

        answer: Future = Future()
        # Taken over as the start is queued, atomically with the queue's
        # close(): a close either finds this backend in clean_up (and closes
        # it, which ends its start) or came first, and the shell does not start.
        if not self._events.push_unless_closed(ShellStarting(answer), take_over):
            try:
                backend.close()
            except BackendError:
                log.debug("closing a backend made as the session closed", exc_info=True)
            raise SessionError(SHUTTING_DOWN)
        try:
            started = backend.start(output.on_output,
                                    lambda ended: self._events.push(Exited(generation, ended)))
            self.start_notice = started.notice
            if started.attached is not None:
                return self._adopt(started.attached)
            script = protocol.session_script(token, self.options.snapshot_exports,
                                             started.preset_state_dir, restore,
                                             tty=self.options.tty, queries=self.options.queries,
                                             exports=self.options.exports,
                                             announce_where=self.options.announce_where)
            backend.send(protocol.bootstrap_lines(script))
        except BackendError as err:
            self.discard_backend(backend)
            if self._events.closed:  # close() closed it under the start
                raise SessionError(SHUTTING_DOWN) from None
            raise SessionError(f"Could not start the shell: {err}") from None
        try:
            ready = answer.result(self.options.start_timeout)
        except FutureTimeout:
            ready = f"no answer within {self.options.start_timeout:g} s"
        if not isinstance(ready, frames.ReadyFrame):
            if self._events.closed:  # clean_up ended this wait, and closes the backend
                raise SessionError(SHUTTING_DOWN)
            self.discard_backend(backend)
            raise SessionError(not_started(self.description, ready))
        self.info = ShellInfo(ready.pid or 0, ready.bash_version, ready.state_dir, ready.restored,
                              ready.where)
        log.info("shell ready: pid %s, bash %s, state dir %s",
                 self.info.pid, self.info.bash_version, self.info.state_dir)
        if (sweep := backend.sweeper()) is not None:
            threading.Thread(target=sweep, name="shell-kernel-sweep", daemon=True).start()
        self.token = token
        self.open_input()
        return self.info

    def _adopt(self, attached: Attached) -> ShellInfo:
        """A named session's shell, set up by an earlier kernel: no output flows
        until the first cell, which catches up first (catch_up.py)."""
        self.output.retoken(attached.token)
        self.info = ShellInfo(attached.shell_pid, attached.bash_version, attached.state_dir)
        self.catch_up_due = attached
        # Its output is the catch-up's, not start-up noise.
        self._events.push(StartEnded(attached.shell_pid))
        self.shell_up()
        log.info("attached to session %s: pid %s, state dir %s", attached.name,
                 attached.shell_pid, attached.state_dir)
        self.token = attached.token
        self.open_input()
        return self.info

    def open_input(self) -> None:
        """Open the terminal that the shell's cells read (see prompts.py); a
        host that cannot give one leaves them reading /dev/null."""
        if not self.options.prompts or self._events.closed:
            self.input.forget()
            return
        generation, info = self.generation, self.info
        if self.input.open(self.backend, self.token, info.pid, info.state_dir,
                           lambda frame: self._on_input_frame(generation, frame)):
            self._change(self._terminal_opened)
            self.input.settle()

    def _on_input_frame(self, generation: int, frame: frames.Frame | None) -> None:
        if frame is not None:  # None: the terminal is gone; cells read /dev/null until reopened
            self._events.push(FrameSeen(generation, frame))

    def discard_backend(self, backend: Contained) -> None:
        self.input.close()
        try:
            backend.close()  # first: it ends a fetch the pump may be waiting for
        except BackendError:
            log.debug("closing a failed backend", exc_info=True)
        self.shell_up(False)

    def reaper(self) -> Reaper | None:
        if self.backend is None or self.info is None:
            return None
        return Reaper(self.backend, self.info.pid, self.info.state_dir)

    # ------------------------------------------------------------ restart
    def restart(self) -> str:
        """Replace a shell that ended; say, for the user, what was lost."""
        lost = self.lost or ShellExit("it was not running")
        old_backend, old_reaper, old_info = self.backend, self.reaper(), self.info
        if lost.connection_lost and self.can_reattach:
            try:
                # Said as it happens, on the stderr of the cell that waits for it.
                self.reattach(self._say)
                return ""
            except SessionGone as err:
                lost = ShellExit(f"the remote session is gone: {err}")
            self.set_lost(lost)
        # The shell was seen to end, but its connection may have failed the
        # reaper since (a host going down): the new connection does it then.
        reaped = True
        if old_backend is not None:
            if not lost.connection_lost and old_reaper is not None:
                reaped = old_reaper.stop_everything()
            self.discard_backend(old_backend)
        restore = None
        if lost.connection_lost and old_info is not None:
            restore = (old_info.state_dir, self.last_cwd)
        self.start(restore)  # raises SessionError; the next cell tries again
        self.set_lost(None)
        if old_info is None:
            return ""  # the first shell: nothing was lost
        if restore is None:
            if not reaped:
                Reaper(self.backend, old_info.pid, old_info.state_dir).stop_everything()
            return ("A new shell was started: the working directory, variables, functions, "
                    "aliases and background jobs of the old shell are gone.")
        where = f" ({self.last_cwd})" if self.last_cwd else ""
        if self.info.restored == "refused":
            # Not ours (any more): neither trusted nor touched.
            return (f"The old shell was lost with the connection ({lost.reason}). Reconnected "
                    f"with a new shell in the same working directory{where}, but its exported "
                    f"variables were NOT restored: the old shell's directory {old_info.state_dir} "
                    "is not private to you any more (owned by another user or writable by "
                    "others), so nothing in it was trusted. Set your variables again.")
        # The old shell may live on at the far end: stop it and remove its files.
        Reaper(self.backend, old_info.pid, old_info.state_dir).stop_everything()
        return (f"The old shell was lost with the connection ({lost.reason}). Reconnected with "
                f"a new shell: its working directory{where} and exported variables were "
                "restored; plain variables, functions, aliases, shell options and background "
                "jobs are gone.")

    def lost_message(self, cell: RunningCell, lost: ShellExit, closing: bool) -> str:
        """What the user is told about a cell whose shell was lost (a shell
        that ended, not with its connection, is replaced at once: see
        replace_now, whose word follows)."""
        if cell.replaced:
            what = ("The shell did not stop after SIGINT, SIGTERM and SIGKILL to this cell's "
                    "processes (it ignores SIGINT, e.g. after trap '' INT), so it was replaced.")
        elif cell.not_sent:
            what = f"This cell did not run: it could not be sent to the shell ({lost.reason})."
        elif cell.given_up:
            what = f"This cell could not be interrupted ({lost.reason}), so its shell was given up."
        elif lost.connection_lost:
            what = (f"{lost.reason[:1].upper()}{lost.reason[1:]} while this cell ran: its "
                    "remaining output and its exit status are unknown.")
        else:
            what = f"The shell running this cell ended ({lost.reason})."
        if closing:
            return what
        if lost.connection_lost and self.can_reattach:
            return f"{what} The next cell tries again to reconnect to the same shell."
        if lost.connection_lost:
            return (f"{what} The next cell reconnects and starts a new shell in the same "
                    "working directory with the same exported variables.")
        return what

    @staticmethod
    def replace_now(lost: ShellExit, closing: bool) -> bool:
        """A shell that ended (not with its connection) is replaced as its cell
        ends, so that what was lost is told with that cell."""
        return not closing and not lost.connection_lost

    def replaced(self) -> str:
        """restart(), for a shell replace_now says to replace: what to tell."""
        try:
            return self.restart()
        except SessionError as err:
            return f"A new shell could not be started: {err} The next cell tries again."

    # ----------------------------------------------------------- reattach
    def reattach(self, notice: Callable[[str], None]) -> CellsHeard | None:
        """Reconnect to the same durable shell, retrying with backoff; returns
        what the host received of the cells' lines (Backend.reattach).

        Raises SessionGone, or SessionError once options.reattach_timeout is
        spent or the backend fails in a way no retry mends (BackendFault)."""
        backend = self.backend
        deadline = time.monotonic() + self.options.reattach_timeout
        delay, attempt = 0.5, 0
        while True:
            attempt += 1
            notice(f"[shell_kernel] Connection lost; reconnecting to the same shell "
                   f"(attempt {attempt})...\n")
            try:
                heard = backend.reattach()
            except SessionGone:
                raise
            except BackendFault as err:
                raise SessionError(f"Could not reconnect: {err}.") from None
            except BackendError as err:
                if time.monotonic() + delay > deadline:
                    raise SessionError(f"Could not reconnect within "
                                       f"{self.options.reattach_timeout:g} s ({err}).") from None
                log.info("reattach attempt %d failed: %s", attempt, err)
                time.sleep(delay)
                delay = min(delay * 2, 15.0)
                continue
            # Told first: the notice goes before the pump hears of the shell's
            # return, and so before the cell's resumed output it handles after.
            notice("[shell_kernel] Reconnected: same shell, output resumes where it stopped.\n")
            self._reattached()
            self.open_input()  # the old terminal went with the connection
            return heard

    def reattach_during_cell(self, generation: int, ended: ShellExit) -> None:
        """The connection dropped under a running cell (the session's I/O
        worker): get the shell back, and tell the pump how it goes."""
        notice = lambda text: self._events.push(Notice(generation, text))  # noqa: E731
        try:
            self._events.push(Reattached(generation, self.reattach(notice)))
        except SessionGone as err:
            self._events.push(CellLost(generation, ShellExit(
                f"the remote session is gone ({err}): the host may have rebooted or the "
                "session was reaped")))
        except SessionError as err:
            self._events.push(CellLost(generation, ShellExit(
                f"{ended.reason}. {err} The shell may still be running there; the next cell "
                "tries again", connection_lost=True)))

    # ----------------------------------------------------------- clean-up
    def clean_up(self, run_lock: threading.Lock) -> None:
        """At close: stop every process of the shell and remove its state
        directory (but a named session's shell stays), then release the backend.
        Called after the event queue closed; a start under way on another
        thread then fails (see start)."""
        backend, reaper = self.backend, self.reaper()  # (see start: the queue is closed)
        self._events.push(StartEnded())  # a start waiting for its shell stops waiting
        if backend is None:
            return
        if reaper is not None and not self.outlives_kernel and not self._end_itself(run_lock):
            self._stop_everything(reaper)
        self.discard_backend(backend)

    def _stop_everything(self, reaper: Reaper) -> None:
        """The reaper ends the shell and everything it started, and removes its
        files. An ephemeral shell lost with its connection may live on at the
        far end, and its files are there either way: a new connection, for
        the reaper only, does it then, tried for a few seconds (a host that
        restarts); also when the shell was seen to end but its connection
        then failed the reaper (a host going down ends the shell and the
        connection in either order)."""
        lost = self.lost
        if lost is None or self.can_reattach:
            reaper.stop_everything()
            return
        if not lost.connection_lost and reaper.stop_everything():
            return
        deadline = time.monotonic() + CLEANUP_RECONNECT_SECONDS
        while not self._clean_through_new_connection():
            if time.monotonic() + CLEANUP_RECONNECT_PAUSE > deadline:
                log.info("gave up cleaning up after the shell lost with its connection")
                return
            time.sleep(CLEANUP_RECONNECT_PAUSE)

    def _clean_through_new_connection(self) -> bool:
        """The reaper, through a connection of its own; False if the host
        could not be reached or told."""
        try:
            cleaner = Contained(self._backend_factory())
        except Exception as err:  # noqa: BLE001 - e.g. the ssh config changed meanwhile
            log.info("could not clean up after the shell lost with its connection: %s", err)
            return True  # no retry mends this
        try:
            cleaner.open_connection()
            return Reaper(cleaner, self.info.pid, self.info.state_dir).stop_everything()
        except BackendError as err:
            log.info("could not clean up after the shell lost with its connection: %s", err)
            return False
        finally:
            try:
                cleaner.close()
            except BackendError:
                log.debug("closing the cleaning connection", exc_info=True)

    def _end_itself(self, run_lock: threading.Lock) -> bool:
        """Have an idle shell that its connection or process owns end itself
        and everything it started (see __shell_kernel_close): cheaper than the
        reaper, which needs a side channel and scans the host's process table.
        False when it did not: a cell, query or start runs, the shell is
        durable (its wrapper leads its group) or declined."""
        if self.can_reattach or not self.up.is_set():
            return False
        if not run_lock.acquire(blocking=False):
            return False  # a cell is running: the reaper interrupts it too
        try:
            nonce, answered = secrets.token_hex(8), threading.Event()
            self._events.push(SelfCloseAsked(nonce, answered))
            self.backend.send(protocol.close_line(nonce))
            answered.wait(SELF_CLOSE_TIMEOUT)
            return not self.up.is_set()
        except BackendError as err:
            log.info("the shell could not be asked to end itself: %s", err)
            return False
        finally:
            run_lock.release()


def _as_text(err: BaseException) -> str:
    return str(err) if isinstance(err, (BackendError, ValueError)) and str(err) else describe_error(err)
