"""The byte-level protocol between the kernel and its bash, what goes in:
pure logic, no I/O. One line that evals the cell (quoted as a bash ANSI-C
string, so any byte is safe and the cell is always a single line), then one
line that runs the post hook; the session script, queries, barriers and the
close. What comes out is frames.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import shell

STREAMS = ("stdout", "stderr")


def session_script(token: str, snapshot_exports: bool = False, state_dir: str | None = None,
                   restore: tuple[str, str | None] | None = None, tty: bool = False,
                   queries: bool = True, exports: tuple = (),
                   announce_where: bool = False) -> bytes:
    """The bash code that turns a fresh interactive bash into a session.

    restore: (state dir, cwd) of a lost shell whose exported variables and
    working directory the new one takes over (session.bash checks the
    directory is private first, and says in its ready frame what it did).
    tty: the cells' stdout and stderr are pseudo-terminals (see shell/tty.bash).
    queries: the shell answers the kernel's questions (shell/queries.bash);
    without, a fifth less to parse for a shell nobody asks (a notebook job).
    exports: (name, value) pairs exported before the ready frame.
    announce_where: the ready frame says where the shell runs (shell/where.bash).
    """
    settings = [b"__shell_kernel_token=" + token.encode()]
    for name, value in exports:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"not a variable name: {name!r}")
        settings.append(b"builtin export " + name.encode() + b"="
                        + ansi_c_quote(value.encode(errors="surrogateescape")))
    if announce_where:
        settings.append(b"__shell_kernel_announce_where=1")
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
    session = shell.bash_code("session.bash", None if queries else "queries.bash")
    return b"\n".join(settings) + b"\n" + session.encode()


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
