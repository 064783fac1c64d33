"""The Backend verbs over a transport that gives channels (channels.py): the
shell on one channel (shell.DirectShell, or durable.DurableShell's
relay), side commands, payloads and the sweep through a side shell (or,
locally, a process each). A subclass connects and disconnects the transport
(SSHBackend over paramiko; LocalBackend and LocalNamedBackend over local
processes).

Threads: as Backend says; the reader and ack timer threads are the shell's.
"""

from __future__ import annotations

import abc
import logging
from typing import Callable

from ...shell import script
from .. import Backend, BackendError, CellsHeard, ExitCallback, OutputCallback, SideResult, Started
from .shell import ChannelShell
from .channels import Channels, SideCommands
from .durable import LAUNCH_SCRIPT, LAUNCH_TIMEOUT, DurableShell

log = logging.getLogger("shell_kernel.backends")

FETCH_SCRIPT = script("fetch.sh")


class ChannelBackend(Backend):
    def __init__(self, channels: Channels, shell: ChannelShell, side: SideCommands):
        self._channels = channels
        self._shell = shell
        self._side = side

    @abc.abstractmethod
    def _connect(self) -> None:
        """Reach the host (again, after _disconnect)."""

    @abc.abstractmethod
    def _disconnect(self) -> None:
        """Drop the connection; its channels close. Idempotent."""

    def start(self, on_output: OutputCallback, on_exit: ExitCallback) -> Started:
        self._connect()
        try:
            return self._shell.start(on_output, on_exit)
        except OSError as err:
            self.close()
            raise BackendError(
                f"could not start bash on {self._channels.where}: {err}") from err

    def open_connection(self) -> None:
        self._connect()

    def send(self, data: bytes) -> None:
        self._shell.send(data)

    def side_command(self, script: str, args: list[str], timeout: float = 10.0,
                     urgent: bool = False) -> SideResult:
        return self._side.run(script, args, timeout, urgent)

    def fetch(self, path: str) -> bytes:
        result = self.side_command(FETCH_SCRIPT, [path], timeout=30)
        if result.status != 0:
            raise BackendError(f"could not read {path} on {self._channels.where}: "
                               f"{result.stdout.strip()}")
        # The side shell's text keeps every byte as a surrogate escape.
        return result.stdout.encode("utf-8", "surrogateescape")

    def received(self) -> object | None:
        return self._shell.received()

    def acknowledge(self, received: object) -> None:
        self._shell.acknowledge(received)

    def open_output(self) -> None:
        self._shell.open_output()

    def reattach(self) -> CellsHeard | None:
        if not isinstance(self._shell, DurableShell):
            super().reattach()  # raises: only a durable shell outlives its connection
        self._drop_connection()
        self._connect()
        return self._shell.reattach()

    def sweeper(self) -> Callable[[], None] | None:
        # A durable shell's launch.sh swept as it launched or opened it. A side
        # shell is not opened for this alone (a fleet's hosts have none): the
        # sessions that open one, and every durable one, sweep often enough.
        if isinstance(self._shell, DurableShell) or not self._side.is_open():
            return None
        return self._sweep

    def _sweep(self) -> None:
        try:
            self.side_command(LAUNCH_SCRIPT, ["sweep"], timeout=LAUNCH_TIMEOUT)
        except BackendError as err:
            log.info("could not look for state directories left on %s: %s",
                     self._channels.where, err)

    def _drop_connection(self) -> None:
        self._side.close()
        self._shell.detach()  # its reader then ends silently
        self._disconnect()

    def close(self) -> None:
        self._shell.close()
        self._drop_connection()
