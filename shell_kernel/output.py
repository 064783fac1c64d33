"""Turning a shell's output bytes into a bounded number of text messages."""

from __future__ import annotations

import codecs
import mimetypes
import os
import re
import time
from pathlib import Path
from typing import Callable

from .output_files import new_file

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
        #: How many looks of the prompt watcher (see looked) after a partial
        #: line began it waits for too, at most partial_hold_max seconds: no
        #: read the watcher saw waiting took that line for its text. 0: the
        #: time alone.
        self.partial_looks = 0
        self.partial_hold_max = 0.0
        self._looks: list[float] = []  # when the last partial_looks looks were told
        self._max = max_bytes
        self._clock = clock
        self._parts: list[list] = []  # [stream, [texts]]
        self._size = 0
        self._since: float | None = None
        #: Per stream, when the partial line its held output ends with began.
        #: Per stream, because the streams travel apart: a prompt on stderr may
        #: come in before the lines its command printed on stdout earlier.
        self._partial_since: dict[str, float] = {}
        self._lines_held = False  # held output holds more than partial lines
        #: Per stream, the line it was on when its output last went out, in
        #: the order the streams last brought some (see take_partial).
        self._shown: dict[str, str] = {}
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
        elif self.tie_window and stream == "stdout" and self._parts \
                and now - self._tail_since <= self.tie_window:
            # Written at the same time as the stderr just before it, as far as
            # two copying processes let anyone tell: stdout first, as pipes
            # give it (their reader takes stdout first).
            tail = self._parts.pop()
            if self._parts and self._parts[-1][0] == stream:
                self._parts[-1][1].append(text)
            else:
                self._parts.append([stream, [text]])
            self._parts.append(tail)
            self._lines_held = True
        else:
            self._tail_since = now
            self._lines_held |= bool(self._parts)
            self._parts.append([stream, [text]])
        self._size += len(text)
        if self._since is None:
            self._since = now
        line_end = max(text.rfind("\n"), text.rfind("\r"))
        if line_end == len(text) - 1:
            self._partial_since.pop(stream, None)
        elif line_end >= 0 or stream not in self._partial_since:
            self._partial_since[stream] = now
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
        if self._tied():
            due = max(due, self._tail_since + self.tie_window)
        if self._screen_since is not None:
            due = max(due, self._screen_since + SCREEN_HOLD_SECONDS)
        if self.partial_hold and not self._lines_held and self._partial_since:
            due = max(due, min(map(self._partial_due, self._partial_since)))
        return due

    def _tied(self) -> bool:
        """The held output ends with stderr that stdout may still come before."""
        return bool(self.tie_window and self._parts and self._parts[-1][0] == "stderr")

    def flush_if_due(self) -> None:
        now = self._clock()
        if self._since is None or now < self._since + self.interval or self._prompt is not None:
            return
        if self._screen_since is not None and now < self._screen_since + SCREEN_HOLD_SECONDS:
            return
        if self._tied() and now < self._tail_since + self.tie_window:
            return
        held = [stream for stream in self._streams_with_partials()
                if self.partial_hold and now < self._partial_due(stream)]
        kept = [(stream, self._partial_since[stream], self._cut_partial(stream)) for stream in held]
        self.flush()
        for stream, since, text in kept:
            self._parts.append([stream, [text]])
            self._size += len(text)
            self._partial_since[stream] = since
            self._since = min(since, self._since if self._since is not None else since)

    def looked(self) -> None:
        """The prompt watcher looked at the cell's processes and reported the
        reads it saw (called when that report has been handled)."""
        self._looks = (self._looks + [self._clock()])[-self.partial_looks:] if self.partial_looks else []

    def _partial_due(self, stream: str) -> float:
        """When STREAM's partial line may go out as output."""
        since, looks = self._partial_since[stream], self.partial_looks
        if looks and not (len(self._looks) == looks and self._looks[0] > since):
            return since + max(self.partial_hold, self.partial_hold_max)
        return since + self.partial_hold

    @property
    def holds_partial(self) -> bool:
        """The held output ends with a partial line, on either stream."""
        return bool(self._partial_since)

    def take_partial(self, shown: bool = False) -> tuple[str, str]:
        """Remove a trailing partial line from the held output and return
        (its stream, its text): the later one when both streams end with one;
        the text is "" when there is none. With `shown`, and no partial line
        held, the partial line that already went out as output, if nothing
        came on its stream since: a prompt reported after its hold."""
        streams = self._streams_with_partials()
        if streams:
            self._shown.pop(streams[-1], None)  # that line is the prompt's, not a later one's
            return streams[-1], self._cut_partial(streams[-1])
        held = {stream for stream, _ in self._parts}
        for stream in reversed(self._shown if shown else ()):
            if self._shown[stream] and stream not in held:
                return stream, self._shown.pop(stream)
        return "stdout", ""

    def _streams_with_partials(self) -> list[str]:
        """The streams whose held output ends with a partial line, in the
        order of their last parts."""
        last = {stream: at for at, (stream, _) in enumerate(self._parts)}
        return sorted((stream for stream in self._partial_since if stream in last),
                      key=last.__getitem__)

    def _cut_partial(self, stream: str) -> str:
        """Remove STREAM's trailing partial line from the held output; return it."""
        self._partial_since.pop(stream, None)
        at = max((at for at, (name, _) in enumerate(self._parts) if name == stream), default=None)
        if at is None:
            return ""
        text = "".join(self._parts[at][1])
        cut = max(text.rfind("\n"), text.rfind("\r")) + 1
        partial, rest = text[cut:], text[:cut]
        if rest:
            self._parts[at][1] = [rest]
        else:
            del self._parts[at]
            if 0 < at < len(self._parts) and self._parts[at - 1][0] == self._parts[at][0]:
                self._parts[at - 1][1] += self._parts.pop(at)[1]  # neighbours of one stream
        self._size -= len(partial)
        if not self._parts:
            self._since, self._lines_held = None, False
        return partial

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
            self._partial_since[stream] = self._clock()  # it may be the next prompt's text too
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
        self._partial_since, self._lines_held, self._screen_since = {}, False, None
        for stream, texts in parts:
            text = "".join(texts)
            cut = max(text.rfind("\n"), text.rfind("\r")) + 1
            line = text[cut:] if cut else self._shown.pop(stream, "") + text
            self._shown.pop(stream, None)
            self._shown[stream] = line  # last: the order the streams went out
            self._sink(stream, text)

    def discard(self) -> None:
        """Drop the held output (the screen was cleared before it was shown)."""
        self._parts, self._size, self._since = [], 0, None
        self._partial_since, self._lines_held, self._screen_since = {}, False, None


class OutputLimit:
    """Caps how much of one cell's output goes to the frontend.

    Streams and displays count alike. Past `limit` bytes, the rest of the
    cell's stream output is written to a file (mode 0600) in `spill_dir`,
    and each later display to a file of its own beside it; the frontend
    gets a notice naming each. Kernel memory stays bounded either way:
    output is streamed, not kept.
    """

    def __init__(self, limit: int, spill_dir: Path):
        self.limit = limit
        self._spill_dir = spill_dir
        self._sent = 0
        self._full = False  # past the limit: everything after goes to files
        self._stem: str | None = None  # the cell's files' names start so
        self._displays = 0  # displays saved
        self._file = None
        self._spill_tried = False
        self.spill_path: Path | None = None
        self.spilled = 0

    def admit(self, data: bytes) -> tuple[bytes, str | None]:
        """Split data into the part to show and, once, a notice to show."""
        room = self.limit - self._sent
        if room >= len(data) and not self._full:
            self._sent += len(data)
            return data, None
        shown, rest = (data[: max(room, 0)], data[max(room, 0):]) if not self._full else (b"", data)
        self._sent += len(shown)
        self._full = True
        notice = None
        if not self._spill_tried:  # once: a file that could not be made is not tried again
            self._spill_tried = True
            notice = self._open_spill()
        if self._file is not None:
            self._file.write(rest)
        self.spilled += len(rest)
        return shown, notice

    def admit_display(self, mime: str, data: bytes) -> str | None:
        """None: show the display. Else it would pass the limit (or the cell
        is past it): it is saved to a file instead, and this notice says where."""
        if len(data) <= self.limit - self._sent and not self._full:
            self._sent += len(data)
            return None
        self._full = True
        self._displays += 1
        extension = mimetypes.guess_extension(mime or sniff_mime(data) or "") or ".data"
        name = f"{self._name()}-display-{self._displays}{extension}"
        try:
            with new_file(self._spill_dir, name) as file:
                file.write(data)
            where = f"is saved in {self._spill_dir / name}"
        except OSError as err:
            where = f"is discarded (could not create a file in {self._spill_dir}: {err})"
        return (f"\n[shell_kernel] A display of {_megabytes(len(data))} would take this cell "
                f"past its output limit of {self.limit / 1e6:g} MB; it is not shown, and {where}.\n")

    def _name(self) -> str:
        """What the names of the cell's files start with."""
        if self._stem is None:
            self._stem = time.strftime("cell-%Y%m%d-%H%M%S-") + os.urandom(4).hex()
        return self._stem

    def _open_spill(self) -> str:
        mb = self.limit / 1e6
        name = self._name() + ".log"
        try:
            self._file = new_file(self._spill_dir, name)
            self.spill_path = self._spill_dir / name
            where = f"the rest of it is saved in {self.spill_path}"
        except OSError as err:
            where = f"the rest is discarded (could not create a file in {self._spill_dir}: {err})"
        return (f"\n[shell_kernel] This cell printed more than {mb:g} MB; "
                f"output stops here and {where}.\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.3g} MB"


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
    and for no bytes at all.

    HTML only from a start that nothing else has (`<!doctype html`, `<html`):
    JupyterLab renders a kernel's HTML as trusted, and text that merely
    starts with a tag (`<stdin>:1: warning`, a file someone else wrote) must
    not run its markup. A fragment is HTML when the user says so (--mime
    text/html, displayHTML, a .html file name)."""
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
    if head.startswith((b"<!doctype html", b"<html")):
        return "text/html"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return "text/plain" if "\x00" not in text else None
