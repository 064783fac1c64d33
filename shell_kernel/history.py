"""history_request answered from the shell's own history list, as ipykernel
answers it from IPython's: (session, line, input) entries, or (session, line,
(input, output)) with output, where output is None (the kernel keeps none).

The list is the one `history` and `fc -l` show in the cells, and the line
numbers are theirs. It holds the cells run in this shell (a named session's
earlier kernels' too): one session, numbered SESSION. A request's session 0
(the current one, in IPython's terms) or SESSION means it; an earlier one
(negative, or another number) has nothing, as the kernel keeps no history
between shells."""

from __future__ import annotations

import fnmatch
import re

SESSION = 1

# An entry as the shell's history query lists it: `history` with a time
# stamp format of \036, or ?? for an entry read from a file without one.
_ENTRY = re.compile(r"(?:^|\n) *(\d+)[ *] (?:\x1e|\?\?)")


def parse(listing: str) -> list[tuple[int, str]]:
    """(number, text) of each entry. Numbers follow each other: a split
    counts only where it carries the next one, so that a cell's own lines
    cannot pass for an entry of their own (short of that very number)."""
    starts: list[tuple[int, int, int]] = []
    for match in _ENTRY.finditer(listing):
        number = int(match.group(1))
        if not starts or number == starts[-1][0] + 1:
            starts.append((number, match.start(), match.end()))
    entries = []
    for i, (number, _start, text_start) in enumerate(starts):
        end = starts[i + 1][1] if i + 1 < len(starts) else len(listing)
        text = listing[text_start:end]
        entries.append((number, text[:-1] if text.endswith("\n") else text))
    return entries


def answer(entries: list[tuple[int, str]], hist_access_type: str, output: bool = False,
           session: int | None = None, start: int | None = None, stop: int | None = None,
           n: int | None = None, pattern: str | None = None, unique: bool = False) -> list:
    """The reply's history list for one request (see ipykernel's do_history)."""
    if hist_access_type == "tail":
        chosen = entries[-n:] if n else (entries if n is None else [])
    elif hist_access_type == "range":
        chosen = _range(entries, session, start, stop)
    elif hist_access_type == "search":
        chosen = _search(entries, pattern, n, unique)
    else:
        chosen = []
    return [(SESSION, number, (text, None) if output else text) for number, text in chosen]


def _range(entries, session, start, stop):
    """IPython's get_range on the current session: lines start to stop
    (excluded), negative ones counted from the end, stop None: to the end."""
    if session not in (None, 0, SESSION) or not entries:
        return []
    end = entries[-1][0] + 1
    start = 1 if start is None else start
    if start < 0:
        start += end
    if stop is None or stop > end:
        stop = end
    elif stop < 0:
        stop += end
    return [(number, text) for number, text in entries if start <= number < stop]


def _search(entries, pattern, n, unique):
    """IPython's search: a glob over the whole input, the newest n, unique:
    each input once (its newest entry)."""
    regex = re.compile(fnmatch.translate(pattern if pattern is not None else "*"))
    found = [(number, text) for number, text in entries if regex.match(text)]
    if unique:
        newest = {text: number for number, text in found}
        found = [(number, text) for number, text in found if newest[text] == number]
    return found[-n:] if n else found
