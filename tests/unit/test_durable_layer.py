"""The durable layer (shell_kernel.backends.channel.durable) over scripted channels:
relay headers, resume offsets, delivery, acknowledgements, relay restart,
the end of a relay, and the named open. No host, no sshd, no timeouts."""

from __future__ import annotations

import time

import pytest

from shell_kernel.backends import BackendError, CellsHeard, SessionGone, SessionTaken, ShellExit
from shell_kernel.backends.channel import durable as durable_module
from shell_kernel.backends.channel.channels import SideShell
from shell_kernel.backends.channel.durable import (RELAY_RESTART, RELAY_SHELL_ENDED, RELAY_TAKEN,
                                                   DurableShell, RelayHeaders)
from shell_kernel.backends.channel.shell import DirectShell
from shell_kernel.testing.received import Received
from shell_kernel.testing.scripted_channels import ScriptedChannels, ScriptedHost, ScriptedSh

WITHIN = 5.0  # a liveness bound: every wait here ends as soon as its event comes


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def durable(host: ScriptedHost | None = None, session: str | None = None, take_over=False):
    host = host or ScriptedHost()
    channels = ScriptedChannels(host)
    side = SideShell(channels.open, 1.0)
    shell = DurableShell(channels, side, ["bash", "-l", "-i"], 60, session, take_over)
    return shell, channels, host


def started(host: ScriptedHost | None = None, session: str | None = None):
    shell, channels, host = durable(host, session)
    received = Received()
    result = shell.start(received.on_output, received.on_exit)
    return shell, channels, host, received, result


# ------------------------------------------------------------ relay headers
def test_headers_drop_startup_noise_and_give_the_stream_offset():
    headers = RelayHeaders()
    tag = headers.marker.encode()
    assert headers.feed("stdout", b"welcome from .bashrc\n" + tag + b":120\nout") == (120, b"out")
    assert headers.feed("stdout", b"more") == (None, b"more")  # past its header


def test_a_header_split_across_reads_is_put_together():
    headers = RelayHeaders()
    tag = headers.marker.encode() + b":7\n"
    assert headers.feed("stderr", b"noise " + tag[:5]) == (None, b"")
    assert headers.feed("stderr", tag[5:-2]) == (None, b"")
    assert headers.feed("stderr", tag[-2:] + b"err") == (7, b"err")
    assert headers.feed("stdout", tag + b"x") == (7, b"x")  # each stream has its own


# ----------------------------------------------------- start and delivery
def acknowledged(relay) -> list[bytes]:
    return [line for line in relay.sent if line.startswith(durable_module.ACK.encode())]


def input_sent(relay) -> list[bytes]:
    """What went to the relay but the kernel's acknowledgements."""
    return [line for line in relay.sent if line not in acknowledged(relay)]


def test_start_launches_the_shell_and_relays_from_offset_zero():
    shell, channels, host, received, result = started()
    assert (result.preset_state_dir, result.attached, result.notice) == (host.state_dir, None, None)
    assert host.calls_of("launch", "start")[0][1:3] == ["60", str(4 << 20)]
    relay = channels.relay(1)
    assert relay.words[4:6] == [host.state_dir, str(host.pid)] and relay.offsets == (0, 0)
    relay.headers(noise=b"stty: not a tty\n").play("stdout", b"hello\n").play("stderr", b"oops\n")
    received.wait_for("stdout", b"hello\n")
    received.wait_for("stderr", b"oops\n")
    assert b"stty" not in received.text("stdout")
    shell.send(b"echo hi\n")
    assert input_sent(relay) == [b"echo hi\n"]


def test_output_before_its_header_is_not_the_sessions():
    shell, channels, host, received, _ = started()
    relay = channels.relay(1)
    relay.play("stdout", b"conda banner\n").headers().play("stdout", b"real\n")
    received.wait_for("stdout", b"real\n")
    assert received.text("stdout") == b"real\n"


def test_output_of_a_replaced_relay_is_dropped():
    shell, channels, host, received, _ = started()
    old = channels.relay(1)
    old.headers().play("stdout", b"before\n")
    received.wait_for("stdout", b"before\n")
    shell.detach()  # the connection goes
    old.play("stdout", b"late\n").end()
    shell.reattach()
    channels.relay(2).headers().play("stdout", b"after\n")
    received.wait_for("stdout", b"after\n")
    assert received.text("stdout") == b"before\nafter\n" and not received.exits


# ------------------------------------------------------------ resume offsets
def test_reattach_resumes_each_stream_where_delivery_stopped():
    shell, channels, host, received, _ = started()
    first = channels.relay(1)
    first.headers().play("stdout", b"12345").play("stderr", b"ab")
    received.wait_for("stderr", b"ab")
    first.end()  # no status: the connection was lost
    assert received.exit().connection_lost
    shell.detach()
    shell.reattach()
    assert host.calls_of("launch", "alive")[0] == ["alive", host.state_dir, str(host.pid)]
    second = channels.relay(2)
    assert second.offsets == (5, 2)
    second.headers().play("stdout", b"678")
    received.wait_for("stdout", b"12345678")


def test_a_gap_the_host_dropped_is_told_and_skipped():
    shell, channels, host, received, _ = started()
    relay = channels.relay(1)
    relay.headers(out=1000).play("stdout", b"x")
    received.wait_for("stdout", b"x")
    assert b"1,000 bytes of stdout were dropped on scripted-host" in received.text("stderr")
    relay.end()
    received.exit()
    shell.detach()
    shell.reattach()
    assert channels.relay(2).offsets == (1001, 0)


@pytest.mark.parametrize("answer, heard", [("alive 7 6", CellsHeard(7, 6)), ("alive", None)])
def test_reattach_says_what_the_host_heard_of_the_cells_lines(answer, heard):
    shell, channels, host, received, _ = started()
    host.alive = answer  # ("alive": a session no relay of this version served)
    assert shell.reattach() == heard


@pytest.mark.parametrize("answer, error", [("gone", SessionGone), ("taken 1700000000", SessionTaken)])
def test_reattach_to_a_session_that_is_gone_or_taken(answer, error):
    shell, channels, host, received, _ = started()
    host.alive = answer
    with pytest.raises(error):
        shell.reattach()
    assert len(channels.relays) == 1


def test_a_link_that_cannot_open_a_relay_fails_reattach_for_the_user():
    shell, channels, host, received, _ = started()
    channels.active = False  # the side shell is open already: the relay's channel fails
    with pytest.raises(BackendError, match="could not reattach: the link is down"):
        shell.reattach()


# ---------------------------------------------------------- acknowledgements
def test_received_output_is_acknowledged_on_the_relays_input():
    # (No side command: one would cost the host a process or two each time.)
    shell, channels, host, received, _ = started()
    relay = channels.relay(1)
    relay.headers().play("stdout", b"abc").play("stderr", b"de")
    assert wait_until(lambda: acknowledged(relay)[-1:] == [durable_module.ACK.encode() + b" 3 2\n"],
                      WITHIN), relay.sent
    assert [call[1] for call in host.calls] == ["start"]
    assert shell.received() is None  # only a named session's host keeps count
    shell.close()


@pytest.mark.parametrize("session", [None, "work"], ids=["not named", "named"])
def test_only_a_session_not_named_beats_and_ends_with_a_dead_kernel(monkeypatch, session):
    """A session that is not named: heartbeats on the relay's input, and a
    relay told to end it once its kernel is gone (see relay.sh). A named
    one outlives its kernel: grace 0, no heartbeat."""
    monkeypatch.setattr(durable_module, "HEARTBEAT_INTERVAL", 0.01)
    host = ScriptedHost()
    if session:
        host.open_answers.append(f"new - {host.pid} {host.state_dir}")
    shell, channels, host, _, _ = started(host, session=session)
    relay = channels.relay(1)
    grace = "0" if session else str(durable_module.REATTACH_GRACE)
    assert relay.words[11:16] == ["bash", durable_module.HEARTBEAT, durable_module.ACK,
                                  str(durable_module.HEARD_WITHIN), grace]
    beat = durable_module.HEARTBEAT.encode() + b"\n"
    beating = lambda: beat in relay.sent  # noqa: E731
    if session:
        assert not wait_until(beating, 0.3)
    else:
        assert wait_until(beating, WITHIN)
    shell.close()


def test_a_named_session_acknowledges_only_when_asked():
    host = ScriptedHost()
    host.open_answers.append(f"new - {host.pid} {host.state_dir}")
    shell, channels, host, received, _ = started(host, session="work")
    relay = channels.relay(1)
    assert relay.owner and relay.words[17] == str(RELAY_TAKEN)
    relay.headers().play("stdout", b"abc").play("stderr", b"d")
    received.wait_for("stderr", b"d")
    assert not wait_until(lambda: acknowledged(relay), 0.3)  # nothing on delivery
    mark = shell.received()
    assert mark == (3, 1)
    shell.acknowledge(mark)
    assert acknowledged(relay) == [durable_module.ACK.encode() + b" 3 1\n"]


# ------------------------------------------------------------- relay restart
def test_a_relay_that_fell_behind_is_restarted_from_the_offsets():
    shell, channels, host, received, _ = started()
    first = channels.relay(1)
    first.headers().play("stdout", b"0123456789")
    received.wait_for("stdout", b"0123456789")
    first.end(RELAY_RESTART)
    second = channels.relay(2)
    assert second.offsets == (10, 0)
    second.headers(out=50).play("stdout", b"later\n")
    received.wait_for("stdout", b"later\n")
    assert b"40 bytes of stdout were dropped" in received.text("stderr")
    assert not received.exits  # the shell never ended
    shell.send(b"next\n")
    assert input_sent(second) == [b"next\n"]


def test_a_relay_that_cannot_be_restarted_is_a_lost_connection():
    shell, channels, host, received, _ = started()
    first = channels.relay(1)
    first.headers()
    channels.active = False
    first.end(RELAY_RESTART)
    ended = received.exit()
    assert ended.connection_lost and ended.reason == "the scripted link to scripted-host was lost"


# ------------------------------------------------------------ how it ended
def test_the_shell_ending_is_told_with_its_status():
    host = ScriptedHost()
    host.status = "3"
    shell, channels, host, received, _ = started(host)
    channels.relay(1).headers().end(RELAY_SHELL_ENDED)
    assert received.exit() == ShellExit("exited with status 3", 3)
    assert host.calls_of("launch", "status") == [["status", host.state_dir]]


def test_a_named_session_taken_over_is_told_so():
    host = ScriptedHost()
    host.open_answers.append(f"new - {host.pid} {host.state_dir}")
    shell, channels, host, received, _ = started(host, session="work")
    channels.relay(1).headers().end(RELAY_TAKEN)
    ended = received.exit()
    assert "taken over by another kernel" in ended.reason and ended.connection_lost


def test_closed_by_the_kernel_stops_a_shell_it_launched():
    shell, channels, host, received, _ = started()
    relay = channels.relay(1)
    shell.close()
    assert host.calls_of("launch", "stop") == [["stop", host.state_dir]]
    relay.end(-1)
    assert received.exit() == ShellExit("closed by the kernel")


# ------------------------------------------------------------- named open
def test_opening_a_named_session_that_exists_attaches_without_output():
    host = ScriptedHost()
    host.open_answers.append(
        f"attached {host.pid} 999 abcdef 5.2.21 30 4 40 4 7 1700000000 6 0 {host.state_dir}")
    shell, channels, host, received, result = started(host, session="work")
    assert result.attached.shell_pid == 999 and result.attached.running
    assert result.attached.backlog and result.preset_state_dir == host.state_dir
    assert not channels.relays  # its output starts with open_output
    shell.open_output()
    assert channels.relay(1).offsets == (30, 4)


def test_an_ended_named_session_is_replaced_and_said_so():
    host = ScriptedHost()
    host.open_answers.append(f"new 137 {host.pid} {host.state_dir}")
    *_, result = started(host, session="work")
    assert "had ended while no kernel was attached" in result.notice
    assert "status 137" in result.notice


def test_a_named_session_left_half_set_up_is_stopped_and_opened_again():
    host = ScriptedHost()
    host.open_answers += [f"attached 11 - - - 0 0 0 0 0 - 0 0 /tmp/half",
                          f"new - {host.pid} {host.state_dir}"]
    shell, channels, host, received, result = started(host, session="work")
    assert host.calls_of("launch", "stop") == [["stop", "/tmp/half"]]
    assert result.preset_state_dir == host.state_dir and channels.relay(1)


def test_a_named_session_held_by_another_kernel_is_refused():
    host = ScriptedHost()
    host.open_answers.append("held 1700000000")
    shell, channels, host = durable(host, session="work")
    with pytest.raises(SessionTaken, match="in use by another kernel"):
        shell.start(Received().on_output, Received().on_exit)


# ------------------------------------------------------------- side shell
def test_the_side_shell_skips_rc_noise_and_reads_the_status():
    answers = iter([(0, b""), (2, b"line one\nline two\n")])
    sh = ScriptedSh(b"exec sh", lambda words: next(answers), noise=b"Welcome!\n")
    side = SideShell(lambda command: sh, 1.0)
    result = side.run("exit 2", ["a b"], 1.0)
    assert (result.status, result.stdout) == (2, "line one\nline two\n")
    assert b"'a b'" in sh.sent[-1]


def test_a_side_command_that_does_not_answer_fails_at_its_timeout():
    sh = ScriptedSh(b"exec sh", lambda words: (0, b""))
    side = SideShell(lambda command: sh, 1.0)
    side.open()
    sh.send = lambda data: sh.sent.append(data)  # from now on the shell says nothing
    with pytest.raises(BackendError, match="did not finish"):
        side.run("sleep 9", [], 0.0)


# ------------------------------------------------------------- direct shell
@pytest.mark.parametrize("status, signal, expected", [
    (3, None, ShellExit("exited with status 3", 3)),
    (137, "KILL", ShellExit("killed by SIGKILL", 137)),
    (-1, None, ShellExit("the scripted link to scripted-host was lost", connection_lost=True)),
])
def test_a_direct_shell_tells_how_it_ended(status, signal, expected):
    channels = ScriptedChannels(ScriptedHost())
    opened = []
    channels.open = lambda command: opened.append(ScriptedSh(command, None)) or opened[-1]
    shell, received = DirectShell(channels, ["bash", "-i"]), Received()
    shell.start(received.on_output, received.on_exit)
    assert opened[0].command == b"exec bash -i"
    opened[0].play("stdout", b"out").end(status, signal)
    assert received.exit() == expected and received.text("stdout") == b"out"
