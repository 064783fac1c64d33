"""Interrupting a cell: reap.sh's modes as methods, and the plan that uses them.

Terminal semantics are the model: SIGINT to the cell's processes and the
shell first (an interactive bash abandons the command line and keeps its
state); then SIGTERM and SIGKILL to what is left of the cell's process tree;
and if the shell still does not come back (it ignores SIGINT), it is
replaced.

The plan (interrupt_plan) is a generator that says what it needs next and
is sent the answer: a host step (a Reaper call, or the post line sent
again), a wait for the cell's end, a pause, a wait for a reconnect. It
owns no thread and writes no session state: the session's pump drives it
(session/escalations.py), running its host steps on the session's I/O
worker, and acts on what it returns. Reaper calls block (side commands).
"""

from __future__ import annotations

import enum
import logging
import threading
from dataclasses import dataclass
from typing import Callable, Generator, Protocol, Sequence, Union

from . import protocol, shell
from .backends import Backend, BackendError

log = logging.getLogger("shell_kernel.interrupts")

REAP_SCRIPT = shell.script("reap.sh")
# An interrupt of a named session's cell waits this long for a shutdown
# request that would make it jupyter_client's own (see interrupt_plan).
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
    NAMED_CLOSE = "named close"  # the kernel shuts down: a named session's cell runs on


@dataclass
class EscalationResult:
    outcome: Outcome
    error: BackendError | None = None


# What a plan yields, and what it is sent back.
@dataclass(frozen=True)
class HostStep:
    """Run call() on the I/O worker: sent its result, or thrown its BackendError."""
    call: Callable[[], object]
    #: The cell's post line sent again: the cell may end once this step is over.
    repeats_post: bool = False


@dataclass(frozen=True)
class WaitEnd:
    """Sent True once the shell has ended the cell, False after seconds."""
    seconds: float


@dataclass(frozen=True)
class Pause:
    """Sent None after seconds (or at once, when the session closes)."""
    seconds: float


@dataclass(frozen=True)
class Suspect:
    """A side channel failed on a live connection: treat it as dropped, so
    that the session reconnects. Sent None."""


@dataclass(frozen=True)
class WaitReattached:
    """Sent True once the durable session has reconnected since it had
    `since` reattaches, with the cell still running; False when the cell
    ended, or after seconds."""
    seconds: float
    since: int


Step = Union[HostStep, WaitEnd, Pause, Suspect, WaitReattached]
Plan = Generator[Step, object, EscalationResult]


# SIGINT's wait is the grace; then (signal, seconds to wait for the cell's end after it).
LATER_PHASES = (("TERM", 0.3), ("KILL", 0.7))
# How long a cell that the host says has ended may take to say so here:
# its end travels with its output, which a slow relay holds up (BusyBox's
# tail -f looks once a second; a loaded host).
END_ON_ITS_WAY_SECONDS = 10.0


def escalation(reaper: Reaper, seq: int, resend_post: Callable[[], None],
               grace: float) -> Plan:
    """SIGINT, then SIGTERM and SIGKILL to what is left, for one running cell.
    With SIGTERM and SIGKILL the shell gets SIGURG, which its trap turns into
    a SIGINT before its next command (see reap.sh's cell mode): the cell's
    command list is abandoned then, whatever signal ended the program.

    seq: the cell's number; reap.sh does nothing once that cell has ended,
    so a step that is late (the cell's end was on its way) leaves the next
    cell alone. resend_post: sends the cell's post-hook line again (the
    first may have been cut short by the SIGINT)."""
    try:
        # Noted first: a child killed by SIGINT leaves its own children to
        # init, outside the shell's tree, and they must not escape the
        # SIGTERM/SIGKILL that follows the grace period.
        noted = yield HostStep(lambda: reaper.note_tree(seq))
        for signal_name, wait in (("INT", grace), *LATER_PHASES):
            yield HostStep(lambda name=signal_name: reaper.signal_cell(name, seq, noted))
            yield HostStep(resend_post, repeats_post=True)
            if (yield WaitEnd(wait)):
                yield from _reap_leftovers(reaper, noted, grace)
                return EscalationResult(Outcome.ENDED)
        # Not replaced if it has ended on the host: that shell is well,
        # and its end is on its way (the next cell waits for it).
        if (yield HostStep(lambda: reaper.cell_has_ended(seq))):
            yield WaitEnd(END_ON_ITS_WAY_SECONDS)
            yield from _reap_leftovers(reaper, noted, grace)
            return EscalationResult(Outcome.ENDED)
    except BackendError as err:
        return EscalationResult(Outcome.UNREACHABLE, err)
    return EscalationResult(Outcome.REPLACE)


def _reap_leftovers(reaper: Reaper, noted: list[str], grace: float) -> Plan:
    """The cell is over; what is left of its processes gets SIGTERM, then SIGKILL."""
    if not noted:
        return
    yield Pause(min(grace, 0.5))
    if (yield HostStep(lambda: reaper.signal_leftovers("TERM", noted))):
        yield Pause(0.3)
        yield HostStep(lambda: reaper.signal_leftovers("KILL", noted))


class Shell(Protocol):
    """What an interrupt needs of the session's current shell (session.keeper.Keeper)."""
    backend: Backend | None
    up: threading.Event  # set while the shell is up
    attachments: int  # reattaches so far
    can_reattach: bool
    outlives_kernel: bool

    def reaper(self) -> Reaper | None: ...


def interrupt_plan(shell: Shell, cell, grace: float, reattach_timeout: float,
                   closing: Callable[[], bool]) -> Plan:
    """The whole interrupt of one cell (the session's RunningCell: seq,
    catch_up, done): its escalation, tried again through a durable session's
    new connection when the host was out of reach. Returns the outcome;
    REPLACE: the shell is to be replaced (the caller of the plan then stops
    everything of it, and the shell's end ends the cell); UNREACHABLE: the
    cell cannot be stopped."""
    if shell.outlives_kernel:
        # jupyter_client interrupts a kernel before every shutdown and
        # restart (KernelManager.shutdown_kernel), and the shutdown request
        # follows at once: a named session's cell then outlives the kernel.
        yield Pause(SHUTDOWN_AFTER_INTERRUPT)
        if closing():
            return EscalationResult(Outcome.NAMED_CLOSE)
    line = protocol.post_line(cell.seq) + (
        protocol.barrier_line(cell.catch_up) if cell.catch_up else b"")
    while True:
        backend, attachments = shell.backend, shell.attachments
        result = yield from escalation(shell.reaper(), cell.seq, lambda: backend.send(line), grace)
        if result.outcome is not Outcome.UNREACHABLE or not shell.can_reattach:
            return result
        if shell.up.is_set() and not cell.done.is_set():
            yield Suspect()
        if not (yield WaitReattached(reattach_timeout, attachments)):
            return result
        # The same shell, through a new connection: interrupt it now.
