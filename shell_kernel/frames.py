"""What comes out of the kernel's bash, besides the user's bytes on two
streams: frames `\\036\\037<token>\\037<kind>\\037<field>...\\037\\036` that the
session's bash code writes (see shell/frame.bash), each field %-escaped;
their kinds, their parse and the scanner that finds them. Pure logic, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

FRAME_START = b"\x1e\x1f"
FRAME_END = b"\x1f\x1e"
FIELD_SEP = b"\x1f"
# A frame is short (its longest field is a working directory); one longer
# than this is not read, and ends its cell with an error (see EndFrame.unread).
MAX_FRAME = 64 << 10
# What shell/frame.bash escapes in a field: % and the bytes that frame a
# frame, a newline and a carriage return, as %XX.
_ESCAPE = re.compile(rb"%(?:([0-9A-F]{2})|)")


@dataclass(frozen=True)
class ReadyFrame:
    """The session script finished setting up (stdout carries the fields)."""
    stream: str
    pid: int | None = None
    bash_version: str = ""
    state_dir: str = ""
    #: What became of a restore request: "", "yes" or "refused" (not private).
    restored: str = ""
    #: A notebook job's session says where it runs: user, hostname, os
    #: (shell/where.bash's __shell_kernel_where; provenance.WHERE).
    where: tuple = ()


@dataclass(frozen=True)
class EndFrame:
    """A cell (or a repeat of its post hook) ended; stdout carries status and cwd,
    and for a failed cell the command that set the status and its line in the
    cell, when the shell could tell (see __shell_kernel_failure)."""
    stream: str
    seq: int
    status: int | None = None
    cwd: str | None = None
    line: int | None = None
    command: str | None = None
    #: The cell's line did not run to its end (see session.bash's post hook).
    abandoned: bool = False
    #: Why the frame could not be read in full ("" when it was): the cell
    #: ends all the same, with its status if that much was read.
    unread: str = ""


@dataclass(frozen=True)
class DisplayFrame:
    """`display` was called; its bytes are in the state directory's file `payload`."""
    mime: str
    display_id: str
    payload: str


@dataclass(frozen=True)
class ReplyFrame:
    """The answer to a query between cells, in the state directory's file `payload`."""
    seq: int
    payload: str


@dataclass(frozen=True)
class TtyFrame:
    """The prompt watcher's terminal, which cells read (see shell/prompts.bash)."""
    path: str


@dataclass(frozen=True)
class ReadingFrame:
    """A cell's process waits for input: its read number `reads` of the terminal."""
    pid: int
    reads: int
    echo: bool  # False: the terminal does not echo (read -s, a password)
    lines: bool  # False: it delivers keys, not lines (-icanon: vim, top, readline)
    name: str
    parent: str
    #: The watcher put a barrier (read_mark) on both output streams first.
    marked: bool = False
    #: A read of keys (read -n1; no line editor): how many bytes it asked
    #: for. 0: it reads a line.
    keys: int = 0


READ_MARK_PREFIX = "read."


def read_mark(pid: int, reads: int) -> str:
    """The nonce of the barrier that the terminal's watcher writes on each
    output stream before it reports that read (shell/prompts.bash): once both
    have come back, the text the process printed before reading (its prompt)
    is all in."""
    return f"{READ_MARK_PREFIX}{pid}.{reads}"


@dataclass(frozen=True)
class ReadDoneFrame:
    """The read that a ReadingFrame reported is over (answered, timed out, or gone)."""
    pid: int
    reads: int


@dataclass(frozen=True)
class LookedFrame:
    """The watcher looked at the running cell's processes once more, and
    reported what it saw waiting (each look's last frame): output that came
    in before the look before this one was not a prompt for a read it saw."""


@dataclass(frozen=True)
class BarrierFrame:
    """The answer to barrier_line(nonce), on each stream."""
    stream: str
    nonce: str


@dataclass(frozen=True)
class UnknownFrame:
    """A frame with our token that no kind here matches, or that could not
    be read (why: `unread`): a bug, logged."""
    stream: str
    fields: tuple
    unread: str = ""


Frame = Union[ReadyFrame, EndFrame, DisplayFrame, ReplyFrame, TtyFrame, ReadingFrame,
              ReadDoneFrame, LookedFrame, BarrierFrame, UnknownFrame]


def parse_frame(stream: str, fields: list, unread: str = "") -> Frame:
    """The typed value of one frame's fields. unread: why the fields are not
    all there, or not as written (see FrameScanner): only an end frame is
    made of them then, which ends its cell (see EndFrame.unread)."""
    kind, rest = fields[0], fields[1:]
    if unread:
        if kind == "end" and rest and rest[0].isdigit():
            status = _int_or_none(rest[1]) if len(rest) > 1 else None
            return EndFrame(stream, int(rest[0]), status, unread=unread)
        return UnknownFrame(stream, tuple(fields), unread)
    if kind == "ready" and len(rest) in (0, 4, 7):
        if not rest:
            return ReadyFrame(stream)
        return ReadyFrame(stream, _int_or_none(rest[0]), *rest[1:4], where=tuple(rest[4:]))
    if kind == "end" and rest and rest[0].isdigit():
        if len(rest) == 1:
            return EndFrame(stream, int(rest[0]))
        status = _int_or_none(rest[1])
        if len(rest) not in (3, 5, 6) or status is None:
            return EndFrame(stream, int(rest[0]), status,
                            unread=f"{len(rest) + 1} fields, status {rest[1]!r}")
        line, command = (_int_or_none(rest[3]), rest[4] or None) if len(rest) >= 5 else (None, None)
        return EndFrame(stream, int(rest[0]), status, rest[2], line, command,
                        len(rest) == 6 and rest[5] == "1")
    if kind == "barrier" and len(rest) == 1:
        return BarrierFrame(stream, rest[0])
    if kind == "display" and len(rest) == 3 and _is_payload(rest[2]):
        return DisplayFrame(*rest)
    if kind == "reply" and len(rest) == 2 and rest[0].isdigit() and _is_payload(rest[1]):
        return ReplyFrame(int(rest[0]), rest[1])
    if kind == "tty" and len(rest) == 1 and rest[0].startswith("/"):
        return TtyFrame(rest[0])
    if kind == "reading" and len(rest) == 8 and rest[0].isdigit() and rest[1].isdigit() \
            and all(flag in ("0", "1") for flag in (rest[2], rest[3], rest[6])) \
            and rest[7].isdigit():
        return ReadingFrame(int(rest[0]), int(rest[1]), rest[2] == "1", rest[3] == "1",
                            rest[4], rest[5], rest[6] == "1", int(rest[7]))
    if kind == "done" and len(rest) == 2 and rest[0].isdigit() and rest[1].isdigit():
        return ReadDoneFrame(int(rest[0]), int(rest[1]))
    if kind == "looked" and not rest:
        return LookedFrame()
    return UnknownFrame(stream, tuple(fields))


def unread_end_notice(frame: EndFrame) -> str:
    """What the user is told of a cell whose end frame could not be read
    (EndFrame.unread): the cell ends all the same."""
    status = (f"is {frame.status}" if frame.status is not None
              else "is not known (reported as 1)")
    return (f"[shell_kernel] The shell's report of this cell's end could not be read "
            f"({frame.unread}): its exit status {status}; its working directory and "
            "failing command are not known. The shell keeps what the cell did: the next "
            "cell runs as usual.\n")


def _is_payload(name: str) -> bool:
    """A payload file's name as session.bash makes it: nothing that could leave the directory."""
    return re.fullmatch(r"payload\.\d+\.\d+", name) is not None


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


class FrameScanner:
    """Splits one output stream into user data and kernel frames.

    feed() returns user data as bytes and frames as typed values (parse_frame),
    in order. A possible frame split across reads is held back until it completes.
    A frame is never shown as data (it holds the token): one cut short (a
    frame's start comes before its end), longer than MAX_FRAME or with a bad
    escape is parsed as far as it goes, marked unread.
    """

    def __init__(self, token: str, stream: str = "stdout"):
        self._head = FRAME_START + token.encode() + FIELD_SEP
        self._stream = stream
        self._pending = b""
        self._skipping = False  # inside a frame over MAX_FRAME, reported already

    def feed(self, data: bytes) -> list[bytes | Frame]:
        events: list[bytes | Frame] = []
        buf = self._pending + data
        self._pending = b""
        start = 0
        if self._skipping:
            start = self._skip(buf)
            if start < 0:
                return events
        while True:
            at = buf.find(self._head, start)
            if at < 0:
                keep = _partial_suffix(buf, self._head, start)
                if keep:
                    self._pending = buf[len(buf) - keep:]
                    buf = buf[: len(buf) - keep]
                if start < len(buf):
                    events.append(buf[start:])
                return events
            if at > start:
                events.append(buf[start:at])
            body = at + len(self._head)
            end = buf.find(FRAME_END, body)
            cut = buf.find(FRAME_START, body, None if end < 0 else end)
            if cut >= 0:  # a frame starts before this one ends
                events.append(self._frame(buf[body:cut], "cut short"))
                start = cut
                continue
            if end < 0 and len(buf) - body <= MAX_FRAME:
                self._pending = buf[at:]
                return events
            if end < 0 or end - body > MAX_FRAME:
                events.append(self._frame(buf[body: body + MAX_FRAME],
                                          f"longer than {MAX_FRAME} bytes"))
                start = self._skip(buf, body + MAX_FRAME)
                if start < 0:
                    return events
                continue
            start = end + len(FRAME_END)
            events.append(self._frame(buf[body:end]))

    def _frame(self, body: bytes, unread: str = "") -> Frame:
        fields = []
        for field in body.split(FIELD_SEP):
            if b"%" in field:
                field, bad = _unescape(field)
                if bad and not unread:
                    unread = "a bad escape"
            fields.append(field.decode("utf-8", "surrogateescape"))
        return parse_frame(self._stream, fields, unread)

    def _skip(self, buf: bytes, start: int = 0) -> int:
        """Past the rest of a frame over MAX_FRAME: where what follows it
        starts in buf (its end, or the next frame's start), or -1 when buf
        ends first (kept: the next feed goes on skipping)."""
        end, cut = buf.find(FRAME_END, start), buf.find(FRAME_START, start)
        found = [at for at in (end + len(FRAME_END) if end >= 0 else -1, cut) if at >= 0]
        self._skipping = not found
        if found:
            return min(found)
        # (A last byte that may begin either.)
        self._pending = buf[-1:] if buf[-1:] in (FRAME_END[:1], FRAME_START[:1]) else b""
        return -1

    def flush(self) -> bytes:
        """Whatever is held back, as data (the stream ended)."""
        data, self._pending = self._pending, b""
        if self._skipping or data.startswith(self._head):
            data = b""  # part of a frame: its token is never shown
        self._skipping = False
        return data


def _unescape(field: bytes) -> tuple[bytes, bool]:
    """A field as frame.bash was given it; True if an escape was bad."""
    bad = []

    def byte(match: re.Match) -> bytes:
        if match.group(1) is None:
            bad.append(match.group())
            return match.group()
        return bytes([int(match.group(1), 16)])

    return _ESCAPE.sub(byte, field), bool(bad)


def _partial_suffix(buf: bytes, marker: bytes, start: int) -> int:
    """Length of the longest tail of buf[start:] that is a proper prefix of marker."""
    limit = min(len(marker) - 1, len(buf) - start)
    for size in range(limit, 0, -1):
        if buf.endswith(marker[:size]):
            return size
    return 0


class TtyNoiseFilter:
    """Drops bash's `tcsetattr: Inappropriate ioctl` complaints from stderr.

    An interactive bash without a terminal prints
    `bash: [PID: LEVEL (FD)] tcsetattr: <error>` (bash 3.2: without
    ` (FD)`) whenever a foreground program dies of a signal. It is about
    our plumbing, not the user's work.
    Lines that might be that message are held until complete; all other
    bytes pass straight through.
    """

    #: The message, any shell's: compiled once, not per shell (a fleet starts hundreds).
    _LINE = re.compile(rb"bash: \[(\d+): \d+(?: \(\d+\))?\] tcsetattr: [^\n]*\n")

    def __init__(self, shell_pid: int):
        self._prefix = b"bash: [%d: " % shell_pid
        self._pid = b"%d" % shell_pid
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        data = self._held + data
        self._held = b""
        if self._prefix[:1] not in data:
            return data
        out = bytearray()
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            line = data[pos:] if nl < 0 else data[pos: nl + 1]
            if nl < 0:
                if self._could_be_noise(line):
                    self._held = line
                else:
                    out += line
                break
            noise = self._LINE.fullmatch(line)
            if noise is None or noise.group(1) != self._pid:
                out += line
            pos = nl + 1
        return bytes(out)

    def _could_be_noise(self, partial: bytes) -> bool:
        n = min(len(partial), len(self._prefix))
        return partial[:n] == self._prefix[:n] and len(partial) < 512

    def flush(self) -> bytes:
        data, self._held = self._held, b""
        return data
