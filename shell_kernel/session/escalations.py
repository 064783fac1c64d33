"""The interrupts under way, driven on the pump's thread.

Each is an interrupts.interrupt_plan: a generator that yields what it needs
next. Its host steps run on the I/O worker; it is resumed when what it waits
for comes (the step's IoDone, the cell's end, a reconnect) or at its
deadline, which the pump waits for with everything else (due()). What the
plan returns goes to the pump (finished), and so does each repeat of the
cell's post line (repeated) and a side channel found failing (suspect).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from ..backends import BackendError, describe_error
from ..interrupts import (EscalationResult, HostStep, Outcome, Pause, Plan, Step, Suspect,
                          WaitEnd, WaitReattached)
from .events import IoDone
from .io_worker import IoWorker
from .types import RunningCell

log = logging.getLogger("shell_kernel.session")


@dataclass
class _Run:
    cell: RunningCell
    plan: Plan
    step: Step | None = None
    job: int | None = None  # the I/O job of a HostStep
    due: float | None = None  # when a wait ends without what it waits for


class Escalations:
    def __init__(self, io: IoWorker, reattached_since: Callable[[int], bool],
                 repeated: Callable[[RunningCell], None],
                 suspect: Callable[[RunningCell], None],
                 finished: Callable[[RunningCell, EscalationResult], None]):
        self._io = io
        self._reattached_since = reattached_since  # attachments count -> reconnected since
        self._repeated = repeated
        self._suspect = suspect
        self._finished = finished
        self._runs: list[_Run] = []

    def start(self, cell: RunningCell, plan: Plan) -> None:
        run = _Run(cell, plan)
        self._runs.append(run)
        self._advance(run, None)

    def close(self) -> None:
        """The session closes: the plans stop where they are."""
        runs, self._runs = self._runs, []
        for run in runs:
            run.plan.close()

    def due(self) -> float | None:
        return min((run.due for run in self._runs if run.due is not None), default=None)

    # ------------------------------------------------- what plans wait for
    def io_done(self, event: IoDone) -> None:
        for run in self._runs:
            if run.job == event.job:
                if run.step.repeats_post:
                    self._repeated(run.cell)
                self._advance(run, event.result, event.error)
                return

    def cell_ended(self, cell: RunningCell) -> None:
        """The shell has ended this cell (its end frames came, or it is done)."""
        self._resume(lambda run: run.cell is cell and isinstance(run.step, WaitEnd), True)
        if cell.done.is_set():
            self._resume(lambda run: run.cell is cell and isinstance(run.step, WaitReattached),
                         False)

    def reattached(self) -> None:
        self._resume(lambda run: isinstance(run.step, WaitReattached), True)

    def tick(self) -> None:
        now = time.monotonic()
        self._resume(lambda run: run.due is not None and now >= run.due,
                     lambda run: None if isinstance(run.step, Pause) else False)

    # ------------------------------------------------------------ driving
    def _resume(self, waiting: Callable[[_Run], bool], value) -> None:
        for run in [run for run in self._runs if waiting(run)]:
            if run in self._runs:  # not ended by an earlier one's resumption
                self._advance(run, value(run) if callable(value) else value)

    def _advance(self, run: _Run, value: object, error: BackendError | None = None) -> None:
        """Resume the plan with what it waited for, until its next wait."""
        while True:
            try:
                step = run.plan.throw(error) if error is not None else run.plan.send(value)
            except StopIteration as stop:
                self._runs.remove(run)
                self._finished(run.cell, stop.value)
                return
            except Exception as err:  # noqa: BLE001 - a bug in the plan: the cell is not stopped
                log.exception("the interrupt of cell %d failed", run.cell.seq)
                self._runs.remove(run)
                self._finished(run.cell, EscalationResult(Outcome.UNREACHABLE, BackendError(
                    f"the interrupt failed ({describe_error(err)})")))
                return
            error, value = None, None
            run.step, run.job, run.due = step, None, None
            if isinstance(step, HostStep):
                run.job = self._io.submit(step.call)
                return
            if isinstance(step, Suspect):
                self._suspect(run.cell)
                continue
            if isinstance(step, WaitEnd) and run.cell.shell_ended.is_set():
                value = True
                continue
            if isinstance(step, WaitReattached):
                if self._reattached_since(step.since):
                    value = True
                    continue
                if run.cell.done.is_set():
                    value = False
                    continue
            run.due = time.monotonic() + step.seconds
            return
