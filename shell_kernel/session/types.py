"""The session's value types: its options, the per-cell record, the ready
shell, its one error, and the running cell. No threads of their own; the
RunningCell says whose its fields are when."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..backends import ShellExit
from ..options import default, output_limit_bytes
from ..output import OutputLimit
from ..prompts import InputTerminal, Prompt


@dataclass
class Options:
    interrupt_grace: float = default("interrupt_grace")  # seconds between SIGINT and SIGTERM
    #: bytes of one cell's output sent to the frontend
    output_limit: int = output_limit_bytes(default("output_limit_mb"))
    spill_dir: Path = Path(default("spill_dir"))
    start_timeout: float = default("start_timeout")
    flush_interval: float = 0.05
    #: Keep a copy of the exported variables after every cell, so that a
    #: shell lost with its connection can be followed by one that has them.
    snapshot_exports: bool = False
    #: How long to keep trying to reattach a durable session after a drop.
    reattach_timeout: float = 120.0
    #: Give cells a terminal to read, so that a prompt can be answered (see
    #: prompts.py); without it, cells read /dev/null.
    prompts: bool = True
    #: Cells write to two pseudo-terminals on the host (see shell/tty.bash).
    tty: bool = default("tty")
    #: The shell answers questions (ShellSession.query: completion,
    #: inspection...); a notebook job, which asks none, saves its host the code.
    queries: bool = True
    #: (name, value) pairs the shell exports before it is ready (a notebook
    #: job's SHELL_KERNEL_HOST), in every shell the session starts.
    exports: tuple = ()
    #: The shell says where it runs as it gets ready (ShellInfo.where): a
    #: notebook job's record, without a cell to ask.
    announce_where: bool = False


@dataclass
class CellRecord:
    """What one cell came to, as ShellSession.run returns it: the kernel's
    results.reply_metadata turns it into the execute_reply's shell_kernel
    metadata, and failure.cell_error into the error a frontend shows."""
    exit_code: int | None  # None: not known here (the cell runs on in a named session)
    duration_s: float
    cwd: str | None = None
    interrupted: bool = False
    #: Set when the shell ended during the cell: what happened, for the user.
    shell_lost: str | None = None
    spill_path: str | None = None
    #: For a failed cell: the command that set the status, and its line in the cell.
    command: str | None = None
    line: int | None = None
    #: The kernel left a named session while it ran this cell, which goes on there.
    detached: bool = False


class SessionError(RuntimeError):
    """The session cannot run cells; the message is written for the user."""


#: A SessionError's message once close() has begun.
SHUTTING_DOWN = "The kernel is shutting down."


@dataclass
class ShellInfo:
    pid: int
    bash_version: str
    state_dir: str  # where the shell's payload files are (see frames.DisplayFrame)
    restored: str = ""  # see frames.ReadyFrame
    where: tuple = ()  # user, hostname, os: when Options.announce_where asked (ReadyFrame)


@dataclass
class RunningCell:
    """A running cell. The caller makes it and hands it to the pump (the
    CellBegun request); from then on its fields are the pump's, until done
    is set, after which the pump leaves them alone and the caller reads
    them (and terminal, once it got a prompt)."""
    seq: int
    generation: int
    limit: OutputLimit
    started: float = field(default_factory=time.monotonic)
    ended: dict = field(default_factory=lambda: {"stdout": False, "stderr": False})
    status: int | None = None
    cwd: str | None = None
    source: bytes = b""
    failed: tuple = (None, None)  # (line, command) from the end frame
    replaced: bool = False
    given_up: bool = False  # the interrupt could not reach its processes
    not_sent: bool = False  # the cell never reached the shell
    #: Its lines are being sent (by the I/O worker, until the pump hears
    #: they went): a connection lost meanwhile is recorded in lost_unsent,
    #: and mended once they went.
    sending: bool = True
    lost_unsent: ShellExit | None = None
    #: The prompt terminal its lines point its reads at (None: /dev/null).
    terminal: InputTerminal | None = None
    detached: bool = False  # close() left it running in a named session
    key_mode: bool = False  # stopped: a program of it reads keys (what it prints is not shown)
    lost: ShellExit | None = None
    #: Set when the cell is over: the caller reads its fields from then on.
    done: threading.Event = field(default_factory=threading.Event)
    #: Set once the shell has ended the cell (its end frames came; or the
    #: cell is done otherwise): a key-mode cell is done a moment after, an
    #: interrupted one once its post line went again (see Pump._end_if_over).
    shell_ended: threading.Event = field(default_factory=threading.Event)
    #: When a key-mode cell that the shell ended is done (monotonic time).
    settle_due: float | None = None
    interrupted: bool = False
    escalating: bool = False  # an interrupt plan works on it
    #: The interrupt has yet to send the post line again: the next
    #: cell must not go before it, or that cell's $? would be the abandoned
    #: line's (1 on bash 3.2, 128 on 4.2) where 130 belongs.
    post_repeat_due: bool = False
    #: A named session's cell that an earlier kernel sent (see catch_up.py):
    #: it ends when the barrier with this nonce has come back on both streams.
    catch_up: str | None = None
    barriers: set = field(default_factory=set)
    #: A line for its stderr that the pump shows as it takes the cell, before
    #: anything of it (what a catch-up cell waits for).
    notice: str | None = None
    #: Asks the user a Prompt and returns the answer (None: end-of-file);
    #: None when nobody can be asked (an automated run). The caller's thread.
    ask: Callable[[Prompt], "str | None"] | None = None
    #: What the pump tells the waiting caller: a Prompt to answer, or None
    #: once the cell is done.
    inbox: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    #: Reads reported by the terminal's watcher, each with when it was reported.
    reads: list = field(default_factory=list)
    #: The streams on which each read's mark came back (frames.read_mark
    #: nonce -> streams).
    read_marks: dict = field(default_factory=dict)
    prompt: Prompt | None = None  # the open question, until the caller's PromptAnswered
    told_no_input: bool = False
