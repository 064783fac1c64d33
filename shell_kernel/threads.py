"""Every thread that shell_kernel starts: its name, where it runs, what it owns.

The one table of threads: docs/architecture.md's "Threads" table is rendered
from it (`python -m shell_kernel.threads`), tests/unit/test_thread_table.py
checks that every thread name in the code is here and that the document is
up to date, and tests/test_threads.py checks it against the threads each kind
of session really starts. Pure data: imports nothing of the package.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The kinds of session, as the kernelspec makes them.
LOCAL, LOCAL_NAMED = "local", "local named"
SSH, SSH_EPHEMERAL, SSH_NAMED = "ssh", "ssh --ephemeral", "ssh named"
SESSIONS = (LOCAL, LOCAL_NAMED, SSH, SSH_EPHEMERAL, SSH_NAMED)
EVERY_SSH = (SSH, SSH_EPHEMERAL, SSH_NAMED)
#: Outside a session: the kernel process, `run --hosts`.
KERNEL, FLEET = "kernel", "run --hosts"

#: What makes a thread start, besides the session itself (None: every
#: session of its kinds starts it once, as it starts its shell).
OUTPUT, PING, PROXY, SIDE_TIMEOUT, CELL_TIMEOUT = (
    "output received", "each keepalive ping",
    "a ProxyCommand", "a side command timed out", "each cell with --timeout")


@dataclass(frozen=True)
class ThreadKind:
    name: str  # the thread's name; a trailing "N" stands for a number
    where: tuple[str, ...]  # session kinds (SESSIONS), or KERNEL / FLEET
    runs: str
    owns: str
    when: str | None = None  # OUTPUT ... or None


THREADS = (
    ThreadKind("shell-kernel-start", (KERNEL,),
               "launch.py: the first ShellSession.start (a local shell's once the first "
               "kernel_info reply is out, a request needs it, or a second has passed; an "
               "SSH or named one at once)",
               "nothing of the session: it waits for the start, which the session's I/O "
               "worker runs"),
    ThreadKind("shell-kernel-pump", SESSIONS,
               "session/pump.py: every event and request in order, until close()'s Closing",
               "decoders, screen clears, coalescer, acknowledgements, the running cell from "
               "the caller's CellBegun until it is done (progress, prompts, interrupt), a "
               "query's reply, the self-close answer, the start's answer; the only thread "
               "that ends a cell; drives interrupts (session/escalations.py); the keeper's "
               "shell state (up, lost, reattaches: the only writer, other threads ask with "
               "KeeperChange); gives the I/O worker its jobs"),
    ThreadKind("shell-kernel-local-reader", (LOCAL, LOCAL_NAMED),
               "the local shell's pipes, or a local named session's relay: "
               "keeper.ShellOutput.on_output (frame scanning), then push",
               "its shell's scanners (one reader per stream at a time)"),
    ThreadKind("shell-kernel-ssh-reader", EVERY_SSH,
               "a shell on an SSH channel (backends/channel/shell.py): "
               "keeper.ShellOutput.on_output, then push",
               "its shell's scanners"),
    ThreadKind("shell-kernel-terminal", (LOCAL, LOCAL_NAMED),
               "the local prompt terminal's output (prompts.InputTerminal)",
               "pushes the prompt watcher's frames"),
    ThreadKind("shell-kernel-ssh-terminal", EVERY_SSH,
               "the prompt terminal on the SSH host",
               "pushes the prompt watcher's frames"),
    ThreadKind("shell-kernel-io", SESSIONS,
               "session/io_worker.py: the session's blocking host I/O, one job at a time: "
               "the shell's start and restart (keeper.py; the caller waits on a future), a "
               "cell's lines (with the reconnect of a durable session found gone before they "
               "went), a query's line, display and reply payloads fetched, an interrupt's host "
               "steps (reap.sh, the post line again), a durable session's reconnect under a "
               "running cell",
               "the keeper's current shell (backend, info, token, generation, the cell input) "
               "as it starts, restarts or reattaches it; pushes each job's outcome (IoDone), "
               "a reconnect's progress (Notice) and success (Reattached, LossMended), and asks "
               "the pump to change the shell's state (KeeperChange)"),
    ThreadKind("shell-kernel-sweep", (SSH_EPHEMERAL,),
               "Backend.sweeper's sweep, once per started shell that has one to do (an "
               "ephemeral SSH shell with its side shell open: a fleet's have none, a durable "
               "shell's launch.sh sweeps, a local kernel cleans up after its own shells)",
               "nothing of the session"),
    ThreadKind("shell-kernel-ssh-keepalive", EVERY_SSH,
               "ServerAliveInterval/CountMax, one per connection",
               "closes a connection that stopped answering"),
    ThreadKind("shell-kernel-ssh-keepalive-ping", EVERY_SSH,
               "one keepalive request (it may block for as long as the host takes)",
               "nothing", PING),
    ThreadKind("shell-kernel-spool-ack", (SSH,),
               "a timer: acknowledges the output received, so that the host trims its "
               "spool (at most one a second, and one after the last output)",
               "the backend's acknowledgement state", OUTPUT),
    ThreadKind("shell-kernel-heartbeat", (SSH,),
               "a heartbeat line on the relay's input every 3 s, unless a send is under way, "
               "so that the host tells a dead kernel from a dropped network (docs/ssh.md)",
               "nothing (takes the send lock without waiting)"),
    ThreadKind("shell-kernel-ssh-side", (SSH_EPHEMERAL,),
               "opens the side channel at the start, ready for the first interrupt",
               "the backend's side channel"),
    ThreadKind("shell-kernel-side-end", EVERY_SSH,
               "SIGKILLs, from a channel of its own, what a timed-out side command left",
               "nothing", SIDE_TIMEOUT),
    ThreadKind("proxy-stderr", EVERY_SSH, "a ProxyCommand's stderr", "the proxy's", PROXY),
    ThreadKind("proxy-reaper", EVERY_SSH, "waits for a ProxyCommand's exit", "the proxy's",
               PROXY),
    ThreadKind("shell-kernel-fleet-N", (FLEET,),
               "a worker: the caller of its hosts' sessions, one host at a time",
               "its host's HostRun until the host ends"),
    ThreadKind("shell-kernel-fleet-progress", (FLEET,),
               "redraws the live progress block on a terminal", "nothing"),
    ThreadKind("shell-kernel-fleet-timeout", (FLEET,),
               "interrupts a cell that outlived --timeout", "nothing", CELL_TIMEOUT),
)
#: Threads that are not ours, started with every SSH connection: paramiko's
#: transport thread (and its handshake timers). Named here for the reader.
NOT_OURS = "paramiko's transport thread and its handshake timers (every SSH connection)"


def by_name(name: str) -> ThreadKind | None:
    """The kind of a thread from its name (shell-kernel-fleet-3 is shell-kernel-fleet-N)."""
    for kind in THREADS:
        if name == kind.name or (kind.name.endswith("-N") and name.startswith(kind.name[:-1])
                                 and name[len(kind.name) - 1:].isdigit()):
            return kind
    return None


def started_by(where: str, triggers: set[str]) -> set[str]:
    """The names of the threads a session of kind `where` starts, given what happened."""
    return {kind.name for kind in THREADS
            if where in kind.where and (kind.when is None or kind.when in triggers)}


def markdown_table() -> str:
    rows = ["| Thread | Where | Started | Runs | Owns / writes |", "|---|---|---|---|---|"]
    for kind in THREADS:
        where = "every session" if kind.where == SESSIONS else ", ".join(kind.where)
        rows.append(f"| `{kind.name}` | {where} | {kind.when or 'with the shell'} | "
                    f"{kind.runs} | {kind.owns} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
