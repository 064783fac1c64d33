"""What a notebook job is and what it reports: the model `run` (runner.py,
one notebook on one kernel) and `run --hosts` (fleet.py, one notebook on many
hosts) share, with their reports (fleet_report.py) and the command (cli.py).

Plain data, imported by all of them and importing none of them. A CellRun or
HostRun is written by the thread that runs its host (the runner's main
thread, a fleet worker) and read by the others once that host has ended.
"""

from __future__ import annotations

import datetime
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

# What became of a host (summary.json's "status") and of a cell (the runner's
# table); the words they share mean the same for both.
OK = "ok"
FAILED = "failed"
INTERRUPTED = "interrupted"
SKIPPED = "skipped"  # a host no batch reached; a cell that is empty or tagged skip-execution
UNREACHABLE = "unreachable"  # hosts only
FAILED_AS_EXPECTED = "failed as expected"  # cells only, from here on
NOT_RUN = "not run"
TIMED_OUT = "timed out"
KERNEL_DIED = "kernel died"
STOPPED = "stopped"  # the cell that was running when the run broke off otherwise

#: In the order the reports list them: failures first.
HOST_STATUSES = (FAILED, UNREACHABLE, INTERRUPTED, SKIPPED, OK)
#: In the order the runner's tally counts them.
CELL_STATES = (OK, FAILED, TIMED_OUT, KERNEL_DIED, INTERRUPTED, STOPPED, FAILED_AS_EXPECTED,
               SKIPPED, NOT_RUN)
_NOT_FAILURES = (OK, FAILED_AS_EXPECTED, SKIPPED, NOT_RUN)


class RunError(Exception):
    """A problem with the request itself (exit status 2); the message says what."""


@dataclass(frozen=True)
class FleetHost:
    name: str  # in reports, file names and SHELL_KERNEL_HOST
    target: str  # [USER@]HOST[:PORT], resolved with the ssh config at connection time


@dataclass
class CellRun:
    """One code cell of a job: where it is, and what it did."""
    index: int  # in the notebook's cells
    number: int  # 1-based among the job's cells: the N of the progress's [N/total]
    label: str
    tags: list[str] = field(default_factory=list)
    state: str = NOT_RUN  # one of CELL_STATES
    #: From the cell's record (its metadata.shell_kernel, CellRecord's
    #: fields) once the cell has ended; None until then.
    exit_code: int | None = None
    duration_s: float | None = None
    error: str = ""  # why the cell failed or was stopped, for the user

    def record(self, metadata: dict) -> None:
        """Take the exit code and duration of the cell's shell_kernel metadata."""
        self.exit_code, self.duration_s = metadata.get("exit_code"), metadata.get("duration_s")

    @property
    def counts_as_failure(self) -> bool:
        return self.state not in _NOT_FAILURES


@dataclass
class HostRun:
    """What happened on one host of a fleet; its fields are its worker's until it finishes."""
    host: FleetHost
    status: str = SKIPPED  # one of HOST_STATUSES
    error: str | None = None
    cells: list[CellRun] = field(default_factory=list)  # the cells that ended, in run order
    duration_s: float | None = None
    #: The cell that failed (its index), and the end of its stderr.
    failed_cell: int | None = None
    stderr_tail: str = ""
    notebook_path: Path | None = None
    #: Where it ran (provenance.PROBE's answer) and when it started.
    probed: dict = field(default_factory=dict)
    started_at: datetime.datetime | None = None

    @property
    def failed(self) -> bool:
        return self.status in (FAILED, UNREACHABLE)


@dataclass
class FleetRun:
    """One notebook on many hosts, as the reports tell it."""
    notebook: Path
    output_dir: Path
    parameters: dict[str, str]
    nb: object  # the prepared notebook every host's copy starts from
    cells: list[int]  # the indexes of the cells each host runs
    runs: dict[str, HostRun]  # by host name, in the order given
    started: datetime.datetime = field(
        default_factory=lambda: datetime.datetime.now(datetime.timezone.utc))
    stop_reason: str | None = None  # why later batches were skipped
    #: Set by Ctrl-C (the main thread); the workers stop starting hosts and cells.
    interrupted: threading.Event = field(default_factory=threading.Event)


class CellEvents(Protocol):
    """What a job reports about its cells while it runs, from the thread that
    runs the host (several fleet workers at once: implementations lock)."""

    def cell_started(self, host: str, cell: CellRun) -> None: ...

    def cell_ended(self, host: str, cell: CellRun) -> None: ...


class FleetEvents(CellEvents, Protocol):
    """A fleet's events: its cells', and its batches, hosts and notes for the user."""

    def batch_started(self, number: int, total: int, names: list[str]) -> None: ...

    def host_started(self, host: str) -> None: ...

    def host_ended(self, run: HostRun) -> None: ...

    def note(self, text: str) -> None: ...
