"""Every use of ipykernel's private API, in one place (ipykernel 6.29 to 7.x).

kernel.py and cli.py call these instead of ipykernel's underscored names
(ShellKernelApp overrides one: _try_bind_socket), so that a new ipykernel
release changes this module only; tests/test_compat.py runs
the kernel behaviours that depend on it on the oldest ipykernel the package
allows and on the newest (.ci/run). Runs on whichever thread calls it.
"""

from __future__ import annotations

import threading

import zmq
from ipykernel.kernelapp import IPKernelApp
from ipykernel.kernelbase import Kernel

from .early_ports import EarlyPorts, endpoint


def shell_ident(kernel: Kernel) -> list:
    """The routing identity of the shell request being handled, which
    stdin messages must carry. ipykernel 7 keeps it in a context variable
    (resolved from other threads through its shell context), 6.x in a dict."""
    if hasattr(kernel, "_shell_parent_ident"):  # ipykernel 7
        return kernel._get_shell_context_var(kernel._shell_parent_ident)
    return kernel._parent_ident["shell"]


def reply_pause(kernel: Kernel) -> float:
    """How long ipykernel's execute_request sleeps after flushing IOPub and
    before the execute_reply, so that the cell's output reaches the frontend
    first (Kernel._execute_sleep, as configured)."""
    return kernel._execute_sleep


def set_reply_pause(kernel: Kernel, seconds: float) -> None:
    """The pause before the reply to the execute_request being handled."""
    kernel._execute_sleep = seconds


def ask_input(kernel: Kernel, prompt: str, password: bool, over: threading.Event) -> str | None:
    """ipykernel's _input_request, except that it gives up, returning None,
    once `over` is set (the question is moot: the read timed out, the cell
    ended or was interrupted); the frontend's late answer is then dropped
    with the stale ones at the next question."""
    while True:  # stale answers, to questions given up on
        try:
            kernel.stdin_socket.recv_multipart(zmq.NOBLOCK)
        except zmq.ZMQError:
            break
    kernel.session.send(kernel.stdin_socket, "input_request",
                        {"prompt": prompt, "password": password},
                        kernel.get_parent("shell"), ident=shell_ident(kernel))
    while not over.is_set():
        if not kernel.stdin_socket.poll(50):
            continue
        _, reply = kernel.session.recv(kernel.stdin_socket)
        if reply is not None and reply.get("msg_type") == "input_reply":
            return str(reply["content"].get("value", ""))
    return None


def topic(kernel: Kernel, msg_type: str) -> bytes:
    """The IOPub topic of a message of msg_type from this kernel."""
    return kernel._topic(msg_type)


def publish_execute_input(kernel: Kernel, code: str, parent: dict, count: int) -> None:
    kernel._publish_execute_input(code, parent, count)


async def announce_shutdown(kernel: Kernel, content: dict, parent: dict) -> None:
    """What ipykernel's shutdown_request does after its reply: the same
    content on IOPub (as shutdown_reply), its children terminated."""
    kernel._shutdown_message = kernel.session.msg("shutdown_reply", content, parent)
    await kernel._at_shutdown()


class AbortHook:
    """A mixin, before Kernel: ipykernel answers each request that it skips
    (queued behind a failed cell) through _send_abort_reply; abort_reply
    may answer instead (True: answered)."""

    def abort_reply(self, stream, msg: dict, idents) -> bool:
        return False

    def _send_abort_reply(self, stream, msg, idents):
        if not self.abort_reply(stream, msg, idents):
            super()._send_abort_reply(stream, msg, idents)


class ShellKernelApp(IPKernelApp):
    """ipykernel's application, binding each channel on the socket that
    early_ports has listened on since the process started (ZMQ_USE_FD), so
    that the connections it holds are taken over, not refused."""

    early_ports: EarlyPorts | None = None

    def _try_bind_socket(self, s, port):
        listening = self.early_ports.take(endpoint(self.transport, self.ip, port)) \
            if self.early_ports is not None else None
        if listening is not None:
            s.setsockopt(zmq.USE_FD, listening)
        return super()._try_bind_socket(s, port)

    def init_sockets(self):
        super().init_sockets()
        if self.early_ports is not None:
            self.early_ports.close()


def launch_kernel(argv: list[str], kernel_class: type[Kernel], early_ports: EarlyPorts) -> None:
    """Run the kernel application until the kernel shuts down."""
    if hasattr(IPKernelApp, "_try_bind_socket"):
        ShellKernelApp.early_ports = early_ports
    else:  # an ipykernel that binds otherwise: its bind would find the ports taken
        early_ports.close()
    ShellKernelApp.launch_instance(argv=argv, kernel_class=kernel_class)
