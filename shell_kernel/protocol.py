"""The byte-level protocol between the kernel and its bash: pure logic, no I/O.

What goes in: one line that evals the cell (quoted as a bash ANSI-C string,
so any byte is safe and the cell is always a single line), then one line
that runs the post hook. What comes out: the user's bytes on two streams,
with frames `\\036\\037<token>\\037<kind>\\037<field>...\\037\\036` that the
session's bash code writes (see shell/frame.bash), each field %-escaped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

from . import shell

FRAME_START = b"\x1e\x1f"
FRAME_END = b"\x1f\x1e"
FIELD_SEP = b"\x1f"
# A frame is short (its longest field is a working directory); one longer
# than this is not read, and ends its cell with an error (see EndFrame.unread).
MAX_FRAME = 64 << 10
# What shell/frame.bash escapes in a field: % and the bytes that frame a
# frame, a newline and a carriage return, as %XX.
_ESCAPE = re.compile(rb"%(?:([0-9A-F]{2})|)")

STREAMS = ("stdout", "stderr")


def session_script(token: str, snapshot_exports: bool = False, state_dir: str | None = None,
                   restore: tuple[str, str | None] | None = None, tty: bool = False) -> bytes:
    """The bash code that turns a fresh interactive bash into a session.

    restore: (state dir, cwd) of a lost shell whose exported variables and
    working directory the new one takes over (session.bash checks the
    directory is private first, and says in its ready frame what it did).
    tty: the cells' stdout and stderr are pseudo-terminals (see shell/tty.bash).
    """
    settings = [b"__shell_kernel_token=" + token.encode()]
    if state_dir:
        settings.append(b"__shell_kernel_dir="
                        + ansi_c_quote(state_dir.encode(errors="surrogateescape")))
    if snapshot_exports:
        settings.append(b"__shell_kernel_snapshot=1")
    if restore is not None:
        restore_dir, cwd = restore
        settings.append(b"__shell_kernel_restore_dir="
                        + ansi_c_quote(restore_dir.encode(errors="surrogateescape")))
        if cwd:
            settings.append(b"__shell_kernel_restore_cwd="
                            + ansi_c_quote(cwd.encode(errors="surrogateescape")))
    if tty:
        settings.append(b"__shell_kernel_tty=1\n" + shell.bash_code("tty.bash").encode())
    return b"\n".join(settings) + b"\n" + shell.bash_code("session.bash").encode()


def bootstrap_lines(script: bytes) -> bytes:
    """What a fresh interactive bash is sent to become a session: line editing
    off first, then the session script's own lines. Readline, on when bash is
    interactive even without a terminal, reads its input one byte at a time,
    with a select(2) per byte, and echoes all of it to stderr; without it bash
    reads in blocks. (Cells read fd 60, never stdin, so reading ahead is safe.)
    The script goes as it is, not as one `eval` word: bash expands a word of
    50 KB in several passes over it, which doubled what a session's start cost
    its host. Read line by line, every command would show a prompt and run
    PROMPT_COMMAND (an rc file's `$(git ...)` or direnv hook: forks) until the
    script clears them: the second line does at once (on its own line: a
    readonly PS1 fails only that line)."""
    return (b"builtin set +o emacs +o vi\n"
            b"PS1= PS2= PS0=; builtin unset -v PROMPT_COMMAND\n"
            + script + (b"" if script.endswith(b"\n") else b"\n"))


def ansi_c_quote(data: bytes) -> bytes:
    """Quote bytes as one bash $'...' word that contains no raw newline."""
    # The common escapes by replace(), the rare control bytes by the pattern:
    # a callback per byte made quoting the 51 KB session script a fleet's
    # biggest cost per host.
    quoted = data.replace(b"\\", b"\\\\").replace(b"'", b"\\'").replace(b"\n", b"\\n")
    return b"$'" + _NEEDS_ESCAPE.sub(_escaped, quoted) + b"'"


# Inside $'...', past the quote, backslash and newline: control bytes (tab
# stays as it is; UTF-8 and other high bytes pass through).
_NEEDS_ESCAPE = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")
_ESCAPES = {bytes([byte]): b"\\x%02x" % byte for byte in [*range(0x09), *range(0x0B, 0x20), 0x7F]}


def _escaped(match: re.Match) -> bytes:
    return _ESCAPES[match.group()]


@dataclass
class PreparedCell:
    source: bytes
    removed_nul: bool


def prepare_cell(code: str) -> PreparedCell:
    """Normalise cell text the way a script file would be read.

    CRLF line endings become LF (a stray CR would end up inside words).
    NUL bytes cannot exist in a bash string, so they are removed, and the
    caller tells the user.
    """
    text = code.replace("\r\n", "\n")
    data = text.encode("utf-8", "replace")
    removed = b"\x00" in data
    return PreparedCell(data.replace(b"\x00", b""), removed)


#: How a cell's first line and its post line begin, and the call in the
#: post line before the cell's number: a durable session's relay (relay.sh)
#: records the numbers of the last cell whose first and post lines reached
#: the host, for a kernel that reconnects to learn which it must send again.
CELL_FIRST_LINE = b"__shell_kernel_resume "
POST_LINE = b"__shell_kernel_rc="
POST_CALL = b"; builtin set +T; __shell_kernel_post "


def eval_lines(source: bytes, seq: int, post_only: bool = False) -> bytes:
    """The two input lines that run one cell and report its end. The cell
    reads descriptor STDIN_FD (see stdin_line). A cell that runs fc is named
    to the shell with its text (see runs_fc). The first line's last step
    runs only if nothing abandoned the line (see session.bash's post hook).
    post_only: only the second (the host has the first: see CELL_FIRST_LINE)."""
    post = post_line(seq, b"$?", history_entry(source), command_words(source))
    if post_only:
        return post
    text = _history_text(source)
    fc = b"fc " + ansi_c_quote(text) + b" " if text is not None and runs_fc(text) else b""
    return (
        CELL_FIRST_LINE + b"%d %s''; builtin eval -- " % (seq, fc) + ansi_c_quote(source)
        + b" <&%d >&61 2>&62; __shell_kernel_whole=$?\n" % STDIN_FD + post
    )


#: The shell's descriptor that cells read: the prompt terminal or /dev/null.
STDIN_FD = 60


RESET_STDIN_LINE = b"__shell_kernel_reset_stdin\n"


def stdin_line(path: str | None) -> bytes:
    """A line that points STDIN_FD at the terminal whose path the prompt
    watcher gave (see shell/prompts.bash), or at /dev/null (path None)."""
    word = ansi_c_quote(path.encode(errors="surrogateescape")) if path else b"''"
    return b"__shell_kernel_stdin " + word + b"\n"


# A cell that re-runs an earlier command (`fc -s`, `fc -e -`, ksh's `r`):
# as in a terminal, its own text is not recorded, only the command it re-ran
# (which fc records itself); recorded, a later `fc -s` would re-run it, which
# would re-run itself without end.
_RERUN = re.compile(rb"\s*(fc\s+(-\w*s|-e\s*-)|r)(\s|;|$)")


# A bigger cell (pasted data) is not recorded: the shell would keep it,
# and the post line would carry it again, at every run.
MAX_HISTORY_ENTRY = 64 << 10


def history_entry(source: bytes) -> bytes | None:
    """What a cell adds to the shell's history: its lines, as one entry
    (so that `fc -s` re-runs a whole cell, never a fragment such as `done`),
    without the blank lines around them; None for a blank cell, a re-run, or
    one over MAX_HISTORY_ENTRY."""
    text = _history_text(source)
    if text is None or _RERUN.match(text):
        return None
    return text


def _history_text(source: bytes) -> bytes | None:
    """The cell's lines without the blank lines around them; None for a
    blank cell or one over MAX_HISTORY_ENTRY."""
    if len(source) > MAX_HISTORY_ENTRY:
        return None
    lines = source.split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    while lines and not lines[0].strip():
        lines.pop(0)
    return b"\n".join(lines) if lines else None


# The word fc anywhere in a cell (not fc-cache, a path or an option), or a
# re-run: bash 3.2's fc takes the newest history entry for the fc command
# itself, as a terminal has added it by then, so there the shell adds the
# cell's text before it runs (session.bash, __shell_kernel_fc_begin). A
# word that is not the command costs only that: `history` in that cell
# shows the cell. fc run by a function whose call names no fc is not seen.
_NAMES_FC = re.compile(rb"(?<![\w./-])fc(?![\w./-])")


def runs_fc(text: bytes) -> bool:
    """Whether a cell (its history text) may run fc: see _NAMES_FC."""
    return bool(_NAMES_FC.search(text) or _RERUN.match(text))


QUERIES = ("complete", "is-complete", "inspect", "history")


def query_line(seq: int, what: str, text: str) -> bytes:
    """A line asking the shell something between cells (see __shell_kernel_query)."""
    if what not in QUERIES:
        raise ValueError(f"unknown query {what!r}")
    data = text.encode("utf-8", "replace").replace(b"\x00", b"")
    return b"__shell_kernel_query %d %s %s\n" % (seq, what.encode(), ansi_c_quote(data))


def post_line(seq: int, status: bytes = b"130", history: bytes | None = None,
              words: bytes | None = None) -> bytes:
    """A post-hook line; sent again after an interrupt in case the first was cut.
    history: the cell's entry for the shell's history list (see history_entry).
    words: the cell's command words (see command_words)."""
    entry = b"" if history is None else b" " + ansi_c_quote(history)
    named = b"" if words is None else b" __shell_kernel_words=" + ansi_c_quote(words)
    return (POST_LINE + status + b" __shell_kernel_flags=$-" + named
            + POST_CALL + b"%d%s\n" % (seq, entry))


# A word in command position: at a line's start, after an operator or a
# keyword that a command follows. Only what an alias name can be (no
# quotes, $, /, =, globbing or operators).
# (The word is matched ahead, not taken: `then ll` finds then, then ll.)
_COMMAND_WORD = re.compile(
    rb"(?:^|[;&|(){}!`]|\b(?:then|do|else|elif|time)\b)[ \t]*"
    rb"(?=([A-Za-z0-9_.:,@%+^~-]+)(?:[\s;&|)]|$))", re.MULTILINE)
_KEYWORDS = frozenset(b"if then else elif fi do done case esac while until for select function "
                      b"time".split())
#: At most so many words go (a bigger cell's failing alias may go unnamed).
MAX_COMMAND_WORDS = 64


def command_words(source: bytes) -> bytes:
    """The distinct words in command position in a cell, space-separated:
    the only names the post hook looks up as aliases when the cell fails
    (the whole `alias` listing cost seconds with thousands of aliases)."""
    found: dict[bytes, None] = {}
    for match in _COMMAND_WORD.finditer(source[:MAX_HISTORY_ENTRY]):
        if match.group(1) not in _KEYWORDS:
            found.setdefault(match.group(1), None)
        if len(found) == MAX_COMMAND_WORDS:
            break
    return b" ".join(found)


def barrier_line(nonce: str) -> bytes:
    """A line that prints a barrier frame carrying nonce on both streams: once
    it arrives, everything the shell wrote before it has (a kernel that
    attaches to a named session learns so where the spooled backlog ends)."""
    frame = (b"'\\036\\037%s\\037barrier\\037%s\\037\\036' \"$__shell_kernel_token\" "
             + nonce.encode())
    return (b"builtin printf " + frame + b" >&61 2>/dev/null || builtin true; builtin printf "
            + frame + b" >&62 2>/dev/null || builtin true\n")


def close_line(nonce: str) -> bytes:
    """A line that has an idle shell end itself and everything it started
    (see __shell_kernel_close); a shell that cannot answers with a barrier
    frame carrying nonce instead."""
    return b"__shell_kernel_close " + nonce.encode() + b"\n"


@dataclass(frozen=True)
class ReadyFrame:
    """The session script finished setting up (stdout carries the fields)."""
    stream: str
    pid: int | None = None
    bash_version: str = ""
    state_dir: str = ""
    #: What became of a restore request: "", "yes" or "refused" (not private).
    restored: str = ""


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
    if kind == "ready" and len(rest) in (0, 4):
        if not rest:
            return ReadyFrame(stream)
        return ReadyFrame(stream, _int_or_none(rest[0]), *rest[1:])
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

    def __init__(self, shell_pid: int):
        self._prefix = b"bash: [%d: " % shell_pid
        self._line = re.compile(rb"bash: \[%d: \d+(?: \(\d+\))?\] tcsetattr: [^\n]*\n" % shell_pid)
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
            if not self._line.fullmatch(line):
                out += line
            pos = nl + 1
        return bytes(out)

    def _could_be_noise(self, partial: bytes) -> bool:
        n = min(len(partial), len(self._prefix))
        return partial[:n] == self._prefix[:n] and len(partial) < 512

    def flush(self) -> bytes:
        data, self._held = self._held, b""
        return data
