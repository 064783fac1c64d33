"""Prompts: the terminal that cells read, and the questions it carries.

Every cell's standard input is a pseudo-terminal on the shell's host, held
by shell/prompts.bash, which reports each process of the cell that waits in
a read of it. The session turns such a report into a Prompt (the text the
process printed on the current line, and whether it is a password); the
kernel asks the user and the answer, with a newline, is written to the
terminal. Without a way to ask (an automated run), the read gets end-of-file.
No Python is needed on the host; nothing here knows Jupyter or paramiko.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from typing import Callable

from . import frames, shell
from .backends import BackendError, Contained, Terminal

log = logging.getLogger("shell_kernel.prompts")

WATCH_SCRIPT = shell.script("prompts.bash")
#: The askpass helper's name, as the host's /proc/PID/comm shows it (see session.bash).
ASKPASS_NAME = "sk-askpass"
#: Answers that mean end-of-file (Ctrl-D in a terminal).
EOF_ANSWERS = ("^D", "\x04")
#: How long a prompt's text may take to arrive after its read was reported,
#: for a read that no barrier orders behind its text (no /proc and no spool
#: FIFO: see prompts_portable.bash): the text comes on the cell's stream, the
#: report on the terminal, each read by its own thread, and a reader starved
#: of CPU delivers late. The text ends the wait as it comes; a read that
#: prints no question waits this long for its input box.
SETTLE_SECONDS = 1.0
#: How long a marked read waits for its marks, which follow its text on the
#: output streams (see prompts.bash): a safety net, for output held up.
MARK_WAIT_SECONDS = 2.0
#: How long a new shell waits for its terminal (a login on the host).
START_SECONDS = 10.0
#: How long a partial line is held back from the frontend, so that it can
#: still become a prompt's text instead of output...
PARTIAL_HOLD_SECONDS = 0.4
#: ...and longer, until the terminal's watcher looked this often since it
#: came (a read it saw would have been reported first)...
PARTIAL_HOLD_LOOKS = 2
#: ...but at most this long, when the watcher is slow (a loaded host) or
#: gone: a prompt reported later has its text shown as output too.
PARTIAL_HOLD_MAX_SECONDS = 2.0

# Programs that read keys (the terminal in -icanon mode) but can be driven a
# line at a time: shells and REPLs on readline or editline. Any other program
# that reads keys (vim, top, less, nano, fzf...) needs a real terminal.
LINE_DRIVEN = frozenset({
    "bash", "sh", "dash", "zsh", "ksh", "fish", "busybox", "node", "irb", "ruby", "bc", "dc",
    "sqlite3", "psql", "mysql", "mariadb", "gdb", "lua", "R", "ghci", "php", "perl", "ipython",
    "ftp", "sftp", "bluetoothctl", "redis-cli",
})
_SECRET = re.compile(r"pass(word|phrase|code)|passwort|mot de passe|contrase|\bPIN\b", re.I)
# Control characters that a terminal in canonical mode would act on (erase,
# kill, interrupt, end-of-file...): never part of an answer.
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


@dataclass
class Prompt:
    text: str
    password: bool
    command: str  # what asked, for messages: "read", "python3", "ssh"...
    key: tuple  # (pid, read number) of the read it answers
    #: A read of keys (read -n1): how many bytes it asked for; that many of
    #: the answer's keys go, not the Enter that sent them, nor keys it did not
    #: ask for, which would stay for the next read. 0: it reads a line.
    keys: int = 0
    #: Set when the read is over without an answer (it timed out, the cell
    #: ended or was interrupted): the question is moot.
    over: threading.Event = field(default_factory=threading.Event)
    #: Set by the asking thread before the answer goes out: "line", or "eof".
    answered: str = ""


def asking_command(frame: frames.ReadingFrame, shell_pid: int) -> str:
    if frame.name == ASKPASS_NAME:
        return frame.parent or "a program"  # sudo, ssh, git...
    if frame.pid == shell_pid:
        return "read"  # the shell's own builtin (read, mapfile)
    return frame.name


def make_prompt(frame: frames.ReadingFrame, text: str, shell_pid: int) -> Prompt:
    # Echo off in line mode is a password (read -s, askpass); in key mode it
    # is readline, which echoes by itself.
    password = (not frame.echo and frame.lines) or bool(_SECRET.search(text))
    return Prompt(text, password, asking_command(frame, shell_pid), (frame.pid, frame.reads),
                  keys=frame.keys)


def needs_terminal(frame: frames.ReadingFrame) -> bool:
    """A full-screen or key-driven program, which a notebook cannot drive."""
    return not frame.lines and not frame.name.startswith("python") \
        and frame.name not in LINE_DRIVEN


def needs_terminal_notice(command: str) -> str:
    return (f"[shell_kernel] '{command}' needs a terminal: it reads keys, not lines, which a "
            "notebook cannot give, so the cell was stopped. Use JupyterLab's terminal (File > "
            "New > Terminal), or a command-line form (top -b -n 1; cat or head instead of a "
            "pager; sed or vim -es for edits).\n")


def no_input_notice(command: str) -> str:
    return (f"[shell_kernel] '{command}' asked for input; this run cannot answer prompts, so "
            "it got end-of-file (give the input in the cell: a here-string <<<, a pipe or a "
            "parameter).\n")


def is_eof(answer: str | None) -> bool:
    return answer is None or answer in EOF_ANSWERS


def answer_bytes(answer: str | None, keys: int = 0) -> bytes:
    """What to write to the terminal for an answer (None: end-of-file); for
    a read of KEYS bytes, its first KEYS characters (as read -n counts
    them), or Enter for an empty answer."""
    if is_eof(answer):
        return b"\x04"
    typed = _CONTROLS.sub("", answer)
    if keys and typed:
        return typed[:keys].encode("utf-8", "replace")
    return typed.encode("utf-8", "replace") + b"\n"


class InputTerminal:
    """The terminal one shell's cells read, watched by prompts.bash.

    Frames from the watcher go to on_frame (called on the terminal's reader
    thread); everything else that comes back from the terminal (its echo of
    the answers, which may be passwords, and startup-file noise) is dropped
    unread. on_frame(None) says the terminal is gone."""

    def __init__(self, backend: Contained, token: str, shell_pid: int, state_dir: str,
                 on_frame: Callable[[frames.Frame | None], None]):
        self._scanner = frames.FrameScanner(token, "terminal")
        self._on_frame = on_frame
        self._path: str | None = None
        self._settled = threading.Event()  # the path is known, or never will be
        self._terminal: Terminal = backend.open_terminal(
            WATCH_SCRIPT, [str(shell_pid), state_dir], self._on_data)
        # On the terminal, where only the watcher reads it (no cell reads the
        # terminal before the watcher gave its path): never in an argv.
        try:
            self._terminal.write(token.encode() + b"\n")
        except BackendError:
            self._terminal.close()
            raise

    def _on_data(self, data: bytes) -> None:
        if not data:
            log.info("the prompt watcher's terminal closed: cells read /dev/null from the next one")
            self._path = None
            self._settled.set()
            self._on_frame(None)
            return
        for item in self._scanner.feed(data):
            if isinstance(item, frames.TtyFrame):
                self._path = item.path
                self._settled.set()
            elif not isinstance(item, bytes):
                self._on_frame(item)

    def path(self, timeout: float) -> str | None:
        """The terminal's path on the host, waiting up to timeout for the
        watcher to start; None if there is none (cells then read /dev/null)."""
        self._settled.wait(timeout)
        return self._path

    def answer(self, answer: str | None, keys: int = 0) -> None:
        try:
            self._terminal.write(answer_bytes(answer, keys))
            self._terminal.answered()  # after: the read it answers is over by then
        except BackendError as err:
            log.info("could not deliver an answer: %s", err)

    def close(self) -> None:
        self._path = None
        try:
            self._terminal.close()
        except (BackendError, OSError) as err:
            log.debug("closing the terminal: %s", err)
