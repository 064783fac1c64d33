"""A start and a close on two threads (a kernel shut down while its shell
starts): whichever comes first, the start fails with the shutdown's message
and the backend it made is closed, never left running."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from shell_kernel.session import SessionError, ShellSession
from shell_kernel.session.types import SHUTTING_DOWN
from shell_kernel.testing.fake_shell import FakeShell


class SlowStart(FakeShell):
    """A shell whose start waits until the test lets it go on."""

    def __init__(self, entered: threading.Event, go: threading.Event):
        super().__init__()
        self._entered, self._go = entered, go

    def start(self, on_output, on_exit):
        self._entered.set()
        self._go.wait(10)
        return super().start(on_output, on_exit)


def test_a_start_after_close_makes_nothing_run():
    made: list[FakeShell] = []
    session = ShellSession(lambda: made.append(FakeShell()) or made[-1], lambda n, t: None)
    session.close()
    with pytest.raises(SessionError, match=SHUTTING_DOWN):
        session.start()
    assert all(shell.closed for shell in made)


def test_a_close_during_a_start_closes_the_shell_it_starts():
    entered, go = threading.Event(), threading.Event()
    made: list[FakeShell] = []
    session = ShellSession(lambda: made.append(SlowStart(entered, go)) or made[-1],
                           lambda n, t: None)
    box: dict = {}

    def start() -> None:
        try:
            session.start()
        except SessionError as err:
            box["error"] = str(err)

    thread = threading.Thread(target=start)
    thread.start()
    assert entered.wait(10)
    closer = threading.Thread(target=session.close)
    closer.start()
    deadline = time.monotonic() + 10
    while not made[0].closed:  # clean_up found the backend being started, and closed it
        assert time.monotonic() < deadline, "close() did not close the backend being started"
        time.sleep(0.01)
    go.set()
    thread.join(10)
    closer.join(10)
    assert not thread.is_alive() and not closer.is_alive()
    assert box.get("error") == SHUTTING_DOWN
    assert made[0].closed


class Sweeping(FakeShell):
    """A shell with a sweep to do, which fails as `failing` says."""

    def __init__(self, failing: str, swept: threading.Event):
        super().__init__()
        self._failing, self._swept = failing, swept

    def sweeper(self):
        if self._failing == "sweeper":
            raise RuntimeError("a bug in sweeper()")
        return self._sweep

    def _sweep(self) -> None:
        self._swept.set()
        if self._failing == "sweep":
            raise RuntimeError("a bug in the sweep")


@pytest.mark.parametrize("failing", ["nothing", "sweeper", "sweep"])
def test_a_sweep_runs_on_a_thread_of_its_own_and_its_failure_is_only_logged(failing, caplog):
    caplog.set_level(logging.INFO, logger="shell_kernel")
    swept = threading.Event()
    session = ShellSession(lambda: Sweeping(failing, swept), lambda n, t: None)
    try:
        session.start()
        assert session.run("echo ok").exit_code == 0
        if failing == "sweeper":
            assert not swept.is_set()  # (no sweep to run: nothing could set it later)
        else:
            assert swept.wait(10)
    finally:
        session.close()
    if failing != "nothing":
        deadline = time.monotonic() + 10
        while not any(f"a bug in {'sweeper()' if failing == 'sweeper' else 'the sweep'}"
                      in record.getMessage() + str(record.exc_info) for record in caplog.records):
            assert time.monotonic() < deadline, "the failure was not logged"
            time.sleep(0.01)
