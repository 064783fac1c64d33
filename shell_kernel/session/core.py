"""ShellSession: the session's API, on its caller's thread (the kernel's
request handler, the launch thread, a fleet worker): start, run, query,
interrupt, close. The run lock serialises start, run and query. What a
cell, a query, an interrupt or close needs of the running session goes to
the pump as a request (events.py), answered through the cell's done event
and inbox or a future; a start or restart runs on the I/O worker, which
answers through a future too. The package docstring has the threads.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Callable, TypeVar

from .. import prompts, protocol
from ..backends import Backend, BackendError, NotSent, SessionGone, ShellExit
from ..failure import failed_command
from ..output import DisplaySink, OutputLimit, Sink
from ..prompts import InputTerminal, Prompt
from .catch_up import catch_up
from .events import (CellBegun, Closing, EventQueue, InterruptAsked, LifecycleAsked, LossMended,
                     Notice, PromptAnswered, QueryAsked, QueryTimedOut)
from .keeper import Keeper
from .pump import Pump
from .types import CellRecord, Options, RunningCell, SHUTTING_DOWN, SessionError, ShellInfo

log = logging.getLogger("shell_kernel.session")

#: How long a send that found the connection gone waits for the backend's
#: report of the loss, before reconnecting.
LOSS_SEEN_S = 5.0
#: How long close() waits for the pump to handle its Closing request.
CLOSE_JOIN_S = 5.0

T = TypeVar("T")


class ShellSession:
    """One persistent shell and the cells run in it.

    The caller's fields: _seq and _query_seq (the numbers of cells and
    queries), _starting (a start holds the run lock), _running (read by
    close() when the pump is stuck). The current shell is
    the keeper's, the running cell's progress the pump's.
    """

    def __init__(self, backend_factory: Callable[[], Backend], sink: Sink,
                 options: Options | None = None, display_sink: DisplaySink | None = None,
                 clear_sink: Callable[[], None] | None = None):
        self._sink = sink
        self.options = options or Options()
        self._run_lock = threading.Lock()
        self._starting = False
        self._seq = 0
        self._query_seq = 0
        self._running: RunningCell | None = None  # the last cell begun (close() ends it)
        self._events = EventQueue()
        self._keeper = Keeper(backend_factory, self.options, self._events,
                              lambda text: self._sink("stderr", text),
                              lambda: self._pump.terminal_opened())
        self._pump = Pump(self._events, self._keeper, self.options, sink, display_sink,
                          clear_sink)

    # ----------------------------------------------------------------- start
    @property
    def info(self) -> ShellInfo | None:
        return self._keeper.info

    @property
    def description(self) -> str:
        return self._keeper.description

    @property
    def seq(self) -> int:
        """The number of the last cell sent, as the shell numbers it (a named
        session's numbers go on across kernels)."""
        return self._seq

    def start(self, restore: tuple[str, str | None] | None = None) -> ShellInfo:
        """Start a shell and wait until it is ready for cells. It holds the run
        lock: a cell or a query made meanwhile waits for it (a query only
        once the shell is up: before, it has nothing to ask).

        restore: (state dir, cwd) of a shell lost with its connection, whose
        exported variables and working directory the new shell takes over.
        """
        with self._run_lock:
            self._starting = True
            try:
                return self._on_io_worker(lambda: self._keeper.start(restore))
            finally:
                self._starting = False

    # ------------------------------------------------------------- run cells
    def run(self, code: str, ask: Callable[[Prompt], str | None] | None = None) -> CellRecord:
        """Run one cell. ask(prompt) answers a prompt (None: end-of-file); it is
        called on this thread. Without it, a read gets end-of-file and a notice."""
        with self._run_lock:
            keeper = self._keeper
            if self._events.closed:
                raise SessionError(SHUTTING_DOWN)
            if not keeper.up.is_set():
                notice = self._on_io_worker(keeper.restart)
                if notice:
                    self._sink("stderr", f"[shell_kernel] {notice}\n")
            if keeper.start_notice:
                self._sink("stderr", f"[shell_kernel] {keeper.start_notice}\n")
                keeper.start_notice = None
            attached, keeper.catch_up_due = keeper.catch_up_due, None
            # The cell's duration is the request's: a catch-up's wait included.
            started = time.monotonic()
            if attached is not None:
                self._seq = max(self._seq, attached.last_seq)  # the shell numbers its cells on
                caught_up = catch_up(attached, keeper, self._sink, self._begin, self._finish)
                if caught_up.lost is not None or caught_up.interrupted:
                    return self._result(caught_up)  # this cell's own code does not run
            prepared = protocol.prepare_cell(code)
            if prepared.removed_nul:
                self._sink("stderr", "[shell_kernel] NUL bytes in the cell were removed "
                           "(bash cannot hold them in a command).\n")
            self._seq += 1
            cell = self._begin(self._seq, lambda cell, post_only: self._send(
                                   cell, prepared.source, post_only),
                               source=prepared.source, ask=ask, started=started)
            log.debug("cell %d starts", cell.seq)
            self._wait_answering(cell)
            self._finish(cell)
            if cell.cwd is not None:
                keeper.last_cwd = cell.cwd
            return self._result(cell)

    def _send(self, cell: RunningCell, source: bytes,
              post_only: bool = False) -> InputTerminal | None:
        """Send the cell's lines (the I/O worker); returns the prompt terminal
        they point its reads at. A durable shell whose connection was found
        gone before any of them went is reconnected first (as the next cell
        would), then sent them. Raises BackendError when they did not go.
        post_only: the shell runs the cell already (its first line reached
        the host, its post line did not): only the post line goes, and the
        cell's reads stay where they were."""
        keeper = self._keeper
        reconnected = False
        while True:
            terminal = cell.terminal if post_only else keeper.input.terminal
            lines = (b"" if post_only else keeper.input.lines(terminal)) + protocol.eval_lines(
                source, cell.seq, post_only)
            try:
                keeper.backend.send(lines)
                return terminal
            except NotSent:
                keeper.input.forget_sent()
                if reconnected or not keeper.can_reattach or not self._reconnect(cell):
                    raise
                reconnected = True

    def _reconnect(self, cell: RunningCell) -> bool:
        """The connection was found gone as the cell was sent (the I/O
        worker): True once the same shell is reachable again, with the
        notices on the cell's stderr."""
        keeper = self._keeper
        if not keeper.down.wait(LOSS_SEEN_S):  # the pump has the backend's report of the loss
            return False
        try:
            keeper.reattach(lambda text: self._events.push(Notice(cell.generation, text)))
        except (SessionGone, SessionError) as err:
            log.info("could not reconnect before cell %d: %s", cell.seq, err)
            return False
        self._events.push(LossMended(cell))
        return True

    def _begin(self, seq: int, send: Callable[[RunningCell], InputTerminal | None],
               **fields) -> RunningCell:
        """The running cell, handed to the pump to follow and to send with
        send(cell) (see CellBegun)."""
        cell = RunningCell(seq, self._keeper.generation,
                           OutputLimit(self.options.output_limit, self.options.spill_dir),
                           **fields)
        self._running = cell
        self._events.push(CellBegun(cell, send))
        return cell

    def _finish(self, cell: RunningCell) -> None:
        cell.limit.close()

    def _wait_answering(self, cell: RunningCell) -> None:
        """Wait for the cell to end, answering its prompts on the way (on the
        terminal its lines pointed at: the pump sets it before any prompt)."""
        while (prompt := cell.inbox.get()) is not None:
            terminal = cell.terminal
            answer = cell.ask(prompt) if not prompt.over.is_set() else None
            if prompt.over.is_set() or terminal is None:
                self._events.push(PromptAnswered(cell, prompt, ""))
                continue
            # Told first: what the answer makes the cell print comes after it.
            self._events.push(PromptAnswered(cell, prompt,
                                             "eof" if prompts.is_eof(answer) else "line"))
            terminal.answer(answer, prompt.keys)
            del answer  # perhaps a password: not kept

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
        lost, keeper, closing = cell.lost, self._keeper, self._events.closed
        message = keeper.lost_message(cell, lost, closing)
        if keeper.replace_now(lost, closing):
            try:
                message = f"{message} {self._on_io_worker(keeper.replaced)}"
            except SessionError as err:  # the session closed meanwhile
                message = f"{message} {err}"
        status = lost.status if lost.status is not None else 1
        return CellRecord(status, duration, None, cell.interrupted, message, spill)

    def _on_io_worker(self, step: Callable[[], T]) -> T:
        """Run a step of the shell's lifecycle (start, restart) on the I/O
        worker, the thread of the session's host I/O, and wait for it: its
        result, or the exception it raised."""
        done: Future = Future()

        def job() -> None:
            try:
                done.set_result(step())
            except BaseException as err:  # noqa: BLE001 - the caller re-raises it
                done.set_exception(err)

        if not self._events.push_unless_finished(LifecycleAsked(job)):
            raise SessionError(SHUTTING_DOWN)
        return done.result()

    # --------------------------------------------------------------- queries
    def query(self, what: str, text: str, timeout: float = 10.0) -> str | None:
        """Ask the idle shell something (see protocol.QUERIES); None if it cannot answer."""
        if not self.options.queries:
            return None  # (its shell has not the code to answer)
        if self._starting and not self._keeper.up.is_set():
            return None  # not up yet: nothing to ask (a query does not wait for a start)
        if not self._run_lock.acquire(timeout=timeout):
            return None
        try:
            keeper = self._keeper
            if not keeper.up.is_set() or self._events.closed:
                return None
            self._query_seq += 1
            reply: Future = Future()
            line, backend = protocol.query_line(self._query_seq, what, text), keeper.backend
            self._events.push(QueryAsked(self._query_seq, reply, lambda: backend.send(line)))
            try:
                answer = reply.result(timeout)
                return None if answer is None else answer.decode("utf-8", "replace")
            except FutureTimeout:
                pass
            log.warning("query %s got no answer within %g s; interrupting it", what, timeout)
            self._events.push(QueryTimedOut(self._query_seq))
            return None
        except BackendError as err:
            log.warning("query %s failed: %s", what, err)
            return None
        finally:
            self._run_lock.release()

    # ------------------------------------------------------------ interrupts
    def interrupt(self) -> None:
        """Ctrl-C for the running cell; harmless when idle. Returns at once."""
        self._events.push(InterruptAsked())

    # -------------------------------------------------------------- shutdown
    def close(self) -> None:
        """Stop every process of the session and remove its state directory
        (but a named session's shell stays, for the next kernel)."""
        self._events.close()
        keeper = self._keeper
        try:
            keeper.clean_up(self._run_lock)
        finally:
            self._events.push(Closing(detach=keeper.outlives_kernel))
        self._pump.thread.join(timeout=CLOSE_JOIN_S)
        if self._pump.thread.is_alive():
            # Stuck (in a frontend's sink, say), before it took the last cell
            # or while it followed it: that cell's caller still gets its
            # answer. The pump, if it ever comes back, ends at its Closing.
            log.warning("the pump did not end within %g s of the close", CLOSE_JOIN_S)
            cell = self._running
            if cell is not None and not cell.done.is_set():
                cell.lost = ShellExit("the kernel is shutting down")
                cell.done.set()
                cell.inbox.put(None)
