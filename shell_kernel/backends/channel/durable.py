"""Durable sessions, over any transport that gives channels (channels.py).

The shell runs detached on the host (shell/launch.sh) and spools its output
(shell/spool.sh); a relay channel (shell/relay.sh) carries its input and the
spooled output from byte offsets the kernel keeps, so that after a dropped
connection a new relay resumes where the last stopped. A durable session may
be named: it then outlives the kernel, and start() attaches to it when it
exists (see named_sessions). SSH and local named sessions both use this.

Threads: start, open_output, reattach and close come from the session's
caller thread; the reader thread delivers output (and restarts a relay that
fell behind); a timer thread acknowledges the output received.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time

from ... import named_sessions
from ...shell import script
from .. import (Attached, BackendError, CellsHeard, ExitCallback, OutputCallback, SessionGone,
                SessionTaken, ShellExit, Started)
from .shell import ChannelShell
from .channels import Channel, Channels, SideShell, command, last_line

log = logging.getLogger("shell_kernel.durable")

# How long a side command that launches or finds a session may take.
LAUNCH_TIMEOUT = 15.0
LAUNCH_SCRIPT = script("launch.sh")
RELAY_SCRIPT = script("relay.sh")
SPOOL_SCRIPT = script("spool.sh")
REAP_SCRIPT = script("reap.sh")  # installed on the host for the idle watchdog
# relay.sh's statuses (it is given them): the shell itself has ended; output
# it was to send was dropped meanwhile, so a new relay must resume after the gap.
RELAY_SHELL_ENDED = 4
RELAY_RESTART = 5
RELAY_TAKEN = 6  # a named session's: another kernel took it over
# A durable session spools each stream in files of about this size (see
# spool.sh); the kernel has the host delete those it has received.
SPOOL_GENERATION_BYTES = 4 << 20
# While output arrives, the kernel tells the host at least this often (in
# seconds) that it is reading, and has the received spool files deleted. (A
# named session's kernel does so before it shows output: see acknowledge.)
SPOOL_ACK_INTERVAL = 1.0
# An acknowledgement is a line "ACK OUT ERR" on the relay's input, OUT and
# ERR the stream offsets received so far: the bash that reads the input on
# the host acts on it with its builtins (see relay.sh), so that it costs the
# host no process, and it comes after every line sent before it.
ACK = "#shell_kernel ack"
# Once no kernel has said so for this long (it is away, or a laptop asleep
# holds up the relay), the host keeps only the newest SPOOL_KEEP_BYTES of each
# stream. A kernel that is reading, however slowly, loses nothing: so this is
# well past what an acknowledgement can take on a loaded host (its line waits
# behind the cell input sent before it, and for a CPU busy with the output).
SPOOL_STALL_SECONDS = 10
SPOOL_KEEP_BYTES = 16 << 20
# A dead kernel is not a dropped network: its host closes the connection at
# once, while a network that dropped gives the host no word for a long time
# (until sshd's ClientAlive or TCP keepalive timeouts). So the kernel of a
# session that is not named sends a heartbeat line on its relay's input every
# HEARTBEAT_INTERVAL seconds (relay.sh drops it); a relay whose input ends
# within HEARD_WITHIN seconds of the kernel's last line waits REATTACH_GRACE
# seconds for the kernel to come back, then ends the session. Input that ends
# after a longer silence leaves the session to its idle timeout.
HEARTBEAT = "#shell_kernel heartbeat"
HEARTBEAT_INTERVAL = 3.0
HEARD_WITHIN = 8
REATTACH_GRACE = 8


class RelayHeaders:
    """relay.sh puts a header line "MARKER:START" before each stream. What
    comes before it on the channel was printed by the login shell's startup
    files (an echo in .bashrc, a setlocale warning), never by the session;
    START is the stream offset of the bytes that follow it."""

    def __init__(self):
        self.marker = secrets.token_hex(8)
        self._tag = self.marker.encode() + b":"
        self._waiting = {"stdout": b"", "stderr": b""}  # streams before their header

    def feed(self, stream: str, data: bytes) -> tuple[int | None, bytes]:
        """(START, the session's bytes in data) when data completes the
        stream's header, else (None, the session's bytes in data)."""
        if stream not in self._waiting:
            return None, data
        seen = self._waiting[stream] + data
        at = seen.find(self._tag)
        end = seen.find(b"\n", at) if at >= 0 else -1
        if end < 0:
            # Keep only what may be the start of the header.
            self._waiting[stream] = seen[at:] if at >= 0 else seen[-len(self._tag):]
            return None, b""
        del self._waiting[stream]
        if at:
            log.debug("startup noise on the relay's %s: %r", stream, seen[:at])
        start = seen[at + len(self._tag):end]
        return int(start) if start.isdigit() else None, seen[end + 1:]


class DurableShell(ChannelShell):
    """A detached shell on the host, and the relay channel to it."""

    def __init__(self, channels: Channels, side: SideShell, bash_argv: list[str],
                 idle_timeout: float, session: str | None = None, take_over: bool = False):
        super().__init__(channels)
        self._side = side
        self._bash_argv = bash_argv
        self._idle_timeout = idle_timeout
        self._session_name = session
        self._take_over = take_over
        # This kernel's claim on a named session (see launch.sh open).
        self._owner = secrets.token_hex(8) if session else ""
        self._state_dir: str | None = None
        self._remote_pid: int | None = None
        # Bytes of each spooled stream delivered so far: where a relay resumes.
        self._offsets = {"stdout": 0, "stderr": 0}
        self._next_ack = 0.0  # when the next _acknowledge_received may run
        self._heartbeat: threading.Thread | None = None  # a session not named: see _beat
        self._ack_pending = False  # one is scheduled

    # ------------------------------------------------------------ starting
    def start(self, on_output: OutputCallback, on_exit: ExitCallback) -> Started:
        """Launch the shell, or open the named session, and its relay unless
        attached to an existing shell. Raises OSError when a channel cannot
        be opened, BackendError (for the user) when the host says no."""
        self._on_output, self._on_exit = on_output, on_exit
        attached = notice = None
        if self._session_name:
            attached, notice = self._open_named()
        else:
            self._launch()
        if attached is None:
            self._open_relay()
        return Started(self._state_dir, attached, notice)

    def _launch_arguments(self) -> list[str]:
        return [str(int(self._idle_timeout)), str(SPOOL_GENERATION_BYTES), str(SPOOL_KEEP_BYTES),
                str(SPOOL_STALL_SECONDS), REAP_SCRIPT, SPOOL_SCRIPT, *self._bash_argv]

    def _launch(self) -> None:
        result = self._side.run(LAUNCH_SCRIPT, ["start", *self._launch_arguments()],
                                LAUNCH_TIMEOUT)
        # "PID DIR": DIR (under the host's TMPDIR) may hold spaces.
        pid, _, state_dir = last_line(result.stdout).partition(" ")
        if result.status != 0 or not pid.isdigit() or not state_dir:
            raise BackendError(f"could not start a durable shell: {result.stdout.strip()}")
        self._state_dir, self._remote_pid = state_dir, int(pid)

    def _open_named(self) -> tuple[Attached | None, str | None]:
        """Attach to the named session, or start it (see launch.sh open):
        (the shell attached to, the notice for the user's next cell)."""
        where, name = self._channels.where, self._session_name
        for _ in range(2):
            result = self._side.run(LAUNCH_SCRIPT, [
                "open", name, self._owner, "yes" if self._take_over else "no",
                *self._launch_arguments()], LAUNCH_TIMEOUT + 10)
            opened = named_sessions.parse_open(result.stdout, name, where)
            if not opened.unusable:
                break
            # Its setup never finished (the kernel that started it failed to): replace it.
            log.info("replacing the unusable session in %s", opened.state_dir)
            self._side.run(LAUNCH_SCRIPT, ["stop", opened.state_dir], LAUNCH_TIMEOUT)
        else:
            raise BackendError(f"the session {name} on {where} could not be set up")
        self._state_dir, self._remote_pid = opened.state_dir, opened.pid
        if opened.attached is not None:
            self._offsets = dict(opened.delivered)
        notice = named_sessions.ended_message(name, where, opened.previous) \
            if opened.previous else None
        return opened.attached, notice

    def open_output(self) -> None:
        try:
            self._open_relay()
        except OSError as err:
            raise BackendError(f"could not open the session's output: {err}") from err

    def _open_relay(self) -> None:
        headers = RelayHeaders()
        owner = [self._owner, str(RELAY_TAKEN)] if self._owner else []
        channel = self._channels.open(command(
            "sh", "-c", RELAY_SCRIPT, "shell_kernel", self._state_dir, str(self._remote_pid),
            headers.marker, str(self._offsets["stdout"]), str(self._offsets["stderr"]),
            str(RELAY_SHELL_ENDED), str(RELAY_RESTART), self._bash_argv[0], HEARTBEAT, ACK,
            str(HEARD_WITHIN), "0" if self._owner else str(REATTACH_GRACE), *owner))
        self._read(channel, lambda relay, stream, data: self._deliver(relay, headers, stream, data))
        if not self._owner and self._heartbeat is None:
            self._heartbeat = threading.Thread(target=self._beat, name="shell-kernel-heartbeat",
                                               daemon=True)
            self._heartbeat.start()

    def _beat(self) -> None:
        """Until closed: a heartbeat on the relay's input, unless a send is
        under way (a word from the kernel all the same)."""
        while not self._closed.wait(HEARTBEAT_INTERVAL):
            if not self._send_lock.acquire(blocking=False):
                continue
            try:
                channel = self._channel
                if channel is not None and not channel.closed:
                    channel.send(HEARTBEAT.encode() + b"\n")
            except OSError:
                pass  # the connection went: its reader says so
            finally:
                self._send_lock.release()

    def reattach(self) -> CellsHeard | None:
        """The same shell again, over the transport's new connection; and
        what the host received of the cells' lines (see relay.sh)."""
        try:
            alive = self._side.run(LAUNCH_SCRIPT, [
                "alive", self._state_dir, str(self._remote_pid),
                *([self._owner] if self._owner else [])], LAUNCH_TIMEOUT)
            answer = last_line(alive.stdout)
            if answer.startswith("taken "):
                raise SessionTaken(named_sessions.taken_message(
                    self._session_name, self._channels.where, answer.partition(" ")[2]))
            words = answer.split()
            if words[:1] != ["alive"]:
                raise SessionGone(f"the session (pid {self._remote_pid}) and its files "
                                  f"({self._state_dir}) are gone from {self._channels.where}")
            self._open_relay()
            if len(words) == 3 and words[1].isdigit() and words[2].isdigit():
                return CellsHeard(int(words[1]), int(words[2]))
            return None
        except OSError as err:
            raise BackendError(f"could not reattach: {err}") from err

    # ------------------------------------------------------------- output
    def _deliver(self, channel: Channel, headers: RelayHeaders, stream: str, data: bytes) -> None:
        with self._output_lock:
            if channel is not self._channel:
                return  # a relay replaced meanwhile: the new one resumes from the offsets
            start, data = headers.feed(stream, data)
            if start is not None:
                self._resume(stream, start)
            if data:
                self._offsets[stream] += len(data)
                self._on_output(stream, data)
            if not self._owner and data and not self._ack_pending:
                # At most one a SPOOL_ACK_INTERVAL, and one after the last output.
                self._ack_pending = True
                delay = max(0.0, self._next_ack - time.monotonic())
                timer = threading.Timer(delay, self._acknowledge_received)
                timer.name, timer.daemon = "shell-kernel-spool-ack", True
                timer.start()

    def _resume(self, stream: str, start: int) -> None:
        """A relay's output of `stream` begins at offset `start`: later than
        delivered when the host dropped output the kernel had not received."""
        dropped = start - self._offsets[stream]
        if dropped < 0:
            log.warning("the relay resumed %s at %d, before %d", stream, start,
                        self._offsets[stream])
            return
        self._offsets[stream] = start
        if dropped:
            self._on_output("stderr", (
                f"\n[shell_kernel] {dropped:,} bytes of {stream} were dropped on "
                f"{self._channels.where} before this kernel could receive them: a durable "
                f"session keeps the newest {SPOOL_KEEP_BYTES >> 20} MB of each stream while no "
                "kernel reads it. The output goes on after the gap; to keep all of it, send long "
                "outputs to a file.\n").encode())

    def _acknowledge_received(self) -> None:
        """Has the host delete the spool files this kernel has received in full,
        which also tells the host that this kernel is reading (see spool.sh)."""
        with self._output_lock:
            self._ack_pending = False
            self._next_ack = time.monotonic() + SPOOL_ACK_INTERVAL
            offsets = (self._offsets["stdout"], self._offsets["stderr"])
        try:
            self._send_acknowledgement(offsets)
        except BackendError as err:
            log.info("could not acknowledge the output received: %s", err)

    def received(self) -> tuple[int, int] | None:
        """A named session's stream offsets delivered so far (see _deliver)."""
        return (self._offsets["stdout"], self._offsets["stderr"]) if self._owner else None

    def acknowledge(self, received: object) -> None:
        """A named session's: the host records where the next kernel resumes
        (relay.sh writes `delivered`, if this kernel still owns the session).
        The line is on its way once sent: a kernel killed at once has the
        host act on it all the same, as the relay reads its input to the end,
        and the next kernel attaches only once that relay has ended."""
        if self._owner:
            self._send_acknowledgement(received)

    def _send_acknowledgement(self, offsets) -> None:
        self.send(f"{ACK} {offsets[0]} {offsets[1]}\n".encode())

    # -------------------------------------------------------------- the end
    def _ended(self, channel: Channel) -> None:
        if not self._closed.is_set() and channel.exit().status == RELAY_RESTART:
            self._restart_relay(channel)
        else:
            self._on_exit(self._how_it_ended(channel))

    def _restart_relay(self, old: Channel) -> None:
        """A new relay, from the offsets delivered so far, for one that lagged
        so far behind that the host dropped output it was to send."""
        try:
            with self._send_lock:  # a cell sent meanwhile goes to the new relay
                self._open_relay()
        except (OSError, BackendError) as err:
            log.info("could not reopen the relay: %s", err)
            self._on_exit(self._lost())
        finally:
            old.close()

    def _how_it_ended(self, channel: Channel) -> ShellExit:
        status, signame = channel.exit()
        if self._closed.is_set():
            return ShellExit("closed by the kernel")
        if self._owner and status == RELAY_TAKEN:
            return ShellExit(f"the session {self._session_name} was taken over by another "
                             "kernel", connection_lost=True)
        if status == RELAY_SHELL_ENDED:
            status = self._exit_status()
            return ShellExit(f"exited with status {status}" if status is not None else "ended",
                             status)
        if signame:
            return ShellExit(f"killed by SIG{signame}", status)
        return self._lost()

    def _exit_status(self) -> int | None:
        try:
            result = self._side.run(LAUNCH_SCRIPT, ["status", self._state_dir], 10.0)
        except BackendError:
            return None
        text = last_line(result.stdout)
        return int(text) if text.isdigit() else None

    def close(self) -> None:
        """No more output. A shell that is not a named session's goes too
        (once it is launched, a start that failed leaves nothing waiting for
        the idle timeout; at shutdown the session has reaped it already)."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._session_name or self._state_dir is None:
            return
        try:
            if not self._channels.is_active():
                return  # out of reach: the watchdog will stop it
            self._side.run(LAUNCH_SCRIPT, ["stop", self._state_dir], 5.0)
        except BackendError as err:
            log.info("could not stop the durable session in %s: %s", self._state_dir, err)
