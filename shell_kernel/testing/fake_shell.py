"""A scripted stand-in for bash, to test the session engine in milliseconds.

In the spirit of invoke's `_Dummy(Runner)`: FakeShell implements the Backend
verbs and answers the lines the session sends the way shell/session.bash
would (ready frames, a cell's output and its end frames), with output and
statuses the test chooses. It records every line sent and every reap.sh call.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from shell_kernel import shell
from shell_kernel.backends import (Attached, Backend, BackendError, Capabilities, CellsHeard,
                                   ShellExit, SideResult, Started)

TOKEN = re.compile(rb"__shell_kernel_token=([0-9a-f]+)")
CELL = re.compile(rb"^__shell_kernel_resume (?:(?P<seq>\d+) )?(?:fc \$'.*' )?''; builtin eval -- (?P<source>\$'.*') <\S+ >&61 2>&62"
                  rb"; __shell_kernel_whole=\$\?$")
POST = re.compile(rb"__shell_kernel_post (\d+)(?: \$'.*')?$")
CLOSE = re.compile(rb"^__shell_kernel_close [0-9a-f]+$")
BARRIER = re.compile(rb"^builtin printf .* \"\$__shell_kernel_token\" (\S+) >&61 ")


def ansi_c_unquote(word: bytes) -> bytes:
    """Inverse of protocol.ansi_c_quote, for the escapes it writes."""
    body, out, i = word[2:-1], bytearray(), 0
    while i < len(body):
        if body[i:i + 1] != b"\\":
            out += body[i:i + 1]
            i += 1
        elif body[i + 1:i + 2] == b"x":
            out.append(int(body[i + 2:i + 4], 16))
            i += 4
        else:
            out += {b"n": b"\n", b"'": b"'", b"\\": b"\\"}[body[i + 1:i + 2]]
            i += 2
    return bytes(out)


@dataclass
class CellScript:
    """What the fake shell does for one cell: output chunks, then its end (unless hang)."""
    output: list = field(default_factory=list)  # (stream, bytes)
    status: int = 0
    cwd: str = "/fake"
    hang: bool = False  # never ends by itself (until interrupted)


class FakeShell(Backend):
    capabilities = Capabilities(description="fake")

    def __init__(self, pid: int = 4242, chunk: int | None = None,
                 on_cell: Callable[[str], CellScript] | None = None, ignores_sigint: bool = False,
                 side_delay: float = 0.0, durable: bool = False,
                 attached: Attached | None = None):
        if durable:  # outlives its connection: see cut_at and reattach
            self.capabilities = Capabilities(description="fake durable", can_reattach=True)
        #: A named session's shell that start() attaches to: its cell
        #: attached.last_seq still runs if attached.running (until interrupted).
        self.attached = attached
        self._barriers: list[str] = []  # barriers that wait for the running cell's end
        self.pid = pid
        #: Every reap.sh call returns this long after it did its work, as on
        #: a loaded host: what it made the shell print is on its way meanwhile.
        self.side_delay = side_delay
        self.chunk = chunk  # deliver output in pieces of this many bytes
        self.on_cell = on_cell or (lambda source: CellScript())
        self.ignores_sigint = ignores_sigint
        self.sent: list[bytes] = []
        self.side_calls: list[tuple[str, str]] = []  # (reap.sh mode, signal)
        self.side_args: list[list[str]] = []  # every reap.sh call's arguments
        self.fail_next: dict[str, Exception] = {}  # verb -> raised once
        self.payloads: dict[str, bytes] = {}  # payload file name -> bytes (see display)
        self.closed = False
        #: The next send's lines from the first this matches on go down with
        #: the connection, which the kernel hears of only after the send.
        self.cut_at: re.Pattern | None = None
        self.heard = CellsHeard(0, 0)  # the last cells whose first and post lines came
        self._token = b""
        self._hung_seq: int | None = None
        self._pending: CellScript | None = None
        self._on_output = self._on_exit = None
        self._exited = threading.Event()

    # ------------------------------------------------------------- helpers
    def _maybe_fail(self, verb: str) -> None:
        err = self.fail_next.pop(verb, None)
        if err is not None:
            raise err

    def frame(self, *fields: str) -> bytes:
        return b"\x1e\x1f" + self._token + b"".join(b"\x1f" + f.encode() for f in fields) \
            + b"\x1f\x1e"

    def emit(self, stream: str, data: bytes) -> None:
        step = self.chunk or len(data) or 1
        for at in range(0, len(data), step):
            self._on_output(stream, data[at:at + step])

    def display(self, mime: str, data: bytes, display_id: str = "") -> bytes:
        """The frame session.bash writes for `display`, its bytes kept for fetch()."""
        name = f"payload.{self.pid}.{len(self.payloads) + 1}"
        self.payloads[name] = data
        return self.frame("display", mime, display_id, name)

    def end_cell(self, seq: int, status: int, cwd: str = "/fake") -> None:
        self.emit("stdout", self.frame("end", str(seq), str(status), cwd))
        self.emit("stderr", self.frame("end", str(seq)))

    def end_hung_cell(self, status: int) -> None:
        """The cell that hangs (a hang script's, or the one an attached
        session still runs) ends: its end frames, then the barriers that
        waited for it."""
        seq, self._hung_seq = self._hung_seq, None
        self.end_cell(seq, status)
        self._emit_barriers()

    def _emit_barriers(self) -> None:
        barriers, self._barriers = self._barriers, []
        for nonce in barriers:
            self.emit("stdout", self.frame("barrier", nonce))
            self.emit("stderr", self.frame("barrier", nonce))

    def die(self, ended: ShellExit) -> None:
        if not self._exited.is_set():
            self._exited.set()
            if self._on_exit is not None:  # (closed before it started: nobody to tell)
                self._on_exit(ended)

    # --------------------------------------------------------------- verbs
    def start(self, on_output, on_exit) -> Started:
        self._maybe_fail("start")
        self._on_output, self._on_exit = on_output, on_exit
        attached = self.attached
        if attached is None:
            return Started()
        self._token = attached.token.encode()
        self._hung_seq = attached.last_seq if attached.running else None
        return Started(attached=attached)

    def send(self, data: bytes) -> None:
        self._maybe_fail("send")
        if self.closed:
            raise BackendError("the shell is not running")
        self.sent.append(data)
        cut_at, self.cut_at = self.cut_at, None
        for line in data.rstrip(b"\n").split(b"\n"):
            if cut_at is not None and cut_at.search(line):
                self.die(ShellExit("the connection was lost", connection_lost=True))
                return
            self._answer(line)

    def _answer(self, line: bytes) -> None:
        token = TOKEN.search(line)
        if token:  # the session script
            self._token = token.group(1)
            self.emit("stdout", self.frame("ready", str(self.pid), "5.2-fake", "/fake-state", ""))
            self.emit("stderr", self.frame("ready"))
            return
        cell = CELL.match(line)
        if cell:
            if cell.group("seq"):
                self.heard = CellsHeard(int(cell.group("seq")), self.heard.posted)
            script = self.on_cell(ansi_c_unquote(cell.group("source")).decode())
            self._pending = script
            return
        barrier = BARRIER.match(line)
        if barrier:  # bash reads it once the running cell ends: its frames wait for that
            self._barriers.append(barrier.group(1).decode())
            if self._hung_seq is None:
                self._emit_barriers()
            return
        post = POST.search(line)
        if post:
            self.heard = CellsHeard(self.heard.begun, int(post.group(1)))
            self._post(int(post.group(1)))
        elif CLOSE.match(line):  # an idle shell asked to end itself does
            self.closed = True
            self.die(ShellExit("ended itself at close", 0))

    def _post(self, seq: int) -> None:
        script, self._pending = self._pending, None
        if script is None:
            # A repeated post line (after an interrupt): bash runs it once
            # the cell's line is over, and frames the end (again).
            if self._hung_seq is None:
                self.end_cell(seq, 130)
            return
        for stream, data in script.output:
            self.emit(stream, data)
        if script.hang:
            self._hung_seq = seq
        else:
            self.end_cell(seq, script.status, script.cwd)

    def side_command(self, script: str, args: list[str], timeout: float = 10.0,
                     urgent: bool = False) -> SideResult:
        self._maybe_fail("side_command")
        if script == shell.RUN_INSTALLED:  # reap.sh, by its path
            args = args[1:]
        mode, signal_name = args[0], args[1]
        self.side_calls.append((mode, signal_name))
        self.side_args.append(list(args))
        if mode == "cell" and self._hung_seq is not None and not self.ignores_sigint:
            self.end_hung_cell(130)
        if mode == "all" and args[2] == str(self.pid):
            self.die(ShellExit("killed by SIGKILL", 137))
        time.sleep(self.side_delay)
        return SideResult(0, "")

    def fetch(self, path: str) -> bytes:
        self._maybe_fail("fetch")
        return self.payloads.pop(path.rsplit("/", 1)[-1])

    def reattach(self) -> CellsHeard | None:
        """The same shell again (durable=True), which tells what it heard."""
        self._maybe_fail("reattach")
        if not self.capabilities.can_reattach:
            return super().reattach()
        self._exited.clear()
        return self.heard

    def close(self) -> None:
        self.closed = True
        self.die(ShellExit("closed by the kernel"))
