"""ProxyCommand run as OpenSSH runs it.

OpenSSH hands `exec COMMAND` to the user's shell ($SHELL, else /bin/sh), so quotes,
redirections and variables work; paramiko's ProxyCommand splits the line itself and
runs the first word, so `exec nc %h %p` fails there. The command talks to us over a
socket pair rather than paramiko's pipes: its end is an end-of-file at once, so a
command that fails is reported in a moment instead of after the banner timeout.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading

from .. import BackendError

STDERR_KEPT = 2000  # bytes of the command's stderr kept for an error message


class ProxyCommandSocket(socket.socket):
    """Our end of the socket pair; the command has the other end as stdin and stdout."""

    command: str
    shell: str
    process: subprocess.Popen
    _stderr_tail: bytearray
    _stderr_reader: threading.Thread

    @classmethod
    def start(cls, command: str) -> "ProxyCommandSocket":
        shell = os.environ.get("SHELL") or "/bin/sh"
        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen([shell, "-c", _exec_line(command)], stdin=theirs,
                                       stdout=theirs, stderr=subprocess.PIPE)
        except OSError as err:
            ours.close()
            raise BackendError(f"could not run the ProxyCommand `{command}` with the shell "
                               f"{shell} ($SHELL): {err}. Check SHELL in the environment Jupyter "
                               "was started from.") from None
        finally:
            theirs.close()
        sock = cls(fileno=ours.detach())
        sock.command, sock.shell, sock.process = command, shell, process
        sock._stderr_tail = bytearray()
        sock._stderr_reader = threading.Thread(target=sock._keep_stderr, name="proxy-stderr",
                                               daemon=True)
        sock._stderr_reader.start()
        return sock

    def _keep_stderr(self) -> None:
        for chunk in iter(lambda: self.process.stderr.read1(4096), b""):
            self._stderr_tail += chunk
            del self._stderr_tail[:-STDERR_KEPT]

    def failure(self) -> str | None:
        """Why the connection failed if the command ended (None while it runs)."""
        try:
            status = self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return None
        self._stderr_reader.join(timeout=1)
        said = self._stderr_tail.decode(errors="replace").strip()
        return (f"its ProxyCommand `{self.command}` (run with `{self.shell} -c`, as ssh runs it) "
                f"ended with status {status} before the connection was made"
                + (f", saying: {said}" if said else "") + ". Fix the ProxyCommand in your ssh "
                "config (try it with `ssh -v` in a terminal).")

    def close(self) -> None:
        super().close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGHUP)  # as ssh ends its ProxyCommand
            threading.Thread(target=self.process.wait, name="proxy-reaper", daemon=True).start()


def _exec_line(command: str) -> str:
    """`exec COMMAND`, so no shell lingers. A command that already starts with exec is
    left alone: bash and dash reject `exec exec ...`, which ssh itself would pass them
    when run from such a shell."""
    return command if re.match(r"exec\s", command) else f"exec {command}"
