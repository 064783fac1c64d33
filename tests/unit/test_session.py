"""The session engine driven directly (no kernel, no ZeroMQ): over the scripted
FakeShell for the engine's own logic, and over LocalBackend with a real bash."""

from __future__ import annotations

import logging
import os
import platform
import subprocess
import threading
import time
from dataclasses import dataclass

import pytest

from shell_kernel import frames, protocol
from shell_kernel.backends import BackendError, Capabilities, NotSent, ShellExit
from shell_kernel.backends.local import processes as local_processes
from shell_kernel.backends.local.backend import LocalBackend
from shell_kernel.session import CellRecord, Options, SessionError, ShellSession
from shell_kernel.testing.fake_shell import CELL, POST, CellScript, FakeShell


class Recorder:
    """The session's sinks: stream text and displays, in order."""

    def __init__(self):
        self.streams: list[tuple[str, str]] = []
        self.displays: list[tuple[str, bytes, str]] = []

    def stream(self, name: str, text: str) -> None:
        self.streams.append((name, text))

    def display(self, mime: str, data: bytes, display_id: str) -> None:
        self.displays.append((mime, data, display_id))

    def text(self, name: str) -> str:
        return "".join(t for n, t in self.streams if n == name)


class Harness:
    """A ShellSession over backends made by `make`, with every backend kept."""

    def __init__(self, make, **options):
        self.backends = []
        self.out = Recorder()

        def factory():
            backend = make()
            self.backends.append(backend)
            return backend

        options = {"interrupt_grace": 0.1, "start_timeout": 10, **options}
        self.session = ShellSession(factory, self.out.stream, Options(**options), self.out.display)

    @property
    def backend(self):
        return self.backends[-1]

    def run_in_thread(self, code: str):
        box: dict = {}
        thread = threading.Thread(target=lambda: box.setdefault("result", self.session.run(code)))
        thread.start()
        return thread, box

    def wait_running(self) -> None:
        deadline = time.monotonic() + 10
        while (cell := self.session._pump.cell) is None or cell.sending:  # until its lines went
            assert time.monotonic() < deadline, "the cell did not start"
            time.sleep(0.01)

    def finish(self, thread, box, timeout: float = 20) -> CellRecord:
        thread.join(timeout)
        assert not thread.is_alive(), "the cell never ended"
        return box["result"]


@pytest.fixture
def fake():
    harnesses = []

    def make(**shell_options) -> Harness:
        harness = Harness(lambda: FakeShell(**shell_options))
        harness.session.start()
        harnesses.append(harness)
        return harness

    yield make
    for harness in harnesses:
        harness.session.close()


def subsequence(wanted, calls) -> bool:
    it = iter(calls)
    return all(any(call == w for call in it) for w in wanted)


# ------------------------------------------------------------- fake shell
def test_cell_output_status_and_cwd(fake):
    h = fake(on_cell=lambda src: CellScript([("stdout", b"hi\n"), ("stderr", b"oops\n")], 3, "/x"))
    result = h.session.run("anything")
    assert (result.exit_code, result.cwd, result.shell_lost) == (3, "/x", None)
    assert h.out.text("stdout") == "hi\n" and h.out.text("stderr") == "oops\n"


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 13, None])
def test_frames_split_at_every_byte(fake, chunk):
    png = b"\x89PNG\r\n\x1a\n\x1e\x1f" + bytes(range(256))

    def cell(source):
        return CellScript([
            ("stdout", b"before \xe2\x82"),  # a UTF-8 character split across reads too
            ("stdout", b"\xac\n"),
            ("stdout", h.backend.display("image/png", png, "plot")),
            ("stderr", b"\x1e\x1fnot a frame\n"),
            ("stdout", b"after"),
        ], status=7, cwd="/tmp/dir with space")

    h = fake(chunk=chunk, on_cell=cell)
    result = h.session.run("x")
    assert (result.exit_code, result.cwd) == (7, "/tmp/dir with space")
    assert h.out.text("stdout") == "before €\nafter"
    assert h.out.text("stderr") == "\x1e\x1fnot a frame\n"
    assert h.out.displays == [("image/png", png, "plot")]


def test_cell_source_reaches_the_shell_byte_for_byte(fake):
    seen = []
    h = fake(on_cell=lambda src: seen.append(src) or CellScript())
    code = "echo 'a' \"b\" $'\\x01' \\\nnext line\t\x1b[0m é"
    h.session.run(code)
    assert seen == [code]


def test_interrupt_escalates_int_term_kill_then_replaces_the_shell(fake):
    h = fake(ignores_sigint=True, on_cell=lambda src: CellScript(hang=True))
    first = h.backend
    thread, box = h.run_in_thread("trap '' INT; while :; do :; done")
    h.wait_running()
    h.session.interrupt()
    result = h.finish(thread, box)
    assert result.interrupted and "so it was replaced" in result.shell_lost
    assert subsequence([("tree", "-"), ("cell", "INT"), ("cell", "TERM"), ("cell", "KILL"),
                        ("all", "-")], first.side_calls)
    assert first.side_calls.index(("cell", "TERM")) < first.side_calls.index(("cell", "KILL"))
    assert len(h.backends) == 2
    h.backend.on_cell = lambda src: CellScript([("stdout", b"ok\n")])
    assert h.session.run("echo ok").exit_code == 0


def test_interrupt_that_sigint_answers_goes_no_further(fake):
    h = fake(on_cell=lambda src: CellScript([("stdout", b"started\n")], hang=True))
    thread, box = h.run_in_thread("sleep 100")
    h.wait_running()
    h.session.interrupt()
    result = h.finish(thread, box)
    assert (result.exit_code, result.interrupted, result.shell_lost) == (130, True, None)
    assert ("cell", "TERM") not in h.backend.side_calls
    assert h.out.text("stdout") == "started\n"


def test_an_interrupted_cell_ends_only_after_its_post_line_went_again(fake):
    """The end frames of an interrupted cell may come before the interrupt's
    signal step returns (a loaded host): the cell must not end before the
    post line went again, or the next cell would be sent first and its $?
    be the abandoned line's (1 on bash 3.2) rather than 130."""
    h = fake(on_cell=lambda src: CellScript([("stdout", b"started\n")], hang=True),
             side_delay=0.5)
    thread, box = h.run_in_thread("sleep 100")
    h.wait_running()
    h.session.interrupt()
    result = h.finish(thread, box)
    assert (result.exit_code, result.interrupted) == (130, True)
    repeats = [line for line in h.backend.sent if line.startswith(b"__shell_kernel_rc=130 ")]
    assert repeats, h.backend.sent[-3:]


@pytest.mark.parametrize("cut_at, again", [(CELL, "every line"), (POST, "the post line")],
                         ids=["none-heard", "first-line-heard"])
def test_lines_sent_into_a_dead_connection_go_again_once_reconnected(fake, cut_at, again):
    """The connection died under the cell's lines (the kernel heard only
    after they went): what the host did not get goes again, and the cell
    runs once."""
    h = fake(durable=True, on_cell=lambda src: CellScript([("stdout", b"ran\n")]))
    assert h.session.run("true").exit_code == 0
    h.backend.cut_at, before = cut_at, len(h.backend.sent)
    result = h.finish(*h.run_in_thread("echo ran"))
    assert result.exit_code == 0, h.out.streams
    assert h.out.text("stdout").count("ran\n") == 2  # the first cell's, and this one's once
    assert "Reconnected" in h.out.text("stderr")
    sent = b"".join(h.backend.sent[before:]).split(b"\n")
    assert sum(1 for line in sent if CELL.match(line)) == (2 if cut_at is CELL else 1), again
    assert sum(1 for line in sent if POST.search(line)) == 2, again


def test_a_cell_interrupted_before_its_lost_lines_could_go_again_never_runs(fake):
    h = fake(durable=True, on_cell=lambda src: CellScript([("stdout", b"ran\n")]))
    h.backend.cut_at = CELL
    h.backend.fail_next["reattach"] = BackendError("the host does not answer yet")
    thread, box = h.run_in_thread("echo ran")
    deadline = time.monotonic() + 10
    while "attempt 1" not in h.out.text("stderr"):  # reconnecting, after a pause
        assert time.monotonic() < deadline, h.out.streams
        time.sleep(0.01)
    h.session.interrupt()
    result = h.finish(thread, box)
    assert (result.exit_code, result.interrupted) == (130, True), h.out.streams
    assert "ran" not in h.out.text("stdout")
    assert h.session.run("echo ran").exit_code == 0
    assert h.out.text("stdout") == "ran\n"


class SilentHost(FakeShell):
    """A host that stops answering while the kernel fetches a display's data."""

    def __init__(self, **options):
        super().__init__(**options)
        self.fetching = threading.Event()
        self.silent = threading.Event()

    def fetch(self, path: str) -> bytes:
        self.fetching.set()
        self.silent.wait(30)
        raise BackendError("the host went silent")


def test_a_display_from_a_silent_host_holds_back_only_what_follows_it():
    """The display's data is fetched off the pump: what the cell printed
    after it waits (order is kept), while the pump goes on: an interrupt is
    taken, and close() answers the cell, showing what was held."""
    host: list[SilentHost] = []

    def shell() -> SilentHost:
        host.append(SilentHost(on_cell=lambda src: CellScript(
            [("stdout", b"before\n"), ("stdout", host[0].display("text/plain", b"x")),
             ("stdout", b"after\n")], hang=True)))
        return host[0]

    h = Harness(shell)
    h.session.start()
    thread, box = h.run_in_thread("echo before; display x; echo after; sleep 100")
    assert host[0].fetching.wait(10)
    time.sleep(0.3)  # "after" has reached the pump: it must wait for the display
    assert h.out.text("stdout") == "before\n"
    h.session.interrupt()
    deadline = time.monotonic() + 10
    while not h.session._pump.cell.interrupted:  # (its host steps wait behind the fetch)
        assert time.monotonic() < deadline, "the interrupt was not taken"
        time.sleep(0.01)
    h.session.close()
    result = h.finish(thread, box)
    assert result.shell_lost
    assert h.out.text("stdout") == "before\nafter\n"
    host[0].silent.set()


class StuckDisplay:
    """A session whose frontend's display sink never returns (until released)."""

    def __init__(self, monkeypatch):
        monkeypatch.setattr("shell_kernel.session.core.CLOSE_JOIN_S", 0.5)
        self.stuck, self.release = threading.Event(), threading.Event()
        self.shell = FakeShell()
        self.session = ShellSession(lambda: self.shell, lambda name, text: None,
                                    Options(start_timeout=10), self.display)
        self.session.start()
        self._result: dict = {}

    def display(self, mime: str, data: bytes, display_id: str) -> None:
        self.stuck.set()
        self.release.wait(30)

    def run_in_thread(self, code: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: self._result.setdefault(
            "result", self.session.run(code)))
        thread.start()
        return thread

    def assert_close_answers(self, thread: threading.Thread) -> None:
        self.session.close()
        thread.join(20)
        assert not thread.is_alive(), "the cell never ended"
        assert "shutting down" in self._result["result"].shell_lost
        self.release.set()


def test_close_answers_a_cell_whose_pump_is_stuck(monkeypatch):
    """Every request gets a reply: a cell still running at close is ended by
    close() itself when the pump cannot take its Closing (stuck, here in the
    frontend's display sink)."""
    h = StuckDisplay(monkeypatch)
    h.shell.on_cell = lambda src: CellScript([("stdout", h.shell.display("text/plain", b"x"))],
                                             hang=True)
    thread = h.run_in_thread("display x")
    assert h.stuck.wait(10)
    h.assert_close_answers(thread)


def test_close_answers_a_cell_the_stuck_pump_never_took(monkeypatch):
    """The same when the pump got stuck before it took the cell: here showing
    what a background job displayed between cells."""
    h = StuckDisplay(monkeypatch)
    assert h.session.run("true").exit_code == 0
    h.shell.emit("stdout", h.shell.display("text/plain", b"x"))  # a background job's, while idle
    assert h.stuck.wait(10)
    thread = h.run_in_thread("true")
    thread.join(0.3)
    assert thread.is_alive()  # behind the stuck pump
    h.assert_close_answers(thread)


def test_interrupt_when_idle_is_harmless(fake):
    h = fake()
    h.session.interrupt()
    assert h.backend.side_calls == []
    assert h.session.run("true").exit_code == 0


def test_shell_that_dies_mid_cell(fake):
    h = fake(on_cell=lambda src: CellScript([("stdout", b"partial\n")], hang=True))
    thread, box = h.run_in_thread("kill -9 $$")
    h.wait_running()
    h.backend.die(ShellExit("killed by SIGKILL", 137))
    result = h.finish(thread, box)
    assert result.exit_code == 137
    assert "ended (killed by SIGKILL)" in result.shell_lost
    assert "A new shell was started" in result.shell_lost
    assert h.out.text("stdout") == "partial\n"  # nothing printed before the death is lost
    assert len(h.backends) == 2
    h.backend.on_cell = lambda src: CellScript()
    assert h.session.run("true").exit_code == 0


@dataclass(frozen=True)
class MadeUpEvent:
    generation: int


def test_an_unknown_event_is_a_logged_bug_not_an_exit(fake, caplog):
    h = fake(on_cell=lambda src: CellScript(hang=True))
    thread, box = h.run_in_thread("x")
    h.wait_running()
    with caplog.at_level(logging.ERROR, logger="shell_kernel.session"):
        h.session._events.push(MadeUpEvent(h.session._keeper.generation))
        time.sleep(0.2)
    assert thread.is_alive(), "an unknown event ended the cell"
    assert any("unknown event" in r.message for r in caplog.records)
    h.backend.end_cell(h.session._seq, 0)
    assert h.finish(thread, box).exit_code == 0


# -------------------------------------------- faults at the backend boundary
def test_start_failure_is_a_session_error_and_the_next_start_works():
    makes = iter([lambda: FakeShell(), lambda: FakeShell()])
    h = Harness(lambda: next(makes)())
    original = FakeShell.start

    def broken_once(self, *args):
        FakeShell.start = original
        raise ValueError("injected")
    FakeShell.start = broken_once
    try:
        with pytest.raises(SessionError, match="ValueError: injected"):
            h.session.start()
    finally:
        FakeShell.start = original
    assert h.session.run("true").exit_code == 0  # the cell starts a new shell
    h.session.close()


class SlowStart(FakeShell):
    """A shell whose start() waits until released (startup files that take a while)."""

    def __init__(self):
        super().__init__()
        self.starting, self.release = threading.Event(), threading.Event()

    def start(self, on_output, on_exit):
        self.starting.set()
        assert self.release.wait(10), "never released"
        return super().start(on_output, on_exit)


def test_a_cell_sent_during_the_start_waits_for_that_shell():
    """start() holds the run lock: the cell does not start a second shell
    beside the one still starting (as the launch thread's start and the
    first cell would)."""
    h = Harness(SlowStart)
    starter = threading.Thread(target=h.session.start)
    starter.start()
    deadline = time.monotonic() + 10
    while not (h.backends and h.backend.starting.is_set()):
        assert time.monotonic() < deadline, "the start did not begin"
        time.sleep(0.01)
    thread, box = h.run_in_thread("true")
    time.sleep(0.2)
    assert thread.is_alive() and len(h.backends) == 1  # waiting for the start
    assert h.session.query("complete", "ec", timeout=5) is None  # not up yet: no wait
    h.backends[0].release.set()
    starter.join(10)
    assert h.finish(thread, box).exit_code == 0
    assert len(h.backends) == 1
    h.session.close()


def test_a_shell_seen_to_end_is_reaped_through_the_new_connection_if_the_old_one_failed():
    """The shell ended, then its connection failed the reaper (a host going
    down ends both, in either order): the new shell's connection reaps what
    the old one left, as close() does through a connection of its own."""
    pids = iter([4242, 4343])
    h = Harness(lambda: FakeShell(pid=next(pids)))
    h.session.start()
    old = h.backend
    old.fail_next["side_command"] = BackendError("the SSH connection is gone")
    old.die(ShellExit("killed by SIGKILL", 137))
    assert h.session._keeper.down.wait(5)  # the session has seen it end
    assert h.session.run("true").exit_code == 0
    assert "A new shell was started" in h.out.text("stderr")
    assert len(h.backends) == 2 and old.side_args == []  # its reaper failed
    assert ["all", "-", "4242", "/fake-state"] in h.backend.side_args
    h.session.close()


@pytest.mark.parametrize("error", [BackendError("pipe closed"), OSError("injected")])
def test_send_failure_ends_the_cell_with_an_error_and_the_next_cell_works(fake, error):
    h = fake()
    h.backend.fail_next["send"] = error
    result = h.session.run("echo hi")
    assert result.exit_code != 0 and "could not be sent to the shell" in result.shell_lost
    assert h.session.run("echo hi").exit_code == 0


def test_side_command_failure_during_an_interrupt_ends_the_cell(fake):
    h = fake(on_cell=lambda src: CellScript(hang=True))
    h.backend.fail_next["side_command"] = RuntimeError("injected")
    thread, box = h.run_in_thread("sleep 100")
    h.wait_running()
    h.session.interrupt()
    result = h.finish(thread, box)
    assert result.interrupted and "could not be interrupted" in result.shell_lost
    assert "RuntimeError: injected" in result.shell_lost
    h.backend.on_cell = lambda src: CellScript()
    assert h.session.run("true").exit_code == 0


class DurableFake(FakeShell):
    capabilities = Capabilities(description="fake", can_reattach=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.reattaches = 0

    def reattach(self) -> None:
        self._maybe_fail("reattach")
        self.reattaches += 1


def connection_lost_mid_cell(reattach_fault: Exception):
    """A durable session whose connection drops while a cell runs, and whose
    first reattach fails with reattach_fault."""
    h = Harness(lambda: DurableFake(on_cell=lambda src: CellScript(hang=True)), reattach_timeout=60)
    h.session.start()
    thread, box = h.run_in_thread("sleep 100")
    h.wait_running()
    h.backend.fail_next["reattach"] = reattach_fault
    h.backend.die(ShellExit("the SSH connection was lost", connection_lost=True))
    return h, thread, box


class DropsAtFirstCell(DurableFake):
    """Its connection is found gone as the first cell is sent (none of it
    went); the report of the loss comes a moment later, as a transport's does."""

    def send(self, data: bytes) -> None:
        if b"\n__shell_kernel_resume 1 " in b"\n" + data and not self.reattaches:
            threading.Timer(0.2, self.die, [ShellExit("the SSH connection was lost",
                                                      connection_lost=True)]).start()
            raise NotSent("the shell is not running")
        super().send(data)


def test_a_cell_sent_as_the_connection_drops_runs_once_it_is_back():
    """The durable shell is still there to reconnect to: the cell waits for
    the reattach and runs, instead of "This cell did not run" at once."""
    h = Harness(DropsAtFirstCell, reattach_timeout=10)
    h.session.start()
    try:
        h.backend.on_cell = lambda src: CellScript(output=[("stdout", b"ran\n")])
        result = h.session.run("echo ran")
        assert (result.exit_code, result.shell_lost) == (0, None)
        assert h.backend.reattaches == 1 and h.out.text("stdout") == "ran\n"
        assert "reconnecting to the same shell" in h.out.text("stderr")
        assert h.session.run("true").exit_code == 0
    finally:
        h.session.close()


def test_reattach_fault_ends_the_cell_at_once():
    h, thread, box = connection_lost_mid_cell(KeyError("bug"))
    result = h.finish(thread, box, timeout=10)  # not after the 60 s reattach timeout
    assert "Could not reconnect" in result.shell_lost and "KeyError" in result.shell_lost
    h.session.close()


def test_transient_reattach_failure_is_retried_and_the_cell_goes_on():
    h, thread, box = connection_lost_mid_cell(BackendError("connection refused"))
    deadline = time.monotonic() + 10
    while h.session._keeper.attachments == 0:  # the pump has heard of the reattach
        assert time.monotonic() < deadline, "never reattached"
        time.sleep(0.05)
    h.backend.emit("stdout", b"done\n")
    h.backend.end_cell(h.session._seq, 0)
    result = h.finish(thread, box)
    assert (result.exit_code, result.shell_lost) == (0, None)
    assert "Reconnected" in h.out.text("stderr") and h.out.text("stdout") == "done\n"
    h.session.close()


# --------------------------------------------------------- real local bash
@pytest.fixture
def local(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    harness = Harness(lambda: LocalBackend(clean=True), interrupt_grace=0.3,
                      spill_dir=tmp_path / "spill")
    harness.session.start()
    yield harness
    harness.session.close()


def test_a_job_shell_exports_its_variables_and_says_where_it_runs(tmp_path, monkeypatch):
    """Options.exports and announce_where (a `run --hosts` session): set
    before the first cell, said in the ready frame; the session's own
    variables are gone again. A value of any bytes arrives as it was."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    value = "web 1's \"$HOME\" \\ é\nsecond line"
    bash = os.environ.get("SHELL_KERNEL_TEST_BASH") or "bash"  # .ci/run's old bashes too
    harness = Harness(lambda: LocalBackend(bash, clean=True), spill_dir=tmp_path / "spill",
                      exports=(("SHELL_KERNEL_HOST", value),), announce_where=True)
    try:
        info = harness.session.start()
        user, hostname, os_name = info.where
        assert user == (os.environ.get("USER") or os.environ.get("LOGNAME")
                        or subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip())
        assert hostname == platform.node()
        assert os_name == " ".join(platform.uname()[i] for i in (0, 2, 4))
        result = harness.session.run('printf %s "$SHELL_KERNEL_HOST"; env | grep -c "^SHELL_KERNEL_HOST="; '
                                     "declare -p | grep -c '^declare -- __shell_kernel_where' || :")
        assert result.exit_code == 0
        assert harness.out.text("stdout") == value + "1\n0\n"
    finally:
        harness.session.close()
    with pytest.raises(ValueError, match="not a variable name"):
        protocol.session_script("ab", exports=(("A-B", "x"),))


def test_a_shell_not_asked_says_nothing_of_where(local):
    assert local.session.info.where == ()


def test_local_cell_and_status(local):
    result = local.session.run("cd /; echo out; echo err >&2; (exit 4)")
    assert (result.exit_code, result.cwd) == (4, "/")
    assert local.out.text("stdout") == "out\n" and local.out.text("stderr") == "err\n"


def test_local_interrupt_with_sigint(local):
    thread, box = local.run_in_thread("echo started; sleep 100")
    local.wait_running()
    time.sleep(0.3)
    local.session.interrupt()
    result = local.finish(thread, box)
    assert (result.exit_code, result.interrupted, result.shell_lost) == (130, True, None)
    assert local.session.run("echo $((1+1))").exit_code == 0


@pytest.mark.parametrize("step", ["INT", "TERM", "KILL"])
def test_a_late_escalation_step_leaves_the_next_cell_alone(local, step, tmp_path):
    """An interrupt's steps go on while the interrupted cell's end is on its
    way (under load, past the grace): a step for a cell that has ended, run
    when the next cell has started, must not touch that one. (Its SIGTERM
    would kill the next cell's processes, and its SIGURG abandon that cell's
    command line, whose end would never come: a hang.)"""
    assert local.session.run("true").exit_code == 0
    ended = local.session._seq
    go = tmp_path / "go"
    os.mkfifo(go)
    # The next cell's cat waits for this test's word, however slow the machine.
    thread, box = local.run_in_thread(f"cat {go}; echo survived")
    local.wait_running()
    reaper = local.session._keeper.reaper()
    deadline = time.monotonic() + 10
    while not reaper.note_tree(ended + 1):  # its cat runs
        assert time.monotonic() < deadline, "the next cell's cat never started"
        time.sleep(0.02)
    assert reaper.note_tree(ended) == []
    assert reaper.signal_cell(step, ended) == []
    with open(go, "w"):
        pass  # the cat ends
    result = local.finish(thread, box)
    assert (result.exit_code, result.interrupted) == (0, False)
    assert local.out.text("stdout").endswith("survived\n")


def test_a_repeated_post_line_leaves_the_status_the_cell_left(local):
    """An interrupt sends the cell's post line again (with status 130): the
    next cell's $? is still what the interrupted one ended with."""
    assert local.session.run("(exit 3)").exit_code == 3
    local.session._keeper.backend.send(protocol.post_line(local.session._seq))
    assert local.session.run("echo $?").exit_code == 0
    assert local.out.text("stdout").endswith("3\n")


def test_local_shell_ignoring_sigint_is_replaced(local):
    local.session.run("x=kept")
    thread, box = local.run_in_thread("trap '' INT; while :; do :; done")
    local.wait_running()
    time.sleep(0.2)
    local.session.interrupt()
    result = local.finish(thread, box)
    assert result.interrupted and "so it was replaced" in result.shell_lost
    assert local.session.run("echo ${x-gone}").exit_code == 0
    assert local.out.text("stdout").endswith("gone\n")


def test_local_shell_that_dies_mid_cell(local):
    result = local.session.run("echo before; kill -9 $$")
    assert result.exit_code == 137 and "killed by SIGKILL" in result.shell_lost
    assert local.out.text("stdout") == "before\n"
    assert local.session.run("true").exit_code == 0


class ReadFailsOnce:
    """os, except that read() raises once: a reader thread that crashes."""

    def __init__(self):
        self.armed = True

    def __getattr__(self, name):
        return getattr(os, name)

    def read(self, fd, size):
        if self.armed:
            self.armed = False
            raise OSError(5, "injected read failure")
        return os.read(fd, size)


def test_local_reader_crash_ends_the_cell_and_the_next_cell_works(local, monkeypatch):
    monkeypatch.setattr(local_processes, "os", ReadFailsOnce())
    thread, box = local.run_in_thread("echo hi; sleep 0.2")
    result = local.finish(thread, box, timeout=10)
    assert result.exit_code != 0 and "reading the shell's output failed" in result.shell_lost
    assert "injected read failure" in result.shell_lost
    assert local.session.run("echo again").exit_code == 0
    assert local.out.text("stdout").endswith("again\n")


def test_local_frames_survive_any_split(local):
    # A frame-like prefix printed by the user must pass through as data.
    result = local.session.run(r"printf '\036\037%s\037end\0371\0370\037/\037\036\n' nottoken")
    assert result.exit_code == 0
    assert local.out.text("stdout") == "\x1e\x1fnottoken\x1fend\x1f1\x1f0\x1f/\x1f\x1e\n"


def test_protocol_frames_are_typed():
    scanner = frames.FrameScanner("ab", "stdout")
    events = scanner.feed(b"\x1e\x1fab\x1fready\x1f12\x1f5.2\x1f/d\x1fyes\x1f\x1e"
                          b"\x1e\x1fab\x1fready\x1f12\x1f5.2\x1f/d\x1f\x1fada\x1fweb1\x1fLinux\x1f\x1e"
                          b"\x1e\x1fab\x1fready\x1f12\x1f5.2\x1f/d\x1f\x1fada\x1f\x1e"
                          b"\x1e\x1fab\x1fwhat\x1f1\x1f\x1e")
    assert events == [frames.ReadyFrame("stdout", 12, "5.2", "/d", "yes"),
                      frames.ReadyFrame("stdout", 12, "5.2", "/d", "", ("ada", "web1", "Linux")),
                      frames.UnknownFrame("stdout", ("ready", "12", "5.2", "/d", "", "ada")),
                      frames.UnknownFrame("stdout", ("what", "1"))]
