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
lock; close takes it only to ask an idle shell to end itself.

The pump owns the running session: the caller hands it a cell (CellBegun)
and waits on the cell's done event and inbox (prompts to answer), a query
waits on its future; an interrupt, the caller's answers and close() are
requests on the same queue as the backend's events, so the pump sees them
in the order they happened. The pump has the I/O worker send a cell's or a
query's lines; while a cell's lines are being sent, a lost connection is
recorded (lost_unsent): the I/O worker reconnects and sends again if none
of the lines went (LossMended), or the pump has it reconnect once they went.

A start or a restart is a job for the session's I/O worker (LifecycleAsked,
through the pump), which the caller waits for on a future; there, the
keeper queues ShellStarting, whose future the pump resolves with the
shell's ready frame or why it failed. The current shell's state
(up, lost, reattaches) is the pump's alone: the I/O worker (adopting a
named session's shell, restarting, reconnecting) asks it to change it
(KeeperChange) and waits until it did. The keeper's backend, generation
and ShellOutput are the I/O worker's: a start takes them over as it
queues its ShellStarting, atomically with the queue's close() (after
which close() reads them). A started shell's readers scan its output with
scanners of their own and push what they find.
"""

from .core import ShellSession
from .types import CellRecord, Options, RunningCell, SessionError, ShellInfo

__all__ = ["CellRecord", "Options", "RunningCell", "SessionError", "ShellInfo", "ShellSession"]
