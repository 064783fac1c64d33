"""Pure logic of an interrupt's escalation (interrupts.escalation): which
signals go, and when the shell is replaced. The host is a stand-in that
records the steps, and the plan is driven here as the session's pump drives
it (session/escalations.py), without its waits; reap.sh itself runs in
tests/test_interrupt.py."""

from __future__ import annotations

from types import SimpleNamespace

from shell_kernel.interrupts import EscalationResult, HostStep, Outcome, Pause, WaitEnd, escalation
from shell_kernel.session.escalations import Escalations


class HostReaper:
    """A host whose cell ends (or not) at some step, and whose end reaches
    the kernel only arrives_after further waits (a slow relay)."""

    def __init__(self, ends_on: str | None, arrives_after: int = 0):
        self.ends_on = ends_on
        self.arrives_after = arrives_after
        self.ended = False
        self.steps: list[str] = []

    def note_tree(self, seq):
        return ["101:7"]

    def signal_cell(self, signal_name, seq, noted=()):
        self.steps.append(signal_name)
        if signal_name == self.ends_on:
            self.ended = True
        return []

    def cell_has_ended(self, seq):
        self.steps.append("ended?")
        return self.ended

    def signal_leftovers(self, signal_name, noted):
        self.steps.append(f"leftovers {signal_name}")
        return []

    def cell_ended_here(self, timeout):
        if self.ended and self.arrives_after == 0:
            return True
        if self.ended:
            self.arrives_after -= 1
        return False


def escalate(host: HostReaper):
    plan = escalation(host, 7, resend_post=lambda: None, grace=0.0)
    answer = None
    while True:
        try:
            step = plan.send(answer)
        except StopIteration as stop:
            return stop.value
        if isinstance(step, HostStep):
            answer = step.call()
        elif isinstance(step, WaitEnd):
            answer = host.cell_ended_here(step.seconds)
        else:
            assert isinstance(step, Pause), step
            answer = None


def test_a_cell_that_ends_at_sigint_gets_nothing_more():
    host = HostReaper(ends_on="INT")
    assert escalate(host).outcome is Outcome.ENDED
    assert host.steps == ["INT", "leftovers TERM"]


def test_a_cell_that_ignores_sigint_gets_sigterm():
    host = HostReaper(ends_on="TERM")
    assert escalate(host).outcome is Outcome.ENDED
    assert host.steps == ["INT", "TERM", "leftovers TERM"]


def test_a_shell_whose_cell_outlives_sigkill_is_replaced():
    host = HostReaper(ends_on=None)
    assert escalate(host).outcome is Outcome.REPLACE
    assert host.steps == ["INT", "TERM", "KILL", "ended?"]


def test_a_cell_whose_end_is_slow_to_come_keeps_its_shell():
    """The cell ended at SIGINT, but its end came after the last wait (a
    BusyBox host's relay, under load): the host says it has ended, and the
    shell, which is well, is not replaced."""
    host = HostReaper(ends_on="INT", arrives_after=3)
    assert escalate(host).outcome is Outcome.ENDED
    assert host.steps == ["INT", "TERM", "KILL", "ended?", "leftovers TERM"]


def test_a_plan_that_fails_ends_as_unreachable_and_its_driver_goes_on():
    """A bug in an interrupt's plan must not end the pump (which drives it):
    the cell is told it could not be interrupted, and other plans go on."""
    finished = []
    escalations = Escalations(io=None, reattached_since=lambda since: False,
                              repeated=lambda cell: None, suspect=lambda cell: None,
                              finished=lambda cell, result: finished.append((cell.seq, result)))

    def broken():
        raise RuntimeError("a bug")
        yield  # a generator, as plans are

    def pausing():
        yield Pause(0.0)
        return EscalationResult(Outcome.ENDED)

    escalations.start(SimpleNamespace(seq=1), broken())
    escalations.start(SimpleNamespace(seq=2), pausing())
    escalations.tick()
    (seq, failed), (other, ended) = finished
    assert (seq, failed.outcome) == (1, Outcome.UNREACHABLE) and "a bug" in str(failed.error)
    assert (other, ended.outcome) == (2, Outcome.ENDED)
