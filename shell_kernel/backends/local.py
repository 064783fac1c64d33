"""Local backend: bash as a child process of the kernel."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading

from . import Backend, BackendError, ExitCallback, OutputCallback, ShellExit, SideResult

READ_SIZE = 1 << 16


class LocalBackend(Backend):
    description = "local"

    def __init__(self, bash: str = "bash", clean: bool = False, env: dict | None = None):
        # Long options must come first: bash rejects them after -i.
        self._argv = [bash] + (["--noprofile", "--norc"] if clean else ["-l"]) + ["-i"]
        self._env = env
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._send_lock = threading.Lock()

    def start(self, on_output: OutputCallback, on_exit: ExitCallback) -> None:
        try:
            # A new session: terminal Ctrl-C aimed at the kernel never reaches
            # the shell, and the reaper can find double-forked daemons by sid.
            self._proc = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=self._env,
                bufsize=0,
            )
        except OSError as err:
            raise BackendError(f"could not start {self._argv[0]}: {err}") from err
        self._reader = threading.Thread(
            target=self._read_loop, args=(self._proc, on_output, on_exit),
            name="shell-kernel-local-reader", daemon=True,
        )
        self._reader.start()

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
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise BackendError("the shell is not running")
        with self._send_lock:
            try:
                proc.stdin.write(data)
            except (BrokenPipeError, ValueError, OSError) as err:
                raise BackendError("the shell is not running") from err

    def side_command(self, script: str, args: list[str], timeout: float = 10.0) -> SideResult:
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", script, "shell_kernel", *args],
                capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise BackendError(f"side command failed: {err}") from err
        return SideResult(done.returncode, done.stdout, done.stderr)

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()  # end-of-file: bash exits
        except OSError:
            pass
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=2)
        for pipe in (proc.stdout, proc.stderr):
            try:
                pipe.close()
            except OSError:
                pass
