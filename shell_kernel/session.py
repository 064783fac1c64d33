"""The persistent-shell session: one long-lived bash, driven cell by cell.

This layer frames cells, streams their output, detects their end, reads
their exit status, interrupts and escalates, and recovers when the shell
dies. It knows nothing about Jupyter messages or sockets, and reaches the
shell only through a Backend's verbs.
"""

from __future__ import annotations

import collections
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import protocol, shell
from .backends import Backend, BackendError, SessionGone, ShellExit
from .output import Coalescer, DisplaySink, OutputLimit, Sink, StreamDecoder

log = logging.getLogger("shell_kernel.session")

REAP_SCRIPT = shell.script("reap.sh")

# Reader threads block once this much output waits for the pump: the shell
# then blocks on its pipe, so memory stays bounded whatever a cell prints.
MAX_QUEUED_BYTES = 8 << 20


@dataclass
class Options:
    interrupt_grace: float = 1.0  # seconds between SIGINT and SIGTERM
    output_limit: int = 64_000_000  # bytes of one cell's output sent to the frontend
    spill_dir: Path = Path("shell_kernel_output")
    start_timeout: float = 30.0
    flush_interval: float = 0.05
    #: Keep a copy of the exported variables after every cell, so that a
    #: shell lost with its connection can be followed by one that has them.
    snapshot_exports: bool = False
    #: How long to keep trying to reattach a durable session after a drop.
    reattach_timeout: float = 120.0


@dataclass
class CellResult:
    exit_code: int
    duration_s: float
    cwd: str | None = None
    interrupted: bool = False
    #: Set when the shell ended during the cell: what happened, for the user.
    shell_lost: str | None = None
    spill_path: str | None = None


class SessionError(RuntimeError):
    """The session cannot run cells; the message is written for the user."""


@dataclass
class _Cell:
    seq: int
    generation: int
    limit: OutputLimit
    started: float = field(default_factory=time.monotonic)
    ended: dict = field(default_factory=lambda: {"stdout": False, "stderr": False})
    status: int | None = None
    cwd: str | None = None
    interrupted: bool = False
    escalating: bool = False
    replaced: bool = False
    lost: ShellExit | None = None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class ShellInfo:
    pid: int
    bash_version: str
    state_dir: str


class ShellSession:
    def __init__(self, backend_factory: Callable[[], Backend], sink: Sink,
                 options: Options | None = None, display_sink: DisplaySink | None = None):
        self._backend_factory = backend_factory
        self._sink = sink
        self._display_sink = display_sink
        self._query_seq = 0
        self._reply: tuple[int, bytes] | None = None
        self._reply_ready = threading.Event()
        self.options = options or Options()
        self._backend: Backend | None = None
        self._generation = 0
        self._info: ShellInfo | None = None
        self._alive = False
        self._lost: ShellExit | None = None  # why the shell is gone, until replaced
        self._last_cwd: str | None = None
        self._closing = False
        self._seq = 0
        self._cell: _Cell | None = None
        self._run_lock = threading.Lock()
        # Events from backend threads to the pump thread.
        self._cond = threading.Condition()
        self._events: collections.deque = collections.deque()
        self._queued = 0
        self._ready = threading.Event()
        self._ready_fields: dict = {}
        self._startup_output = b""
        self._scanners: dict[str, protocol.FrameScanner] = {}
        self._noise: protocol.TtyNoiseFilter | None = None
        self._decoders = {name: StreamDecoder() for name in protocol.STREAMS}
        self._coalescer = Coalescer(self._sink, interval=self.options.flush_interval)
        self._pump_thread = threading.Thread(target=self._pump, name="shell-kernel-pump", daemon=True)
        self._pump_thread.start()

    # ----------------------------------------------------------------- start
    @property
    def info(self) -> ShellInfo | None:
        return self._info

    @property
    def description(self) -> str:
        return self._backend.description if self._backend else "shell"

    def start(self, restore: tuple[str, str | None] | None = None) -> ShellInfo:
        """Start a shell and wait until it is ready for cells.

        restore: (state dir, cwd) of a shell lost with its connection, whose
        exported variables and working directory the new shell takes over.
        """
        token = secrets.token_hex(8)
        backend = self._backend_factory()
        with self._cond:
            self._generation += 1
            generation = self._generation
            self._scanners = {name: protocol.FrameScanner(token) for name in protocol.STREAMS}
            self._noise = None
            self._ready.clear()
            self._ready_fields = {}
            self._startup_output = b""
        self._backend = backend
        try:
            backend.start(
                lambda stream, data: self._on_output(generation, stream, data),
                lambda ended: self._push(("exit", generation, ended)),
            )
            script = protocol.session_script(token, self.options.snapshot_exports,
                                             backend.preset_state_dir)
            if restore is not None:
                script += protocol.restore_script(*restore)
            backend.send(b"builtin eval -- " + protocol.ansi_c_quote(script) + b"\n")
        except BackendError as err:
            self._discard_backend(backend)
            raise SessionError(f"Could not start the shell: {err}") from None
        if not self._ready.wait(self.options.start_timeout) or not self._alive:
            reason = self._ready_fields.get("failed", f"no answer within {self.options.start_timeout:g} s")
            self._discard_backend(backend)
            raise SessionError(
                f"The {backend.description} bash did not start ({reason}). Check that bash "
                "is installed and that your shell startup files finish without waiting for input; "
                "the 'clean' option starts bash without them.")
        fields = self._ready_fields
        self._info = ShellInfo(int(fields["pid"]), fields["version"], fields["dir"])
        with self._cond:
            self._noise = protocol.TtyNoiseFilter(self._info.pid)
        log.info("shell ready: pid %s, bash %s, state dir %s",
                 self._info.pid, self._info.bash_version, self._info.state_dir)
        return self._info

    def _discard_backend(self, backend: Backend) -> None:
        self._alive = False
        try:
            backend.close()
        except Exception:  # noqa: BLE001 - cleanup of a failed start must not mask its error
            log.debug("closing a failed backend", exc_info=True)

    # ------------------------------------------------------------- run cells
    def run(self, code: str) -> CellResult:
        with self._run_lock:
            if self._closing:
                raise SessionError("The kernel is shutting down.")
            if not self._alive:
                notice = self._restart()
                if notice:
                    self._sink("stderr", f"[shell_kernel] {notice}\n")
            try:
                self._backend.before_cell()
            except BackendError as err:
                log.warning("housekeeping before the cell failed: %s", err)
            prepared = protocol.prepare_cell(code)
            if prepared.removed_nul:
                self._sink("stderr", "[shell_kernel] NUL bytes in the cell were removed "
                           "(bash cannot hold them in a command).\n")
            log.debug("cell %d starts", self._seq + 1)
            with self._cond:
                self._seq += 1
                cell = _Cell(self._seq, self._generation,
                             OutputLimit(self.options.output_limit, self.options.spill_dir))
                self._cell = cell
            try:
                self._backend.send(protocol.eval_lines(prepared.source, cell.seq))
            except BackendError as err:
                self._finish_lost(cell, ShellExit(f"could not send the cell: {err}",
                                                  connection_lost=True))
            while not cell.done.wait(0.5):
                pass
            with self._cond:
                self._cell = None
            cell.limit.close()
            if cell.cwd is not None:
                self._last_cwd = cell.cwd
            return self._result(cell)

    def _result(self, cell: _Cell) -> CellResult:
        duration = time.monotonic() - cell.started
        spill = str(cell.limit.spill_path) if cell.limit.spill_path else None
        if cell.lost is None:
            return CellResult(cell.status if cell.status is not None else 1, duration,
                              cell.cwd, cell.interrupted, spill_path=spill)
        lost = cell.lost
        if cell.replaced:
            what = ("The shell did not stop after SIGINT, SIGTERM and SIGKILL to this cell's "
                    "processes (it ignores SIGINT, e.g. after trap '' INT), so it was replaced.")
        elif lost.connection_lost:
            what = (f"{lost.reason[:1].upper()}{lost.reason[1:]} while this cell ran: its "
                    "remaining output and its exit status are unknown.")
        else:
            what = f"The shell running this cell ended ({lost.reason})."
        if self._closing:
            message = what
        elif lost.connection_lost and self._backend.can_reattach:
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
        return CellResult(status, duration, None, cell.interrupted, message, spill)

    def _restart(self) -> str:
        """Replace a shell that ended; say, for the user, what was lost."""
        lost = self._lost or ShellExit("it was not running")
        old_backend, old_info = self._backend, self._info
        if lost.connection_lost and old_backend is not None and old_backend.can_reattach:
            try:
                # Said as it happens, on the stderr of the cell that waits for it.
                self._reattach(lambda text: self._sink("stderr", text))
                return ""
            except SessionGone as err:
                lost = ShellExit(f"the remote session is gone: {err}")
            self._lost = lost
        if old_backend is not None:
            if not lost.connection_lost:
                self._reap_all(old_backend, old_info)
            self._discard_backend(old_backend)
        restore = None
        if lost.connection_lost and old_info is not None:
            restore = (old_info.state_dir, self._last_cwd)
        self.start(restore)  # raises SessionError; the next cell tries again
        self._lost = None
        if old_info is None:
            return ""  # the first shell: nothing was lost
        if restore is None:
            return ("A new shell was started: the working directory, variables, functions, "
                    "aliases and background jobs of the old shell are gone.")
        # The old shell may live on at the far end: stop it and remove its files.
        self._reap_all(self._backend, old_info)
        where = f" ({self._last_cwd})" if self._last_cwd else ""
        return (f"The old shell was lost with the connection ({lost.reason}). Reconnected with "
                f"a new shell: its working directory{where} and exported variables were "
                "restored; plain variables, functions, aliases, shell options and background "
                "jobs are gone.")

    # ------------------------------------------------------------- reattach
    def _reattach(self, notice: Callable[[str], None]) -> None:
        """Reconnect to the same durable shell, retrying with backoff.

        Raises SessionGone, or SessionError once options.reattach_timeout is spent."""
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
            except BackendError as err:
                if time.monotonic() + delay > deadline:
                    raise SessionError(f"Could not reconnect within "
                                       f"{self.options.reattach_timeout:g} s ({err}).") from None
                log.info("reattach attempt %d failed: %s", attempt, err)
                time.sleep(delay)
                delay = min(delay * 2, 15.0)
                continue
            self._alive = True
            self._lost = None
            notice("[shell_kernel] Reconnected: same shell, output resumes where it stopped.\n")
            return

    def _reattach_during_cell(self, cell: _Cell, ended: ShellExit) -> None:
        generation = self._generation
        notice = lambda text: self._push(("notice", generation, text))  # noqa: E731
        try:
            self._reattach(notice)
        except SessionGone as err:
            self._push(("lost", generation, ShellExit(
                f"the remote session is gone ({err}): the host may have rebooted or the "
                "session was reaped")))
        except SessionError as err:
            self._push(("lost", generation, ShellExit(
                f"{ended.reason}. {err} The shell may still be running there; the next cell "
                "tries again", connection_lost=True)))

    # --------------------------------------------------------------- queries
    def query(self, what: str, text: str, timeout: float = 10.0) -> str | None:
        """Ask the idle shell something (see protocol.QUERIES); None if it cannot answer."""
        if not self._run_lock.acquire(timeout=timeout):
            return None
        try:
            if not self._alive or self._closing:
                return None
            self._query_seq += 1
            seq = self._query_seq
            self._reply_ready.clear()
            self._backend.send(protocol.query_line(seq, what, text))
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self._alive:
                if self._reply_ready.wait(0.1) and self._reply and self._reply[0] == seq:
                    return self._reply[1].decode("utf-8", "replace")
            log.warning("query %s got no answer within %g s; interrupting it", what, timeout)
            self._reap(self._backend, self._info, "cell", "INT")
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
        threading.Thread(target=self._escalate, args=(cell,), name="shell-kernel-interrupt",
                         daemon=True).start()

    def _escalate(self, cell: _Cell) -> None:
        try:
            self._escalate_once(cell)
        finally:
            cell.escalating = False  # a later interrupt of this cell may try again

    def _escalate_once(self, cell: _Cell) -> None:
        """SIGINT, then SIGTERM and SIGKILL to what is left, then a new shell.

        The cell's processes are noted first: a child killed by SIGINT leaves
        its own children to init, outside the shell's tree, and they must
        not escape the SIGTERM/SIGKILL that follows the grace period.
        """
        backend, info = self._backend, self._info
        try:
            noted = self._reap(backend, info, "tree", "-")
            phases = [("INT", self.options.interrupt_grace), ("TERM", 0.3), ("KILL", 0.7)]
            for signal_name, duration in phases:
                self._reap(backend, info, "cell", signal_name, noted)
                backend.send(protocol.post_line(cell.seq))
                if self._wait_cell(cell, duration, backend, info, follow_up=signal_name != "INT"):
                    self._reap_leftovers(backend, info, noted)
                    return
        except BackendError as err:
            log.warning("interrupt of cell %d failed: %s", cell.seq, err)
            if backend.can_reattach and self._wait_reattached(cell):
                # The same shell, through a new connection: interrupt it now.
                self._escalate_once(cell)
            return  # out of reach; the user may interrupt again
        cell.replaced = True
        self._reap_all(backend, info)

    def _wait_reattached(self, cell: _Cell) -> bool:
        """Wait while a durable session reconnects; True once the cell is in reach."""
        deadline = time.monotonic() + self.options.reattach_timeout
        while not cell.done.wait(0.1):
            if self._alive:
                return True
            if time.monotonic() > deadline:
                break
        return False

    def _wait_cell(self, cell: _Cell, duration: float, backend: Backend, info: ShellInfo,
                   follow_up: bool) -> bool:
        """Wait for the cell to end. With follow_up, keep sending SIGINT: a
        shell whose child was killed by SIGTERM/SIGKILL goes on with the next
        command, and only a child dying of SIGINT makes it abandon the line."""
        deadline = time.monotonic() + duration
        while not cell.done.wait(0.05 if follow_up else duration):
            if time.monotonic() >= deadline:
                return False
            self._reap(backend, info, "cell", "INT")
        return True

    def _reap_leftovers(self, backend: Backend, info: ShellInfo, noted: list[str]) -> None:
        """The cell is over; what is left of its processes gets SIGTERM, then SIGKILL."""
        if not noted:
            return
        time.sleep(min(self.options.interrupt_grace, 0.5))
        if self._reap(backend, info, "orphans", "TERM", noted):
            time.sleep(0.3)
            self._reap(backend, info, "orphans", "KILL", noted)

    def _reap(self, backend: Backend, info: ShellInfo, mode: str, signal_name: str,
              pids: list[str] = ()) -> list[str]:
        result = backend.side_command(REAP_SCRIPT, [mode, signal_name, str(info.pid),
                                                    info.state_dir, *pids])
        log.debug("reap %s %s: %s", mode, signal_name, result.stdout.strip())
        return result.stdout.split()

    def _reap_all(self, backend: Backend, info: ShellInfo | None) -> None:
        if info is None:
            return
        try:
            backend.side_command(REAP_SCRIPT, ["all", "-", str(info.pid), info.state_dir], timeout=10)
        except BackendError as err:
            log.warning("could not clean up the shell's processes: %s", err)

    # -------------------------------------------------------------- shutdown
    def close(self) -> None:
        """Stop every process of the session and remove its state directory."""
        self._closing = True
        backend = self._backend
        if backend is not None:
            self._reap_all(backend, self._info)
            self._discard_backend(backend)
        with self._cond:
            cell = self._cell
            if cell is not None and not cell.done.is_set():
                # The pump may be gone before the shell's end reaches it.
                cell.lost = ShellExit("the kernel is shutting down")
                cell.done.set()
            self._cond.notify_all()
        self._pump_thread.join(timeout=2)

    # ------------------------------------------------ backend threads -> pump
    def _on_output(self, generation: int, stream: str, data: bytes) -> None:
        scanner = self._scanners.get(stream)
        if scanner is None:
            return
        for kind, value in scanner.feed(data):
            if kind == "data":
                self._push(("data", generation, stream, value), len(value))
            else:
                self._push(("frame", generation, stream, value))

    def _push(self, event: tuple, size: int = 0) -> None:
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
                    deadline = self._coalescer.deadline()
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
                    log.exception("while handling %r", event[:3])
            self._coalescer.flush_if_due()

    def _handle(self, event: tuple) -> None:
        kind, generation = event[0], event[1]
        if generation != self._generation:
            return
        if kind == "data":
            self._handle_data(event[2], event[3])
        elif kind == "notice":
            self._coalescer.add("stderr", event[2])
        elif kind == "lost":
            cell = self._cell
            if cell is not None and not cell.done.is_set():
                self._finish_lost(cell, event[2])
        elif kind == "frame":
            self._handle_frame(event[2], event[3])
        else:
            self._handle_exit(event[2])

    def _handle_data(self, stream: str, data: bytes) -> None:
        if not self._ready.is_set():
            # rc-file noise: never shown, but kept briefly to explain a failed start.
            self._startup_output = (self._startup_output + data)[-2000:]
            return
        if stream == "stderr" and self._noise is not None:
            data = self._noise.feed(data)
        cell = self._cell
        if cell is not None and not cell.ended[stream] and cell.generation == self._generation:
            data, notice = cell.limit.admit(data)
            if notice:
                self._coalescer.add(stream, self._decoders[stream].decode(data))
                self._coalescer.add("stderr", notice)
                return
        self._coalescer.add(stream, self._decoders[stream].decode(data))

    def _handle_frame(self, stream: str, fields: list) -> None:
        kind = fields[0] if fields else ""
        if kind == "display" and len(fields) == 4:
            self._coalescer.flush()  # what was printed before the display shows before it
            if self._display_sink is not None:
                self._display_sink(fields[1], fields[3], fields[2])
            return
        if kind == "reply" and len(fields) == 3:
            self._reply = (_int_or(fields[1], -1), fields[2])
            self._reply_ready.set()
            return
        if kind == "ready":
            if stream == "stdout" and len(fields) >= 4:
                self._ready_fields.update(pid=fields[1], version=fields[2], dir=fields[3])
            self._ready_fields[stream] = True
            if "stdout" in self._ready_fields and "stderr" in self._ready_fields:
                self._alive = True
                self._ready.set()
            return
        cell = self._cell
        if kind != "end" or cell is None or len(fields) < 2 or fields[1] != str(cell.seq):
            return  # the repeat of an earlier cell's end, after an interrupt
        if stream == "stdout" and len(fields) >= 4:
            cell.status = _int_or(fields[2], 1)
            cell.cwd = fields[3]
        if stream == "stderr" and self._noise is not None:
            self._coalescer.add("stderr", self._decoders["stderr"].decode(self._noise.flush()))
        cell.ended[stream] = True
        if cell.ended["stdout"] and cell.ended["stderr"]:
            self._end_cell(cell)

    def _handle_exit(self, ended: ShellExit) -> None:
        self._alive = False
        self._lost = ended
        cell = self._cell
        if (ended.connection_lost and self._backend.can_reattach and not self._closing
                and self._ready.is_set() and cell is not None and not cell.done.is_set()):
            # The shell and its cell carry on at the far end: get them back.
            threading.Thread(target=self._reattach_during_cell, args=(cell, ended),
                             name="shell-kernel-reattach", daemon=True).start()
            return
        if not self._ready.is_set():
            said = self._startup_output.decode(errors="replace").strip()
            self._ready_fields["failed"] = f"bash {ended.reason}" + (f"; it said: {said}" if said else "")
            self._ready.set()
            return
        for stream, scanner in self._scanners.items():
            self._handle_data(stream, scanner.flush())
        cell = self._cell
        if cell is not None and not cell.done.is_set():
            self._finish_lost(cell, ended)

    def _finish_lost(self, cell: _Cell, ended: ShellExit) -> None:
        cell.lost = ended
        self._end_cell(cell)

    def _end_cell(self, cell: _Cell) -> None:
        for stream, decoder in self._decoders.items():
            self._coalescer.add(stream, decoder.decode(b"", final=True))
        self._coalescer.flush()
        cell.done.set()


def _int_or(text: str, default: int) -> int:
    try:
        return int(text)
    except ValueError:
        return default
