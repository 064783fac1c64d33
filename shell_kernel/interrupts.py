"""Interrupting a cell: reap.sh's modes as methods, and the escalation that uses them.

Terminal semantics are the model: SIGINT to the cell's processes and the
shell first (an interactive bash abandons the command line and keeps its
state); then SIGTERM and SIGKILL to what is left of the cell's process tree;
and if the shell still does not come back (it ignores SIGINT), it is
replaced. Everything here runs on the interrupt thread (one per interrupt,
"shell-kernel-interrupt", started by the session's pump) and reaches the
host only through the backend's side command; it writes no session state,
and tells the session what happened through the Interrupter's callbacks.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from . import protocol, shell
from .backends import Backend, BackendError

log = logging.getLogger("shell_kernel.interrupts")

REAP_SCRIPT = shell.script("reap.sh")
# An interrupt of a named session's cell waits this long for a shutdown
# request that would make it jupyter_client's own (see Interrupter._closed_soon).
SHUTDOWN_AFTER_INTERRUPT = 0.5


class Reaper:
    """One shell's processes on its host, through shell/reap.sh.

    Process ids travel as opaque tokens: reap.sh prints them and takes them
    back, so it may tag them (e.g. with a start time) without Python knowing.
    """

    def __init__(self, backend: Backend, shell_pid: int, state_dir: str):
        self._backend = backend
        self._args = [str(shell_pid), state_dir]
        # reap.sh runs from the session's directory (a durable session's
        # launch put it there; else the first step does), not sent each time.
        self._path = f"{state_dir}/reap.sh"
        self._installed = True  # until a step finds it is not

    def _run(self, mode: str, signal_name: str, pids: Sequence[str] = (),
             timeout: float = 10.0) -> list[str]:
        args = [mode, signal_name, *self._args, *pids]
        result = None
        if self._installed:
            result = self._backend.side_command(shell.RUN_INSTALLED, [self._path, *args],
                                                timeout=timeout, urgent=True)
            self._installed = result.status != shell.NOT_INSTALLED
        if not self._installed:
            result = self._backend.side_command(shell.INSTALL_AND_RUN,
                                                [self._path, REAP_SCRIPT, *args],
                                                timeout=timeout, urgent=True)
            self._installed = True
        log.debug("reap %s %s: %s", mode, signal_name, result.stdout.strip())
        return result.stdout.split()

    def note_tree(self, seq: int) -> list[str]:
        """Cell seq's processes (not earlier cells' background jobs); none
        once it has ended."""
        return self._run("tree", "-", [str(seq)])

    def signal_cell(self, signal_name: str, seq: int | None,
                    noted: Sequence[str] = ()) -> list[str]:
        """Signal cell seq's processes (and those noted still alive), then
        SIGINT the shell; nothing once that cell has ended (seq None: what
        runs, e.g. a query)."""
        return self._run("cell", signal_name, ["-" if seq is None else str(seq), *noted])

    def cell_has_ended(self, seq: int) -> bool:
        """Cell seq has ended on the host (its end may not have come yet)."""
        return self._run("ended", "-", [str(seq)]) == ["yes"]

    def signal_leftovers(self, signal_name: str, noted: Sequence[str]) -> list[str]:
        """Signal what is left of the noted processes and their descendants."""
        return self._run("orphans", signal_name, noted)

    def stop_everything(self) -> bool:
        """Stop every process the session started and remove its state directory.
        Never raises: it runs on the way out, where a failure can only be logged.
        False when the host could not be told."""
        try:
            self._run("all", "-", timeout=10)
            return True
        except BackendError as err:
            log.warning("could not clean up the shell's processes: %s", err)
            return False


class Outcome(enum.Enum):
    ENDED = "ended"  # the cell ended; what was left of it was reaped
    REPLACE = "replace"  # the shell ignored SIGINT, SIGTERM and SIGKILL to its cell
    UNREACHABLE = "unreachable"  # a side command failed: the host is out of reach


@dataclass
class EscalationResult:
    outcome: Outcome
    error: BackendError | None = None


class Escalation:
    """SIGINT, then SIGTERM and SIGKILL to what is left, for one running cell.
    With SIGTERM and SIGKILL the shell gets SIGURG, which its trap turns into
    a SIGINT before its next command (see reap.sh's cell mode): the cell's
    command list is abandoned then, whatever signal ended the program.

    seq: the cell's number; reap.sh does nothing once that cell has ended,
    so a step that is late (the cell's end was on its way) leaves the next
    cell alone. resend_post: sends the cell's post-hook line again (the
    first may have been cut short by the SIGINT). cell_ended(timeout): waits
    up to timeout seconds for the cell's end; True once it ended.
    """

    # (signal, seconds to wait for the cell's end after it); SIGINT's wait is the grace.
    LATER_PHASES = (("TERM", 0.3), ("KILL", 0.7))
    # How long a cell that the host says has ended may take to say so here:
    # its end travels with its output, which a slow relay holds up (BusyBox's
    # tail -f looks once a second; a loaded host).
    END_ON_ITS_WAY_SECONDS = 10.0

    def __init__(self, reaper: Reaper, seq: int, resend_post: Callable[[], None],
                 cell_ended: Callable[[float], bool], grace: float):
        self._reaper = reaper
        self._seq = seq
        self._resend_post = resend_post
        self._cell_ended = cell_ended
        self._grace = grace

    def run(self) -> EscalationResult:
        """Returns the outcome; never raises BackendError."""
        try:
            # Noted first: a child killed by SIGINT leaves its own children to
            # init, outside the shell's tree, and they must not escape the
            # SIGTERM/SIGKILL that follows the grace period.
            noted = self._reaper.note_tree(self._seq)
            for signal_name, wait in (("INT", self._grace), *self.LATER_PHASES):
                self._reaper.signal_cell(signal_name, self._seq, noted)
                self._resend_post()
                if self._cell_ended(wait):
                    self._reap_leftovers(noted)
                    return EscalationResult(Outcome.ENDED)
            # Not replaced if it has ended on the host: that shell is well,
            # and its end is on its way (the next cell waits for it).
            if self._reaper.cell_has_ended(self._seq):
                self._cell_ended(self.END_ON_ITS_WAY_SECONDS)
                self._reap_leftovers(noted)
                return EscalationResult(Outcome.ENDED)
        except BackendError as err:
            return EscalationResult(Outcome.UNREACHABLE, err)
        return EscalationResult(Outcome.REPLACE)

    def _reap_leftovers(self, noted: list[str]) -> None:
        """The cell is over; what is left of its processes gets SIGTERM, then SIGKILL."""
        if not noted:
            return
        time.sleep(min(self._grace, 0.5))
        if self._reaper.signal_leftovers("TERM", noted):
            time.sleep(0.3)
            self._reaper.signal_leftovers("KILL", noted)


class Shell(Protocol):
    """What an interrupt needs of the session's current shell (session.keeper.Keeper)."""
    backend: Backend | None
    up: threading.Event  # set while the shell is up
    attachments: int  # reattaches so far
    can_reattach: bool
    outlives_kernel: bool

    def reaper(self) -> Reaper | None: ...


class Interrupter:
    """Interrupts running cells, each on a thread of its own (run(cell)).

    cell: the session's RunningCell (seq, generation, catch_up, done,
    shell_ended). closing(): the session is shutting down. report(cell,
    result): the outcome, when the session must act on it (the shell is to
    be replaced, or the host is out of reach). suspect(cell): a side channel
    failed on a live connection, to be treated as a dropped one (the session
    then reconnects). repeated(cell): the cell's post line was sent again
    (or could not be). finished(cell): this interrupt is over.
    """

    def __init__(self, shell: Shell, grace: float, reattach_timeout: float,
                 closing: Callable[[], bool], report: Callable[[object, EscalationResult], None],
                 suspect: Callable[[object], None], repeated: Callable[[object], None],
                 finished: Callable[[object], None]):
        self._shell = shell
        self._grace = grace
        self._reattach_timeout = reattach_timeout
        self._closing = closing
        self._report = report
        self._suspect = suspect
        self._repeated = repeated
        self._finished = finished

    def run(self, cell) -> None:
        try:
            if self._shell.outlives_kernel and self._closed_soon():
                return  # a named session's cell outlives the kernel (see _closed_soon)
            result = self._escalate(cell)
            if result.outcome is Outcome.REPLACE:
                self._report(cell, result)
                self._shell.reaper().stop_everything()  # the shell's end then ends the cell
            elif result.outcome is Outcome.UNREACHABLE:
                log.warning("interrupt of cell %d failed: %s", cell.seq, result.error)
                self._report(cell, result)
        finally:
            self._finished(cell)  # a later interrupt of this cell may try again

    def _closed_soon(self) -> bool:
        """jupyter_client interrupts a kernel before every shutdown and restart
        (KernelManager.shutdown_kernel), and the shutdown request follows at
        once: True if it comes within SHUTDOWN_AFTER_INTERRUPT seconds."""
        deadline = time.monotonic() + SHUTDOWN_AFTER_INTERRUPT
        while time.monotonic() < deadline:
            if self._closing():
                return True
            time.sleep(0.02)
        return self._closing()

    def _escalate(self, cell) -> EscalationResult:
        attachments = self._shell.attachments
        backend, reaper = self._shell.backend, self._shell.reaper()
        line = protocol.post_line(cell.seq) + (
            protocol.barrier_line(cell.catch_up) if cell.catch_up else b"")

        def resend_post() -> None:
            try:
                backend.send(line)
            finally:
                self._repeated(cell)

        result = Escalation(reaper, cell.seq, resend_post, cell.shell_ended.wait,
                            self._grace).run()
        if result.outcome is Outcome.UNREACHABLE and self._shell.can_reattach \
                and self._wait_reattached(cell, attachments):
            # The same shell, through a new connection: interrupt it now.
            return self._escalate(cell)
        return result

    def _wait_reattached(self, cell, attachments: int) -> bool:
        """Wait while a durable session reconnects; True once it did, with the
        cell still running. A side channel that failed on a live connection
        is treated as a dropped connection, so that the session reconnects."""
        if self._shell.up.is_set() and not cell.done.is_set():
            self._suspect(cell)
        deadline = time.monotonic() + self._reattach_timeout
        while not cell.done.wait(0.1):
            if self._shell.attachments != attachments and self._shell.up.is_set():
                return True
            if time.monotonic() > deadline:
                break
        return False
