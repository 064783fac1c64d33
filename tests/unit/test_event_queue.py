"""The pump's queue (session/events.py): output waits for room, nothing else does."""

from __future__ import annotations

import threading

from shell_kernel.session.events import MAX_QUEUED_BYTES, EventQueue, InterruptAsked, Output


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
