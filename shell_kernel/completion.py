"""Where the cursor is in bash terms: what to complete, and the word to inspect."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .completion_words import WORDBREAKS, command_line

# Characters that end a word for completion purposes.
_WORD_BREAKS = set(" \t\n;|&()<>\"'`=")
# After these (ignoring spaces) a word is in command position.
_COMMAND_SEPARATORS = (";", "|", "&", "(", "{", "`", "$(", "\n")
_COMMAND_KEYWORDS = {"then", "do", "else", "elif", "if", "while", "until", "!", "time",
                     "sudo", "exec", "command", "builtin", "xargs", "env", "nohup"}
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)?$")


@dataclass
class CompletionContext:
    """The fallback: what bash completes where no programmable completion
    (a `complete` spec) answers, a little more eagerly than bash (a command
    name after then, do, sudo...; paths with : or = in them)."""
    what: str  # "commands", "variables" or "paths" (see queries.bash)
    word: str  # the prefix the shell completes
    start: int  # cursor_start for the reply


def completion_context(code: str, cursor: int) -> CompletionContext:
    before = code[:cursor]
    variable = _VARIABLE.search(before)
    if variable:
        word = variable.group(1) or ""
        return CompletionContext("variables", word, cursor - len(word))
    start = cursor
    while start > 0 and before[start - 1] not in _WORD_BREAKS:
        start -= 1
    word = before[start:]
    if "/" not in word and _in_command_position(before[:start]):
        return CompletionContext("commands", word, start)
    return CompletionContext("paths", word, start)


def _in_command_position(text: str) -> bool:
    stripped = text.rstrip(" \t")
    if stripped.endswith((">|", ">&", "<&")):  # redirections
        return False
    if not stripped or stripped.endswith(_COMMAND_SEPARATORS):
        return True
    last_word = re.split(r"[\s;|&(]+", stripped)[-1]
    return last_word in _COMMAND_KEYWORDS


# What readline puts a backslash before in a file name it inserts (bash's
# filename quote characters; not ~, which keeps its meaning first in a path).
_FILENAME_QUOTE = re.compile(r"""([ \t\n\\"'@<>=;|&()#$`?*\[!:{])""")
#: At most this many matches go to the frontend.
MAX_MATCHES = 1000


class Completer:
    """complete_request as a terminal's Tab: the host's programmable
    completion (`complete` specs, bash-completion's functions) run by the
    shell with COMP_WORDS, COMP_CWORD, COMP_LINE and COMP_POINT as readline
    sets them (see queries.bash), else the fallback of CompletionContext.
    query(what, text) asks the shell; None: no answer (not up, busy, timed
    out)."""

    def __init__(self, query: Callable[[str, str], str | None]):
        self._query = query
        # The shell's COMP_WORDBREAKS and bash version, as its last answer
        # said (a request is split with them; the first, with defaults).
        self._breaks = WORDBREAKS
        self._version = (5, 2)

    def complete(self, code: str, cursor: int) -> tuple[list, int]:
        """(matches, cursor_start)."""
        fallback = completion_context(code, cursor)
        for _attempt in range(2):
            line = command_line(code, cursor, self._breaks, self._version)
            fields = [fallback.what, fallback.word]
            if line is not None:
                fields += [line.line, str(line.point), str(line.cword), line.name, line.text,
                           *line.words]
            answer = self._query("complete", "\n".join(fields))
            if answer is None:
                return [], cursor
            shell, _, answer = answer.partition("\n")
            if self._learn(shell) and command_line(code, cursor, self._breaks,
                                                   self._version) != line:
                continue  # split as this shell splits
            how, _, answer = answer.partition("\n")
            matches = [m for m in answer.split("\n") if m]
            if how.split(" ")[0] != "spec" or line is None:
                return _listed(matches), fallback.start
            if " filenames" in how and not _in_open_quote(code, line.text_start):
                matches = [_FILENAME_QUOTE.sub(r"\\\1", m) for m in matches]
            else:
                matches = [m.rstrip(" ") for m in matches]  # (git's words end in a space)
            return _listed(matches), line.text_start
        return [], cursor

    def _learn(self, shell: str) -> bool:
        """Take the shell's version and COMP_WORDBREAKS from its answer's
        first line ("5.2 0 BREAKS", 1 if there is a newline among them);
        True if they changed."""
        version, newline, breaks = (shell.split(" ", 2) + ["", "", ""])[:3]
        try:
            major, minor = (int(part) for part in version.split(".")[:2])
        except ValueError:
            return False
        breaks += "\n" if newline == "1" else ""
        changed = (breaks, (major, minor)) != (self._breaks, self._version)
        self._breaks, self._version = breaks, (major, minor)
        return changed


def _in_open_quote(code: str, start: int) -> bool:
    """Whether readline's word starts inside a quote: right after a quote
    character that breaks words (an opening one: closing ones are quoted)."""
    return start > 0 and code[start - 1] in "'\""


def _listed(matches: list) -> list:
    return sorted(set(m for m in matches if m))[:MAX_MATCHES]


def word_at(code: str, cursor: int) -> str:
    """The command-like word under or just before the cursor, for inspection."""
    start = end = min(cursor, len(code))
    while start > 0 and code[start - 1] not in _WORD_BREAKS and code[start - 1] != "$":
        start -= 1
    while end < len(code) and code[end] not in _WORD_BREAKS:
        end += 1
    return code[start:end]


# What bash -n says of code that goes on (session.bash's is-complete query
# adds the first two): the text goes on inside a quote, a here-document or
# a backslash continuation, where spaces before the next line would be data
# (`echo "a<Enter>b"` would print "  b"; an indented EOF ends no document),
# else inside an open compound command, where a terminal user indents.
_IN_TEXT = ("line continues", "here-document", "looking for matching")
_GOES_ON = ("unexpected end of file",)


def continuation(parser_says: str) -> dict:
    """An is_complete reply for code that bash -n rejected with parser_says."""
    if any(s in parser_says for s in _IN_TEXT):
        return {"status": "incomplete", "indent": ""}
    if any(s in parser_says for s in _GOES_ON):
        return {"status": "incomplete", "indent": "  "}
    return {"status": "invalid"}
