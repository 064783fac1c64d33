"""A named session's first cell after the kernel attached to its shell
(Keeper adopted it: see keeper.py): it shows what the session printed since
the last kernel received its output, and the end of the cell that kernel
had sent, waiting for it if it still runs. Runs on the caller's thread,
holding the run lock; the pump ends the cell when the barrier comes back.
"""

from __future__ import annotations

import secrets
from typing import Callable

from .. import protocol
from ..backends import Attached
from ..named_sessions import catch_up_end, catch_up_header
from ..output import Sink
from .keeper import Keeper
from .types import RunningCell


def catch_up(attached: Attached, keeper: Keeper, sink: Sink,
             begin: Callable[..., RunningCell], finish: Callable[[RunningCell], None]
             ) -> RunningCell:
    """The shell prints a barrier after the earlier kernel's cell; the
    backlog ends there. begin(seq, send, **fields) makes the running cell,
    which the pump has sent with send(cell); finish(cell) retires it.
    Returns the cell, ended."""
    # The pump shows the line that says what the cell waits for, once it
    # follows the cell: Stop pressed as it shows then reaches that cell.
    header = (catch_up_header(attached)
              if attached.last_seq and (attached.running or attached.backlog) else None)

    def send(cell: RunningCell, post_only: bool) -> None:  # the I/O worker (never post_only)
        keeper.backend.open_output()
        keeper.backend.send(protocol.barrier_line(cell.catch_up))

    cell = begin(attached.last_seq, send, catch_up=secrets.token_hex(8), notice=header)
    cell.done.wait()
    finish(cell)
    if cell.lost is None and cell.status is not None:
        sink("stderr", catch_up_end(attached, cell.status))
    return cell
