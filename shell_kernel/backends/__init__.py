"""Backends run one bash somewhere and move bytes to and from it.

A backend knows nothing of cells, frames or Jupyter. The session layer
(shell_kernel.session) drives it through these verbs only.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Callable

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
    stdout: str
    stderr: str


class BackendError(RuntimeError):
    """The backend could not do what was asked; the message is for the user."""


class SessionGone(BackendError):
    """A durable session could not be found again (host rebooted, session reaped)."""


class Backend(abc.ABC):
    #: Shown to the user in banners and messages, e.g. "local" or "ssh alice@db1".
    description = "shell"
    #: A durable backend's shell outlives its connection: after a
    #: connection_lost exit, reattach() can resume the same shell.
    can_reattach = False
    #: Where a durable backend keeps the session's files (made before bash starts).
    preset_state_dir: str | None = None

    @abc.abstractmethod
    def start(self, on_output: OutputCallback, on_exit: ExitCallback) -> None:
        """Start bash; call on_output with its bytes and on_exit once when it ends.

        Raises BackendError with a message for the user when it cannot."""

    @abc.abstractmethod
    def send(self, data: bytes) -> None:
        """Write bytes to the shell's standard input."""

    @abc.abstractmethod
    def side_command(self, script: str, args: list[str], timeout: float = 10.0) -> SideResult:
        """Run a short POSIX sh script next to the shell (same host), not in it."""

    def before_cell(self) -> None:
        """Called while the shell is idle, before each cell: housekeeping."""

    def reattach(self) -> None:
        """Reconnect to the same shell, resuming its output where it stopped.

        Raises SessionGone when the shell no longer exists, BackendError when
        the host cannot be reached."""
        raise BackendError(f"the {self.description} backend cannot reattach")

    @abc.abstractmethod
    def close(self) -> None:
        """Release the shell's channels; idempotent."""
