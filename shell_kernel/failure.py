"""What a failed cell tells the user: the command that set its status, and
the error (ename, evalue, traceback) that a frontend shows."""

from __future__ import annotations

import re
from typing import Protocol

# Longer commands are cut; bash cuts them at 200 characters too.
MAX_COMMAND = 200

_WORD_BREAK = re.compile(r"[\s;&|(){}]+")


class _Record(Protocol):
    """The fields of a session.CellRecord that cell_error reads (the session
    imports this module, so this one names what it needs instead)."""
    exit_code: int | None
    interrupted: bool
    shell_lost: str | None
    command: str | None
    line: int | None


def failed_command(source: str, line: int | None, command: str | None
                   ) -> tuple[str | None, int | None]:
    """(command, line in the cell) to report, from what the shell noted.

    The shell notes the last simple command that ran (bash's BASH_COMMAND)
    and the line of the cell where the failure surfaced. When that command
    does not appear on that line, it ran inside something the line called
    (a function, an alias, a sourced file): the line itself is what the
    user wrote, so it names the failure instead.
    """
    lines = source.split("\n")
    if line is None or not 1 <= line <= len(lines):
        return command, None
    text = lines[line - 1].strip()
    words = command.split() if command else []
    if words and words[0] in _WORD_BREAK.split(text):
        return command, line
    return (text[:MAX_COMMAND] or command), line


def cell_error(result: _Record) -> tuple[str, str, str] | None:
    """(ename, evalue, summary) of a failed cell, None for a success; the
    traceback line a frontend shows is "ename: summary"."""
    if result.shell_lost:
        return "ShellExited", result.shell_lost, result.shell_lost
    if result.interrupted:
        return ("KeyboardInterrupt", str(result.exit_code),
                f"Interrupted (exit status {result.exit_code})")
    if result.exit_code == 0:
        return None
    text = f"exit status {result.exit_code}"  # from 'grep nomatch' (line 3), as far as known
    if result.command:
        text += f" from '{' '.join(result.command.split())}'"  # on one line
    if result.line is not None:
        text += f" (line {result.line})"
    return "ExitCode", text, text
