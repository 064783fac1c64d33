"""Pure logic of the Coalescer's holds: output behind an open question, a
drawn screen, and the two terminals' near-simultaneous output."""

from __future__ import annotations

from shell_kernel.output import SCREEN_HOLD_SECONDS, TTY_TIE_SECONDS
from test_prompts_unit import coalescer as prompt_coalescer


def coalescer():
    return prompt_coalescer(partial_hold=0.0)


def test_output_behind_an_open_question_waits_and_gets_its_text_back_if_unanswered():
    c, sent, clock = coalescer()
    c.hold_prompt("stderr", "quick? ")
    c.add("stdout", "status=142\n")
    clock.now = 1.0
    assert c.deadline() is None
    c.flush_if_due()
    assert sent == []
    c.release_prompt("")  # the read timed out
    c.flush()
    assert sent == [("stderr", "quick? "), ("stdout", "status=142\n")]


def test_an_answered_question_is_not_repeated_and_eof_drops_the_line_end():
    c, sent, clock = coalescer()
    c.hold_prompt("stderr", ">>> ")
    c.release_prompt("eof")
    c.add("stderr", "\n")  # the program ends the prompt's line itself
    c.add("stdout", "bye\n")
    c.flush()
    assert sent == [("stdout", "bye\n")]


def test_a_drawn_screen_is_held_and_dropped_when_its_program_reads_keys():
    c, sent, clock = coalescer()
    c.add("stdout", "\x1b[2;1H~\x1b[3;1H~")
    clock.now = SCREEN_HOLD_SECONDS / 2
    c.flush_if_due()
    assert sent == []
    c.drop_screen()
    c.flush()
    assert sent == []
    c.add("stdout", "\x1b[5;1Hdrawn")  # no key reader found: shown after the hold
    clock.now += SCREEN_HOLD_SECONDS + 0.01
    c.flush_if_due()
    assert sent == [("stdout", "\x1b[5;1Hdrawn")]


def test_near_simultaneous_stdout_goes_before_stderr_within_the_tie_window():
    c, sent, clock = coalescer()
    c.tie_window = TTY_TIE_SECONDS
    c.add("stderr", "err1\n")
    clock.now += TTY_TIE_SECONDS / 2
    c.add("stdout", "out1\n")
    c.add("stderr", "err2\n")
    clock.now += TTY_TIE_SECONDS * 2
    c.add("stdout", "out2\n")  # well after: keeps its place
    clock.now += 1
    c.flush_if_due()
    assert sent == [("stdout", "out1\n"), ("stderr", "err1\nerr2\n"), ("stdout", "out2\n")]
