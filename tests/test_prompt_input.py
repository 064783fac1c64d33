"""What the user types for a prompt reaches that prompt only, and every
prompt's text reaches the notebook, on both backends, under load too."""

from __future__ import annotations

import os
import shutil


def unanswered(prompt, password):
    return None  # the read times out


def timed_out(kernel) -> int:
    """The status of a read that timed out: 142, or 1 on bash 3.2."""
    return 142 if int(kernel.ok("echo ${BASH_VERSINFO[0]}")) >= 4 else 1


def timed_out_read(kernel, code="read -t 2 x; echo \"rc=$? x=$x\""):
    """A cell whose read gets nothing: it asks, times out."""
    execution = kernel.collect(kernel.start(code, allow_stdin=True), answer=unanswered)
    assert execution.stdout == f"rc={timed_out(kernel)} x=\n", execution.stdout


def test_a_key_read_gets_the_key_and_no_newline_for_the_next_read(kernel):
    answers = ["y", None]  # the second read is left to time out
    msg_id = kernel.start("read -n1 -p 'Continue? [y/N] ' c; echo \"[$c]\"; "
                          "read -t 2 x; echo \"rc=$? x=$x\"", allow_stdin=True)
    execution = kernel.collect(msg_id, answer=lambda prompt, password: answers.pop(0))
    assert execution.prompts == [("Continue? [y/N] ", False), ("", False)]
    assert execution.stdout == f"[y]\nrc={timed_out(kernel)} x=\n"


def test_a_key_read_gets_as_many_keys_as_it_asked_for(kernel):
    """read -n1 answered "yes" takes the y: the e and s are not left for the
    next read, which asks for itself."""
    execution = kernel.answering("read -n1 -p 'A? ' a; read -n1 -p 'B? ' b; echo \"[$a$b]\"",
                                 ["yes", "no"])
    assert execution.prompts == [("A? ", False), ("B? ", False)]
    assert execution.stdout == "[yn]\n"


def test_nothing_typed_for_a_key_read_reaches_the_next_cell(kernel):
    execution = kernel.answering("read -n1 -p 'Continue? [y/N] ' c; echo \"[$c]\"", ["yes"])
    assert execution.stdout == "[y]\n"
    timed_out_read(kernel)


def test_nothing_typed_for_a_line_reaches_the_next_cell(kernel):
    execution = kernel.answering("head -c 2; echo", ["abcdef"])
    assert execution.stdout == "ab\n"
    timed_out_read(kernel)


def test_what_a_read_left_of_its_answer_goes_when_it_ends(kernel):
    """head -c 2 takes two bytes of the line: the rest goes once it ended,
    before a later read in the same cell (the sleep: time for the terminal's
    watcher, which looks every 50 ms, to see it end)."""
    answers = ["abcdef", None]
    msg_id = kernel.start("head -c 2; echo; sleep 3; read -t 2 x; echo \"rc=$? x=$x\"",
                          allow_stdin=True)
    execution = kernel.collect(msg_id, answer=lambda prompt, password: answers.pop(0))
    assert execution.stdout == f"ab\nrc={timed_out(kernel)} x=\n"


def test_what_a_read_left_goes_even_when_its_program_lingers_after_the_read(kernel):
    """The program that took two bytes of the line lives on a while after its
    read: the rest still goes once it is gone (not left for the next read,
    which would take "cdef" for its own answer)."""
    answers = ["abcdef", None]
    reader = "python3 -c 'import os, time; os.write(1, os.read(0, 2)); time.sleep(1)'"
    msg_id = kernel.start(f"{reader}; echo; sleep 3; read -t 2 x; echo \"rc=$? x=$x\"",
                          allow_stdin=True)
    execution = kernel.collect(msg_id, answer=lambda prompt, password: answers.pop(0))
    assert execution.stdout == f"ab\nrc={timed_out(kernel)} x=\n"


def test_an_empty_answer_to_a_key_read_is_enter(kernel):
    execution = kernel.answering("read -n1 -p 'Press any key ' c; echo \"[$c]\"", [""])
    assert execution.stdout == "[]\n"
    timed_out_read(kernel)


def test_every_prompts_text_is_complete_under_load(kernel, busy_cpus):
    code = "read -p 'first: ' a; echo \"[$a]\"; read -p 'second: ' b; echo \"[$a/$b]\""
    for _ in range(20):
        execution = kernel.answering(code, ["one", "two"], timeout=60)
        assert execution.prompts == [("first: ", False), ("second: ", False)]
        assert execution.stdout == "[one]\n[one/two]\n"
        assert execution.stderr == ""  # the prompts' texts are not output too


def slow_stty_kernel(start_kernel, tmp_path, seconds: int):
    """A kernel whose watcher reports each read SECONDS late: its stty is
    slow, as on a host under load."""
    slow = tmp_path / "slow-bin"
    slow.mkdir()
    (slow / "stty").write_text(f"#!/bin/sh\nsleep {seconds}\nexec {shutil.which('stty')} \"$@\"\n")
    (slow / "stty").chmod(0o755)
    return start_kernel(PATH=f"{slow}{os.pathsep}{os.environ['PATH']}")


def test_a_prompt_its_watcher_is_slow_to_report_is_not_output_too(start_kernel, tmp_path):
    """The report comes a second late, later than a fixed hold would keep
    the text back: the text waits for the watcher's looks, not a time, and
    is the prompt's only."""
    kernel = slow_stty_kernel(start_kernel, tmp_path, 1)
    execution = kernel.answering("read -p 'late: ' x; echo \"[$x]\"", ["v"])
    assert execution.prompts == [("late: ", False)]
    assert execution.stdout == "[v]\n"
    assert execution.stderr == ""


def test_a_prompt_reported_after_its_hold_keeps_its_text(start_kernel, tmp_path):
    """The report comes later than the longest hold (prompts.PARTIAL_HOLD_SECONDS),
    after the text went out as output: the prompt still has its text (shown
    twice rather than lost)."""
    kernel = slow_stty_kernel(start_kernel, tmp_path, 3)
    execution = kernel.answering("read -p 'late: ' x; echo \"[$x]\"", ["v"])
    assert execution.prompts == [("late: ", False)]
    assert execution.stdout == "[v]\n"
    assert execution.stderr == "late: "
