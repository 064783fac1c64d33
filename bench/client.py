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

#: Seconds of quiet on IOPub after the reply before a missing idle status
#: counts as dropped (see KernelSession.collect).
IDLE_GRACE = 2.0
#: How often collect() looks at the shell channel while IOPub is quiet.
POLL = 0.25


@dataclass
class Execution:
    """What came back for one execute_request."""

    msg_id: str
    elapsed: float | None = None  # seconds until both the idle status and the reply arrived
    reply: dict | None = None
    idle: bool = False
    stream_messages: int = 0
    stream_bytes: int = 0
    idle_lost: bool = False  # the reply came but the idle status never did

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

    def __init__(self, kernelspec: str, cwd: str, log=None, env: dict | None = None,
                 setup: str | None = None):
        self.kernelspec = kernelspec
        self.cwd = cwd
        self.log = log  # a file for the kernel's stdout and stderr (default: ours)
        self.env = env  # the kernel's environment (default: ours)
        self.setup = setup  # a cell run after every start (e.g. sshkernel's %login)
        self.setup_s: float | None = None  # how long that cell took at the last start
        self.km: KernelManager | None = None
        self.kc = None

    # ------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 60.0) -> float:
        """Start the kernel and run the setup cell, if any; seconds from
        start_kernel() to wait_for_ready() returning (setup_s: the setup cell)."""
        self.km = KernelManager(kernel_name=self.kernelspec)
        _live.add(self)
        started = time.perf_counter()
        extra = {} if self.log is None else {"stdout": self.log, "stderr": self.log}
        if self.env is not None:
            extra["env"] = self.env
        self.km.start_kernel(cwd=self.cwd, **extra)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=timeout)
        ready = time.perf_counter() - started
        if self.setup is not None:
            ex = self.execute(self.setup, timeout)
            if not ex.ok:
                raise RuntimeError(f"setup cell {self.setup!r}: "
                                   + ("no reply" if not ex.finished else
                                      f"{ex.status} ({ex.error_name})"))
            self.setup_s = ex.elapsed
        return ready

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
        """Read IOPub until the request's idle status, and its reply.

        IOPub is drained first so a flood of output never piles up in the
        client; messages of other requests are skipped. ZeroMQ drops IOPub
        messages past its high-water mark when the client falls behind (as
        with kernels that send one message per line), and the idle status can
        be among them: once the reply is in and IOPub has been quiet for
        IDLE_GRACE seconds, the execution counts as finished (idle_lost).
        """
        ex = Execution(msg_id)
        quiet_since = replied_at = None
        while not (ex.idle and ex.reply is not None):
            if ex.idle:  # only the reply is missing: wait for it
                msg = _next(self.kc.get_shell_msg, deadline)
                if msg is None:
                    return ex
                if msg["parent_header"].get("msg_id") == msg_id:
                    ex.reply = msg
                continue
            msg = _next(self.kc.get_iopub_msg, min(deadline, time.perf_counter() + POLL))
            if msg is None:
                if time.perf_counter() >= deadline:
                    return ex
                if ex.reply is None:
                    ex.reply = self._reply_if_any(msg_id)
                    replied_at = time.perf_counter()
                if ex.reply is not None:
                    quiet_since = quiet_since or time.perf_counter()
                    if time.perf_counter() - quiet_since >= IDLE_GRACE:
                        ex.idle = ex.idle_lost = True
                continue
            quiet_since = None
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
        # With the idle status lost: the time the reply was seen, not the grace after it.
        ex.elapsed = (replied_at if ex.idle_lost else time.perf_counter()) - started
        return ex

    def _reply_if_any(self, msg_id: str) -> dict | None:
        """The reply to msg_id if it is waiting on the shell channel (others are dropped)."""
        while True:
            try:
                msg = self.kc.get_shell_msg(timeout=0)
            except queue.Empty:
                return None
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

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
def find_processes(pattern: str, program: bool = False) -> list[psutil.Process]:
    """Processes (other than this one) whose command line contains pattern.

    program=True: only those whose command line ends with it, i.e. the
    program itself and not a shell whose script mentions it (sshkernel runs
    each cell as `bash -c 'CELL; footer'`).
    """
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        hit = cmdline.rstrip().endswith(pattern) if program else pattern in cmdline
        if hit and proc.pid != psutil.Process().pid:
            found.append(proc)
    return found


def wait_for_process(pattern: str, timeout: float, program: bool = False) -> bool:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if find_processes(pattern, program):
            return True
        time.sleep(0.02)
    return False


def process_names(procs: list[psutil.Process]) -> list[str]:
    names = []
    for proc in procs:
        try:
            names.append(proc.name())
        except psutil.Error:
            names.append("?")
    return names


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
