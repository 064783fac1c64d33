"""Local backend: bash as a child process of the kernel, or, for a named
session, detached from it (LocalNamedBackend)."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
from typing import Callable

from .. import (Backend, BackendError, Capabilities, ExitCallback, NotSent, OutputCallback,
                ShellExit, SideResult, Started, Terminal, bash_argv, describe_error,
                start_reader)
from ..channel.backend import ChannelBackend
from ..channel.channels import SideShell
from ..channel.durable import LAUNCH_TIMEOUT, DurableShell
from .processes import LocalChannels
from .spawn import SpawnedShell
from .terminal import LocalTerminal

READ_SIZE = 1 << 16


class LocalBackend(Backend):
    capabilities = Capabilities(description="local")

    def __init__(self, bash: str = "bash", clean: bool = False, env: dict | None = None,
                 spawned: SpawnedShell | None = None):
        """spawned: a shell that the kernel's launcher started already (with
        the same bash, clean and env), which the first start() takes."""
        self._argv = bash_argv(bash, clean)
        self._env = env
        self._shell = spawned
        self._reader: threading.Thread | None = None
        self._send_lock = threading.Lock()
        # start() and close() may run at once (a kernel shut down while its
        # shell starts): what start() makes, close() then ends.
        self._life_lock = threading.Lock()
        self._closed = False

    def start(self, on_output: OutputCallback, on_exit: ExitCallback) -> Started:
        with self._life_lock:
            if self._closed:
                raise BackendError("the kernel closed the session as its shell started")
            if self._shell is None:
                try:
                    self._shell = SpawnedShell(self._argv, self._env)
                except (OSError, subprocess.SubprocessError) as err:
                    raise BackendError(f"could not start {self._argv[0]}: {err}") from err
            shell = self._shell
            self._reader = start_reader(
                "shell-kernel-local-reader", lambda: self._read_loop(shell.proc, on_output, on_exit),
                lambda err: on_exit(ShellExit(f"reading its output failed ({describe_error(err)})")))
        return Started(preset_state_dir=shell.state_dir)

    @staticmethod
    def _read_loop(proc: subprocess.Popen, on_output: OutputCallback, on_exit: ExitCallback) -> None:
        names = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
        with selectors.DefaultSelector() as sel:
            for fd in names:
                sel.register(fd, selectors.EVENT_READ)
            # Background jobs may hold the pipes open after bash is gone, so
            # the shell's end is judged by its exit, not by end-of-file.
            while names and proc.poll() is None:
                for key, _ in sel.select(timeout=0.2):
                    data = os.read(key.fd, READ_SIZE)
                    if data:
                        on_output(names[key.fd], data)
                    else:
                        sel.unregister(key.fd)
                        del names[key.fd]
            # Drain what the shell wrote before it ended.
            for fd, name in list(names.items()):
                os.set_blocking(fd, False)
                try:
                    while data := os.read(fd, READ_SIZE):
                        on_output(name, data)
                except BlockingIOError:
                    pass
        status = proc.wait()
        if status < 0:
            try:
                signame = signal.Signals(-status).name
            except ValueError:
                signame = f"signal {-status}"
            on_exit(ShellExit(f"killed by {signame}", 128 - status))
        else:
            on_exit(ShellExit(f"exited with status {status}", status))

    def send(self, data: bytes) -> None:
        proc = self._shell.proc if self._shell is not None else None
        if proc is None or proc.stdin is None:
            raise NotSent("the shell is not running")
        with self._send_lock:
            try:
                proc.stdin.write(data)
            except (BrokenPipeError, ValueError, OSError) as err:
                raise BackendError("the shell is not running") from err

    def side_command(self, script: str, args: list[str], timeout: float = 10.0,
                     urgent: bool = False) -> SideResult:
        # Each in a process of its own (none waits behind another), leading a
        # group of its own: one that times out is ended with what it started.
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", script, "shell_kernel", *args], stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
                start_new_session=True)
        except OSError as err:
            raise BackendError(f"side command failed: {err}") from err
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as err:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
            proc.stdout.close()  # (a process that left the group may hold it)
            raise BackendError(f"side command failed: {err}") from err
        return SideResult(proc.returncode, stdout)

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

    def close(self) -> None:
        with self._life_lock:
            self._closed = True
            shell, self._shell = self._shell, None
            reader = self._reader
        if shell is not None:
            shell.close(before_pipes_close=(lambda: reader.join(timeout=2)) if reader else None)


class LocalNamedBackend(ChannelBackend):
    """A named local session: bash runs detached, as a durable SSH session
    does on its host (launch.sh, spool.sh and relay.sh, run here with
    /bin/sh), so that it outlives the kernel process; durable.DurableShell
    drives it over local processes (processes.LocalChannels)."""

    def __init__(self, session: str, take_over: bool = False, bash: str = "bash",
                 clean: bool = False, idle_timeout: float = 3600.0):
        # Its output crosses the spool apart from the prompt terminal's reports.
        self.capabilities = Capabilities(description=f"local session {session}",
                                         can_reattach=True, output_lag=0.15,
                                         outlives_kernel=True)
        self._bash_argv = bash_argv(bash, clean)
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
