"""A named session's output is recorded as received on its host before it is shown.

The next kernel that attaches shows what the host holds after the recorded
place (its catch-up). Recorded after being shown, output that a kernel
showed just before it was killed would be shown again; so the record is
sent first (a line on the relay's input, which the host acts on even when
the kernel dies right after: see DurableShell.acknowledge), and a kernel
killed between the two loses only what it had not shown yet. The session's
pump notes how far the output it handled goes (handled), and has the host
record it before anything goes to the notebook (before_showing), and once
the pump is idle with nothing held, for what is never shown (the kernel's
own frames).
"""

from __future__ import annotations

import logging
from typing import Callable

from .backends import BackendError

log = logging.getLogger("shell_kernel.acknowledgements")


class Acknowledgements:
    """acknowledge(mark): has the host record a backend's received() mark;
    raises BackendError."""

    def __init__(self, acknowledge: Callable[[object], None]):
        self._acknowledge = acknowledge
        self._handled: object | None = None
        self._recorded: object | None = None

    def handled(self, mark: object | None) -> None:
        """The pump handled output up to mark (None: a backend that keeps no count)."""
        if mark is not None:
            self._handled = mark

    def before_showing(self) -> None:
        """Have the host record what was handled, unless it has it already. If
        the host cannot be told, the output is shown all the same (and a next
        kernel may show it again): holding it back would hide it for good."""
        mark = self._handled
        if mark is None or mark == self._recorded:
            return
        try:
            self._acknowledge(mark)
        except BackendError as err:
            log.warning("the host could not record the output shown: %s", err)
            return
        self._recorded = mark
