"""Backends run one bash somewhere and move bytes to and from it.

A backend knows nothing of cells, frames or Jupyter. The session layer
(shell_kernel.session) drives it through these verbs only.
"""

from __future__ import annotations

import abc
import logging
import threading
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger("shell_kernel.backends")

OutputCallback = Callable[[str, bytes], None]  # ("stdout" | "stderr", data)


@dataclass
class ShellExit:
    """How the shell ended, as the backend saw it."""
    reason: str  # for the user, e.g. "killed by SIGKILL"
    status: int | None = None  # exit status, when known
    connection_lost: bool = False  # the shell may still run, out of reach


ExitCallback = Callable[[ShellExit], None]


@dataclass
class SideResult:
    status: int
    stdout: str  # what the script printed (over SSH, with what it wrote to stderr)


class BackendError(RuntimeError):
    """The backend could not do what was asked; the message is for the user."""


class NotSent(BackendError):
    """send() found the shell's input gone before writing: none of the data went."""


class SessionGone(BackendError):
    """A durable session could not be found again (host rebooted, session reaped)."""


class BackendFault(BackendError):
    """A verb failed in a way no retry will mend: a bug, or a configuration
    the backend cannot use. The message names the verb and the error."""


class SessionTaken(BackendFault):
    """Another kernel took this named session over (or holds it)."""


@dataclass
class Attached:
    """A named session's shell that an earlier kernel set up, and that start()
    attached to instead of starting one (see open_output)."""
    name: str
    shell_pid: int
    token: str  # of its frames
    bash_version: str
    state_dir: str
    last_seq: int  # the last cell sent to it
    running: bool  # that cell has not ended
    started_at: float | None  # when that cell started (seconds since the epoch)
    backlog: bool  # output that no kernel has received waits on the host


@dataclass(frozen=True)
class CellsHeard:
    """What a reconnected host says it received of the cells' lines: the
    numbers of the last cell whose first line (begun) and whose post line
    (posted) reached it. Lines sent into a connection that had already died
    never did."""
    begun: int
    posted: int


@dataclass(frozen=True)
class Capabilities:
    """What a backend is, fixed when it is made."""
    #: Shown to the user in banners and messages, e.g. "local" or "ssh alice@db1".
    description: str = "shell"
    #: A durable backend's shell outlives its connection: after a
    #: connection_lost exit, reattach() can resume the same shell.
    can_reattach: bool = False
    #: How long the shell's output may trail what open_terminal's script
    #: reports at the same moment (they travel apart): nothing locally.
    output_lag: float = 0.0
    #: A named session's shell outlives the kernel: close() leaves it running.
    outlives_kernel: bool = False


@dataclass(frozen=True)
class Started:
    """What start() did."""
    #: Where the session's files go, when the backend made the directory
    #: before bash started (durable, and local for its guard); else bash makes it.
    preset_state_dir: str | None = None
    #: A named session's existing shell that start() attached to, instead of
    #: starting one: its output then flows only from open_output() on.
    attached: Attached | None = None
    #: For the user's next cell, e.g. that a named session had ended and a
    #: new shell was started in its place.
    notice: str | None = None


class Backend(abc.ABC):
    """A bash somewhere, and the bytes to and from it: a handful of verbs.

    The session (shell_kernel.session) calls the verbs from its caller thread
    (start, send, reattach, close) and its I/O worker (side_command, send,
    reattach); a backend serialises what needs it. Every verb
    raises BackendError, with a message for the user, when it cannot do its
    job; the session treats any other exception the same way (see Contained).
    """

    capabilities = Capabilities()

    @abc.abstractmethod
    def start(self, on_output: OutputCallback, on_exit: ExitCallback) -> Started:
        """Start bash and the thread(s) that read it; say what was done.

        The reader threads call on_output(stream, bytes) with the shell's
        output in order, and on_exit(ShellExit) exactly once when the shell
        ends or its connection is lost, after its last output. A reader that
        fails reports that as the exit (start_reader does this). Called once
        per backend object."""

    @abc.abstractmethod
    def send(self, data: bytes) -> None:
        """Write bytes to the shell's standard input (thread-safe). Raises
        NotSent when the input was gone before any of them went, else
        BackendError when it fails."""

    @abc.abstractmethod
    def side_command(self, script: str, args: list[str], timeout: float = 10.0,
                     urgent: bool = False) -> SideResult:
        """Run a short POSIX sh script next to the shell (same host), not in it.

        Thread-safe; raises BackendError when it fails or takes longer than
        timeout (it is then ended on the host). An urgent script (an
        interrupt's) never waits behind another one."""

    @abc.abstractmethod
    def fetch(self, path: str) -> bytes:
        """The bytes of a file the shell wrote into its state directory (a
        display's or a query's payload), which is then removed. Called from
        the session's pump thread; raises BackendError when it cannot."""

    def received(self) -> object | None:
        """How far the output given to on_output so far goes, as a value for
        acknowledge(); None where no host keeps count (only a named session's
        does). Called by on_output, in the reader thread."""
        return None

    def acknowledge(self, received: object) -> None:
        """Have the host record that the output up to `received` (a value of
        received()) was shown: a named session's next kernel resumes there.
        Returns once the host has it; raises BackendError when it cannot."""

    def reattach(self) -> CellsHeard | None:
        """Reconnect to the same shell, resuming its output where it stopped;
        the new reader threads then call on_output and (once) on_exit.
        Returns what the host received of the cells' lines (None: not known).

        Raises SessionGone when the shell no longer exists, BackendError when
        the host cannot be reached."""
        raise BackendError(f"the {self.capabilities.description} backend cannot reattach")

    def open_connection(self) -> None:
        """Reach the shell's host for side commands only, starting no shell (to
        clean up after a shell that went with its connection, or to manage
        named sessions). Nothing to do where the host is this machine."""

    def open_output(self) -> None:
        """Start the output of a shell that start() attached to, from where the
        last kernel stopped receiving it (see Attached)."""

    def open_terminal(self, script: str, args: list[str],
                      on_output: Callable[[bytes], None]) -> "Terminal":
        """Run a bash script on the shell's host under a new pseudo-terminal
        (its controlling terminal), for the cells to read (shell/prompts.bash).

        A reader thread calls on_output with what the script writes to the
        terminal (and the terminal's echo), then on_output(b"") once when the
        terminal is gone. Raises BackendError when the host cannot give one."""
        raise BackendError(f"the {self.capabilities.description} backend has no terminals")

    def sweeper(self) -> Callable[[], None] | None:
        """The sweep, which removes what sessions lost with their host left
        there (state directories whose processes are provably gone:
        shell/launch.sh sweep), to run once the shell is up and has restored
        what it was to restore from a lost shell's directory; it may block,
        and never raises. None where there is nothing to sweep, so that no
        thread starts for nothing (one a host in a fleet): here, where the
        kernel cleans up after its own shells (locally)."""
        return None

    @abc.abstractmethod
    def close(self) -> None:
        """Release the shell's channels; idempotent. After it, on_exit may
        still be called once (as "closed by the kernel"). It may come from
        another thread while start() runs (a kernel shut down as its shell
        starts): that start then fails, and what it made goes."""


class Terminal(abc.ABC):
    """The kernel's side of a terminal that open_terminal made: what is written
    here is what a process reading the terminal reads."""

    @abc.abstractmethod
    def write(self, data: bytes) -> None:
        """Raises BackendError when the terminal is gone."""

    @abc.abstractmethod
    def close(self) -> None:
        """Hang the terminal up (its script then ends); idempotent."""

    def answered(self) -> None:
        """Say that an answer went in: the window's size in pixels changes
        (its rows and columns, which programs read, stay), which sends the
        script SIGWINCH. prompts.bash without /proc counts them to tell one
        read from the next. Raises BackendError when the terminal is gone."""


def start_reader(name: str, loop: Callable[[], None], on_crash: Callable[[Exception], None]
                 ) -> threading.Thread:
    """Run a backend's reader loop in a daemon thread. If the loop raises, the
    error goes to on_crash (which reports it as the shell's exit) instead of
    dying silently with the thread and leaving a cell waiting forever."""

    def run() -> None:
        try:
            loop()
        except Exception as err:  # noqa: BLE001 - reported to the session, not lost
            log.exception("the %s thread failed", name)
            on_crash(err)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def bash_argv(bash: str, clean: bool, completion: bool = True) -> list[str]:
    """The interactive bash a backend runs: a login shell, or with --clean
    none of the startup files. (Long options must come first: bash rejects
    them after -i.) History starts off (session.bash keeps it off and adds
    each cell itself): bash <= 4.2 otherwise numbers the cells on from what
    it loaded of ~/.bash_history, which `history -c` cannot undo there.
    Without completion (--no-completion: a notebook job, which is never
    asked to complete) programmable completion starts off, which makes
    bash-completion's login hook (/etc/profile.d/bash_completion.sh) skip
    loading it, half of what a login costs; session.bash turns it back on,
    with the options bash-completion would have set."""
    startup = ["--noprofile", "--norc"] if clean else ["-l"] if completion else ["+O", "progcomp", "-l"]
    return [bash, *startup, "-i", "+o", "history"]


def describe_error(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


class Contained:
    """The session's view of a backend: the same verbs, but an exception that
    is not a BackendError (a bug, an unforeseen library error) comes out as a
    BackendFault, so that every failure takes the session's one error path."""

    def __init__(self, backend: Backend):
        self.backend = backend

    @property
    def capabilities(self) -> Capabilities:
        return self.backend.capabilities

    def _call(self, verb: str, *args, **kwargs):
        return self._contain(verb, getattr(self.backend, verb), *args, **kwargs)

    def _contain(self, verb: str, function: Callable, *args, **kwargs):
        try:
            return function(*args, **kwargs)
        except BackendError:
            raise
        except Exception as err:  # noqa: BLE001 - contained: becomes the session's error path
            description = self.backend.capabilities.description
            log.exception("the %s backend's %s failed", description, verb)
            raise BackendFault(f"the {description} backend failed in {verb} "
                               f"({describe_error(err)})") from err

    def start(self, on_output: OutputCallback, on_exit: ExitCallback) -> Started:
        return self._call("start", on_output, on_exit)

    def send(self, data: bytes) -> None:
        self._call("send", data)

    def side_command(self, script: str, args: list[str], timeout: float = 10.0,
                     urgent: bool = False) -> SideResult:
        return self._call("side_command", script, args, timeout=timeout, urgent=urgent)

    def fetch(self, path: str) -> bytes:
        return self._call("fetch", path)

    def received(self) -> object | None:
        return self._call("received")

    def acknowledge(self, received: object) -> None:
        self._call("acknowledge", received)

    def reattach(self) -> CellsHeard | None:
        return self._call("reattach")

    def open_connection(self) -> None:
        self._call("open_connection")

    def open_output(self) -> None:
        self._call("open_output")

    def open_terminal(self, script: str, args: list[str],
                      on_output: Callable[[bytes], None]) -> "Terminal":
        return self._call("open_terminal", script, args, on_output)

    def sweeper(self) -> Callable[[], None] | None:
        """As Backend.sweeper, and neither it nor its sweep raises."""
        try:
            sweep = self._call("sweeper")
        except BackendError as err:
            log.info("no sweep: %s", err)
            return None
        if sweep is None:
            return None

        def contained() -> None:
            try:
                self._contain("sweep", sweep)
            except BackendError as err:
                log.info("the sweep failed: %s", err)
        return contained

    def close(self) -> None:
        self._call("close")
