"""Turning a shell's output bytes into a bounded number of text messages."""

from __future__ import annotations

import codecs
import os
import re
import time
from pathlib import Path
from typing import Callable

# Frontends choke on NUL characters in text; show them as the control picture.
_NUL_PICTURE = "\u2400"

Sink = Callable[[str, str], None]  # (stream name, text)
DisplaySink = Callable[[str, bytes, str], None]  # (mime type, data, display id or "")


class StreamDecoder:
    """Bytes of one stream to text: UTF-8, invalid bytes replaced, split
    multi-byte characters joined across reads."""

    def __init__(self):
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def decode(self, data: bytes, final: bool = False) -> str:
        return self._decoder.decode(data, final).replace("\x00", _NUL_PICTURE)


#: What only a full-screen program prints: the cursor sent to a row and
#: column, or the alternate screen switched on.
_SCREEN_DRAWING = re.compile(r"\x1b\[\d+;\d+[Hf]|\x1b\[\?(?:1049|1047|47)h")
#: How long output that draws a screen is held back: long enough for the
#: report that its program reads keys (which drops it: see drop_screen).
SCREEN_HOLD_SECONDS = 1.0
#: With --tty, a `script` process copies each stream from its terminal: which
#: of the two copies first is the scheduler's choice, so writes to stdout and
#: stderr closer than that cannot be told apart. Output of both that arrives
#: within this window counts as written at once, and shows stdout first.
TTY_TIE_SECONDS = 0.02


class Coalescer:
    """Collects output and hands it to a sink in few, ordered messages.

    Output is held for at most `interval` seconds or `max_bytes`, whichever
    comes first, so a partial line still shows quickly while a flood of
    lines travels in large messages. Alternating streams stay in order.
    """

    def __init__(self, sink: Sink, interval: float = 0.05, max_bytes: int = 1 << 20,
                 clock: Callable[[], float] = time.monotonic):
        self._sink = sink
        self.interval = interval
        #: How long a trailing partial line (no newline yet) may wait: a
        #: prompt's text, which must not be shown as output too when it
        #: becomes the input box's prompt (see take_partial).
        self.partial_hold = 0.0
        self._max = max_bytes
        self._clock = clock
        self._parts: list[list] = []  # [stream, [texts]]
        self._size = 0
        self._since: float | None = None
        self._partial_since: float | None = None  # when the trailing partial line began
        self._lines_held = False  # held output holds more than that partial line
        self._prompt: tuple[str, str] | None = None  # (stream, text) of an open input box
        self._drop_newline: str | None = None  # see release_prompt
        self._screen_since: float | None = None  # held output draws a screen
        #: stdout that comes this soon after stderr goes before it (see add).
        self.tie_window = 0.0
        self._tail_since = float("-inf")  # when the last held part began

    def add(self, stream: str, text: str) -> None:
        if not text:
            return
        if self._drop_newline is not None:
            if self._drop_newline in (stream, "") and text[0] == "\n":
                text = text[1:]
            self._drop_newline = None
            if not text:
                return
        now = self._clock()
        if self._parts and self._parts[-1][0] == stream:
            self._parts[-1][1].append(text)
        elif stream == "stdout" and self._parts and now - self._tail_since <= self.tie_window:
            # Written at the same time as the stderr just before it, as far as
            # two copying processes let anyone tell: stdout first, as pipes
            # give it (their reader takes stdout first).
            tail = self._parts.pop()
            if self._parts and self._parts[-1][0] == stream:
                self._parts[-1][1].append(text)
            else:
                self._parts.append([stream, [text]])
            self._parts.append(tail)
            self._size += len(text)
            self._lines_held = True
            if self._size >= self._max:
                self.flush()
            return
        else:
            self._tail_since = now
            self._lines_held |= bool(self._parts)
            self._parts.append([stream, [text]])
            self._partial_since = None
        self._size += len(text)
        if self._since is None:
            self._since = now
        line_end = max(text.rfind("\n"), text.rfind("\r"))
        if line_end == len(text) - 1:
            self._partial_since = None
        elif line_end >= 0 or self._partial_since is None:
            self._partial_since = now
        self._lines_held |= line_end >= 0
        if self._screen_since is None and "\x1b" in text and _SCREEN_DRAWING.search(text):
            self._screen_since = now
        if self._size >= self._max:
            self.flush()

    def deadline(self) -> float | None:
        """When the held output must go out (monotonic time), or None."""
        if self._since is None or self._prompt is not None:
            return None
        due = self._since + self.interval
        if self.tie_window and self._parts[-1][0] == "stderr":
            due = max(due, self._tail_since + self.tie_window)
        if self._screen_since is not None:
            due = max(due, self._screen_since + SCREEN_HOLD_SECONDS)
        if self.partial_hold and not self._lines_held and self._partial_since is not None:
            due = max(due, self._partial_since + self.partial_hold)
        return due

    def flush_if_due(self) -> None:
        now = self._clock()
        if self._since is None or now < self._since + self.interval or self._prompt is not None:
            return
        if self._screen_since is not None and now < self._screen_since + SCREEN_HOLD_SECONDS:
            return
        if self.tie_window and self._parts[-1][0] == "stderr" \
                and now < self._tail_since + self.tie_window:
            return
        if self.partial_hold and self._partial_since is not None \
                and now < self._partial_since + self.partial_hold:
            started = self._partial_since
            stream, text = self.take_partial()
            self.flush()
            if text:
                self._parts, self._size, self._since = [[stream, [text]]], len(text), started
                self._partial_since = started
        else:
            self.flush()

    @property
    def holds_partial(self) -> bool:
        """The held output ends with a partial line."""
        return self._partial_since is not None

    def take_partial(self) -> tuple[str, str]:
        """Remove the trailing partial line from the held output and return
        (its stream, its text); the text is "" when there is none."""
        if self._partial_since is None or not self._parts:
            return "stdout", ""
        stream, texts = self._parts[-1]
        text = "".join(texts)
        cut = max(text.rfind("\n"), text.rfind("\r")) + 1
        partial, rest = text[cut:], text[:cut]
        if rest:
            self._parts[-1][1] = [rest]
        else:
            self._parts.pop()
        self._size -= len(partial)
        self._partial_since = None
        if not self._parts:
            self._since, self._lines_held = None, False
        return stream, partial

    def hold_prompt(self, stream: str, text: str) -> None:
        """An input box asks with text (taken with take_partial, the rest
        flushed): what comes after it is held until release_prompt, so that
        the text can still go back in its place."""
        self._prompt = (stream, text)

    def release_prompt(self, answered: str) -> None:
        """The input box's question is over. Unanswered (the read timed out,
        the cell ended), its text goes back before what came after it, as a
        terminal shows it; answered, the frontend shows it with the answer.
        After end-of-file ("eof": ^D, which a terminal does not echo as a
        line), the newline a program then prints on that stream to end the
        prompt's line goes too: nothing would be left but an empty line."""
        if self._prompt is None:
            return
        (stream, text), self._prompt = self._prompt, None
        if answered == "eof":
            self._drop_newline = stream if text else ""  # no text: its stream is unknown
        if answered or not text:
            return
        if self._parts and self._parts[0][0] == stream:
            self._parts[0][1].insert(0, text)
        else:
            self._lines_held |= bool(self._parts)
            self._parts.insert(0, [stream, [text]])
        if len(self._parts) == 1 and len(self._parts[0][1]) == 1:
            self._partial_since = self._clock()  # it may be the next prompt's text too
        self._size += len(text)
        if self._since is None:
            self._since = self._clock()

    def drop_screen(self) -> None:
        """A program that reads keys was found: a screen it drew (held, see
        SCREEN_HOLD_SECONDS) means nothing in a notebook, and goes."""
        if self._screen_since is not None:
            self.discard()

    def flush(self) -> None:
        parts, self._parts, self._size, self._since = self._parts, [], 0, None
        self._partial_since, self._lines_held, self._screen_since = None, False, None
        for stream, texts in parts:
            self._sink(stream, "".join(texts))

    def discard(self) -> None:
        """Drop the held output (the screen was cleared before it was shown)."""
        self._parts, self._size, self._since = [], 0, None
        self._partial_since, self._lines_held, self._screen_since = None, False, None


class OutputLimit:
    """Caps how much of one cell's output goes to the frontend.

    Past `limit` bytes, the rest of the cell's output is written to a file
    (mode 0600) in `spill_dir`, and the frontend gets one notice naming it.
    Kernel memory stays bounded either way: output is streamed, not kept.
    """

    def __init__(self, limit: int, spill_dir: Path):
        self.limit = limit
        self._spill_dir = spill_dir
        self._sent = 0
        self._file = None
        self.spill_path: Path | None = None
        self.spilled = 0

    def admit(self, data: bytes) -> tuple[bytes, str | None]:
        """Split data into the part to show and, once, a notice to show."""
        room = self.limit - self._sent
        if room >= len(data) and self._file is None:
            self._sent += len(data)
            return data, None
        shown, rest = data[: max(room, 0)], data[max(room, 0):]
        self._sent += len(shown)
        notice = None
        if self._file is None:
            notice = self._open_spill()
        if self._file is not None:
            self._file.write(rest)
        self.spilled += len(rest)
        return shown, notice

    def _open_spill(self) -> str:
        mb = self.limit / 1e6
        try:
            self._spill_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            name = time.strftime("cell-%Y%m%d-%H%M%S-") + os.urandom(4).hex() + ".log"
            self.spill_path = self._spill_dir / name
            fd = os.open(self.spill_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            self._file = os.fdopen(fd, "wb")
            where = f"the rest of it is saved in {self.spill_path}"
        except OSError as err:
            self.spill_path = None
            where = f"the rest is discarded (could not create a file in {self._spill_dir}: {err})"
        return (f"\n[shell_kernel] This cell printed more than {mb:g} MB; "
                f"output stops here and {where}.\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class ScreenClears:
    """Finds "clear the screen" (ESC [ 2 J, what `clear` and `tput clear`
    print) in one stream's text, even when a read splits it.

    feed() returns (cleared, text): cleared when the text held a clear, and
    then only what follows the last one (what came before is cleared
    anyway), without the cursor-home and scrollback-erase sequences that
    travel with it. A possible start of one of these sequences at the end is
    held until the next feed, or flush().
    """

    CLEAR = "\x1b[2J"
    # `clear` prints ESC[H ESC[2J ESC[3J; `printf '\033[2J\033[H'` is also usual.
    _COMPANIONS = ("\x1b[H", "\x1b[3J", "\x1b[1;1H")

    def __init__(self):
        self._held = ""
        self._just_cleared = False  # companions that follow are dropped

    def feed(self, text: str) -> tuple[bool, str]:
        text, self._held = self._held + text, ""
        if "\x1b" not in text:
            self._just_cleared = self._just_cleared and not text
            return False, text
        cleared = False
        at = text.rfind(self.CLEAR)
        if at >= 0:
            cleared, self._just_cleared, text = True, True, text[at + len(self.CLEAR):]
        if self._just_cleared:
            text = self._strip_companions(text)
            if any(c.startswith(text) for c in self._COMPANIONS):
                self._held = text  # maybe the start of one: wait for the rest
                return cleared, ""
            self._just_cleared = False
        for size in range(min(len(self.CLEAR) - 1, len(text)), 0, -1):
            if text.endswith(self.CLEAR[:size]):
                text, self._held = text[:-size], text[-size:]
                break
        return cleared, text

    def _strip_companions(self, text: str) -> str:
        while text.startswith(self._COMPANIONS):
            text = text[next(len(c) for c in self._COMPANIONS if text.startswith(c)):]
        return text

    def flush(self) -> str:
        text, self._held, self._just_cleared = self._held, "", False
        return text


def sniff_mime(data: bytes) -> str | None:
    """The type of display data from its first bytes: PNG, JPEG, GIF, SVG or
    HTML, else text/plain for UTF-8 text without NULs; None for other bytes
    and for no bytes at all."""
    if not data:
        return None
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    head = data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith(b"<svg") or (head.startswith(b"<?xml") and b"<svg" in head):
        return "image/svg+xml"
    if head.startswith((b"<!doctype html", b"<html")) or (
            head.startswith(b"<") and b">" in head and not head.startswith(b"<?xml")):
        return "text/html"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return "text/plain" if "\x00" not in text else None
