"""A kernel driven through a real jupyter_client KernelManager, with timeouts
everywhere, plus the process helpers the figures need."""

from __future__ import annotations

import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable

import psutil
from jupyter_client import KernelManager

#: Called with (stream name, text) for each stream message of a cell.
StreamHandler = Callable[[str, str], None]

_live: set["KernelSession"] = set()


@dataclass
class Execution:
    """What came back for one execute_request."""

    msg_id: str
    elapsed: float | None = None  # seconds until both the idle status and the reply arrived
    reply: dict | None = None
    idle: bool = False
    stream_messages: int = 0
    stream_bytes: int = 0

    @property
    def finished(self) -> bool:
        return self.idle and self.reply is not None

    @property
    def status(self) -> str | None:
        return self.reply["content"].get("status") if self.reply else None

    @property
    def ok(self) -> bool:
        return self.finished and self.status == "ok"

    @property
    def error_name(self) -> str | None:
        return self.reply["content"].get("ename") if self.reply else None


class KernelSession:
    """One running kernel and its blocking client."""

    def __init__(self, kernelspec: str, cwd: str, log=None):
        self.kernelspec = kernelspec
        self.cwd = cwd
        self.log = log  # a file for the kernel's stdout and stderr (default: ours)
        self.km: KernelManager | None = None
        self.kc = None

    # ------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 60.0) -> float:
        """Start the kernel; seconds from start_kernel() to wait_for_ready() returning."""
        self.km = KernelManager(kernel_name=self.kernelspec)
        _live.add(self)
        started = time.perf_counter()
        streams = {} if self.log is None else {"stdout": self.log, "stderr": self.log}
        self.km.start_kernel(cwd=self.cwd, **streams)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=timeout)
        return time.perf_counter() - started

    def shutdown(self, now: bool = False) -> int | None:
        """Shut the kernel down; its exit status (negative: killed by that signal)."""
        _live.discard(self)
        if self.kc is not None:
            self.kc.stop_channels()
            self.kc = None
        if self.km is None:
            return None
        process = getattr(self.km.provisioner, "process", None)
        try:
            if self.km.has_kernel:
                self.km.shutdown_kernel(now=now)
        finally:
            self.km = None
        return process.returncode if process is not None else None

    def restart(self) -> None:
        """A fresh kernel in place of this one (which may be stuck)."""
        self.shutdown()
        self.start()

    @property
    def pid(self) -> int:
        return self.km.provisioner.process.pid

    def is_alive(self) -> bool:
        return self.km is not None and self.km.is_alive()

    # ------------------------------------------------------------- execute
    def submit(self, code: str) -> str:
        return self.kc.execute(code, store_history=False)

    def collect(self, msg_id: str, started: float, deadline: float,
                on_stream: StreamHandler | None = None) -> Execution:
        """Read IOPub until the request's idle status, then its reply.

        IOPub is drained first so a flood of output never piles up in the
        client; messages of other requests are skipped.
        """
        ex = Execution(msg_id)
        while not ex.idle:
            msg = _next(self.kc.get_iopub_msg, deadline)
            if msg is None:
                return ex
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                ex.stream_messages += 1
                ex.stream_bytes += len(content["text"].encode())
                if on_stream is not None:
                    on_stream(content["name"], content["text"])
            elif kind == "status" and content["execution_state"] == "idle":
                ex.idle = True
        while ex.reply is None:
            msg = _next(self.kc.get_shell_msg, deadline)
            if msg is None:
                return ex
            if msg["parent_header"].get("msg_id") == msg_id:
                ex.reply = msg
        ex.elapsed = time.perf_counter() - started
        return ex

    def execute(self, code: str, timeout: float, on_stream: StreamHandler | None = None) -> Execution:
        started = time.perf_counter()
        msg_id = self.submit(code)
        return self.collect(msg_id, started, started + timeout, on_stream)

    def abandon(self, msg_id: str, cap: float = 15.0) -> str:
        """Stop a cell that overran its timeout: interrupt, else restart."""
        self.km.interrupt_kernel()
        now = time.perf_counter()
        if self.collect(msg_id, now, now + cap).finished:
            return "interrupted"
        self.restart()
        return "restarted"

    def works(self, code: str, timeout: float = 10.0) -> bool:
        return self.execute(code, timeout).ok


def _next(get: Callable, deadline: float) -> dict | None:
    remaining = deadline - time.perf_counter()
    if remaining <= 0:
        return None
    try:
        return get(timeout=remaining)
    except queue.Empty:
        return None


def shutdown_all() -> None:
    """Shut down every kernel still running; used on the way out, even on error."""
    for session in list(_live):
        try:
            session.shutdown()
        except Exception:  # noqa: BLE001 - try the others too
            try:
                session.shutdown(now=True)
            except Exception:  # noqa: BLE001
                pass


# ------------------------------------------------------------- processes
def find_processes(pattern: str) -> list[psutil.Process]:
    """Processes (other than this one) whose command line contains pattern."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if pattern in cmdline and proc.pid != psutil.Process().pid:
            found.append(proc)
    return found


def wait_for_process(pattern: str, timeout: float) -> bool:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if find_processes(pattern):
            return True
        time.sleep(0.02)
    return False


def survivors(pattern: str, grace: float) -> list[psutil.Process]:
    """Matching processes still there after `grace` seconds."""
    deadline = time.perf_counter() + grace
    while True:
        found = find_processes(pattern)
        if not found or time.perf_counter() >= deadline:
            return found
        time.sleep(0.05)


def ignores_sigint(proc: psutil.Process) -> bool | None:
    """Whether the process has SIGINT ignored (Linux /proc only; else None)."""
    try:
        with open(f"/proc/{proc.pid}/status") as status:
            for line in status:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    except OSError:
        pass
    return None


def kill_processes(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass


class RssSampler:
    """Samples one process's RSS every `interval` seconds while in the block."""

    def __init__(self, pid: int, interval: float = 0.05):
        self._proc = psutil.Process(pid)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.samples: list[int] = []

    def rss(self) -> int:
        return self._proc.memory_info().rss

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.rss())
            except psutil.Error:
                return
            self._stop.wait(self._interval)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak(self) -> int:
        return max(self.samples, default=0)
