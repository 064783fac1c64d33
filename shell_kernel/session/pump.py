"""The pump: the one thread ("shell-kernel-pump") that consumes the session's
events and requests, in order, until the Closing request.

It owns the decoders, the screen clears, the coalescer, the prompt tracker
(prompt_tracker.py) and what the host is told was shown (Acknowledgements);
the running cell from the caller's CellBegun on (its output, end frames,
status, lost/replaced, prompts, interrupt); a query's answer; the
self-close answer; a start's answer (ShellStarting: its ready frames, or
why it failed, with what it said meanwhile). It is the only thread that
ends a cell (sets its done event). It drives interrupts (escalations.py)
and gives the I/O worker its jobs (an interrupt's host steps, a mid-cell
reconnect), which report back as events. Of the keeper's current shell
(keeper.py) it reads what it needs and writes only its state (up, lost,
reattaches): as it sees the shell's frames and end, and as other threads
ask (KeeperChange).
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

from .. import frames, protocol
from ..acknowledgements import Acknowledgements
from ..backends import BackendError, ShellExit
from ..interrupts import EscalationResult, Outcome, interrupt_plan
from ..output import TTY_TIE_SECONDS, Coalescer, DisplaySink, ScreenClears, Sink, StreamDecoder
from .escalations import Escalations
from .events import (CellBegun, CellLost, Closing, Event, EventQueue, Exited, FrameSeen,
                     InterruptAsked, IoDone, KeeperChange, LifecycleAsked, LossMended, Notice,
                     Output, PromptAnswered, QueryAsked, QueryTimedOut, Reattached, REQUESTS,
                     SelfCloseAsked, ShellStarting, StartEnded)
from .io_worker import IoWorker
from .prompt_tracker import PromptTracker
from .keeper import Keeper
from .types import Options, RunningCell

#: How long a key-mode cell's output is still dropped after the shell ended it.
KEY_MODE_SETTLE_S = 0.5

log = logging.getLogger("shell_kernel.session")


@dataclass
class _Start:
    """A shell's start, until its ready frames come on both streams."""
    answer: Future
    frames: dict = field(default_factory=dict)
    said: bytes = b""  # what it printed meanwhile (rc files)


class Pump:
    def __init__(self, events: EventQueue, keeper: Keeper, options: Options, sink: Sink,
                 display_sink: DisplaySink | None, clear_sink: Callable[[], None] | None):
        self._events = events
        self._keeper = keeper
        self._options = options
        self._sink = sink
        self._display_sink = display_sink
        self._clear_sink = clear_sink  # the output printed a screen clear (`clear`)
        self._io = IoWorker(events)
        self._io_followers: dict[int, Callable[[IoDone], None]] = {}  # see _after_io
        #: The shell's events that came after a display being fetched, until it is shown.
        self._held: collections.deque | None = None
        self._closing = False  # the Closing request came: no more fetches
        self._escalations = Escalations(
            self._io, lambda since: keeper.attachments != since and keeper.up.is_set(),
            repeated=self._post_repeated, suspect=self._side_channel_failed,
            finished=self._interrupt_finished)
        #: The running cell, from its CellBegun until it is done.
        self.cell: RunningCell | None = None
        self._send_cell: Callable[[RunningCell, bool], object] | None = None  # its CellBegun's
        self._query: tuple[int, Future] | None = None  # the query awaiting its reply
        self._start: _Start | None = None  # the shell starting, until it answers
        #: What a terminal says of itself on the shell's stderr (see frames.TtyNoiseFilter).
        self._noise: frames.TtyNoiseFilter | None = None
        #: close(): (nonce, set when the shell ended or declined to end itself)
        self._self_close: SelfCloseAsked | None = None
        self._decoders = {name: StreamDecoder() for name in protocol.STREAMS}
        self._clears = {name: ScreenClears() for name in protocol.STREAMS}
        self._shown = Acknowledgements(lambda mark: keeper.backend and keeper.backend.acknowledge(mark))
        self._coalescer = Coalescer(self._show, interval=options.flush_interval)
        if options.tty:  # two `script` copies: see output.TTY_TIE_SECONDS
            self._coalescer.tie_window = TTY_TIE_SECONDS
        self._prompts = PromptTracker(self._coalescer, keeper, self._interrupt)
        self.thread = threading.Thread(target=self._run, name="shell-kernel-pump", daemon=True)
        keeper.owned_by(self.thread)
        self.thread.start()

    def terminal_opened(self) -> None:
        self._prompts.terminal_opened()

    def _run(self) -> None:
        while True:
            for event in self._events.take(self._deadline):
                if isinstance(event, Closing):
                    self._on_closing(event)
                    return
                try:
                    self._handle(event)
                except Exception:  # noqa: BLE001 - the pump must outlive one bad event
                    log.exception("while handling %s", type(event).__name__)
            try:
                self._after_events()
            except Exception:  # noqa: BLE001 - the pump must outlive a bug here too
                log.exception("after handling events")

    def _after_events(self) -> None:
        """What comes due with time: an interrupt's next step, a key-mode
        cell's end, a prompt, the coalesced output, the acknowledgement."""
        self._escalations.tick()
        if self.cell is not None:
            self._end_if_over(self.cell)  # a key-mode cell's settle time
        self._prompts.settle()
        self._prompts.ask_if_due(self.cell)
        self._coalescer.flush_if_due()
        if self._coalescer.deadline() is None:  # all shown: frames too are acknowledged
            self._shown.before_showing()

    def _deadline(self) -> float | None:
        """When the pump must look again without an event (the queue asks it)."""
        try:
            settle_due = self.cell.settle_due if self.cell is not None else None
            return min((due for due in (self._coalescer.deadline(), self._prompts.due(self.cell),
                                        settle_due, self._escalations.due())
                        if due is not None), default=None)
        except Exception:  # noqa: BLE001 - a bug here must not end the pump: look again soon
            log.exception("while computing the next deadline")
            return time.monotonic() + 0.1

    def _handle(self, event: Event) -> None:
        handler = self._HANDLERS.get(type(event))
        if handler is None:
            log.error("bug: the pump got an unknown event %r", event)
        elif isinstance(event, REQUESTS):
            handler(self, event)  # about the session, whatever its shell
        elif self._held is not None:
            self._held.append(event)  # after the display being fetched
        elif event.generation == self._keeper.generation:
            self._shown.handled(getattr(event, "mark", None))
            handler(self, event)

    def _show(self, stream: str, text: str) -> None:
        self._shown.before_showing()
        self._sink(stream, text)

    def _on_output_event(self, event: Output) -> None:
        self._prompts.settle()  # an answer given is behind this output
        self._handle_data(event.stream, event.data)

    def _on_notice(self, event: Notice) -> None:
        self._coalescer.add("stderr", event.text)

    def _on_cell_lost(self, event: CellLost) -> None:
        cell = self.cell
        if cell is not None and not cell.done.is_set():
            self._finish_lost(cell, event.ended)

    # -------------------------------------------------------------- requests
    def _on_cell_begun(self, event: CellBegun) -> None:
        self.cell, self._send_cell = event.cell, event.send
        if event.cell.notice:
            self._coalescer.add("stderr", event.cell.notice)
        self._send(event.cell, post_only=False)

    def _send(self, cell: RunningCell, post_only: bool) -> None:
        cell.sending = True
        send = self._send_cell
        self._after_io(self._io.submit(lambda: send(cell, post_only)),
                       lambda done: self._cell_sent(cell, done, post_only))

    def _cell_sent(self, cell: RunningCell, done: IoDone, post_only: bool) -> None:
        """The I/O worker is done sending the cell's lines (they went, or not)."""
        log.debug("cell %d: lines sent%s", cell.seq, f" ({done.error})" if done.error else "")
        if cell.done.is_set():
            return  # (lost meanwhile: its fields are the caller's now)
        cell.sending = False
        if done.error is not None:
            # Never started (unless its first line went before): for a
            # durable backend the shell is fine.
            cell.not_sent = not post_only
            self._finish_lost(cell, ShellExit(str(done.error),
                                              connection_lost=self._keeper.can_reattach))
            return
        cell.terminal = done.result
        lost = cell.lost_unsent
        if lost is not None and not self._events.closed:
            # Lost once the lines had gone: the cell runs on at the far end.
            self._reattach(cell.generation, lost)

    def _on_shell_starting(self, event: ShellStarting) -> None:
        self._answer_start("it was replaced by another start")
        self._start = _Start(event.answer)
        self._noise = None

    def _on_start_ended(self, event: StartEnded) -> None:
        self._answer_start(None)
        if event.shell_pid is not None:
            self._noise = frames.TtyNoiseFilter(event.shell_pid)

    def _answer_start(self, answer: frames.ReadyFrame | str | None) -> None:
        """The start's answer: its ready frame, why it failed, or None (closing)."""
        if self._start is not None:
            self._start.answer.set_result(answer)
            self._start = None

    def _on_loss_mended(self, event: LossMended) -> None:
        event.cell.lost_unsent = None

    def _on_query_asked(self, event: QueryAsked) -> None:
        self._answer_query(None)  # an earlier query that timed out gets no answer now
        self._query = (event.seq, event.reply)
        if not self._keeper.up.is_set():
            self._answer_query(None)
            return
        self._after_io(self._io.submit(event.send),
                       lambda done: done.error and self._query_not_sent(event.seq, done.error))

    def _on_query_timed_out(self, event: QueryTimedOut) -> None:
        self._answer_query(None, event.seq)
        reaper = self._keeper.reaper()
        if reaper is not None:
            self._io.submit(lambda: reaper.signal_cell("INT", None))

    def _query_not_sent(self, seq: int, error: BackendError) -> None:
        log.warning("query %d could not be sent: %s", seq, error)
        self._answer_query(None, seq)

    def _answer_query(self, reply: bytes | None, seq: int | None = None) -> None:
        if self._query is not None and (seq is None or self._query[0] == seq):
            self._query[1].set_result(reply)
            self._query = None

    def _on_self_close_asked(self, event: SelfCloseAsked) -> None:
        self._self_close = event
        if not self._keeper.up.is_set():
            event.answered.set()

    def _on_prompt_answered(self, event: PromptAnswered) -> None:
        self._prompts.on_answered(self.cell, event)

    def _on_interrupt_asked(self, event: InterruptAsked) -> None:
        cell = self.cell
        log.debug("interrupt requested; running cell: %s", cell and cell.seq)
        if cell is not None:
            self._interrupt(cell)

    def _interrupt(self, cell: RunningCell) -> None:
        if cell.escalating or cell.done.is_set():
            return
        cell.escalating = cell.interrupted = cell.post_repeat_due = True
        options, events = self._options, self._events
        self._escalations.start(cell, interrupt_plan(
            self._keeper, cell, options.interrupt_grace, options.reattach_timeout,
            closing=lambda: events.closed))

    def _post_repeated(self, cell: RunningCell) -> None:
        cell.post_repeat_due = False
        self._end_if_over(cell)

    def _side_channel_failed(self, cell: RunningCell) -> None:
        """Treated as a dropped connection, so that the session reconnects."""
        self._events.push(Exited(cell.generation, ShellExit(
            "the side channel failed", connection_lost=True)))

    def _interrupt_finished(self, cell: RunningCell, result: EscalationResult) -> None:
        cell.escalating = cell.post_repeat_due = False  # a later interrupt may try again
        if result.outcome is Outcome.REPLACE:
            log.info("cell %d outlived SIGKILL: its shell is replaced", cell.seq)
            reaper = self._keeper.reaper()
            if not cell.done.is_set():
                cell.replaced = True  # the shell's end, which follows, ends the cell
            if reaper is not None:
                self._io.submit(reaper.stop_everything)
        elif result.outcome is Outcome.UNREACHABLE:
            log.warning("interrupt of cell %d failed: %s", cell.seq, result.error)
            if not cell.done.is_set():
                cell.given_up = True
                self._finish_lost(cell, ShellExit(str(result.error)))
        self._end_if_over(cell)

    def _reattach(self, generation: int, ended: ShellExit) -> None:
        """The connection dropped under a running cell: the I/O worker gets
        the shell back, and tells the pump how it goes."""
        keeper = self._keeper
        self._io.submit(lambda: keeper.reattach_during_cell(generation, ended))

    def _on_lifecycle_asked(self, event: LifecycleAsked) -> None:
        self._io.submit(event.job)  # (its IoDone is nobody's: the job answers the caller)

    def _on_keeper_change(self, event: KeeperChange) -> None:
        try:
            event.apply()
        finally:
            event.applied.set()

    def _after_io(self, job: int, then: Callable[[IoDone], None]) -> None:
        """Call then(IoDone) when the I/O worker has run job (not an interrupt's)."""
        self._io_followers[job] = then

    def _on_io_done(self, event: IoDone) -> None:
        then = self._io_followers.pop(event.job, None)
        if then is not None:
            then(event)
        else:
            self._escalations.io_done(event)

    def _on_reattached(self, event: Reattached) -> None:
        self._escalations.reattached()
        cell, heard = self.cell, event.heard
        if (cell is not None and heard is not None and not cell.done.is_set()
                and not cell.sending and not cell.catch_up and not cell.interrupted
                and heard.posted < cell.seq):
            # Its lines went into a connection that had already died. (An
            # interrupted one is not sent again: its interrupt's post line
            # ends it, never run, as the user asked.)
            log.info("cell %d: the host had %s of its lines; sending them again", cell.seq,
                     "only the first" if heard.begun >= cell.seq else "none")
            self._send(cell, post_only=heard.begun >= cell.seq)

    def _on_closing(self, event: Closing) -> None:
        """The last request: a cell still running is left to its named
        session's shell, or lost with the kernel."""
        self._closing = True
        if self._held is not None:  # what a display's fetch held back is shown all the same
            self._release_held()
        cell = self.cell
        if cell is not None and not cell.done.is_set():
            if event.detach:
                cell.detached = True
                self._end_cell(cell)
            else:
                self._finish_lost(cell, ShellExit("the kernel is shutting down"))
        self._answer_query(None)
        self._answer_start(None)
        self._escalations.close()
        self._io.close()
        self._coalescer.flush()

    def _handle_data(self, stream: str, data: bytes) -> None:
        keeper = self._keeper
        if self._start is not None:
            # rc-file noise: never shown, but kept briefly to explain a failed start.
            self._start.said = (self._start.said + data)[-2000:]
            return
        if stream == "stderr" and self._noise is not None:
            data = self._noise.feed(data)
        cell = self.cell
        if cell is not None and cell.key_mode and not cell.done.is_set() \
                and cell.generation == keeper.generation:
            return  # a full-screen program's last words (its screen, "Vim: Finished.")
        if cell is not None and not cell.ended[stream] and cell.generation == keeper.generation:
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
        if isinstance(frame, frames.DisplayFrame):
            self._coalescer.flush()  # what was printed before the display shows before it
            if self._closing:
                return  # its payload is removed with the state directory
            # What the shell printed after it waits until it is shown.
            self._held = collections.deque()
            self._fetch(frame.payload, lambda data: self._show_display(frame, data))
        elif isinstance(frame, frames.ReplyFrame):
            self._fetch(frame.payload, lambda data: self._answer_query(data or b"", frame.seq))
        elif isinstance(frame, frames.BarrierFrame):
            self._on_barrier(frame)
        elif isinstance(frame, frames.ReadyFrame):
            self._on_ready(frame)
        elif isinstance(frame, frames.EndFrame):
            self._on_end(frame)
        elif isinstance(frame, frames.ReadingFrame):
            self._prompts.on_reading(self.cell, frame)
        elif isinstance(frame, frames.ReadDoneFrame):
            self._prompts.on_read_done(self.cell, frame)
        elif isinstance(frame, frames.LookedFrame):
            self._prompts.on_looked(self.cell)
        else:
            log.error("bug: a frame of unknown kind %r", frame)

    def _fetch(self, payload: str, then: Callable[[bytes | None], None]) -> None:
        """Have the I/O worker read a payload file the shell wrote (and remove
        it); then(its bytes, or None when it could not be read)."""
        info, backend = self._keeper.info, self._keeper.backend
        path = f"{info.state_dir if info else ''}/{payload}"

        def fetched(done: IoDone) -> None:
            if done.error is not None:
                log.warning("could not fetch %s: %s", payload, done.error)
            then(None if done.error is not None else done.result)

        self._after_io(self._io.submit(lambda: backend.fetch(path)), fetched)

    def _show_display(self, frame: frames.DisplayFrame, data: bytes | None) -> None:
        if data is None:
            self._coalescer.add("stderr", "[shell_kernel] display: the data could not be "
                                "fetched from the shell's host (see the kernel log).\n")
        elif self._display_sink is not None:
            cell = self.cell
            notice = (cell.limit.admit_display(frame.mime, data)
                      if cell is not None and not cell.done.is_set() else None)
            if notice:
                self._coalescer.add("stderr", notice)
            else:
                self._shown.before_showing()
                self._display_sink(frame.mime, data, frame.display_id)
        self._release_held()

    def _release_held(self) -> None:
        """Handle the events held behind a display, in order, until one is
        another display (which holds the rest again)."""
        held, self._held = self._held, None
        while held and self._held is None:
            self._handle(held.popleft())
        if self._held is not None:
            self._held.extend(held)

    def _on_ready(self, frame: frames.ReadyFrame) -> None:
        start = self._start
        if start is None:
            return
        start.frames[frame.stream] = frame
        if len(start.frames) == len(protocol.STREAMS):
            self._noise = frames.TtyNoiseFilter(start.frames["stdout"].pid or 0)
            self._keeper.shell_up()
            self._answer_start(start.frames["stdout"])

    def _on_barrier(self, frame: frames.BarrierFrame) -> None:
        self_close = self._self_close
        if self_close is not None and frame.nonce == self_close.nonce:
            self_close.answered.set()  # the shell declined to end itself
            return
        cell = self.cell
        if cell is not None and frame.nonce.startswith(frames.READ_MARK_PREFIX) and not cell.done.is_set():
            cell.read_marks.setdefault(frame.nonce, set()).add(frame.stream)
            return
        if cell is not None and cell.catch_up == frame.nonce and not cell.done.is_set():
            cell.barriers.add(frame.stream)
            if len(cell.barriers) == len(protocol.STREAMS):
                self._shell_ended(cell)

    def _on_end(self, frame: frames.EndFrame) -> None:
        cell = self.cell
        if cell is None or frame.seq != cell.seq:
            return  # the repeat of an ended cell's end, after an interrupt
        if frame.unread:
            log.error("cell %d: its end frame on %s could not be read: %s",
                      frame.seq, frame.stream, frame.unread)
        if frame.unread and frame.stream == "stdout":
            cell.status = frame.status
            self._coalescer.add("stderr", frames.unread_end_notice(frame))
        elif frame.stream == "stdout" and frame.status is not None:
            # Abandoned by the interrupt: 130, whatever the bash left.
            cell.status = 130 if frame.abandoned and cell.interrupted else frame.status
            cell.cwd, cell.failed = frame.cwd, (frame.line, frame.command)
        if frame.stream == "stderr" and self._noise is not None:
            self._coalescer.add("stderr", self._decoders["stderr"].decode(self._noise.flush()))
        cell.ended[frame.stream] = True
        if cell.ended["stdout"] and cell.ended["stderr"] and not cell.catch_up:
            if cell.key_mode:
                # Its program may end after the shell moved on (bash 3.2 does
                # not always wait for a child that handles SIGINT, as top
                # does): its last words ("\n" from top) must not reach the
                # next cell. They come within moments; the cell ends then.
                cell.settle_due = time.monotonic() + KEY_MODE_SETTLE_S
            self._shell_ended(cell)

    def _on_exited(self, event: Exited) -> None:
        ended, keeper = event.ended, self._keeper
        if not keeper.shell_lost(ended):
            return  # already lost: a second report of the same end
        if self._self_close is not None:
            self._self_close.answered.set()
        self._answer_query(None)
        if self._start is not None:
            said = self._start.said.decode(errors="replace").strip()
            self._answer_start(f"bash {ended.reason}" + (f"; it said: {said}" if said else ""))
            return
        cell = self.cell
        if (cell is not None and cell.sending and ended.connection_lost
                and keeper.can_reattach):
            cell.lost_unsent = ended  # see _on_cell_sent and ShellSession._send
            return
        if (ended.connection_lost and keeper.can_reattach and not self._events.closed
                and cell is not None and not cell.done.is_set()):
            # The shell and its cell carry on at the far end: get them back.
            self._reattach(event.generation, ended)
            return
        for stream, data in keeper.output.flush():
            self._handle_data(stream, data)
        if cell is not None and not cell.done.is_set():
            self._finish_lost(cell, ended)

    _HANDLERS = {
        Output: _on_output_event,
        FrameSeen: _on_frame,
        Notice: _on_notice,
        Exited: _on_exited,
        CellLost: _on_cell_lost,
        Reattached: _on_reattached,
        IoDone: _on_io_done,
        ShellStarting: _on_shell_starting,
        StartEnded: _on_start_ended,
        CellBegun: _on_cell_begun,
        LossMended: _on_loss_mended,
        PromptAnswered: _on_prompt_answered,
        QueryAsked: _on_query_asked,
        QueryTimedOut: _on_query_timed_out,
        SelfCloseAsked: _on_self_close_asked,
        InterruptAsked: _on_interrupt_asked,
        KeeperChange: _on_keeper_change,
        LifecycleAsked: _on_lifecycle_asked,
    }

    def _finish_lost(self, cell: RunningCell, ended: ShellExit) -> None:
        cell.lost = ended
        self._end_cell(cell)

    def _shell_ended(self, cell: RunningCell) -> None:
        cell.shell_ended.set()
        self._end_if_over(cell)
        self._escalations.cell_ended(cell)

    def _end_if_over(self, cell: RunningCell) -> None:
        """End a cell that the shell has ended, unless a key-mode cell's
        settle time or its interrupt's repeat of the post line is still due."""
        if cell.done.is_set() or not cell.shell_ended.is_set() or cell.post_repeat_due:
            return
        if cell.settle_due is not None and time.monotonic() < cell.settle_due:
            return
        self._end_cell(cell)

    def _end_cell(self, cell: RunningCell) -> None:
        self._prompts.cell_ended(cell)
        for stream, decoder in self._decoders.items():
            self._coalescer.add(stream, self._clears[stream].flush()
                                + decoder.decode(b"", final=True))
        self._coalescer.flush()
        if self.cell is cell:
            self.cell = None  # its fields are the caller's from now on
        cell.shell_ended.set()
        cell.done.set()
        cell.inbox.put(None)
        self._escalations.cell_ended(cell)
