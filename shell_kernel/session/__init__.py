"""The persistent-shell session: one long-lived bash, driven cell by cell.

This layer frames cells, streams their output, detects their end, reads
their exit status, interrupts and escalates (through shell_kernel.interrupts),
and recovers when the shell dies. It knows nothing about Jupyter messages or
sockets, and reaches the shell only through a Backend's verbs.

Modules: types (values), events (the pump's events and queue), cell_input
(what cells read), keeper (the current shell and its backend's lifecycle),
pump (the consuming thread), catch_up (a named session's first cell), core
(ShellSession, the caller's API). Imports go one way: core imports the
others; pump and catch_up import keeper; keeper imports cell_input, events
and types; nothing here imports core.

Threads: shell_kernel/threads.py is the one table of every thread (its name,
the kinds of session that start it, what it runs and owns), checked against
the code and against the threads sessions really start. The caller (the
kernel's shell handler, "shell-kernel-start" for the first start, or a fleet
worker) runs ShellSession.start, run, query and close, serialised by the run
lock; close takes it only to ask an idle shell to end itself. While it sends
a cell's lines (the cell's `sending` flag), a lost connection is its to mend:
the pump only records it (lost_unsent), and the caller reconnects and sends
again if none of the lines went, or starts the reattach thread if they did.
The pump is the only thread that sets a cell's done event, except close().

The keeper's up/lost/attachments change together under its liveness lock:
lost by the pump, cleared by whichever thread brings the shell back (the
caller's restart, the reattach thread). The events' closed flag is set once,
by close(). All of these may be read anywhere.
"""

from .core import ShellSession
from .types import CellRecord, Options, RunningCell, SessionError, ShellInfo

__all__ = ["CellRecord", "Options", "RunningCell", "SessionError", "ShellInfo", "ShellSession"]
