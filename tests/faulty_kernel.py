"""The real shell_kernel kernel, with failures injected on request (tests only).

Run as `python tests/faulty_kernel.py kernel ...` in place of `python -m
shell_kernel kernel ...`. The directory in $SHELL_KERNEL_FAULTS holds one
file per armed fault point, containing how many of its next uses fail:

  start         a backend's start()
  send          a backend's send()
  side_command  a backend's side_command()
  reattach      a durable SSH backend's reattach()
  reader        the backend's reader loop (the local os.read, the SSH
                channel's recv, in the shell's reader thread only: a side
                command's recv is the side_command point)

A failure is a RuntimeError, the kind of error the backends do not expect.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import paramiko

from shell_kernel.backends.local import backend as local
from shell_kernel.backends.local import processes as local_processes
from shell_kernel.backends.ssh import backend as ssh
from shell_kernel.cli import main

FAULTS = Path(os.environ["SHELL_KERNEL_FAULTS"])


def take(point: str) -> bool:
    """True if the point is armed; uses up one of its failures."""
    armed = FAULTS / point
    try:
        left = int(armed.read_text() or "1")
    except (OSError, ValueError):
        return False
    if left <= 1:
        armed.unlink()
    else:
        armed.write_text(str(left - 1))
    return True


def failing(point: str, original):
    def wrapper(*args, **kwargs):
        if take(point):
            raise RuntimeError(f"injected {point} failure")
        return original(*args, **kwargs)
    return wrapper


class OsWithFailingRead:
    """The local channels' view of os: read() fails when "reader" is armed."""

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def read(fd, size):
        if take("reader"):
            raise RuntimeError("injected reader failure")
        return os.read(fd, size)


for backend_class in (local.LocalBackend, ssh.SSHBackend):
    for verb in ("start", "send", "side_command"):
        setattr(backend_class, verb, failing(verb, getattr(backend_class, verb)))
ssh.SSHBackend.reattach = failing("reattach", ssh.SSHBackend.reattach)
local_processes.os = OsWithFailingRead()


def _recv(channel, size):
    if threading.current_thread().name == "shell-kernel-ssh-reader" and take("reader"):
        raise RuntimeError("injected reader failure")
    return _recv_unfaulted(channel, size)


_recv_unfaulted, paramiko.Channel.recv = paramiko.Channel.recv, _recv

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
