"""Listen on the kernel's ports from its first moment, before ipykernel is imported.

jupyter_client connects to the kernel's ports as soon as it has started the
kernel's process. A port nobody listens on refuses the connection, and
ZeroMQ tries again only after its reconnect interval (100 ms); importing
ipykernel takes most of a kernel's start, so the first kernel_info waited
for a retry after the kernel had bound its ports. The plain listening
sockets opened here hold the client's connections from the start, until
ipykernel binds: ZeroMQ then takes each one over as it is (ZMQ_USE_FD, as
with systemd's socket activation; see compat.ShellKernelApp).

Runs on the kernel's main thread, before and during IPKernelApp.initialize.
Only standard-library imports: it runs before anything else is imported.
"""

from __future__ import annotations

import atexit
import json
import os
import socket

#: The connection file's ports that ipykernel binds through _try_bind_socket
#: (the heartbeat binds its own, on its thread; no client waits for it to start).
CHANNEL_PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port")
BACKLOG = 16


def endpoint(transport: str, ip: str, port: int) -> str:
    """The ZeroMQ endpoint ipykernel binds for a port (an ipc port is a path)."""
    return f"ipc://{ip}-{port}" if transport == "ipc" else f"{transport}://{ip}:{port}"


def connection_file(kernel_argv: list[str]) -> str | None:
    """The connection file given to the kernel (`-f FILE`, as kernelspecs do)."""
    for i, arg in enumerate(kernel_argv):
        if arg in ("-f", "--f") and i + 1 < len(kernel_argv):
            return kernel_argv[i + 1]
        for prefix in ("-f=", "--f="):
            if arg.startswith(prefix):
                return arg[len(prefix):]
    return None


class EarlyPorts:
    def __init__(self, listening: dict[str, socket.socket]):
        self._listening = listening

    @classmethod
    def open(cls, kernel_argv: list[str]) -> EarlyPorts:
        """Listen on every channel's endpoint that the connection file names.
        Whatever cannot be listened on here is left to ipykernel, which binds
        it itself and says what is wrong."""
        path = connection_file(kernel_argv)
        try:
            with open(path or "") as f:
                info = json.load(f)
        except (OSError, ValueError):
            return cls({})
        transport, ip = info.get("transport", "tcp"), info.get("ip", "127.0.0.1")
        listening = {}
        for key in CHANNEL_PORTS:
            port = info.get(key)
            if not isinstance(port, int) or port <= 0:
                continue  # ipykernel picks one (and writes the file)
            try:
                listening[endpoint(transport, ip, port)] = _listen(transport, ip, port)
            except (OSError, ValueError):
                continue
        return cls(listening)

    def take(self, address: str) -> int | None:
        """The descriptor listening on address, now the caller's to own
        (None if nothing here listens on it)."""
        listener = self._listening.pop(address, None)
        return None if listener is None else listener.detach()

    def close(self) -> None:
        """Stop listening on what was not taken (before ipykernel binds it
        itself, which a listener here would refuse)."""
        for listener in self._listening.values():
            listener.close()
        self._listening.clear()


def _listen(transport: str, ip: str, port: int) -> socket.socket:
    if transport == "ipc":
        path = f"{ip}-{port}"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
        except OSError:
            listener.close()
            raise
        # ZeroMQ removes only the ipc files it made itself.
        atexit.register(_remove, path)
    elif transport == "tcp" and ":" not in ip:  # an IPv6 address needs ZeroMQ's IPV6 option too
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZeroMQ's own
            listener.bind(("" if ip in ("*", "0.0.0.0") else ip, port))
        except OSError:
            listener.close()
            raise
    else:
        raise ValueError(f"not listened on early: {transport}://{ip}")
    try:
        listener.listen(BACKLOG)
    except OSError:
        listener.close()
        raise
    return listener


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
