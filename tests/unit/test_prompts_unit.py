"""Pure logic of prompts: the frames, the prompt's text held back from the
output, passwords, answers."""

from __future__ import annotations

import pytest

from shell_kernel import frames
from shell_kernel.output import Coalescer
from shell_kernel.prompts import answer_bytes, make_prompt, needs_terminal


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def coalescer(partial_hold: float = 0.4):
    """A Coalescer on a clock the test moves, and the messages it sent."""
    sent, clock = [], Clock()
    c = Coalescer(lambda stream, text: sent.append((stream, text)), interval=0.05, clock=clock)
    c.partial_hold = partial_hold
    return c, sent, clock


def test_a_trailing_partial_line_is_held_and_can_become_a_prompt():
    c, sent, clock = coalescer()
    c.add("stdout", "line one\nName: ")
    clock.now = 0.06
    c.flush_if_due()
    assert sent == [("stdout", "line one\n")]  # complete lines go out as usual
    assert c.holds_partial and c.deadline() == 0.4
    assert c.take_partial() == ("stdout", "Name: ")
    c.flush()
    assert sent == [("stdout", "line one\n")]  # the prompt's text is not output too


def test_a_partial_line_goes_out_once_held_long_enough():
    c, sent, clock = coalescer()
    c.add("stderr", "progress ...")
    clock.now = 0.1
    c.flush_if_due()
    assert sent == []
    clock.now = 0.41
    c.flush_if_due()
    assert sent == [("stderr", "progress ...")]


def test_a_partial_line_waits_for_the_watchers_looks_too():
    """Held partial_hold, and longer until two looks of the terminal's
    watcher came after the line (a read it saw would have been reported
    first), at most partial_hold_max."""
    c, sent, clock = coalescer(partial_hold=0.4)
    c.partial_looks, c.partial_hold_max = 2, 2.0
    clock.now = 0.1
    c.looked()  # before the line came: counts for nothing
    clock.now = 0.2
    c.add("stderr", "progress ...")
    clock.now = 0.3
    c.looked()  # it may have begun before the line was written
    clock.now = 0.7
    c.flush_if_due()
    assert sent == [] and c.deadline() == pytest.approx(2.2)
    clock.now = 0.8
    c.looked()
    assert c.deadline() == pytest.approx(0.6)
    c.flush_if_due()
    assert sent == [("stderr", "progress ...")]
    c.add("stdout", "Name: ")
    clock.now = 0.9
    c.looked()
    c.looked()
    assert c.deadline() == pytest.approx(1.2)  # looked at twice at once: the time still holds it
    clock.now = 1.0
    c.add("stderr", "Password: ")  # a watcher that stopped looking: at most partial_hold_max
    clock.now = 2.9
    c.flush_if_due()
    assert sent[1:] == [("stdout", "Name: ")]
    clock.now = 3.0
    c.flush_if_due()
    assert sent[2:] == [("stderr", "Password: ")]


def test_carriage_returns_end_a_partial_line():
    c, sent, clock = coalescer()
    c.add("stdout", "50%\r")
    assert not c.holds_partial
    clock.now = 0.06
    c.flush_if_due()
    assert sent == [("stdout", "50%\r")]


def test_without_a_hold_partial_lines_flush_at_the_interval():
    sent, clock = [], Clock()
    c = Coalescer(lambda stream, text: sent.append((stream, text)), interval=0.05, clock=clock)
    c.add("stdout", "Name: ")
    clock.now = 0.06
    c.flush_if_due()
    assert sent == [("stdout", "Name: ")]


def test_a_prompt_on_stderr_stays_its_text_when_earlier_stdout_comes_in_after_it():
    """The streams travel apart: `echo 3; read -p 'second: '` may bring the
    prompt (stderr) in before the line printed first (stdout)."""
    c, sent, clock = coalescer()
    c.add("stderr", "second: ")
    c.add("stdout", "3\n")
    assert c.holds_partial
    clock.now = 0.06
    c.flush_if_due()
    assert sent == [("stdout", "3\n")]  # the line goes out, the prompt's text is held
    assert c.take_partial() == ("stderr", "second: ")
    c.flush()
    assert sent == [("stdout", "3\n")]


def test_partial_lines_on_both_streams_are_held_and_the_later_is_taken():
    c, sent, clock = coalescer()
    c.add("stdout", "working")
    c.add("stderr", "Name: ")
    clock.now = 0.06
    c.flush_if_due()
    assert sent == []
    assert c.take_partial() == ("stderr", "Name: ")
    c.flush()
    assert sent == [("stdout", "working")]


def test_a_prompts_text_gone_out_as_output_can_still_be_its_text():
    """A read reported after the hold (a loaded host): its text is the line
    already shown, if nothing came on that stream since."""
    c, sent, clock = coalescer()
    c.add("stdout", "3\n")
    c.add("stderr", "Pass")
    c.add("stderr", "word: ")
    clock.now = 0.5
    c.flush_if_due()
    assert sent == [("stdout", "3\n"), ("stderr", "Password: ")]
    c.add("stdout", "late\n")  # the other stream does not matter
    assert c.take_partial() == ("stdout", "")  # not asked: it must not be output twice
    assert c.take_partial(shown=True) == ("stderr", "Password: ")
    assert c.take_partial(shown=True) == ("stdout", "")  # a later read's text it is not
    clock.now = 1.0
    c.add("stderr", "Name: ")
    clock.now = 1.1
    c.flush_if_due()
    assert sent[-1] == ("stdout", "late\n")
    assert c.take_partial() == ("stderr", "Name: ")
    assert c.take_partial(shown=True) == ("stdout", "")
    c.add("stderr", "\n")
    clock.now = 2.0
    c.flush_if_due()
    assert c.take_partial(shown=True) == ("stdout", "")


def test_watcher_frames_parse():
    assert frames.parse_frame("terminal", ["tty", "/dev/pts/7"]) == frames.TtyFrame("/dev/pts/7")
    assert frames.parse_frame("terminal", ["reading", "42", "7", "0", "1", "sk-askpass",
                                             "ssh", "1", "0"]) == \
        frames.ReadingFrame(42, 7, False, True, "sk-askpass", "ssh", marked=True)
    assert frames.parse_frame("terminal", ["reading", "42", "8", "1", "0", "bash", "sh", "1",
                                             "3"]).keys == 3
    assert frames.parse_frame("terminal", ["done", "42", "7"]) == frames.ReadDoneFrame(42, 7)
    assert frames.parse_frame("terminal", ["looked"]) == frames.LookedFrame()
    assert isinstance(frames.parse_frame("terminal", ["reading", "x"]), frames.UnknownFrame)


def test_password_prompts_and_who_asked():
    def frame(pid=5, echo=True, name="python3", parent="bash", lines=True):
        return frames.ReadingFrame(pid, 1, echo, lines, name, parent)
    assert make_prompt(frame(echo=False), "Token: ", 1).password
    assert not make_prompt(frame(echo=False, lines=False), ">>> ", 1).password  # readline
    assert make_prompt(frame(), "Enter passphrase for key: ", 1).password
    assert not make_prompt(frame(), "Continue? [y/N] ", 1).password
    assert make_prompt(frame(pid=1, name="bash"), "", 1).command == "read"
    assert make_prompt(frame(name="sk-askpass", parent="sudo"), "", 1).command == "sudo"
    assert make_prompt(frame(), "", 1).command == "python3"


def test_answers_are_lines_and_ctrl_d_is_end_of_file():
    assert answer_bytes("yes") == b"yes\n"
    assert answer_bytes("") == b"\n"
    assert answer_bytes("^D") == answer_bytes(None) == b"\x04"
    assert answer_bytes("a\x03b\x7fc") == b"abc\n"  # no ^C or erase acted on by the terminal
    assert answer_bytes("naïve") == "naïve\n".encode()
    # A read of keys (read -n1) gets as many as it asked for, or Enter for
    # an empty answer.
    assert answer_bytes("y", keys=1) == b"y"
    assert answer_bytes("yes", keys=1) == b"y"
    assert answer_bytes("yes", keys=1024) == b"yes"
    assert answer_bytes("été", keys=1) == "é".encode()  # a character, as read -n1 takes it
    assert answer_bytes("", keys=1) == b"\n"
    assert answer_bytes(None, keys=1) == b"\x04"


def test_key_driven_programs_need_a_terminal_but_shells_and_repls_do_not():
    def frame(name, lines=False):
        return frames.ReadingFrame(5, 1, False, lines, name, "bash")
    assert needs_terminal(frame("vim")) and needs_terminal(frame("top"))
    assert not needs_terminal(frame("bash")) and not needs_terminal(frame("python3.11"))
    assert not needs_terminal(frame("vim", lines=True))  # e.g. vim -es reading lines
