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

Threads, what each runs, and what it owns (docs/architecture.md, "Threads",
has the same table):

- caller (the kernel's shell handler; "shell-kernel-start", the launch
  thread, for the first start: see launch.py for when; a fleet worker): ShellSession.start, run,
  query, close, serialised by the run lock (a cell sent during the start
  waits for it; a query before the shell is up answers None at once;
  close takes it only to ask an idle shell to end itself). Owns _seq, _query_seq, and the keeper's
  current shell: backend, info, token, generation, scanners, noise, the
  cell input, last_cwd; sets the pump's cell under the events' condition.
  While it sends a cell's lines (the cell's `sending` flag), a lost
  connection is its to mend: the pump only records it (lost_unsent), and
  the caller reconnects and sends again if none of the lines went, or
  starts the reattach thread if they did.
- "shell-kernel-pump" (pump.Pump): every event, in order. Owns the
  decoders, screen clears, coalescer, acknowledgements, the running
  cell's progress and prompts, a query's reply, the start's answer
  (keeper.ready, ready_fields, startup_output); the only thread that sets
  a cell's done event, except close(). It marks the shell lost
  (Keeper.shell_lost) and starts the reattach thread (for a cell sent).
- backend readers: "shell-kernel-local-reader" (the local shell,
  backends.local.backend; or a local named session's relay) and
  "shell-kernel-ssh-reader" (a shell on a channel: backends.channel.shell);
  the prompt terminal's "shell-kernel-terminal" / "shell-kernel-ssh-terminal"
  (backends.local.terminal, backends.ssh.terminal). They feed the current
  generation's scanners (Keeper.on_output, one reader per stream at a
  time) and push events; nothing else.
- "shell-kernel-interrupt" (one per interrupt; interrupts.Interrupter):
  runs an Escalation, pushes Escalated or a suspect Exited; writes only
  the cell's escalating flag, under the condition.
- "shell-kernel-reattach" (durable backends, connection lost mid-cell):
  Keeper.reattach, which reconnects, marks the shell back (under the
  keeper's liveness lock) and reopens the cell input; reports progress and
  failure as events.
- "shell-kernel-sweep" (once per started shell): Backend.sweep.
- durable backends (SSH, local named; backends.channel.durable):
  "shell-kernel-spool-ack" timers, a named session's acknowledgements of
  output received; a durable session that is not named:
  "shell-kernel-heartbeat", a line on the relay's input every few seconds
  (durable.HEARTBEAT), so that the host tells a dead kernel from a dropped
  network.
- SSH backend only (backends.ssh.backend): "shell-kernel-ssh-keepalive"
  (one per connection) and an unnamed thread per keepalive ping;
  "shell-kernel-ssh-side" (opens the side channel early); paramiko's own
  transport thread; "proxy-stderr" and "proxy-reaper" for a ProxyCommand
  (backends.ssh.proxy_command).

The keeper's up/lost/attachments change together under its liveness lock:
lost by the pump, cleared by whichever thread brings the shell back (the
caller's restart, the reattach thread). The events' closed flag is set once,
by close(). All of these may be read anywhere.
"""

from .core import ShellSession
from .types import CellRecord, Options, RunningCell, SessionError, ShellInfo

__all__ = ["CellRecord", "Options", "RunningCell", "SessionError", "ShellInfo", "ShellSession"]
