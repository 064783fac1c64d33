"""The running cell's prompts, on the pump's thread (the pump owns it and
tells it what happens): the reads the terminal's watcher reports, when
each becomes a question (once its text had time to arrive: see due), the
question put to the caller (the cell's inbox) or answered with end-of-file
and a notice, a program that needs a terminal stopped, and the output held
behind an open question until it is answered or over. The Coalescer holds
and lets go what it is told to; the decisions are here.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from .. import frames, prompts, protocol
from ..output import Coalescer
from ..prompts import Prompt
from .events import PromptAnswered
from .keeper import Keeper
from .types import RunningCell

log = logging.getLogger("shell_kernel.session")


class PromptTracker:
    def __init__(self, coalescer: Coalescer, keeper: Keeper,
                 interrupt: Callable[[RunningCell], None]):
        self._coalescer = coalescer
        self._keeper = keeper
        self._interrupt = interrupt  # stops a cell whose program reads keys
        self._held: Prompt | None = None  # the coalescer holds output behind its text

    def terminal_opened(self) -> None:
        """Cells may prompt from now on: a partial line waits a moment, in case
        it is a question (see prompts.PARTIAL_HOLD_SECONDS)."""
        self._coalescer.partial_hold = prompts.PARTIAL_HOLD_SECONDS
        self._coalescer.partial_looks = prompts.PARTIAL_HOLD_LOOKS
        self._coalescer.partial_hold_max = prompts.PARTIAL_HOLD_MAX_SECONDS

    def on_answered(self, cell: RunningCell | None, event: PromptAnswered) -> None:
        """The caller answers (or gives up) the question it was put."""
        prompt = event.prompt
        if event.cell is not cell or cell.prompt is not prompt:
            return
        if event.answered:
            prompt.answered = event.answered
        cell.prompt = None  # the next read may be asked now
        self.settle()

    def cell_ended(self, cell: RunningCell) -> None:
        self.settle(ended=True)
        if cell.prompt is not None:
            cell.prompt.over.set()

    def on_reading(self, cell: RunningCell | None, frame: frames.ReadingFrame) -> None:
        log.debug("read reported: %s (%s), read %d, cell %s", frame.pid, frame.name, frame.reads,
                  cell.seq if cell is not None else None)
        self._keeper.input.was_read()
        if cell is not None and not cell.done.is_set() and not cell.catch_up:
            cell.reads.append((frame, time.monotonic()))

    def on_read_done(self, cell: RunningCell | None, frame: frames.ReadDoneFrame) -> None:
        log.debug("read over: %s, read %d", frame.pid, frame.reads)
        if cell is None:
            return
        key = (frame.pid, frame.reads)
        cell.reads = [(read, due) for read, due in cell.reads if (read.pid, read.reads) != key]
        cell.read_marks.pop(frames.read_mark(*key), None)
        if cell.prompt is not None and cell.prompt.key == key:
            cell.prompt.over.set()  # e.g. read -t timed out: the question is moot

    def on_looked(self, cell: RunningCell | None) -> None:
        # A read reported and not yet asked is the partial line's: its look
        # lets nothing go (see due).
        if cell is None or not cell.reads:
            self._coalescer.looked()

    def due(self, cell: RunningCell | None) -> float | None:
        """When the oldest reported read becomes a prompt. The output and the
        report travel separately: a marked read, once its marks have come
        back on both streams (its text is then all in; a mark lost on the
        way costs MARK_WAIT_SECONDS); else at once if the output ends with a
        partial line (its text), or a moment later, in case the text is
        still on its way."""
        if cell is None or not cell.reads or cell.prompt is not None or cell.sending:
            return None  # (while sending: which terminal the answer goes to is not known)
        frame, reported = cell.reads[0]
        if frame.marked:
            marks = cell.read_marks.get(frames.read_mark(frame.pid, frame.reads), ())
            if len(marks) == len(protocol.STREAMS):
                return reported
            return reported + prompts.MARK_WAIT_SECONDS
        if self._coalescer.holds_partial:
            return reported + self._keeper.output_lag
        return reported + prompts.SETTLE_SECONDS

    def settle(self, ended: bool = False) -> None:
        """Once the open question is answered or over, the output held
        behind its text goes out (with the text, if nobody answered)."""
        prompt = self._held
        if prompt is not None and (prompt.answered or prompt.over.is_set() or ended):
            self._held = None
            self._coalescer.release_prompt(prompt.answered)

    def ask_if_due(self, cell: RunningCell | None) -> None:
        """Turn the oldest reported read into a prompt, once its text had time
        to arrive: the partial line the output ends with. Without anyone to
        ask, the read gets end-of-file, and the cell a notice (once)."""
        due = self.due(cell)
        if due is None or time.monotonic() < due or cell.done.is_set():
            return
        info = self._keeper.info
        frame, _ = cell.reads.pop(0)
        cell.read_marks.pop(frames.read_mark(frame.pid, frame.reads), None)
        log.debug("cell %d: the read of %s (%s) is due", cell.seq, frame.pid, frame.name)
        if prompts.needs_terminal(frame):
            cell.key_mode = True
            self._coalescer.drop_screen()
            self._coalescer.flush()
            self._coalescer.add("stderr", prompts.needs_terminal_notice(
                prompts.asking_command(frame, info.pid if info else 0)))
            self._coalescer.flush()
            self._interrupt(cell)
            return
        # The text may have gone out as output already (reported late): asked
        # anyway, it is the prompt's too; else it would be output twice.
        stream, text = self._coalescer.take_partial(shown=cell.ask is not None)
        self._coalescer.flush()
        prompt = prompts.make_prompt(frame, text, info.pid if info else 0)
        if cell.ask is not None:
            cell.prompt = self._held = prompt
            self._coalescer.hold_prompt(stream, text)
            cell.inbox.put(prompt)
            return
        self._coalescer.add(stream, text)
        if not cell.told_no_input:
            cell.told_no_input = True
            self._coalescer.add("stderr", ("\n" if text else "") + prompts.no_input_notice(prompt.command))
        self._coalescer.flush()
        if cell.terminal is not None:
            cell.terminal.answer(None)  # end-of-file on the terminal it reads
