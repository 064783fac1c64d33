"""Local backend: bash as a child process of the kernel, or, for a named
session, detached from it (LocalNamedBackend). Both are channel backends
(channel/backend.py) over local processes (processes.py)."""

from __future__ import annotations

import os
import subprocess
import threading
from typing import Callable

from .. import (BackendError, Capabilities, ShellExit, Started, Terminal, bash_argv,
                describe_error)
from ..channel.backend import ChannelBackend
from ..channel.channels import Channel, SideShell
from ..channel.durable import LAUNCH_TIMEOUT, DurableShell
from ..channel.shell import CLOSED_AS_IT_STARTED, DirectShell
from .processes import LocalChannels, LocalSideCommands, ShellChannel
from .spawn import SpawnedShell
from .terminal import LocalTerminal


class LocalShell(DirectShell):
    """bash as the kernel's child (processes.ShellChannel): the shell the
    kernel's launcher spawned already (with the same bash, clean and env),
    which the first start() takes, or one spawned then."""

    def __init__(self, channels: LocalChannels, bash_argv: list[str], env: dict | None,
                 spawned: SpawnedShell | None):
        super().__init__(channels, bash_argv)
        self._env = env
        self._spawned = spawned
        # start() and close() may run at once (a kernel shut down while its
        # shell starts): a spawned shell goes to one of them.
        self._spawned_lock = threading.Lock()

    def _open(self) -> tuple[Channel, Started]:
        with self._spawned_lock:
            if self._closed.is_set():
                raise BackendError(CLOSED_AS_IT_STARTED)
            shell, self._spawned = self._spawned, None
        if shell is None:
            try:
                shell = SpawnedShell(self._bash_argv, self._env)
            except (OSError, subprocess.SubprocessError) as err:
                raise BackendError(f"could not start {self._bash_argv[0]}: {err}") from err
        try:
            channel = ShellChannel(shell)
        except ValueError as err:  # its pipes closed: the launcher closed it meanwhile
            shell.close()
            raise BackendError(CLOSED_AS_IT_STARTED) from err
        return channel, Started(preset_state_dir=shell.state_dir)

    def _read_failure(self, err: Exception) -> ShellExit:
        # No connection was lost: closing the channel ended bash, and the
        # next cell starts a new shell.
        return ShellExit(f"reading the shell's output failed ({describe_error(err)})")

    def close(self) -> None:
        with self._spawned_lock:
            super().close()
            shell, self._spawned = self._spawned, None
        if shell is not None:
            shell.close()


class LocalBackend(ChannelBackend):
    """bash as a child of the kernel, read by the channel layer's shell
    (LocalShell); side commands in processes of their own; payloads read
    from the state directory directly."""

    capabilities = Capabilities(description="local")

    def __init__(self, bash: str = "bash", clean: bool = False, env: dict | None = None,
                 spawned: SpawnedShell | None = None, completion: bool = True):
        """spawned: a shell that the kernel's launcher started already (with
        the same bash, clean, completion and env), which the first start()
        takes. completion: see bash_argv."""
        self._argv = bash_argv(bash, clean, completion)
        self._env = env
        channels = LocalChannels()
        super().__init__(channels, LocalShell(channels, self._argv, env, spawned),
                         LocalSideCommands())

    def _connect(self) -> None:
        pass  # this machine is always there

    def _disconnect(self) -> None:
        pass  # the shell's channel is closed

    def open_terminal(self, script: str, args: list[str],
                      on_output: Callable[[bytes], None]) -> Terminal:
        return LocalTerminal([self._argv[0], "-c", script, "shell_kernel", *args], on_output,
                             self._env)

    def fetch(self, path: str) -> bytes:
        try:
            with open(path, "rb") as payload:
                data = payload.read()
            os.unlink(path)
        except OSError as err:
            raise BackendError(f"could not read {path}: {err}") from err
        return data


class LocalNamedBackend(ChannelBackend):
    """A named local session: bash runs detached, as a durable SSH session
    does on its host (launch.sh, spool.sh and relay.sh, run here with
    /bin/sh), so that it outlives the kernel process; durable.DurableShell
    drives it over local processes (processes.LocalChannels)."""

    def __init__(self, session: str, take_over: bool = False, bash: str = "bash",
                 clean: bool = False, idle_timeout: float = 3600.0, completion: bool = True):
        # Its output crosses the spool apart from the prompt terminal's reports.
        self.capabilities = Capabilities(description=f"local session {session}",
                                         can_reattach=True, output_lag=0.15,
                                         outlives_kernel=True)
        self._bash_argv = bash_argv(bash, clean, completion)
        channels = LocalChannels()
        side = SideShell(channels.open, LAUNCH_TIMEOUT)
        super().__init__(channels, DurableShell(channels, side, self._bash_argv, idle_timeout,
                                                session, take_over), side)

    def _connect(self) -> None:
        pass  # this machine is always there

    def _disconnect(self) -> None:
        pass  # its channels are closed

    def open_terminal(self, script: str, args: list[str],
                      on_output: Callable[[bytes], None]) -> Terminal:
        return LocalTerminal([self._bash_argv[0], "-c", script, "shell_kernel", *args], on_output,
                             None)
