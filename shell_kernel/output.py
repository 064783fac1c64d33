"""Turning a shell's output bytes into a bounded number of text messages."""

from __future__ import annotations

import codecs
import os
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
        self._max = max_bytes
        self._clock = clock
        self._parts: list[list] = []  # [stream, [texts]]
        self._size = 0
        self._since: float | None = None

    def add(self, stream: str, text: str) -> None:
        if not text:
            return
        if self._parts and self._parts[-1][0] == stream:
            self._parts[-1][1].append(text)
        else:
            self._parts.append([stream, [text]])
        self._size += len(text)
        if self._since is None:
            self._since = self._clock()
        if self._size >= self._max:
            self.flush()

    def deadline(self) -> float | None:
        """When the held output must go out (monotonic time), or None."""
        return None if self._since is None else self._since + self.interval

    def flush_if_due(self) -> None:
        if self._since is not None and self._clock() >= self._since + self.interval:
            self.flush()

    def flush(self) -> None:
        parts, self._parts, self._size, self._since = self._parts, [], 0, None
        for stream, texts in parts:
            self._sink(stream, "".join(texts))


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
