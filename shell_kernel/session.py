"""The persistent-shell session: one long-lived bash, driven cell by cell.

This layer frames cells, streams their output, detects their end, reads
their exit status, interrupts and escalates (through shell_kernel.interrupts),
and recovers when the shell dies. It knows nothing about Jupyter messages or
sockets, and reaches the shell only through a Backend's verbs.
"""

from __future__ import annotations

import collections
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Union

from . import prompts, protocol
from .acknowledgements import Acknowledgements
from .failure import failed_command
from .backends import (Attached, Backend, BackendError, BackendFault, Contained, SessionGone,
                       ShellExit, describe_error)
from .interrupts import Escalation, EscalationResult, Outcome, Reaper
from .named_sessions import catch_up_end, catch_up_header
from .options import default, output_limit_bytes
from .prompts import InputTerminal, Prompt
from .output import (TTY_TIE_SECONDS, Coalescer, DisplaySink, OutputLimit, ScreenClears, Sink,
                     StreamDecoder)
from .startup import not_started

log = logging.getLogger("shell_kernel.session")

# Reader threads block once this much output waits for the pump: the shell
# then blocks on its pipe, so memory stays bounded whatever a cell prints.
MAX_QUEUED_BYTES = 8 << 20
# An interrupt of a named session's cell waits this long for a shutdown
# request that would make it jupyter_client's own (see _closed_soon).
SHUTDOWN_AFTER_INTERRUPT = 0.5
# How long a shell asked to end itself (close) may take before the reaper does it.
SELF_CLOSE_TIMEOUT = 3.0
# How long close() keeps trying to reach a host whose connection was lost, to
# clean up after the shell (a host that restarts), and the pause between tries.
CLEANUP_RECONNECT_SECONDS = 5.0
CLEANUP_RECONNECT_PAUSE = 0.5


@dataclass
class Options:
    interrupt_grace: float = default("interrupt_grace")  # seconds between SIGINT and SIGTERM
    #: bytes of one cell's output sent to the frontend
    output_limit: int = output_limit_bytes(default("output_limit_mb"))
    spill_dir: Path = Path(default("spill_dir"))
    start_timeout: float = default("start_timeout")
    flush_interval: float = 0.05
    #: Keep a copy of the exported variables after every cell, so that a
    #: shell lost with its connection can be followed by one that has them.
    snapshot_exports: bool = False
    #: How long to keep trying to reattach a durable session after a drop.
    reattach_timeout: float = 120.0
    #: Give cells a terminal to read, so that a prompt can be answered (see
    #: prompts.py); without it, cells read /dev/null.
    prompts: bool = True
    #: Cells write to two pseudo-terminals on the host (see shell/tty.bash).
    tty: bool = default("tty")


@dataclass
class CellRecord:
    exit_code: int | None  # None: not known here (the cell runs on in a named session)
    duration_s: float
    cwd: str | None = None
    interrupted: bool = False
    #: Set when the shell ended during the cell: what happened, for the user.
    shell_lost: str | None = None
    spill_path: str | None = None
    #: For a failed cell: the command that set the status, and its line in the cell.
    command: str | None = None
    line: int | None = None
    #: The kernel left a named session while it ran this cell, which goes on there.
    detached: bool = False


class SessionError(RuntimeError):
    """The session cannot run cells; the message is written for the user."""


@dataclass
class ShellInfo:
    pid: int
    bash_version: str
    state_dir: str
    restored: str = ""  # see protocol.ReadyFrame


# ------------------------------------------------------ events for the pump
# Every event carries the generation of the shell it is about: events of a
# replaced shell are dropped.
@dataclass(frozen=True)
class Output:
    generation: int
    stream: str
    data: bytes
    mark: object = None  # the backend's received() after it (see Acknowledgements)


@dataclass(frozen=True)
class FrameSeen:
    generation: int
    frame: protocol.Frame
    mark: object = None


@dataclass(frozen=True)
class Notice:
    """A line for the running cell's stderr (e.g. reconnect progress)."""
    generation: int
    text: str


@dataclass(frozen=True)
class Exited:
    """The backend's on_exit: the shell ended, or its connection was lost."""
    generation: int
    ended: ShellExit


@dataclass(frozen=True)
class CellLost:
    """The running cell cannot finish (e.g. its durable session is gone)."""
    generation: int
    ended: ShellExit


@dataclass(frozen=True)
class Escalated:
    """The interrupt thread's outcome for one cell."""
    generation: int
    seq: int
    result: EscalationResult


Event = Union[Output, FrameSeen, Notice, Exited, CellLost, Escalated]


@dataclass
class RunningCell:
    """A running cell. Its progress fields are the pump thread's."""
    seq: int
    generation: int
    limit: OutputLimit
    started: float = field(default_factory=time.monotonic)
    ended: dict = field(default_factory=lambda: {"stdout": False, "stderr": False})
    status: int | None = None
    cwd: str | None = None
    source: bytes = b""
    failed: tuple = (None, None)  # (line, command) from the end frame
    replaced: bool = False
    given_up: bool = False  # the interrupt could not reach its processes
    not_sent: bool = False  # the cell never reached the shell
    detached: bool = False  # close() left it running in a named session
    key_mode: bool = False  # stopped: a program of it reads keys (what it prints is not shown)
    lost: ShellExit | None = None
    done: threading.Event = field(default_factory=threading.Event)
    # Set by interrupt() under the session's _cond.
    interrupted: bool = False
    escalating: bool = False
    #: A named session's cell that an earlier kernel sent (see _catch_up): it
    #: ends when the barrier with this nonce has come back on both streams.
    catch_up: str | None = None
    barriers: set = field(default_factory=set)
    #: Asks the user a Prompt and returns the answer (None: end-of-file);
    #: None when nobody can be asked (an automated run). The caller's thread.
    ask: Callable[[Prompt], "str | None"] | None = None
    #: Reads reported by the terminal's watcher, each with when it was
    #: reported; the pump's.
    reads: list = field(default_factory=list)
    #: The streams on which each read's mark came back (protocol.read_mark
    #: nonce -> streams); the pump's.
    read_marks: dict = field(default_factory=dict)
    prompt: Prompt | None = None  # the open question, set by the pump, cleared by the caller
    told_no_input: bool = False
    wake: threading.Event = field(default_factory=threading.Event)  # done, or a prompt


class ShellSession:
    """One persistent shell and the cells run in it.

    Threads, and what each one owns:
    - the caller (the kernel's request handler; start, run, query, close,
      serialised by _run_lock): _backend, _info, _seq, _query_seq,
      _last_cwd; it sets _generation and _scanners under _cond, and waits
      on a cell's done event.
    - the backend's reader thread(s): feed the current generation's
      _scanners (one per stream, fed by one reader at a time) and push
      events; nothing else.
    - the pump (_pump): every event, in order; it owns the running cell's
      progress (output, end frames, status, lost/replaced), _ready_fields,
      _startup_output, _noise, the decoders and the coalescer, and it is the
      only thread that sets a cell's done event, except close().
    - the interrupt thread (one per interrupt): runs an Escalation and
      pushes its outcome (Escalated); it writes no session state.
    - the reattach thread (durable backends, connection lost mid-cell):
      reconnects and reports progress and failure as events.
    _shell_up (an Event) is set when the shell is ready, cleared when it is
    lost; _lost (why) is set by the pump with it, and cleared by whichever
    thread brings the shell back (_restart, _reattach); _attachments counts
    reattaches. _closing is set once by close(). All may be read anywhere.
    """

    def __init__(self, backend_factory: Callable[[], Backend], sink: Sink,
                 options: Options | None = None, display_sink: DisplaySink | None = None,
                 clear_sink: Callable[[], None] | None = None):
        self._backend_factory = backend_factory
        self._sink = sink
        self._display_sink = display_sink
        self._clear_sink = clear_sink  # the output printed a screen clear (`clear`)
        self.options = options or Options()
        self._run_lock = threading.Lock()
        self._closing = False
        self._shell_up = threading.Event()
        # caller thread
        self._backend: Contained | None = None
        self._info: ShellInfo | None = None
        self._generation = 0
        self._seq = 0
        self._query_seq = 0
        self._last_cwd: str | None = None
        self._lost: ShellExit | None = None  # why the shell is gone, until replaced
        self._attachments = 0  # successful reattaches: an interrupt waits for the next
        self._catch_up_due: Attached | None = None  # attached to a named session's shell
        self._start_notice: str | None = None  # the backend's, for the next cell
        self._token = ""  # the current shell's frame token
        self._input: InputTerminal | None = None  # what cells read (see _open_input)
        self._stdin_points_at: str | None = _UNSET  # what the shell's cells read now
        self._stdin_was_read = False  # a cell read the terminal: reset its modes (pump sets)
        # reader threads -> pump
        self._cond = threading.Condition()
        self._events: collections.deque = collections.deque()
        self._queued = 0
        self._scanners: dict[str, protocol.FrameScanner] = {}
        # pump thread
        self._cell: RunningCell | None = None
        self._held_prompt: Prompt | None = None  # the coalescer holds output behind its text
        self._ready = threading.Event()
        self._ready_fields: dict = {}
        self._startup_output = b""
        self._noise: protocol.TtyNoiseFilter | None = None
        self._state_dir = ""  # the ready shell's, where payload files are
        self._reply: tuple[int, bytes] | None = None  # (query seq, answer)
        self._reply_ready = threading.Event()
        # close(): (nonce, set when the shell ended or declined to end itself)
        self._self_close: tuple[str, threading.Event] | None = None
        self._decoders = {name: StreamDecoder() for name in protocol.STREAMS}
        self._clears = {name: ScreenClears() for name in protocol.STREAMS}
        self._shown = Acknowledgements(lambda mark: self._backend and self._backend.acknowledge(mark))
        self._coalescer = Coalescer(self._show, interval=self.options.flush_interval)
        if self.options.tty:  # two `script` copies: see output.TTY_TIE_SECONDS
            self._coalescer.tie_window = TTY_TIE_SECONDS
        self._pump_thread = threading.Thread(target=self._pump, name="shell-kernel-pump", daemon=True)
        self._pump_thread.start()

    # ----------------------------------------------------------------- start
    @property
    def info(self) -> ShellInfo | None:
        return self._info

    @property
    def description(self) -> str:
        return self._backend.capabilities.description if self._backend else "shell"

    def start(self, restore: tuple[str, str | None] | None = None) -> ShellInfo:
        """Start a shell and wait until it is ready for cells.

        restore: (state dir, cwd) of a shell lost with its connection, whose
        exported variables and working directory the new shell takes over.
        """
        token = secrets.token_hex(8)
        try:
            backend = Contained(self._backend_factory())
        except Exception as err:  # noqa: BLE001 - e.g. an ssh config that cannot be used
            raise SessionError(f"Could not start the shell: {_as_text(err)}") from None
        with self._cond:
            self._generation += 1
            generation = self._generation
            self._scanners = {name: protocol.FrameScanner(token, name) for name in protocol.STREAMS}
            self._noise = None
            self._ready.clear()
            self._ready_fields = {}
            self._startup_output = b""
        self._backend = backend
        try:
            started = backend.start(lambda stream, data: self._on_output(generation, stream, data),
                                    lambda ended: self._push(Exited(generation, ended)))
            self._start_notice = started.notice
            if started.attached is not None:
                return self._adopt(started.attached)
            script = protocol.session_script(token, self.options.snapshot_exports,
                                             started.preset_state_dir, restore,
                                             tty=self.options.tty)
            backend.send(protocol.bootstrap_lines(script))
        except BackendError as err:
            self._discard_backend(backend)
            raise SessionError(f"Could not start the shell: {err}") from None
        if not self._ready.wait(self.options.start_timeout) or not self._shell_up.is_set():
            reason = self._ready_fields.get("failed", f"no answer within {self.options.start_timeout:g} s")
            self._discard_backend(backend)
            raise SessionError(not_started(backend.capabilities.description, reason))
        ready: protocol.ReadyFrame = self._ready_fields["stdout"]
        self._info = ShellInfo(ready.pid or 0, ready.bash_version, ready.state_dir, ready.restored)
        with self._cond:
            self._noise = protocol.TtyNoiseFilter(self._info.pid)
        log.info("shell ready: pid %s, bash %s, state dir %s",
                 self._info.pid, self._info.bash_version, self._info.state_dir)
        threading.Thread(target=backend.sweep, name="shell-kernel-sweep", daemon=True).start()
        self._token = token
        self._open_input()
        return self._info

    def _adopt(self, attached: Attached) -> ShellInfo:
        """A named session's shell, set up by an earlier kernel: no output flows
        until the first cell, which catches up first (_catch_up)."""
        with self._cond:
            self._scanners = {name: protocol.FrameScanner(attached.token, name)
                              for name in protocol.STREAMS}
            self._noise = protocol.TtyNoiseFilter(attached.shell_pid)
        self._info = ShellInfo(attached.shell_pid, attached.bash_version, attached.state_dir)
        self._state_dir = attached.state_dir
        self._seq = max(self._seq, attached.last_seq)  # the shell numbers its cells on
        self._catch_up_due = attached
        self._ready.set()
        self._shell_up.set()
        log.info("attached to session %s: pid %s, state dir %s", attached.name,
                 attached.shell_pid, attached.state_dir)
        self._token = attached.token
        self._open_input()
        return self._info

    def _open_input(self) -> None:
        """Open the terminal that the shell's cells read (see prompts.py); a
        host that cannot give one leaves them reading /dev/null."""
        self._close_input()
        self._stdin_points_at = _UNSET  # a new shell, or one whose terminal went with a connection
        if not self.options.prompts or self._closing:
            return
        generation, info = self._generation, self._info
        try:
            terminal = InputTerminal(self._backend, self._token, info.pid, info.state_dir,
                                     lambda frame: self._on_input_frame(generation, frame))
        except BackendError as err:
            log.info("cells read /dev/null: %s", err)
            return
        with self._cond:
            self._input = terminal
        self._coalescer.partial_hold = prompts.PARTIAL_HOLD_SECONDS
        # Here rather than before a cell: a cell must go out at once (a durable
        # session's connection may drop a moment later, with the cell running).
        if terminal.path(prompts.START_SECONDS) is None:
            log.info("no terminal within %g s: cells read /dev/null until one comes",
                     prompts.START_SECONDS)

    def _close_input(self) -> None:
        with self._cond:
            terminal, self._input = self._input, None
        if terminal is not None:
            terminal.close()

    def _on_input_frame(self, generation: int, frame: protocol.Frame | None) -> None:
        if frame is not None:  # None: the terminal is gone; cells read /dev/null until reopened
            self._push(FrameSeen(generation, frame))

    def _discard_backend(self, backend: Contained) -> None:
        self._shell_up.clear()
        self._close_input()
        try:
            backend.close()
        except BackendError:
            log.debug("closing a failed backend", exc_info=True)

    def _reaper(self) -> Reaper | None:
        if self._backend is None or self._info is None:
            return None
        return Reaper(self._backend, self._info.pid, self._info.state_dir)

    # ------------------------------------------------------------- run cells
    def run(self, code: str, ask: Callable[[Prompt], str | None] | None = None) -> CellRecord:
        """Run one cell. ask(prompt) answers a prompt (None: end-of-file); it is
        called on this thread. Without it, a read gets end-of-file and a notice."""
        with self._run_lock:
            if self._closing:
                raise SessionError("The kernel is shutting down.")
            if not self._shell_up.is_set():
                notice = self._restart()
                if notice:
                    self._sink("stderr", f"[shell_kernel] {notice}\n")
            if self._start_notice:
                self._sink("stderr", f"[shell_kernel] {self._start_notice}\n")
                self._start_notice = None
            if self._catch_up_due is not None:
                caught_up = self._catch_up()
                if caught_up is not None:
                    return caught_up
            prepared = protocol.prepare_cell(code)
            if prepared.removed_nul:
                self._sink("stderr", "[shell_kernel] NUL bytes in the cell were removed "
                           "(bash cannot hold them in a command).\n")
            with self._cond:
                self._seq += 1
                cell = RunningCell(self._seq, self._generation,
                             OutputLimit(self.options.output_limit, self.options.spill_dir),
                             source=prepared.source, ask=ask)
                self._cell = cell
                terminal = self._input
            log.debug("cell %d starts", cell.seq)
            stdin = terminal.path(0) if terminal is not None else None
            lines = protocol.eval_lines(prepared.source, cell.seq)
            if stdin != self._stdin_points_at:
                lines = protocol.stdin_line(stdin) + lines
                self._stdin_points_at = stdin
            elif self._stdin_was_read:
                lines = protocol.RESET_STDIN_LINE + lines
            self._stdin_was_read = False
            try:
                self._backend.send(lines)
            except BackendError as err:
                # Never started: for a durable backend the shell itself is fine.
                cell.not_sent = True
                self._push(CellLost(cell.generation, ShellExit(
                    str(err), connection_lost=self._backend.capabilities.can_reattach)))
            self._wait_answering(cell, terminal)
            with self._cond:
                self._cell = None
            cell.limit.close()
            if cell.cwd is not None:
                self._last_cwd = cell.cwd
            return self._result(cell)

    def _wait_answering(self, cell: RunningCell, terminal: InputTerminal | None) -> None:
        """Wait for the cell to end, answering its prompts on the way."""
        while not cell.done.is_set():
            cell.wake.wait(0.5)
            with self._cond:
                cell.wake.clear()
                prompt = cell.prompt
            if prompt is None or cell.done.is_set():
                continue
            answer = cell.ask(prompt)
            if not prompt.over.is_set() and terminal is not None:
                prompt.answered = "eof" if prompts.is_eof(answer) else "line"
                terminal.answer(answer, prompt.keys)
            del answer  # perhaps a password: not kept
            with self._cond:
                cell.prompt = None
                self._cond.notify_all()  # the pump may ask the next question

    def _catch_up(self) -> CellRecord | None:
        """Show, in the first cell after attaching to a named session, what the
        session printed since the last kernel received its output, and the end
        of the cell that kernel had sent (waiting for it, if it still runs).
        The shell prints a barrier after that cell; the backlog ends there.
        Returns the result for this cell when its own code must not run (the
        wait was interrupted, or the shell was lost)."""
        attached, self._catch_up_due = self._catch_up_due, None
        if attached.last_seq and (attached.running or attached.backlog):
            self._sink("stderr", catch_up_header(attached))
        with self._cond:
            cell = RunningCell(attached.last_seq, self._generation,
                         OutputLimit(self.options.output_limit, self.options.spill_dir),
                         catch_up=secrets.token_hex(8))
            self._cell = cell
        try:
            self._backend.open_output()
            self._backend.send(protocol.barrier_line(cell.catch_up))
        except BackendError as err:
            cell.not_sent = True
            self._push(CellLost(cell.generation, ShellExit(str(err), connection_lost=True)))
        while not cell.done.wait(0.5):
            pass
        with self._cond:
            self._cell = None
        cell.limit.close()
        if cell.lost is None and cell.status is not None:
            self._sink("stderr", catch_up_end(attached, cell.status))
        if cell.lost is not None or cell.interrupted:
            return self._result(cell)
        return None

    def _result(self, cell: RunningCell) -> CellRecord:
        duration = time.monotonic() - cell.started
        spill = str(cell.limit.spill_path) if cell.limit.spill_path else None
        if cell.detached:
            return CellRecord(None, duration, None, cell.interrupted, spill_path=spill,
                              detached=True)
        if cell.lost is None:
            status = cell.status if cell.status is not None else 1
            if cell.interrupted and (status == 0 or cell.key_mode):
                status = 130  # stopped (e.g. `watch`, which exits 0 on SIGINT): not a success
            command, line = (failed_command(cell.source.decode("utf-8", "replace"), *cell.failed)
                             if status else (None, None))
            return CellRecord(status, duration, cell.cwd, cell.interrupted, spill_path=spill,
                              command=command, line=line)
        lost = cell.lost
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
        if self._closing:
            message = what
        elif lost.connection_lost and self._backend.capabilities.can_reattach:
            message = f"{what} The next cell tries again to reconnect to the same shell."
        elif lost.connection_lost:
            message = (f"{what} The next cell reconnects and starts a new shell in the same "
                       "working directory with the same exported variables.")
        else:
            try:
                message = f"{what} {self._restart()}"
            except SessionError as err:
                message = f"{what} A new shell could not be started: {err} The next cell tries again."
        status = lost.status if lost.status is not None else 1
        return CellRecord(status, duration, None, cell.interrupted, message, spill)

    def _restart(self) -> str:
        """Replace a shell that ended; say, for the user, what was lost."""
        lost = self._lost or ShellExit("it was not running")
        old_backend, old_reaper, old_info = self._backend, self._reaper(), self._info
        if lost.connection_lost and old_backend is not None and old_backend.capabilities.can_reattach:
            try:
                # Said as it happens, on the stderr of the cell that waits for it.
                self._reattach(lambda text: self._sink("stderr", text))
                return ""
            except SessionGone as err:
                lost = ShellExit(f"the remote session is gone: {err}")
            self._lost = lost
        # The shell was seen to end, but its connection may have failed the
        # reaper since (a host going down): the new connection does it then.
        reaped = True
        if old_backend is not None:
            if not lost.connection_lost and old_reaper is not None:
                reaped = old_reaper.stop_everything()
            self._discard_backend(old_backend)
        restore = None
        if lost.connection_lost and old_info is not None:
            restore = (old_info.state_dir, self._last_cwd)
        self.start(restore)  # raises SessionError; the next cell tries again
        self._lost = None
        if old_info is None:
            return ""  # the first shell: nothing was lost
        if restore is None:
            if not reaped:
                Reaper(self._backend, old_info.pid, old_info.state_dir).stop_everything()
            return ("A new shell was started: the working directory, variables, functions, "
                    "aliases and background jobs of the old shell are gone.")
        where = f" ({self._last_cwd})" if self._last_cwd else ""
        if self._info.restored == "refused":
            # Not ours (any more): neither trusted nor touched.
            return (f"The old shell was lost with the connection ({lost.reason}). Reconnected "
                    f"with a new shell in the same working directory{where}, but its exported "
                    f"variables were NOT restored: the old shell's directory {old_info.state_dir} "
                    "is not private to you any more (owned by another user or writable by "
                    "others), so nothing in it was trusted. Set your variables again.")
        # The old shell may live on at the far end: stop it and remove its files.
        Reaper(self._backend, old_info.pid, old_info.state_dir).stop_everything()
        return (f"The old shell was lost with the connection ({lost.reason}). Reconnected with "
                f"a new shell: its working directory{where} and exported variables were "
                "restored; plain variables, functions, aliases, shell options and background "
                "jobs are gone.")

    # ------------------------------------------------------------- reattach
    def _reattach(self, notice: Callable[[str], None]) -> None:
        """Reconnect to the same durable shell, retrying with backoff.

        Raises SessionGone, or SessionError once options.reattach_timeout is
        spent or the backend fails in a way no retry mends (BackendFault)."""
        backend = self._backend
        deadline = time.monotonic() + self.options.reattach_timeout
        delay, attempt = 0.5, 0
        while True:
            attempt += 1
            notice(f"[shell_kernel] Connection lost; reconnecting to the same shell "
                   f"(attempt {attempt})...\n")
            try:
                backend.reattach()
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
            self._lost = None
            self._attachments += 1
            self._shell_up.set()
            notice("[shell_kernel] Reconnected: same shell, output resumes where it stopped.\n")
            self._open_input()  # the old terminal went with the connection
            return

    def _reattach_during_cell(self, generation: int, ended: ShellExit) -> None:
        notice = lambda text: self._push(Notice(generation, text))  # noqa: E731
        try:
            self._reattach(notice)
        except SessionGone as err:
            self._push(CellLost(generation, ShellExit(
                f"the remote session is gone ({err}): the host may have rebooted or the "
                "session was reaped")))
        except SessionError as err:
            self._push(CellLost(generation, ShellExit(
                f"{ended.reason}. {err} The shell may still be running there; the next cell "
                "tries again", connection_lost=True)))

    # --------------------------------------------------------------- queries
    def query(self, what: str, text: str, timeout: float = 10.0) -> str | None:
        """Ask the idle shell something (see protocol.QUERIES); None if it cannot answer."""
        if not self._run_lock.acquire(timeout=timeout):
            return None
        try:
            if not self._shell_up.is_set() or self._closing:
                return None
            self._query_seq += 1
            seq = self._query_seq
            self._reply_ready.clear()
            self._backend.send(protocol.query_line(seq, what, text))
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self._shell_up.is_set():
                if self._reply_ready.wait(0.1) and self._reply and self._reply[0] == seq:
                    return self._reply[1].decode("utf-8", "replace")
            log.warning("query %s got no answer within %g s; interrupting it", what, timeout)
            reaper = self._reaper()
            if reaper is not None:
                reaper.signal_cell("INT")
            return None
        except BackendError as err:
            log.warning("query %s failed: %s", what, err)
            return None
        finally:
            self._run_lock.release()

    # ------------------------------------------------------------ interrupts
    def interrupt(self) -> None:
        """Ctrl-C for the running cell; harmless when idle. Returns at once."""
        with self._cond:
            cell = self._cell
            log.debug("interrupt requested; running cell: %s", cell and cell.seq)
            if cell is None or cell.escalating or cell.done.is_set():
                return
            cell.escalating = True
            cell.interrupted = True
        threading.Thread(target=self._interrupt_cell, args=(cell,),
                         name="shell-kernel-interrupt", daemon=True).start()

    def _interrupt_cell(self, cell: RunningCell) -> None:
        try:
            if self._backend.capabilities.outlives_kernel and self._closed_soon():
                return  # a named session's cell outlives the kernel (see _closed_soon)
            result = self._escalate(cell)
            if result.outcome is Outcome.REPLACE:
                self._push(Escalated(cell.generation, cell.seq, result))
                self._reaper().stop_everything()  # the shell's end then ends the cell
            elif result.outcome is Outcome.UNREACHABLE:
                log.warning("interrupt of cell %d failed: %s", cell.seq, result.error)
                self._push(Escalated(cell.generation, cell.seq, result))
        finally:
            with self._cond:
                cell.escalating = False  # a later interrupt of this cell may try again

    def _closed_soon(self) -> bool:
        """jupyter_client interrupts a kernel before every shutdown and restart
        (KernelManager.shutdown_kernel), and the shutdown request follows at
        once: True if it comes within SHUTDOWN_AFTER_INTERRUPT seconds."""
        deadline = time.monotonic() + SHUTDOWN_AFTER_INTERRUPT
        while time.monotonic() < deadline:
            if self._closing:
                return True
            time.sleep(0.02)
        return self._closing

    def _escalate(self, cell: RunningCell) -> EscalationResult:
        attachments = self._attachments
        backend, reaper = self._backend, self._reaper()
        resend = protocol.post_line(cell.seq) + (
            protocol.barrier_line(cell.catch_up) if cell.catch_up else b"")
        result = Escalation(reaper, lambda: backend.send(resend),
                            cell.done.wait, self.options.interrupt_grace).run()
        if result.outcome is Outcome.UNREACHABLE and backend.capabilities.can_reattach \
                and self._wait_reattached(cell, attachments):
            # The same shell, through a new connection: interrupt it now.
            return self._escalate(cell)
        return result

    def _wait_reattached(self, cell: RunningCell, attachments: int) -> bool:
        """Wait while a durable session reconnects; True once it did, with the
        cell still running. A side channel that failed on a live connection
        is treated as a dropped connection, so that the session reconnects."""
        if self._shell_up.is_set() and not cell.done.is_set():
            self._push(Exited(cell.generation, ShellExit(
                "the side channel failed", connection_lost=True)))
        deadline = time.monotonic() + self.options.reattach_timeout
        while not cell.done.wait(0.1):
            if self._attachments != attachments and self._shell_up.is_set():
                return True
            if time.monotonic() > deadline:
                break
        return False

    # -------------------------------------------------------------- shutdown
    def close(self) -> None:
        """Stop every process of the session and remove its state directory
        (but a named session's shell stays, for the next kernel)."""
        self._closing = True
        backend, reaper = self._backend, self._reaper()
        if backend is not None:
            if reaper is not None and not backend.capabilities.outlives_kernel and not self._end_itself():
                self._stop_everything(reaper)
            self._discard_backend(backend)
        with self._cond:
            cell = self._cell
            if cell is not None and not cell.done.is_set():
                if backend is not None and backend.capabilities.outlives_kernel:
                    cell.detached = True  # the named session's shell runs it on
                else:  # the pump may be gone before the shell's end reaches it
                    cell.lost = ShellExit("the kernel is shutting down")
                cell.done.set()
            self._cond.notify_all()
        self._pump_thread.join(timeout=2)

    def _stop_everything(self, reaper: Reaper) -> None:
        """The reaper ends the shell and everything it started, and removes its
        files. An ephemeral shell lost with its connection may live on at the
        far end, and its files are there either way: a new connection, for
        the reaper only, does it then, tried for a few seconds (a host that
        restarts); also when the shell was seen to end but its connection
        then failed the reaper (a host going down ends the shell and the
        connection in either order)."""
        lost = self._lost
        if lost is None or self._backend.capabilities.can_reattach:
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
            return Reaper(cleaner, self._info.pid, self._info.state_dir).stop_everything()
        except BackendError as err:
            log.info("could not clean up after the shell lost with its connection: %s", err)
            return False
        finally:
            try:
                cleaner.close()
            except BackendError:
                log.debug("closing the cleaning connection", exc_info=True)

    def _end_itself(self) -> bool:
        """Have an idle shell that its connection or process owns end itself
        and everything it started (see __shell_kernel_close): cheaper than the
        reaper, which needs a side channel and scans the host's process table.
        False when it did not: a cell or query runs, the shell is durable
        (its wrapper leads its group) or declined."""
        if self._backend.capabilities.can_reattach or not self._shell_up.is_set():
            return False
        if not self._run_lock.acquire(blocking=False):
            return False  # a cell is running: the reaper interrupts it too
        try:
            nonce, answered = secrets.token_hex(8), threading.Event()
            with self._cond:
                self._self_close = (nonce, answered)
            self._backend.send(protocol.close_line(nonce))
            answered.wait(SELF_CLOSE_TIMEOUT)
            return not self._shell_up.is_set()
        except BackendError as err:
            log.info("the shell could not be asked to end itself: %s", err)
            return False
        finally:
            self._run_lock.release()

    # ------------------------------------------------ backend threads -> pump
    def _on_output(self, generation: int, stream: str, data: bytes) -> None:
        scanner = self._scanners.get(stream)
        if scanner is None:
            return
        backend = self._backend
        mark = backend.received() if backend is not None else None
        for item in scanner.feed(data):
            if isinstance(item, bytes):
                self._push(Output(generation, stream, item, mark), len(item))
            else:
                self._push(FrameSeen(generation, item, mark))

    def _push(self, event: Event, size: int = 0) -> None:
        with self._cond:
            while self._queued > MAX_QUEUED_BYTES and not self._closing:
                self._cond.wait(0.5)
            self._events.append(event)
            self._queued += size
            self._cond.notify_all()

    def _pump(self) -> None:
        while True:
            with self._cond:
                while not self._events and not self._closing:
                    deadline = min((due for due in (self._coalescer.deadline(), self._prompt_due())
                                    if due is not None), default=None)
                    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if not self._cond.wait(timeout) and deadline is not None:
                        break
                if self._closing and not self._events:
                    return
                events = list(self._events)
                self._events.clear()
                self._queued = 0
                self._cond.notify_all()
            for event in events:
                try:
                    self._handle(event)
                except Exception:  # noqa: BLE001 - the pump must outlive one bad event
                    log.exception("while handling %s", type(event).__name__)
            try:
                self._settle_prompt()
                self._prompt_if_due()
            except Exception:  # noqa: BLE001
                log.exception("while prompting")
            self._coalescer.flush_if_due()
            if self._coalescer.deadline() is None:  # all shown: frames too are acknowledged
                self._shown.before_showing()

    def _handle(self, event: Event) -> None:
        handler = self._HANDLERS.get(type(event))
        if handler is None:
            log.error("bug: the pump got an unknown event %r", event)
        elif event.generation == self._generation:
            self._shown.handled(getattr(event, "mark", None))
            handler(self, event)

    def _show(self, stream: str, text: str) -> None:
        self._shown.before_showing()
        self._sink(stream, text)

    def _on_output_event(self, event: Output) -> None:
        self._settle_prompt()  # an answer given is behind this output
        self._handle_data(event.stream, event.data)

    def _on_notice(self, event: Notice) -> None:
        self._coalescer.add("stderr", event.text)

    def _on_cell_lost(self, event: CellLost) -> None:
        cell = self._cell
        if cell is not None and not cell.done.is_set():
            self._finish_lost(cell, event.ended)

    def _on_escalated(self, event: Escalated) -> None:
        cell = self._cell
        if cell is None or cell.seq != event.seq or cell.done.is_set():
            return
        if event.result.outcome is Outcome.REPLACE:
            cell.replaced = True  # the shell's end, which follows, ends the cell
        else:
            cell.given_up = True
            self._finish_lost(cell, ShellExit(str(event.result.error)))

    def _handle_data(self, stream: str, data: bytes) -> None:
        if not self._ready.is_set():
            # rc-file noise: never shown, but kept briefly to explain a failed start.
            self._startup_output = (self._startup_output + data)[-2000:]
            return
        if stream == "stderr" and self._noise is not None:
            data = self._noise.feed(data)
        cell = self._cell
        if cell is not None and not cell.ended[stream] and cell.generation == self._generation:
            if cell.key_mode:
                return  # a full-screen program's last words (its screen, "Vim: Finished.")
            data, notice = cell.limit.admit(data)
            if notice:
                self._add_text(stream, self._decoders[stream].decode(data))
                self._coalescer.add("stderr", notice)
                return
        self._add_text(stream, self._decoders[stream].decode(data))

    def _add_text(self, stream: str, text: str) -> None:
        """Output for the coalescer, where a screen clear, as in a terminal,
        clears what the cell showed so far (see ScreenClears)."""
        if self._clear_sink is None:
            self._coalescer.add(stream, text)
            return
        cleared, text = self._clears[stream].feed(text)
        if cleared:
            self._coalescer.discard()
            self._clear_sink()
        self._coalescer.add(stream, text)

    def _on_frame(self, event: FrameSeen) -> None:
        frame = event.frame
        if isinstance(frame, protocol.DisplayFrame):
            self._coalescer.flush()  # what was printed before the display shows before it
            data = self._fetch(frame.payload)
            if data is None:
                self._coalescer.add("stderr", "[shell_kernel] display: the data could not be "
                                    "fetched from the shell's host (see the kernel log).\n")
            elif self._display_sink is not None:
                self._shown.before_showing()
                self._display_sink(frame.mime, data, frame.display_id)
        elif isinstance(frame, protocol.ReplyFrame):
            self._reply = (frame.seq, self._fetch(frame.payload) or b"")
            self._reply_ready.set()
        elif isinstance(frame, protocol.BarrierFrame):
            self._on_barrier(frame)
        elif isinstance(frame, protocol.ReadyFrame):
            self._on_ready(frame)
        elif isinstance(frame, protocol.EndFrame):
            self._on_end(frame)
        elif isinstance(frame, protocol.ReadingFrame):
            self._on_reading(frame)
        elif isinstance(frame, protocol.ReadDoneFrame):
            self._on_read_done(frame)
        else:
            log.error("bug: a frame of unknown kind %r", frame)

    def _fetch(self, payload: str) -> bytes | None:
        """The bytes of a payload file the shell wrote (which is then removed)."""
        try:
            return self._backend.fetch(f"{self._state_dir}/{payload}")
        except BackendError as err:
            log.warning("could not fetch %s: %s", payload, err)
            return None

    def _on_ready(self, frame: protocol.ReadyFrame) -> None:
        self._ready_fields[frame.stream] = frame
        if frame.state_dir:
            self._state_dir = frame.state_dir
        if "stdout" in self._ready_fields and "stderr" in self._ready_fields:
            self._shell_up.set()
            self._ready.set()

    def _on_barrier(self, frame: protocol.BarrierFrame) -> None:
        if self._self_close is not None and frame.nonce == self._self_close[0]:
            self._self_close[1].set()  # the shell declined to end itself
            return
        cell = self._cell
        if cell is not None and frame.nonce.startswith(protocol.READ_MARK_PREFIX) and not cell.done.is_set():
            cell.read_marks.setdefault(frame.nonce, set()).add(frame.stream)
            return
        if cell is not None and cell.catch_up == frame.nonce and not cell.done.is_set():
            cell.barriers.add(frame.stream)
            if len(cell.barriers) == len(protocol.STREAMS):
                self._end_cell(cell)

    def _on_end(self, frame: protocol.EndFrame) -> None:
        cell = self._cell
        if cell is None or frame.seq != cell.seq:
            return  # the repeat of an earlier cell's end, after an interrupt
        if frame.stream == "stdout" and frame.status is not None:
            cell.status, cell.cwd = frame.status, frame.cwd
            cell.failed = (frame.line, frame.command)
        if frame.stream == "stderr" and self._noise is not None:
            self._coalescer.add("stderr", self._decoders["stderr"].decode(self._noise.flush()))
        cell.ended[frame.stream] = True
        if cell.ended["stdout"] and cell.ended["stderr"] and not cell.catch_up:
            self._end_cell(cell)

    def _on_exited(self, event: Exited) -> None:
        ended = event.ended
        if self._lost is not None and not self._shell_up.is_set():
            return  # already lost: a second report of the same end
        self._shell_up.clear()
        self._lost = ended
        if self._self_close is not None:
            self._self_close[1].set()
        cell = self._cell
        if (ended.connection_lost and self._backend.capabilities.can_reattach and not self._closing
                and self._ready.is_set() and cell is not None and not cell.done.is_set()):
            # The shell and its cell carry on at the far end: get them back.
            threading.Thread(target=self._reattach_during_cell, args=(event.generation, ended),
                             name="shell-kernel-reattach", daemon=True).start()
            return
        if not self._ready.is_set():
            said = self._startup_output.decode(errors="replace").strip()
            self._ready_fields["failed"] = f"bash {ended.reason}" + (f"; it said: {said}" if said else "")
            self._ready.set()
            return
        for stream, scanner in self._scanners.items():
            self._handle_data(stream, scanner.flush())
        if cell is not None and not cell.done.is_set():
            self._finish_lost(cell, ended)

    _HANDLERS = {
        Output: _on_output_event,
        FrameSeen: _on_frame,
        Notice: _on_notice,
        Exited: _on_exited,
        CellLost: _on_cell_lost,
        Escalated: _on_escalated,
    }

    def _finish_lost(self, cell: RunningCell, ended: ShellExit) -> None:
        cell.lost = ended
        self._end_cell(cell)

    def _end_cell(self, cell: RunningCell) -> None:
        self._settle_prompt(ended=True)
        for stream, decoder in self._decoders.items():
            self._coalescer.add(stream, self._clears[stream].flush()
                                + decoder.decode(b"", final=True))
        self._coalescer.flush()
        if cell.prompt is not None:
            cell.prompt.over.set()
        cell.done.set()
        cell.wake.set()

    # --------------------------------------------------------------- prompts
    def _on_reading(self, frame: protocol.ReadingFrame) -> None:
        cell = self._cell
        self._stdin_was_read = True
        if cell is not None and not cell.done.is_set() and not cell.catch_up:
            cell.reads.append((frame, time.monotonic()))

    def _on_read_done(self, frame: protocol.ReadDoneFrame) -> None:
        cell = self._cell
        if cell is None:
            return
        key = (frame.pid, frame.reads)
        cell.reads = [(read, due) for read, due in cell.reads if (read.pid, read.reads) != key]
        cell.read_marks.pop(protocol.read_mark(*key), None)
        if cell.prompt is not None and cell.prompt.key == key:
            cell.prompt.over.set()  # e.g. read -t timed out: the question is moot

    def _prompt_due(self) -> float | None:
        """When the oldest reported read becomes a prompt. The output and the
        report travel separately: a marked read, once its marks have come
        back on both streams (its text is then all in; a mark lost on the
        way costs MARK_WAIT_SECONDS); else at once if the output ends with a
        partial line (its text), or a moment later, in case the text is
        still on its way."""
        cell = self._cell
        if cell is None or not cell.reads or cell.prompt is not None:
            return None
        frame, reported = cell.reads[0]
        if frame.marked:
            marks = cell.read_marks.get(protocol.read_mark(frame.pid, frame.reads), ())
            if len(marks) == len(protocol.STREAMS):
                return reported
            return reported + prompts.MARK_WAIT_SECONDS
        if self._coalescer.holds_partial:
            return reported + self._backend.capabilities.output_lag
        return reported + prompts.SETTLE_SECONDS

    def _settle_prompt(self, ended: bool = False) -> None:
        """Once the open question is answered or over, the output held
        behind its text goes out (with the text, if nobody answered)."""
        prompt = self._held_prompt
        if prompt is not None and (prompt.answered or prompt.over.is_set() or ended):
            self._held_prompt = None
            self._coalescer.release_prompt(prompt.answered)

    def _prompt_if_due(self) -> None:
        """Turn the oldest reported read into a prompt, once its text had time
        to arrive: the partial line the output ends with. Without anyone to
        ask, the read gets end-of-file, and the cell a notice (once)."""
        due = self._prompt_due()
        if due is None or time.monotonic() < due or self._cell.done.is_set():
            return
        cell = self._cell
        frame, _ = cell.reads.pop(0)
        cell.read_marks.pop(protocol.read_mark(frame.pid, frame.reads), None)
        if prompts.needs_terminal(frame):
            cell.key_mode = True
            self._coalescer.drop_screen()
            self._coalescer.flush()
            self._coalescer.add("stderr", prompts.needs_terminal_notice(
                prompts.asking_command(frame, self._info.pid if self._info else 0)))
            self._coalescer.flush()
            self.interrupt()
            return
        # The text may have gone out as output already (reported late): asked
        # anyway, it is the prompt's too; else it would be output twice.
        stream, text = self._coalescer.take_partial(shown=cell.ask is not None)
        self._coalescer.flush()
        prompt = prompts.make_prompt(frame, text, self._info.pid if self._info else 0)
        if cell.ask is not None:
            cell.prompt = self._held_prompt = prompt
            self._coalescer.hold_prompt(stream, text)
            cell.wake.set()
            return
        self._coalescer.add(stream, text)
        if not cell.told_no_input:
            cell.told_no_input = True
            self._coalescer.add("stderr", ("\n" if text else "") + prompts.no_input_notice(prompt.command))
        self._coalescer.flush()
        with self._cond:
            terminal = self._input
        if terminal is not None:
            terminal.answer(None)


_UNSET = "\0unset"  # not a path: the shell's descriptor is not set up yet


def _as_text(err: BaseException) -> str:
    return str(err) if isinstance(err, (BackendError, ValueError)) and str(err) else describe_error(err)
