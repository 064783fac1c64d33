"""Where the cursor is in bash terms: what to complete, and the word to inspect."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Characters that end a word for completion purposes.
_WORD_BREAKS = set(" \t\n;|&()<>\"'`=")
# After these (ignoring spaces) a word is in command position.
_COMMAND_SEPARATORS = (";", "|", "&", "(", "{", "`", "$(", "\n")
_COMMAND_KEYWORDS = {"then", "do", "else", "elif", "if", "while", "until", "!", "time",
                     "sudo", "exec", "command", "builtin", "xargs", "env", "nohup"}
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)?$")


@dataclass
class CompletionContext:
    what: str  # "commands", "variables" or "paths" (see protocol.QUERIES)
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
    if not stripped or stripped.endswith(_COMMAND_SEPARATORS):
        return True
    last_word = re.split(r"[\s;|&(]+", stripped)[-1]
    return last_word in _COMMAND_KEYWORDS


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
