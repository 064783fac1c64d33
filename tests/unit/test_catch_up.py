"""A named session's first cell after a kernel attached to it (catch_up.py),
over the scripted FakeShell: the earlier kernel's cell still runs there."""

from __future__ import annotations

import threading
import time

from shell_kernel.backends import Attached
from shell_kernel.session import Options, ShellSession
from shell_kernel.testing.fake_shell import FakeShell

TOKEN = "0123456789abcdef"


def attached(running: bool) -> Attached:
    return Attached(name="waited", shell_pid=4242, token=TOKEN, bash_version="5.2-fake",
                    state_dir="/fake-state", last_seq=1, running=running,
                    started_at=time.time() - 60, backlog=False)


def test_stop_pressed_as_the_wait_is_shown_interrupts_the_cell_waited_for():
    """The user presses Stop the moment the new kernel says the earlier
    kernel's cell is still running: that cell is interrupted and this cell's
    own code does not run. (CI: the Stop came before the pump followed the
    cell that waits, which then waited on for good.)"""
    shell = FakeShell(attached=attached(running=True))
    streams: list[tuple[str, str]] = []
    session: ShellSession | None = None

    def sink(stream: str, text: str) -> None:
        streams.append((stream, text))
        if "is still running" in text:
            session.interrupt()  # the Stop button, as soon as the line shows

    session = ShellSession(lambda: shell, sink, Options(interrupt_grace=0.1, start_timeout=10))
    try:
        session.start()
        box: dict = {}
        runner = threading.Thread(target=lambda: box.setdefault("record", session.run("echo never")))
        runner.start()
        runner.join(10)
        assert not runner.is_alive(), f"the cell waited on; shown: {streams}, reap.sh: {shell.side_calls}"
        record = box["record"]
        assert record.interrupted and record.exit_code == 130
        assert ("cell", "INT") in shell.side_calls
        assert not any(b"never" in line for line in shell.sent)
        assert session.run("echo next").exit_code == 0
    finally:
        session.close()


def test_the_wait_is_shown_before_what_the_cell_waited_for_printed():
    """The line that says the earlier kernel's cell still runs comes first, then
    that cell's output, then the line that it ended."""
    shell = FakeShell(attached=attached(running=True))
    streams: list[tuple[str, str]] = []
    session = ShellSession(lambda: shell, lambda stream, text: streams.append((stream, text)),
                           Options(interrupt_grace=0.1, start_timeout=10))

    def output_then_end() -> None:
        deadline = time.monotonic() + 10
        while not any("is still running" in text for _, text in streams):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        shell.emit("stdout", b"late line\n")
        shell.end_hung_cell(0)

    try:
        session.start()
        ender = threading.Thread(target=output_then_end)
        ender.start()
        record = session.run("echo mine")
        ender.join()
        assert record.exit_code == 0
        text = "".join(text for _, text in streams)
        assert text.index("is still running") < text.index("late line") < text.index(
            "ended with exit status 0")
    finally:
        session.close()
