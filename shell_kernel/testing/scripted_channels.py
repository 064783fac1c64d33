"""Scripted stand-ins for a transport's channels (shell_kernel.backends.channel.channels),
in the spirit of fabric.testing: each channel plays the bytes and the exit a
test gives it, and records what was sent to it. Nothing here waits on a
timeout: a read blocks only until the test plays the next step (or closes
the channel), and a read with a timeout that has nothing raises at once.
"""

from __future__ import annotations

import queue
import re
import shlex
import threading

from shell_kernel.backends.channel.channels import SIDE_PID_SCRIPT, ChannelExit
from shell_kernel.backends.channel.durable import LAUNCH_SCRIPT, RELAY_SCRIPT

_END = object()  # a queued step: the command exits


class ScriptedChannel:
    """One command's channel: play() its output, end() it; sent holds its input."""

    def __init__(self, command: bytes):
        self.command = command
        self.sent: list[bytes] = []
        self.closed = False
        self._steps: queue.SimpleQueue = queue.SimpleQueue()
        self._exit = ChannelExit(-1, None)

    @property
    def words(self) -> list[str]:
        return shlex.split(self.command.decode("utf-8", "surrogateescape"))

    def play(self, stream: str, data: bytes) -> "ScriptedChannel":
        self._steps.put((stream, data))
        return self

    def end(self, status: int = -1, signal: str | None = None) -> None:
        """The command ends (status -1: without one, as a dropped connection)."""
        self._steps.put((_END, ChannelExit(status, signal)))

    # -- channels.Channel
    def read(self, timeout: float | None = None):
        try:
            # Without a timeout, only the test's next step (or close) wakes it.
            step = self._steps.get(block=timeout is None)
        except queue.Empty:
            raise TimeoutError("nothing scripted") from None
        if step[0] is _END:
            self._exit = step[1]
            self._steps.put(step)  # every later read sees the end too
            return None
        return step

    def send(self, data: bytes) -> None:
        if self.closed:
            raise OSError("the channel is closed")
        self.sent.append(data)

    def exit(self) -> ChannelExit:
        return self._exit

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._steps.put((_END, self._exit))


class Relay(ScriptedChannel):
    """A relay.sh channel: its arguments, and the headers it would write."""

    @property
    def marker(self) -> str:
        return self.words[6]

    @property
    def offsets(self) -> tuple[int, int]:
        return int(self.words[7]), int(self.words[8])

    @property
    def owner(self) -> str | None:
        return self.words[16] if len(self.words) > 16 else None

    def headers(self, out: int | None = None, err: int | None = None,
                noise: bytes = b"") -> "Relay":
        """Startup noise, then the header line of each stream (START: the
        offsets it was asked for, unless given)."""
        start_out, start_err = self.offsets
        self.play("stdout", noise + f"{self.marker}:{start_out if out is None else out}\n".encode())
        self.play("stderr", f"{self.marker}:{start_err if err is None else err}\n".encode())
        return self


class ScriptedSh(ScriptedChannel):
    """`exec sh` for a SideShell: answers each script line it is sent with
    answer(words) -> (status, output) and SideShell's end marker, after any
    noise the login's rc files print once."""

    LINE = re.compile(rb"^(.*) </dev/null 2>&1; printf '\\n([0-9a-f]+) %s\\n' \$\?\n$", re.S)

    def __init__(self, command: bytes, answer, noise: bytes = b""):
        super().__init__(command)
        self._answer = answer
        self._noise = noise

    def send(self, data: bytes) -> None:
        super().send(data)
        line = self.LINE.match(data)
        assert line, data
        status, output = self._answer(shlex.split(line.group(1).decode("utf-8", "surrogateescape")))
        self.play("stdout", self._noise + output + f"\n{line.group(2).decode()} {status}\n".encode())
        self._noise = b""


class ScriptedChannels:
    """A transport (channels.Channels) whose relay channels are Relay fakes,
    and whose side commands (launch.sh) a ScriptedHost answers."""

    where = "scripted-host"
    link = "the scripted link"
    reader_name = "scripted-reader"

    def __init__(self, host: "ScriptedHost"):
        self.host = host
        self.relays: list[Relay] = []
        self.opened = threading.Condition()
        self.active = True

    def open(self, command: bytes):
        if not self.active:
            raise OSError("the link is down")
        if command == b"exec sh":
            return ScriptedSh(command, self.host.answer)
        relay = Relay(command)
        assert relay.words[2] == RELAY_SCRIPT, relay.words[:2]
        with self.opened:
            self.relays.append(relay)
            self.opened.notify_all()
        return relay

    def is_active(self) -> bool:
        return self.active

    def relay(self, count: int, within: float = 5.0) -> Relay:
        """The count-th relay opened (1-based), once it is (a liveness bound)."""
        with self.opened:
            assert self.opened.wait_for(lambda: len(self.relays) >= count, within), \
                f"{len(self.relays)} relays opened, not {count}"
            return self.relays[count - 1]


class ScriptedHost:
    """launch.sh as the host would answer it; records each call."""

    def __init__(self, state_dir: str = "/tmp/shell_kernel.x", pid: int = 4321):
        self.state_dir, self.pid = state_dir, pid
        self.calls: list[list[str]] = []  # [script name, *arguments]
        self.open_answers: list[str] = []  # launch.sh open's next answers
        self.alive = "alive"
        self.status = "0"

    def answer(self, words: list[str]) -> tuple[int, bytes]:
        script, args = words[2], words[4:]
        if script == SIDE_PID_SCRIPT:  # the side shell's first
            return 0, b"4000 1234\n"
        self.calls.append(["launch" if script == LAUNCH_SCRIPT else "other", *args])
        mode = args[0]
        reply = {"start": f"{self.pid} {self.state_dir}", "alive": self.alive,
                 "status": self.status, "stop": "", "sweep": ""}.get(mode)
        if mode == "open":
            reply = self.open_answers.pop(0)
        return 0, reply.encode() + b"\n"

    def calls_of(self, name: str, mode: str | None = None) -> list[list[str]]:
        return [c[1:] for c in self.calls if c[0] == name and (mode is None or c[1] == mode)]
