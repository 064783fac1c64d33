"""What the other threads tell the pump, and the queue that carries it.

Two kinds: events about the shell (from the backend's readers, the I/O
worker's reconnect), each with the generation of the shell it is about,
so that the pump drops those of a replaced shell; and requests (from the
caller, the kernel's interrupt, close, and the I/O worker's IoDone), which
are about the session whatever its shell. The pump answers a request
through what the request carries (a cell's done event and inbox, a
query's or a start's future).
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from concurrent.futures import Future
from typing import Callable, Union

from .. import frames
from ..backends import BackendError, CellsHeard, ShellExit
from ..prompts import Prompt
from .types import RunningCell

# Reader threads block once this much output waits for the pump: the shell
# then blocks on its pipe, so memory stays bounded whatever a cell prints.
MAX_QUEUED_BYTES = 8 << 20


@dataclass(frozen=True)
class Output:
    generation: int
    stream: str
    data: bytes
    mark: object = None  # the backend's received() after it (see Acknowledgements)


@dataclass(frozen=True)
class FrameSeen:
    generation: int
    frame: frames.Frame
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
class Reattached:
    """The durable shell is reachable again, through a new connection; heard:
    what the host received of the cells' lines (None: not known)."""
    generation: int
    heard: CellsHeard | None = None


ShellEvent = Union[Output, FrameSeen, Notice, Exited, CellLost, Reattached]


@dataclass(frozen=True)
class IoDone:
    """The I/O worker ran job number `job`: its result, or the error it raised."""
    job: int
    result: object
    error: BackendError | None


@dataclass(frozen=True)
class ShellStarting:
    """The caller starts a shell (the keeper's current generation, from now
    on): the pump resolves the future with its ready frame, why it failed
    to start (a message), or None when the session closed meanwhile."""
    answer: Future


@dataclass(frozen=True)
class StartEnded:
    """The start is over without ready frames: a named session's shell (of
    shell_pid) was adopted (it sends none), or close() began while a start
    waited, which stops waiting (None)."""
    shell_pid: int | None = None


@dataclass(frozen=True)
class CellBegun:
    """The caller runs this cell: the pump follows it, and has the I/O
    worker send its lines with send(cell, False), which returns the prompt
    terminal they point at (or raises BackendError: the cell never ran).
    send(cell, True) sends only its post line (the host had the others)."""
    cell: RunningCell
    send: Callable[[RunningCell, bool], object]


@dataclass(frozen=True)
class LossMended:
    """The cell's shell was reconnected before any of its lines went."""
    cell: RunningCell


@dataclass(frozen=True)
class PromptAnswered:
    """The caller is about to write an answer ("line", "eof") to the prompt
    terminal, or ("") gives the question up (it was over)."""
    cell: RunningCell
    prompt: Prompt
    answered: str


@dataclass(frozen=True)
class QueryAsked:
    """The caller asks query seq, whose line send() sends (the I/O worker):
    the pump resolves the future with the reply's bytes, or None once the
    shell is lost or the line could not be sent."""
    seq: int
    reply: Future
    send: Callable[[], None]


@dataclass(frozen=True)
class QueryTimedOut:
    """The caller stopped waiting for query seq: whatever it runs is
    interrupted (the shell must be free for the next cell)."""
    seq: int


@dataclass(frozen=True)
class SelfCloseAsked:
    """close() asks the idle shell to end itself next: the pump sets answered
    when the shell ended, or declined with the barrier of this nonce."""
    nonce: str
    answered: threading.Event


@dataclass(frozen=True)
class InterruptAsked:
    """Ctrl-C for the running cell (harmless when idle)."""


@dataclass(frozen=True)
class LifecycleAsked:
    """The caller has a step of the shell's lifecycle (start, restart) run
    on the I/O worker: job runs it and resolves the caller's future."""
    job: Callable[[], None]


@dataclass(frozen=True)
class KeeperChange:
    """A change the keeper makes, from a thread other than the pump's, to
    state the pump owns (the shell's up, lost and reattaches; the holding
    of partial lines once a prompt terminal opened): the pump applies it,
    its one writer, and then sets applied."""
    apply: Callable[[], None]
    applied: threading.Event


@dataclass(frozen=True)
class Closing:
    """The session is closing and its clean-up is over: the last request.
    The running cell, if any, is left to its named session or lost."""
    detach: bool


REQUESTS = (IoDone, ShellStarting, StartEnded, CellBegun, LossMended, PromptAnswered,
            QueryAsked, QueryTimedOut, SelfCloseAsked, InterruptAsked, LifecycleAsked, KeeperChange,
            Closing)
Request = Union[REQUESTS]
Event = Union[ShellEvent, Request]


class EventQueue:
    """Events in order, from any thread to the pump; pushing output blocks
    while more than MAX_QUEUED_BYTES of it wait (back-pressure on the readers)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._events: collections.deque = collections.deque()
        self._queued = 0
        #: Set once, by close(): push() stops blocking (the pump ends with
        #: the Closing request, which close() makes last).
        self.closed = False
        self._finished = False  # Closing was pushed: nothing after it is handled

    def push(self, event: Event, size: int = 0) -> None:
        """size: the output bytes the event holds. Only output waits for room:
        a request or a frame goes at once (an interrupt of a cell that floods
        its output must not wait behind that output)."""
        with self._cond:
            while size and self._queued > MAX_QUEUED_BYTES and not self.closed:
                self._cond.wait(0.5)
            self._events.append(event)
            self._queued += size
            self._finished = self._finished or isinstance(event, Closing)
            self._cond.notify_all()

    def push_unless_closed(self, event: Event, then: Callable[[], None]) -> bool:
        """Push a request and call then() (under the queue's condition: atomically
        with close()), unless the queue is closed: False then, and neither."""
        with self._cond:
            if self.closed:
                return False
            then()
            self._events.append(event)
            self._cond.notify_all()
            return True

    def push_unless_finished(self, event: Event) -> bool:
        """Push a request the pump will still handle: False (not pushed) once
        the Closing request is queued, after which the pump handles none."""
        with self._cond:
            if self._finished:
                return False
            self._events.append(event)
            self._cond.notify_all()
            return True

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()  # a reader blocked by back-pressure goes on

    def take(self, deadline: Callable[[], float | None]) -> list[Event]:
        """The events queued, waiting for one until deadline() (a monotonic
        time, None: no limit; evaluated by the pump, the only caller): []
        when the deadline came first."""
        with self._cond:
            while not self._events:
                due = deadline()
                timeout = None if due is None else max(0.0, due - time.monotonic())
                if not self._cond.wait(timeout) and due is not None:
                    break
            events = list(self._events)
            self._events.clear()
            self._queued = 0
            self._cond.notify_all()
            return events
