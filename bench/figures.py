"""The five measurements. Each takes a kernel profile and settings and
returns a JSON-able dict; a failure raises and is recorded by the caller."""

from __future__ import annotations

import secrets
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

from client import (KernelSession, RssSampler, find_processes, ignores_sigint,
                    kill_processes, survivors, wait_for_process)
from kernels import KernelProfile

MB = 1_000_000


class FigureError(RuntimeError):
    pass


@dataclass(frozen=True)
class Settings:
    trivial_runs: int = 200
    trivial_warmup: int = 20
    starts: int = 5
    #: Multiplies the throughput and memory sizes (the quick run shrinks them).
    size_scale: float = 1.0
    cell_timeout: float = 10.0  # for trivial cells
    rss_interval: float = 0.05
    interrupt_delay: float = 0.5

    @classmethod
    def quick(cls) -> "Settings":
        return cls(trivial_runs=40, trivial_warmup=5, starts=2, size_scale=0.1)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _scaled(lines: int, settings: Settings) -> int:
    return max(1, int(lines * settings.size_scale))


def _expect_ok(ex, what: str) -> None:
    if not ex.finished:
        raise FigureError(f"{what}: no reply within the timeout")
    if not ex.ok:
        raise FigureError(f"{what}: reply status {ex.status} ({ex.error_name})")


# ------------------------------------------------------------ 1. round trip
def trivial_round_trip(session: KernelSession, profile: KernelProfile, settings: Settings) -> dict:
    code = profile.snippets.trivial
    for _ in range(settings.trivial_warmup):
        _expect_ok(session.execute(code, settings.cell_timeout), "warm-up cell")
    samples = []
    for _ in range(settings.trivial_runs):
        ex = session.execute(code, settings.cell_timeout)
        _expect_ok(ex, "trivial cell")
        samples.append(ex.elapsed * 1000)
    return {"code": code, "runs": len(samples),
            "median_ms": statistics.median(samples), "p90_ms": percentile(samples, 0.9),
            "min_ms": min(samples), "samples_ms": [round(s, 4) for s in samples]}


# ------------------------------------------------------------ 2. throughput
def expected_count_lines(n: int) -> str:
    return "\n".join(map(str, range(1, n + 1))) + "\n"


def completeness(received: str, expected: str) -> str:
    if received == expected:
        return "ok"
    got, want = received.count("\n"), expected.count("\n")
    if got < want:
        return f"LOST {want - got} of {want} lines"
    first = next((i for i, (a, b) in enumerate(zip(received, expected)) if a != b),
                 min(len(received), len(expected)))
    return f"DIFFERS from byte {first} ({len(received)} vs {len(expected)} bytes)"


def throughput(session: KernelSession, profile: KernelProfile, settings: Settings) -> dict:
    lines = _scaled(profile.throughput_lines, settings)
    code = profile.snippets.count_lines(lines)
    stdout: list[str] = []
    stderr: list[str] = []

    def on_stream(name: str, text: str) -> None:
        (stdout if name == "stdout" else stderr).append(text)

    ex = session.execute(code, profile.throughput_timeout, on_stream)
    result = {"code": code, "lines": lines, "timeout_s": profile.throughput_timeout,
              "bytes": ex.stream_bytes, "stream_messages": ex.stream_messages,
              "stderr": "".join(stderr)[:500]}
    if not ex.finished:
        result["complete"] = f"TIMEOUT after {profile.throughput_timeout:g} s"
        result["recovery"] = session.abandon(ex.msg_id, profile.interrupt_cap)
        return result
    result.update(seconds=ex.elapsed, mb_per_s=ex.stream_bytes / MB / ex.elapsed,
                  status=ex.status,
                  complete=completeness("".join(stdout), expected_count_lines(lines)))
    return result


# ---------------------------------------------------------------- 3. interrupt
def _interrupt_cases(profile: KernelProfile) -> list[tuple[str, str, str | None]]:
    """(case name, cell code, command-line pattern of the process to look for)."""
    snippets = profile.snippets
    sleep_for = f"1000.{secrets.randbelow(10**6):06d}"
    ignore_for = f"1000.{secrets.randbelow(10**6):06d}"
    program = [sys.executable, "-c", "import signal,time; signal.signal(signal.SIGINT, "
               f"signal.SIG_IGN); time.sleep({ignore_for})"]
    return [
        ("sleep", snippets.sleep(sleep_for),
         f"sleep {sleep_for}" if snippets.sleep_is_process else None),
        ("program ignoring SIGINT", snippets.run_program(program), f"time.sleep({ignore_for})"),
    ]


def _interrupt_one(session: KernelSession, profile: KernelProfile, settings: Settings,
                   case: str, code: str, pattern: str | None) -> dict:
    result = {"case": case, "code": code}
    msg_id = session.submit(code)
    if pattern is not None:
        if not wait_for_process(pattern, timeout=10):
            raise FigureError(f"{case}: the process did not start")
        # A process that ignores SIGINT can only be stopped by escalation.
        result["sigint_ignored"] = any(ignores_sigint(p) for p in find_processes(pattern))
    time.sleep(settings.interrupt_delay)
    interrupted_at = time.perf_counter()
    session.km.interrupt_kernel()
    ex = session.collect(msg_id, interrupted_at, interrupted_at + profile.interrupt_cap)
    result["reply_s"] = ex.elapsed
    result["reply_status"] = (f"{ex.status} ({ex.error_name})" if ex.error_name else ex.status)
    if ex.reply is not None:
        result["reply_metadata"] = ex.reply.get("metadata", {}).get("shell_kernel")
    left = survivors(pattern, grace=1.0) if pattern else []
    if not ex.finished:
        result["survivors_at_cap"] = None if pattern is None else len(left)
        session.restart()
        result["restarted"] = True
        left = survivors(pattern, grace=1.0) if pattern else []
    result["survivors"] = None if pattern is None else len(left)
    kill_processes(left)
    result["works_after"] = session.works(profile.snippets.trivial)
    return result


def interrupts(session: KernelSession, profile: KernelProfile, settings: Settings) -> dict:
    cases = []
    for case, code, pattern in _interrupt_cases(profile):
        try:
            cases.append(_interrupt_one(session, profile, settings, case, code, pattern))
        except Exception as err:  # noqa: BLE001 - one case failing leaves the other
            cases.append({"case": case, "code": code, "error": f"{type(err).__name__}: {err}"})
            session.restart()  # the cell may still be running: start clean
            if pattern is not None:
                kill_processes(survivors(pattern, grace=0))
    return {"cap_s": profile.interrupt_cap, "cases": cases}


# --------------------------------------------------------------- 4. start
def start_to_ready(new_session: Callable[[], KernelSession], settings: Settings) -> dict:
    """Start times, and as a by-product the time shutdown_kernel() takes."""
    samples, shutdowns, statuses = [], [], []
    for _ in range(settings.starts):
        session = new_session()
        try:
            samples.append(session.start())
        finally:
            started = time.perf_counter()
            statuses.append(session.shutdown())
            shutdowns.append(time.perf_counter() - started)
    return {"starts": len(samples), "median_s": statistics.median(samples),
            "min_s": min(samples), "max_s": max(samples), "samples_s": samples,
            "shutdown_median_s": statistics.median(shutdowns), "shutdown_max_s": max(shutdowns),
            "shutdown_samples_s": shutdowns, "exit_statuses": statuses}


# -------------------------------------------------------------- 5. memory
def memory(session: KernelSession, profile: KernelProfile, settings: Settings) -> dict:
    if profile.flood_lines is None:
        return {"skipped": True}
    lines = _scaled(profile.flood_lines, settings)
    code = profile.snippets.flood(lines)
    notices: list[str] = []

    def on_stream(name: str, text: str) -> None:
        # Text is dropped (bytes are counted by the client) to keep this process small.
        if name == "stderr" and len(notices) < 5:
            notices.append(text[:300])

    sampler = RssSampler(session.pid, settings.rss_interval)
    before = sampler.rss()
    with sampler:
        ex = session.execute(code, profile.flood_timeout, on_stream)
    result = {"code": code, "lines": lines, "bytes_produced": lines * 101,
              "bytes_received": ex.stream_bytes, "stream_messages": ex.stream_messages,
              "rss_before_mb": before / MB, "peak_rss_mb": max(sampler.peak, before) / MB,
              "rss_after_mb": sampler.rss() / MB, "samples": len(sampler.samples),
              "stderr": "".join(notices).replace(session.cwd, "<kernel cwd>")}
    if not ex.finished:
        result["timeout"] = f"TIMEOUT after {profile.flood_timeout:g} s"
        result["recovery"] = session.abandon(ex.msg_id, profile.interrupt_cap)
        return result
    result["seconds"] = ex.elapsed
    result["status"] = ex.status
    result["reply_metadata"] = ex.reply.get("metadata", {}).get("shell_kernel")
    return result
