"""A thin synchronous driver around a real jupyter_client KernelManager."""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from jupyter_client import KernelManager

from shell_kernel.shell import script


@dataclass
class Execution:
    reply: dict
    messages: list = field(default_factory=list)  # IOPub messages of this request, in order
    #: The input_requests of this request: (prompt, password), in order.
    prompts: list = field(default_factory=list)
    received_at: list = field(default_factory=list)  # monotonic arrival time of each message

    @property
    def status(self) -> str:
        return self.reply["content"]["status"]

    @property
    def meta(self) -> dict:
        return self.reply["metadata"].get("shell_kernel", {})

    @property
    def exit_code(self):
        return self.meta.get("exit_code")

    def stream(self, name: str) -> str:
        return "".join(m["content"]["text"] for m in self.messages
                       if m["msg_type"] == "stream" and m["content"]["name"] == name)

    @property
    def stdout(self) -> str:
        return self.stream("stdout")

    @property
    def stderr(self) -> str:
        return self.stream("stderr")

    @property
    def errors(self) -> list:
        return [m["content"] for m in self.messages if m["msg_type"] == "error"]

    @property
    def outputs(self) -> list:
        return [m for m in self.messages
                if m["msg_type"] in ("stream", "error", "display_data", "execute_result")]


class KernelHarness:
    def __init__(self, kernel_name: str, env: dict | None = None, cwd: str | None = None,
                 extra_arguments: list | None = None, wait_shell: bool = True,
                 transport: str = "ipc"):
        # IPC sockets in a directory of its own: over TCP, jupyter_client
        # picks free ports and binds them later, and a kernel of another
        # worker could take one meanwhile ("Address already in use", in CI).
        # The kernel's log goes there too (SHELL_KERNEL_LOG): a cell that
        # never ends shows it in its TimeoutError (see collect).
        self._ipc_dir = tempfile.mkdtemp(prefix="sk-ipc-")
        where = {"ip": os.path.join(self._ipc_dir, "kernel")} if transport == "ipc" else {}
        self.km = KernelManager(kernel_name=kernel_name, transport=transport, **where)
        self.kc = None
        env = dict(os.environ if env is None else env)
        env.setdefault("SHELL_KERNEL_LOG", os.path.join(self._ipc_dir, "kernel.log"))
        self.log_path = env["SHELL_KERNEL_LOG"]
        kwargs = {"env": env}
        if cwd is not None:
            kwargs["cwd"] = cwd
        try:
            self.km.start_kernel(**kwargs)
            self.kc = self.km.client()
            self.kc.start_channels()
            self.kc.wait_for_ready(timeout=60)
            if wait_shell:
                self.wait_shell()
        except BaseException:
            self.shutdown()  # no kernel, client or directory left behind
            raise
        # Messages for requests other than the one being collected (e.g. output
        # of background jobs attributed to an earlier cell) are kept here.
        self.stray: list = []

    def wait_shell(self, timeout: float = 90) -> None:
        """Until the kernel's shell has started (or failed to): kernel_info is
        answered at once, and its banner says "(starting)" meanwhile."""
        deadline = time.monotonic() + timeout
        while "(starting)" in self.request("kernel_info")["content"]["banner"]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the shell did not start within {timeout} s")
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        return self.km.provisioner.process.pid

    def start(self, code: str, **kwargs) -> str:
        return self.kc.execute(code, **kwargs)

    def collect(self, msg_id: str, timeout: float = 30, answer=None) -> Execution:
        """The request's messages, until it is idle. answer(prompt, password)
        answers its input_requests (the string to send, or None to leave the
        request unanswered); without it, an input_request fails the test."""
        deadline = time.monotonic() + timeout
        execution = Execution(reply={})
        idle = False
        while not idle:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no idle status for {msg_id} within {timeout} s; so far: "
                                   f"stdout {execution.stdout!r}, stderr {execution.stderr!r}, "
                                   f"prompts {execution.prompts!r}\n{self.log_tail()}")
            self._answer_input(execution, answer)
            try:
                msg = self.kc.get_iopub_msg(timeout=min(remaining, 0.02))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                self.stray.append(msg)
                continue
            if msg["msg_type"] == "status":
                idle = msg["content"]["execution_state"] == "idle"
                continue
            if msg["msg_type"] == "execute_input":
                continue
            execution.messages.append(msg)
            execution.received_at.append(time.monotonic())
        while True:
            reply = self.kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                execution.reply = reply
                return execution

    def _answer_input(self, execution: Execution, answer) -> None:
        try:
            msg = self.kc.get_stdin_msg(timeout=0)
        except queue.Empty:
            return
        content = msg["content"]
        execution.prompts.append((content["prompt"], content["password"]))
        assert answer is not None, f"unexpected input_request {content}"
        value = answer(content["prompt"], content["password"])
        if value is not None:
            self.kc.input(value)

    def run(self, code: str, timeout: float = 30, **kwargs) -> Execution:
        return self.collect(self.start(code, **kwargs), timeout)

    def answering(self, code: str, answers, timeout: float = 30) -> Execution:
        """Run a cell with allow_stdin=True, giving `answers` (a list of
        strings, in order) to its input_requests."""
        pending = list(answers)
        msg_id = self.start(code, allow_stdin=True)
        return self.collect(msg_id, timeout, answer=lambda prompt, password: pending.pop(0))

    def ok(self, code: str, timeout: float = 30) -> str:
        """Run a cell that must succeed; return its stdout."""
        execution = self.run(code, timeout)
        assert execution.status == "ok", (code, execution.errors, execution.stderr)
        return execution.stdout

    def request(self, method: str, *args, **kwargs) -> dict:
        msg_id = getattr(self.kc, method)(*args, **kwargs)
        while True:
            reply = self.kc.get_shell_msg(timeout=30)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    def log_tail(self, lines: int = 60) -> str:
        """The end of the kernel's log (its session's decisions)."""
        try:
            with open(self.log_path, errors="replace") as log:
                return "the kernel's log ends:\n" + "".join(log.readlines()[-lines:])
        except OSError as err:
            return f"(no kernel log: {err})"

    def shutdown(self) -> None:
        try:
            if self.kc is not None:
                self.kc.stop_channels()
        finally:
            try:
                if self.km.has_kernel:
                    self.km.shutdown_kernel(now=False)
            finally:
                shutil.rmtree(self._ipc_dir, ignore_errors=True)


def descendants(pid: int) -> set[int]:
    """All live descendants of a local process, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


#: The mark of this test pass (.ci/run gives each pass its own), which every
#: process it starts carries in its environment, through kernels, shells
#: and the test sshd's sessions: markers (sleep 1000.NN) are looked for
#: among this pass's processes only, as passes run side by side.
RUN_MARK = (f"SHELL_KERNEL_TEST_RUN={os.environ['SHELL_KERNEL_TEST_RUN']}".encode()
            if os.environ.get("SHELL_KERNEL_TEST_RUN") else None)


def pids_matching(text: str) -> list[int]:
    """Live processes of this pass whose command line contains text, not as
    part of a longer number (markers like 1000.5 must not match 1000.55)."""
    pattern = re.compile(r"(?<![\d.])" + re.escape(text) + r"(?!\d)")
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            if not pattern.search(cmdline):
                continue
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if RUN_MARK is not None:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if RUN_MARK not in f.read().split(b"\0"):
                        continue
        except OSError:
            continue
        if state != "Z":
            pids.append(int(entry))
    return pids


def wait_until(predicate, timeout: float = 10, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def start_record(pid: int, same: bool) -> str:
    """The START a record of process pid holds (as shell/pids.sh tells it:
    from /proc, or from ps under SHELL_KERNEL_NO_PROC), or, not same, one of
    another process that had the pid (a start a tick earlier; with ps, the
    same start in another group)."""
    start = subprocess.run(["sh", "-c", script("pids.sh") + f"pid_start {pid}"],
                           capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    assert start, f"no start for {pid}"
    if same:
        return start
    return str(int(start) - 1) if start.isdigit() else "1" + start
