"""The pump's queue (session/events.py): output waits for room, nothing else does;
nothing goes in after Closing; the keeper's changes run on the pump."""

from __future__ import annotations

import threading

from shell_kernel.session import ShellSession
from shell_kernel.session.events import (MAX_QUEUED_BYTES, Closing, EventQueue, InterruptAsked,
                                         Output)
from shell_kernel.testing.fake_shell import FakeShell


def pushed_within(queue: EventQueue, event, size: int, seconds: float) -> bool:
    thread = threading.Thread(target=queue.push, args=(event, size), daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def test_an_interrupt_goes_in_while_output_waits_for_room():
    queue = EventQueue()
    queue.push(Output(1, "stdout", b"x"), MAX_QUEUED_BYTES + 1)  # a cell flooding its output
    assert not pushed_within(queue, Output(1, "stdout", b"y"), 1, 0.3)  # the next chunk waits
    assert pushed_within(queue, InterruptAsked(), 0, 5)
    taken = queue.take(lambda: None)
    assert InterruptAsked() in taken  # and room is made: the waiting chunk goes in
    assert [e for e in queue.take(lambda: None)] == [Output(1, "stdout", b"y")]


def test_nothing_is_pushed_for_the_pump_after_its_closing():
    """A change asked after Closing would never be applied (the pump stops
    there): push_unless_finished says so, and the keeper applies it itself."""
    queue = EventQueue()
    assert queue.push_unless_finished(InterruptAsked())
    queue.push(Closing(detach=False))
    assert not queue.push_unless_finished(InterruptAsked())
    assert queue.take(lambda: None) == [InterruptAsked(), Closing(detach=False)]


def test_the_keeper_state_changes_on_the_pump_thread_only():
    """up, lost and reattaches have one writer: a change asked from another
    thread runs on the pump's, and the asker waits until it ran."""
    session = ShellSession(FakeShell, lambda name, text: None)
    keeper, ran_on = session._keeper, []
    keeper._change(lambda: ran_on.append(threading.current_thread().name))
    assert ran_on == ["shell-kernel-pump"]
    session.close()
    keeper._change(lambda: ran_on.append(threading.current_thread().name))  # the pump is gone
    assert ran_on[-1] == threading.current_thread().name
