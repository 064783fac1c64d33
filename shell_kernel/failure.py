"""What a failed cell tells the user: the command that set its status, and
the error (ename, evalue, traceback) that a frontend shows."""

from __future__ import annotations

import re
from typing import Protocol

# Longer commands are cut; bash cuts them at 200 characters too.
MAX_COMMAND = 200

_WORD_BREAK = re.compile(r"[\s;&|(){}]+")
# Bash 3.2 notes a failure inside a compound command on its first line (for,
# select) or its last (fi, done, esac).
_OPENS = {"for", "select", "while", "until", "if", "case"}
_CLOSES = {"done", "fi", "esac"}
_DEFINITION = re.compile(r"\s*(?:function\s+)?([A-Za-z_][\w:.-]*)\s*\(\s*\)")


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
    user wrote, so it names the failure instead. Old bashes note other
    lines: 4.2 a line inside a function the cell defines, 3.2 the first or
    last line of a compound command; the line the user ran is found then.
    """
    lines = source.split("\n")
    if line is not None and not 1 <= line <= len(lines) and len(source.strip().split("\n")) == 1:
        # Bash 4.2 notes a function's failure on its body's line, outside a
        # one-line cell: the line that called it is that one line.
        line = next(number for number, text in enumerate(lines, 1) if text.strip())
        last = _last_simple_command(lines[line - 1].strip())
        if command is None or last is None or _holds(lines[line - 1].strip(), command.split()):
            return command, None
        return last[:MAX_COMMAND], line
    if line is None and command is None:
        return _unseen_failure(lines)
    if line is None or not 1 <= line <= len(lines):
        return command, None
    call = _call_of_function_around(lines, line)
    if call is not None:
        return lines[call - 1].strip()[:MAX_COMMAND], call
    text = lines[line - 1].strip()
    words = command.split() if command else []
    if words and _holds(text, words):
        return command, line
    inner = _line_inside(lines, line, words) if words else None
    if inner is not None:
        return command, inner
    last = _last_simple_command(text) if words else None
    if last is not None:
        return last[:MAX_COMMAND], line
    return (text[:MAX_COMMAND] or command), line


# What separates the simple commands of a line (`|&` before `|`, `&&`
# before `&`); a line that holds more than that (quotes, compound commands,
# subshells, substitutions) is not split.
_SEPARATOR = re.compile(r"\|\||&&|\|&|[;|&]")
_NOT_SPLIT = re.compile(r"""['"`\\(){}#<>]|\$\(""")
_KEYWORDS = _OPENS | _CLOSES | {"then", "else", "elif", "do", "in", "!", "time", "function", "[["}


def _unseen_failure(lines: list[str]) -> tuple[str | None, int | None]:
    """A status that no ERR trap saw: `X && Y` ending the cell stopped at X
    (Y's failure would have been seen): (X, its line) when the cell's last
    line is plain and ends so, else (None, None) (`! cmd`, a longer chain)."""
    numbered = [(number, text.strip()) for number, text in enumerate(lines, 1) if text.strip()]
    if not numbered or _NOT_SPLIT.search(numbered[-1][1]):
        return None, None
    number, text = numbered[-1]
    last = re.split(r"\|\||;|(?<!&)&(?!&)", text.rstrip(" \t;"))[-1]
    parts = [part.strip() for part in last.split("&&")]
    if "||" in text or len(parts) != 2 or not parts[0].split() \
            or parts[0].split()[0] in _KEYWORDS - {"[["}:
        return None, None
    return parts[0][:MAX_COMMAND], number


def _last_simple_command(text: str) -> str | None:
    """The last simple command of a plain line (None if the line is not
    plain): the one that ran last. The shell noted the failure at that line
    with a command that is not on it, run inside what the line called (a
    function): the cell's status is the last status set there, so the call
    is the line's last command (an earlier one, failing, was noted itself,
    or did not set the cell's status: `f && g`, f failing, is not seen)."""
    if _NOT_SPLIT.search(text):
        return None
    last = _SEPARATOR.split(text.rstrip(" \t;&"))[-1].strip()
    words = last.split()
    if not words or words[0] in _KEYWORDS:
        return None
    return last


def _holds(text: str, words: list[str]) -> bool:
    return words[0] in _WORD_BREAK.split(text)


def _call_of_function_around(lines: list[str], line: int) -> int | None:
    """Bash 4.2 notes a failed function call on the line in the function's
    body that failed: when LINE is inside a function that the cell defines,
    the one line after it that calls the function (None if not one)."""
    for start in range(line, 0, -1):
        definition = _DEFINITION.match(lines[start - 1])
        if definition:
            break
    else:
        return None
    depth, end = 0, None
    for number in range(start, len(lines) + 1):
        depth += lines[number - 1].count("{") - lines[number - 1].count("}")
        if depth <= 0 and "{" in "".join(lines[start - 1:number]):
            end = number
            break
    if end is None or not start <= line <= end:
        return None
    name = definition.group(1)
    calls = [number for number in range(end + 1, len(lines) + 1)
             if name in _WORD_BREAK.split(lines[number - 1].strip())]
    return calls[0] if len(calls) == 1 else None


def _line_inside(lines: list[str], line: int, words: list[str]) -> int | None:
    """The one line after an opening (or before a closing) line LINE that
    holds the command: where bash 3.2 ran it."""
    first = _WORD_BREAK.split(lines[line - 1].strip())[0]
    if first in _OPENS:
        span = range(line + 1, len(lines) + 1)
    elif first in _CLOSES:
        span = range(1, line)
    else:
        return None
    found = [number for number in span if _holds(lines[number - 1].strip(), words)]
    return found[0] if len(found) == 1 else None


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
