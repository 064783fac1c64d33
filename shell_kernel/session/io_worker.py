"""The session's I/O worker ("shell-kernel-io"): the one thread for the
session's blocking host I/O, which the pump must not wait on: the shell's
start and restart (the caller waits for them), a cell's and a query's
lines, payloads fetched, an interrupt's host steps (reap.sh through side
commands, the post line sent again) and the reconnect of a durable session.

The pump submits jobs and is told each one's outcome as an IoDone event; a
job may push events of its own on the way (a reconnect's progress). Jobs
run one at a time, in the order given. The thread starts with the first
job (the shell's start) and ends with the pump's close().
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from typing import Callable

from ..backends import BackendError, describe_error
from .events import EventQueue, IoDone

log = logging.getLogger("shell_kernel.session")


class IoWorker:
    def __init__(self, events: EventQueue):
        self._events = events
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._numbers = itertools.count(1)
        self._thread: threading.Thread | None = None

    def submit(self, call: Callable[[], object]) -> int:
        """Run call() after the jobs before it; returns the job's number, which
        its IoDone carries. The pump's thread."""
        job = next(self._numbers)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="shell-kernel-io", daemon=True)
            self._thread.start()
        self._jobs.put((job, call))
        return job

    def close(self) -> None:
        """The jobs already given run; the thread ends after them. The pump's thread."""
        if self._thread is not None:
            self._jobs.put(None)

    def _run(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, call = item
            result, error = None, None
            try:
                result = call()
            except BackendError as err:
                error = err
            except Exception as err:  # noqa: BLE001 - a bug in a job must not end the worker
                log.exception("I/O job %d failed", job)
                error = BackendError(describe_error(err))
            self._events.push(IoDone(job, result, error))
