"""Received: what a backend or a shell gives its on_output and on_exit
callbacks, kept for a test to wait on and read (the reader threads call it)."""

from __future__ import annotations

import threading

from ..backends import ShellExit

#: A liveness bound: every wait ends as soon as its event comes.
WITHIN = 20.0


class Received:
    """on_output and on_exit, with events to wait on; hold() makes the
    reader wait in on_output (as a slow consumer would) until release()."""

    def __init__(self):
        self.chunks: list[tuple[str, bytes]] = []
        self.exits: list[ShellExit] = []
        self.ended = threading.Event()
        self._changed = threading.Condition()
        self._open = threading.Event()
        self._open.set()

    def on_output(self, stream: str, data: bytes) -> None:
        self._open.wait()
        with self._changed:
            self.chunks.append((stream, data))
            self._changed.notify_all()

    def on_exit(self, ended: ShellExit) -> None:
        self.exits.append(ended)
        self.ended.set()

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def text(self, stream: str) -> bytes:
        with self._changed:
            return b"".join(data for name, data in self.chunks if name == stream)

    def wait_for(self, stream: str, data: bytes) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: data in b"".join(
                d for n, d in self.chunks if n == stream), WITHIN), self.chunks

    def exit(self) -> ShellExit:
        """The first end reported (waiting for it)."""
        assert self.ended.wait(WITHIN), "no exit reported"
        return self.exits[0]
