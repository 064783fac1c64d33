"""What the backend's threads, the reattach thread and the interrupt thread
tell the pump, and the queue that carries it.

Every event carries the generation of the shell it is about: the pump drops
events of a replaced shell. The queue's condition is also the lock of the
few fields that the caller and the pump share (the running cell, the
current shell's scanners and terminal: see the package docstring).
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Callable, Union

from .. import protocol
from ..backends import ShellExit
from ..interrupts import EscalationResult

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


class EventQueue:
    """Events in order, from any thread to the pump; push() blocks while
    more than MAX_QUEUED_BYTES of output wait (back-pressure on the readers)."""

    def __init__(self):
        self.cond = threading.Condition()
        self._events: collections.deque = collections.deque()
        self._queued = 0
        #: Set once, by close(): push() stops blocking, and the pump ends
        #: once the queue is empty.
        self.closed = False

    def push(self, event: Event, size: int = 0) -> None:
        with self.cond:
            while self._queued > MAX_QUEUED_BYTES and not self.closed:
                self.cond.wait(0.5)
            self._events.append(event)
            self._queued += size
            self.cond.notify_all()

    def close(self) -> None:
        """No notify: a pump waiting for an event keeps waiting for the next one
        (a shell asked to end itself answers with one); ShellSession.close
        wakes it at the end."""
        self.closed = True

    def take(self, deadline: Callable[[], float | None]) -> list[Event] | None:
        """The events queued, waiting for one until deadline() (a monotonic
        time, None: no limit; evaluated under the condition): [] when the
        deadline came first, None once closed and empty."""
        with self.cond:
            while not self._events and not self.closed:
                due = deadline()
                timeout = None if due is None else max(0.0, due - time.monotonic())
                if not self.cond.wait(timeout) and due is not None:
                    break
            if self.closed and not self._events:
                return None
            events = list(self._events)
            self._events.clear()
            self._queued = 0
            self.cond.notify_all()
            return events
