"""A side command's output is read in time linear in its size: a display's
fetch over SSH (backends.channel.backend's fetch) is a side command whose
output is the display's bytes, megabytes of them. Searching the whole output
so far for the end marker after every chunk, or copying it on every append,
would make that quadratic. A stand-in channel plays 64 MB in 4 KB chunks:
read linearly that is well under a second, quadratically minutes (the bound
between them, a liveness timeout, is far from both)."""

from __future__ import annotations

import queue
import re
import threading

from shell_kernel.backends import BackendError
from shell_kernel.backends.channel.channels import SideShell

SIZE = 64 << 20
CHUNK = 4096
LIVENESS_S = 60


class BigChannel:
    """Answers each script sent to it at once; the one that says BIG with
    SIZE bytes of output first, in CHUNK-sized reads."""

    def __init__(self):
        self.closed = False
        self._steps: queue.SimpleQueue = queue.SimpleQueue()
        self._left = 0  # bytes of BIG's output still to come
        self.chunks_read = 0

    def send(self, data: bytes) -> None:
        marker = re.search(rb"printf '\\n([0-9a-f]+) %s\\n'", data).group(1)
        if b"BIG" in data:
            self._left = SIZE
        self._steps.put(("stdout", b"\n" + marker + b" 0\n"))

    def read(self, timeout=None):
        if self.closed:
            return None
        if self._left:
            self._left -= CHUNK
            self.chunks_read += 1
            return "stdout", b"y" * (CHUNK - 1) + b"\n"
        try:
            return self._steps.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError from None

    def exit(self):
        return (-1, None)

    def close(self) -> None:
        self.closed = True


def test_a_large_side_output_is_read_in_linear_time():
    channel = BigChannel()
    side = SideShell(lambda command: channel, open_timeout=30)
    result: list = []

    def fetch():
        try:
            result.append(side.run("cat BIG", [], timeout=LIVENESS_S * 10))
        except BackendError as err:
            result.append(err)

    reader = threading.Thread(target=fetch, daemon=True)
    reader.start()
    reader.join(LIVENESS_S)
    channel.close()  # a reader still at it stops at its next read
    assert not reader.is_alive() and result, (
        f"{channel.chunks_read * CHUNK >> 20} of {SIZE >> 20} MB read in {LIVENESS_S} s")
    assert result[0].status == 0
    assert len(result[0].stdout) == SIZE
