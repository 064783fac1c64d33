"""A line cut as bash cuts it for programmable completion: the command the
cursor is in (COMP_LINE, COMP_POINT), its words (COMP_WORDS, COMP_CWORD), and
readline's word, the text that matches replace. Modelled on bash's bashline.c
(find_cmd_start, find_cmd_end, find_cmd_name), subst.c (skip_to_delim,
split_at_delims with SD_NOQUOTEDELIM|SD_COMPLETE) and readline's
_rl_find_completion_word, so that a completion function sees what it would
see in a terminal."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: bash's default COMP_WORDBREAKS (the shell says when its own differs).
WORDBREAKS = " \t\n\"'@><=;|&(:"
#: What splits COMP_WORDS before bash 4, which split them at these, as the
#: shell's parser does, not at COMP_WORDBREAKS (readline's word uses those).
OLD_WORD_DELIMS = "()<>;&| \t\n"
_COMMAND_SEPARATORS = ";|&{(`"
_NAME_BREAKS = "()<>;&| \t\n"
_BLANK = " \t\n"
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")


@dataclass
class CommandLine:
    line: str  # COMP_LINE: the command, from its name to its end
    point: int  # COMP_POINT: the cursor in it
    words: list  # COMP_WORDS
    cword: int  # COMP_CWORD
    name: str  # the command's name (bash's $1)
    text: str  # readline's word up to the cursor (bash's $2)
    text_start: int  # where it starts in the line of the cell


def _skip_quoted(s: str, i: int) -> int:
    """Past the quoted or substituted text that starts at s[i] (a quote,
    a backslash, $( ${ $' or a backquote); the end of s if it is not closed."""
    c, n = s[i], len(s)
    if c == "\\":
        return i + 2
    if c == "'":
        j = s.find("'", i + 1)
        return n if j < 0 else j + 1
    if c in "\"`":
        j = i + 1
        while j < n and s[j] != c:
            j += 2 if s[j] == "\\" else 1
        return min(j + 1, n)
    if c == "$" and s[i + 1: i + 2] == "'":
        j = i + 2
        while j < n and s[j] != "'":
            j += 2 if s[j] == "\\" else 1
        return min(j + 1, n)
    opening = s[i + 1: i + 2]
    closing = ")" if opening == "(" else "}"
    depth, j = 1, i + 2
    while j < n and depth:
        if s[j] in "\\'\"`" or (s[j] == "$" and s[j + 1: j + 2] in ("(", "{", "'")):
            j = _skip_quoted(s, j)
            continue
        depth += (s[j] == opening) - (s[j] == closing)
        j += 1
    return j


def _quoting_starts(s: str, i: int) -> bool:
    return s[i] in "\\'\"`" or (s[i] == "$" and s[i + 1: i + 2] in ("(", "{", "'"))


def skip_to_delim(s: str, i: int, delims: str) -> int:
    """The first unquoted character of delims at or after i, else len(s)."""
    while i < len(s):
        if _quoting_starts(s, i):
            i = _skip_quoted(s, i)
        elif s[i] in delims:
            return i
        else:
            i += 1
    return len(s)


def split_words(s: str, point: int, delims: str) -> tuple[list, int]:
    """COMP_WORDS and COMP_CWORD of command s with the cursor at point."""
    d2 = "".join(c for c in delims if c not in _BLANK and c not in "'\"")
    words: list = []
    cw = -1
    i = 0
    while i < len(s) and s[i] in delims and s[i] in _BLANK:
        i += 1
    ts = te = i
    while i < len(s):
        te = skip_to_delim(s, ts, delims)
        if ts == te and s[ts] in d2:
            te = ts + 1
            while te < len(s) and s[te] in d2:
                te += 1
        words.append(s[ts:te])
        if ts <= point <= te:
            cw = len(words)
        if cw == -1 and point == ts - 1:
            cw = len(words)
        if cw == -1 and point < ts:
            words.insert(len(words) - 1, "")
            cw = len(words) - 1
        i = te
        while i < len(s) and s[i] in delims and s[i] in _BLANK:
            i += 1
        ts = i
    if cw == -1 and (point >= len(s) or point >= te):
        if point > 0 and s[point - 1] in _BLANK:
            words.append("")
        cw = len(words)
    return words, cw - 1


def _find_cmd_start(s: str, start: int) -> int:
    os_ = 0
    while True:
        sep = skip_to_delim(s, os_, _COMMAND_SEPARATORS)
        if sep > start or sep >= len(s):
            return os_
        if s[sep] == "|" and sep > 0 and s[sep - 1] == ">":  # >| is a redirection
            nxt = skip_to_delim(s, sep + 1, _COMMAND_SEPARATORS)
            if nxt > start or nxt >= len(s):
                return os_
            os_ = nxt + 1
            continue
        if s[sep] == "{":  # a reserved word only first in a command, before a blank
            before = s[os_:sep].strip(_BLANK)
            if before or s[sep + 1: sep + 2] not in ("", " ", "\t", "\n", ";", "&", "|", "(", ")", "<", ">"):
                nxt = skip_to_delim(s, sep + 1, _COMMAND_SEPARATORS)
                if nxt > start or nxt >= len(s):
                    return os_
                os_ = nxt + 1
                continue
        os_ = sep + 1


def _word_start(line: str, point: int, breaks: str) -> int:
    """Where readline's word starts: after an unclosed quote, else after
    the last unquoted break character before the cursor."""
    quoted = [False] * point
    quote, i = "", 0
    while i < point:
        c = line[i]
        if quote:
            quoted[i] = True
            if c == quote:
                quote = ""
        elif c == "\\":
            if i + 1 < point:
                quoted[i + 1] = True
            i += 2
            continue
        elif c in "'\"":
            quote, quoted[i] = c, True
            start_after = i + 1
        i += 1
    if quote:
        return start_after
    for j in range(point - 1, -1, -1):
        if line[j] in breaks and not quoted[j]:
            return j + 1
    return 0


def command_line(code: str, cursor: int, breaks: str = WORDBREAKS,
                 version: tuple = (5, 2)) -> CommandLine | None:
    """The command under the cursor as bash hands it to a completion
    function; None where bash completes no command's arguments (the cursor
    in a command's first word, after a separator or a redirection such as
    >|). breaks: the shell's COMP_WORDBREAKS; version: its bash's, since
    3.2 and 4.2 (unlike 5) keep the blanks after a separator in COMP_LINE
    and take an assignment before the name for the name."""
    line_start = code.rfind("\n", 0, cursor) + 1
    line_end = code.find("\n", cursor)
    line = code[line_start: len(code) if line_end < 0 else line_end]
    point = cursor - line_start
    text_start = _word_start(line, point, breaks)
    before = line[:text_start].rstrip(_BLANK)
    if not before or before[-1] in _COMMAND_SEPARATORS:
        return None
    start = _find_cmd_start(line, text_start)
    end = skip_to_delim(line, point, _COMMAND_SEPARATORS)
    name_start = start
    while True:
        while name_start < len(line) and line[name_start] in _BLANK:
            name_start += 1
        name_end = skip_to_delim(line, name_start, _NAME_BREAKS)
        name = line[name_start:name_end]
        if version < (4, 4) or not _ASSIGNMENT.match(name) or name_end >= text_start:
            break
        name_start = name_end  # past assignments before the name, as bash 5 does
    if not name or name_end >= point:
        return None
    if version >= (4, 4):
        start = name_start
    words, cword = split_words(line[start:end], point - start,
                               OLD_WORD_DELIMS if version < (4, 0) else breaks)
    return CommandLine(line[start:end], point - start, words, cword, name,
                       line[text_start:point], line_start + text_start)
