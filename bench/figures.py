"""The measurements. Each takes a kernel profile and settings and
returns a JSON-able dict; a failure raises and is recorded by the caller."""

from __future__ import annotations

import re
import secrets
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

import psutil

from client import (KernelSession, RssSampler, find_processes, ignores_sigint,
                    kill_processes, process_names, survivors, wait_for_process)
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
    connection_cells: int = 50
    #: How long processes on the SSH host may take to go after a shutdown.
    host_cleanup_wait: float = 8.0
    #: Figure 8: cells whose connection is dropped, and when in the cell.
    reconnect_repeats: int = 3
    reconnect_kill_after: float = 1.0
    reconnect_timeout: float = 60.0

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
def trivial_round_trip(session: KernelSession, profile: KernelProfile, settings: Settings,
                       twin: KernelSession | None = None) -> dict:
    """Round trips of a cell that does nothing.

    With `twin` (the local shell_kernel, for an SSH kernel) the two kernels
    take turns, cell by cell, so both see the same load on the machine and
    the difference between them is not skewed by whatever else runs.
    """
    code = profile.snippets.trivial
    runs = min(settings.trivial_runs, profile.trivial_runs or settings.trivial_runs)
    kernels = [session] if twin is None else [session, twin]
    samples = _take_turns(kernels, code, runs, settings)
    result = _round_trips(samples[session])
    result["code"] = code
    if twin is not None:
        result["twin"] = {"kernel": profile.local_twin, "kernelspec": twin.kernelspec,
                          **_round_trips(samples[twin])}
    return result


def _take_turns(kernels: list[KernelSession], code: str, runs: int,
                settings: Settings) -> dict[KernelSession, list[float]]:
    """Round trips in ms of `runs` cells on each kernel, the kernels taking
    turns cell by cell (and who goes first alternating), after warm-up cells."""
    for _ in range(settings.trivial_warmup):
        for kernel in kernels:
            _expect_ok(kernel.execute(code, settings.cell_timeout), "warm-up cell")
    samples: dict[KernelSession, list[float]] = {kernel: [] for kernel in kernels}
    for i in range(runs):
        for kernel in (kernels if i % 2 == 0 else kernels[::-1]):
            ex = kernel.execute(code, settings.cell_timeout)
            _expect_ok(ex, "trivial cell")
            samples[kernel].append(ex.elapsed * 1000)
    return samples


def _round_trips(samples: list[float]) -> dict:
    return {"runs": len(samples), "median_ms": statistics.median(samples),
            "p90_ms": percentile(samples, 0.9), "min_ms": min(samples),
            "samples_ms": [round(s, 4) for s in samples]}


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
    received = "".join(stdout)
    if profile.stdout_preamble:
        received, removed = re.subn("^" + profile.stdout_preamble, "", received, count=1)
        result["preamble_removed"] = bool(removed)
    result.update(seconds=ex.elapsed, mb_per_s=ex.stream_bytes / MB / ex.elapsed,
                  status=ex.status, idle_lost=ex.idle_lost,
                  complete=completeness(received, expected_count_lines(lines)))
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
        if not wait_for_process(pattern, timeout=10, program=True):
            raise FigureError(f"{case}: the process did not start")
    time.sleep(settings.interrupt_delay)
    if pattern is not None:
        # A process that ignores SIGINT can only be stopped by escalation.
        # (Read after the delay: a program sets its handlers after it starts.)
        result["sigint_ignored"] = any(ignores_sigint(p)
                                       for p in find_processes(pattern, program=True))
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
        result["survivor_names_at_cap"] = process_names(left)
        session.restart()
        result["restarted"] = True
        left = survivors(pattern, grace=1.0) if pattern else []
    result["survivors"] = None if pattern is None else len(left)
    result["survivor_names"] = process_names(left)
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
    """Start times (to ready, plus the setup cell if the kernel has one), and
    as a by-product the time shutdown_kernel() takes."""
    samples, ready, setups, shutdowns, statuses = [], [], [], [], []
    for _ in range(settings.starts):
        session = new_session()
        try:
            ready.append(session.start())
            setups.append(session.setup_s)
            samples.append(ready[-1] + (session.setup_s or 0.0))
        finally:
            started = time.perf_counter()
            statuses.append(session.shutdown())
            shutdowns.append(time.perf_counter() - started)
    setup = None
    if any(s is not None for s in setups):
        setup = {"code": session.setup, "median_s": statistics.median(setups),
                 "samples_s": setups, "ready_median_s": statistics.median(ready),
                 "ready_samples_s": ready}
    return {"starts": len(samples), "median_s": statistics.median(samples), "setup": setup,
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
    result["idle_lost"] = ex.idle_lost
    result["reply_metadata"] = ex.reply.get("metadata", {}).get("shell_kernel")
    return result


# ---------------------------------------------------------- 6. connections
def _tcp_to(pids: set[int], port: int) -> int:
    """ESTABLISHED TCP connections from these processes to 127.0.0.1:port."""
    count = 0
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:
            continue
        count += sum(1 for c in conns if c.raddr and c.raddr.port == port
                     and c.status == psutil.CONN_ESTABLISHED)
    return count


def _tree(pid: int) -> set[int]:
    try:
        proc = psutil.Process(pid)
        return {pid, *(child.pid for child in proc.children(recursive=True))}
    except psutil.Error:
        return set()


def _host_processes(server, exclude: set[int], wait: float) -> list[psutil.Process]:
    """Processes below the sshd listener (sessions, shells, whatever they
    left: the test server is a child subreaper, so orphans stay below it),
    once none are left or `wait` seconds have passed."""
    deadline = time.perf_counter() + wait
    while True:
        try:
            found = [p for p in psutil.Process(server.pid).children(recursive=True)
                     if p.pid not in exclude]
        except psutil.Error:
            return []
        if not found or time.perf_counter() >= deadline:
            return found
        time.sleep(0.1)


def connections(new_session: Callable[[], KernelSession], profile: KernelProfile,
                settings: Settings, ssh) -> dict:
    """A fresh kernel runs `connection_cells` cells (output, a cd, a failing
    cell, an interrupted sleep); the TCP connections from the kernel to sshd,
    sshd's per-connection processes and its logins are counted after every
    cell, and what is left on the host after shutdown_kernel().
    `ssh` is the run's sshenv.SSHEnvironment."""
    server = ssh.server
    # Earlier kernels' processes may take a few seconds to go; wait for them.
    earlier = {p.pid for p in _host_processes(server, set(), settings.host_cleanup_wait)}
    baseline = set(server.session_pids())
    logins_before = ssh.logins()
    tcp, sessions, logged_in = [], [], []
    failures: list[str] = []
    session = new_session()
    try:
        session.start()
        kernel = session.pid
        interrupt_at = settings.connection_cells // 2
        for i in range(1, settings.connection_cells + 1):
            if i == interrupt_at:
                seconds = f"1000.{secrets.randbelow(10**6):06d}"
                msg_id = session.submit(f"sleep {seconds}")
                if not wait_for_process(f"sleep {seconds}", timeout=10, program=True):
                    failures.append(f"cell {i}: the sleep did not start")
                time.sleep(0.2)
                now = time.perf_counter()
                session.km.interrupt_kernel()
                ex = session.collect(msg_id, now, now + profile.interrupt_cap)
                expect_error = True
            else:
                code = {10: "cd /tmp", 40: "false"}.get(i, f"echo cell {i}")
                ex = session.execute(code, settings.cell_timeout)
                expect_error = code == "false"
            if not ex.finished or (ex.status == "error") != expect_error:
                failures.append(f"cell {i}: {ex.status if ex.finished else 'no reply'}")
            tcp.append(_tcp_to(_tree(kernel), server.port))
            sessions.append(len(set(server.session_pids()) - baseline))
            logged_in.append(len(set(server.session_pids(authenticated=True)) - baseline))
        logins = ssh.logins() - logins_before
    finally:
        session.shutdown()
    # Everything the kernel opened should be gone once it has shut down.
    left_procs = _host_processes(server, earlier, settings.host_cleanup_wait)
    left = len(set(server.session_pids()) - baseline)
    return {"host_processes_left": process_names(left_procs),
            "host_cleanup_wait_s": settings.host_cleanup_wait, "earlier_processes": len(earlier),
            "cells": settings.connection_cells, "tcp_after": tcp[-1], "tcp_max": max(tcp),
            "tcp_min": min(tcp), "sessions_after": sessions[-1], "sessions_max": max(sessions),
            "logged_in_after": logged_in[-1], "logins": logins,
            "sessions_after_shutdown": left, "cell_failures": failures,
            "ok": tcp[-1] == 1 and max(tcp) == 1 and sessions[-1] == 1 and max(sessions) == 1
            and logins == 1}


# ------------------------------------------------- 7. durable per-cell cost
def durable_overhead(new_session: Callable[[], KernelSession],
                     new_ephemeral: Callable[[], KernelSession], profile: KernelProfile,
                     settings: Settings) -> dict:
    """Trivial cells on a fresh durable SSH kernel and a fresh --ephemeral
    one (same sshd, same flags otherwise), taking turns cell by cell."""
    code = profile.snippets.trivial
    durable, ephemeral = new_session(), new_ephemeral()
    try:
        durable.start()
        ephemeral.start()
        samples = _take_turns([durable, ephemeral], code, settings.trivial_runs, settings)
    finally:
        durable.shutdown()
        ephemeral.shutdown()
    d, e = samples[durable], samples[ephemeral]
    # Cell i of each kernel ran back to back: their difference is the paired one.
    paired = [a - b for a, b in zip(d, e)]
    return {"code": code, "runs": len(d), "durable": _round_trips(d), "ephemeral": _round_trips(e),
            "diff_ms": statistics.median(d) - statistics.median(e),
            "paired_diff_median_ms": statistics.median(paired),
            "budget_ms": profile.durable_budget_ms}


# ----------------------------------------------- 8. connection lost mid-cell
TICKS = 60


def tick_code(n: int = TICKS) -> str:
    return f"for i in $(seq 1 {n}); do echo tick-$i; sleep 0.1; done"


def _tick_count(text: str) -> dict:
    lines = text.splitlines()
    expected = [f"tick-{i}" for i in range(1, TICKS + 1)]
    return {"lines": len(lines), "distinct": len(set(lines) & set(expected)),
            "duplicated": len(lines) - len(set(lines)),
            "missing": len(set(expected) - set(lines))}


def _one_drop(session: KernelSession, server, settings: Settings) -> dict:
    code = tick_code()
    events: list[tuple[float, str, str]] = []  # (arrival, stream name, text)
    kill: dict = {}

    def on_stream(name: str, text: str) -> None:
        events.append((time.perf_counter(), name, text))

    def drop() -> None:
        kill["start"] = time.perf_counter()
        kill["pids"] = len(server.kill_sessions())
        kill["end"] = time.perf_counter()

    started = time.perf_counter()
    msg_id = session.submit(code)
    timer = threading.Timer(settings.reconnect_kill_after, drop)
    timer.start()
    try:
        ex = session.collect(msg_id, started, started + settings.reconnect_timeout, on_stream)
    finally:
        timer.cancel()
        timer.join()
    if "end" not in kill:
        raise FigureError("the connection was not dropped (the cell ended first?)")
    stdout = [(t, text) for t, name, text in events if name == "stdout"]
    stderr = [(t, text) for t, name, text in events if name == "stderr"]
    received = "".join(text for _, text in stdout)
    stderr_text = "".join(text for _, text in stderr)
    # The kernel's "Connection lost; reconnecting" notice goes out after all
    # the output the old connection carried and before any the new one does
    # (one ordered queue): stdout after it is resumed output.
    noticed = next((t for t, text in stderr if "Connection lost" in text), None)
    reconnected = next((t for t, text in stderr if "Reconnected" in text), None)
    split = noticed if noticed is not None else kill["end"]
    before = [t for t, _ in stdout if t < split]
    after = [t for t, _ in stdout if t > split]
    times = [t for t, _ in stdout]
    gaps = [b - a for a, b in zip(times, times[1:])]
    metadata = (ex.reply or {}).get("metadata", {}).get("shell_kernel") or {}
    expected = "".join(f"tick-{i}\n" for i in range(1, TICKS + 1))
    result = {
        "code": code, "finished": ex.finished, "status": ex.status,
        "exit_code": metadata.get("exit_code"), "seconds": ex.elapsed,
        "kill_at_s": kill["start"] - started, "kill_call_s": kill["end"] - kill["start"],
        "pids_killed": kill["pids"],
        "last_before_kill_s": (kill["start"] - max(t for t in before if t < kill["start"]))
        if any(t < kill["start"] for t in before) else None,
        "noticed_s": None if noticed is None else noticed - kill["end"],
        "reconnected_notice_s": None if reconnected is None else reconnected - kill["end"],
        "kill_to_output_s": after[0] - kill["end"] if after else None,
        "drop_gap_s": after[0] - before[-1] if after and before else None,
        "max_gap_s": max(gaps) if gaps else None,
        "stdout_messages": len(stdout),
        "attempts": stderr_text.count("reconnecting to the same shell (attempt"),
        "complete": completeness(received, expected), **_tick_count(received),
        "stderr": stderr_text[:600],
    }
    result["ok"] = (result["complete"] == "ok" and ex.status == "ok"
                    and result["exit_code"] == 0 and bool(after))
    return result


def _shell_pid(session: KernelSession, settings: Settings) -> str | None:
    out: list[str] = []
    ex = session.execute("echo $$", settings.cell_timeout,
                         lambda name, text: out.append(text) if name == "stdout" else None)
    return "".join(out).strip() if ex.ok else None


def reconnect(new_session: Callable[[], KernelSession], profile: KernelProfile,
              settings: Settings, ssh) -> dict:
    """A fresh durable kernel runs the tick cell `reconnect_repeats` times;
    each time, `reconnect_kill_after` s in, every sshd per-connection process
    is killed (SSHServer.kill_sessions(): the connection drops, the detached
    shell on the host lives on). `ssh` is the run's sshenv.SSHEnvironment."""
    server = ssh.server
    # Earlier kernels' sessions would be killed too: let them go first.
    earlier = {p.pid for p in _host_processes(server, set(), settings.host_cleanup_wait)}
    session = new_session()
    repeats = []
    try:
        session.start()
        _expect_ok(session.execute(profile.snippets.trivial, settings.cell_timeout), "first cell")
        shell_before = _shell_pid(session, settings)
        for _ in range(settings.reconnect_repeats):
            repeats.append(_one_drop(session, server, settings))
            repeats[-1]["same_shell"] = _shell_pid(session, settings) == shell_before
    finally:
        session.shutdown()
    # The detached shell too must be gone after shutdown_kernel(), reattached or not.
    left = _host_processes(server, earlier, settings.host_cleanup_wait)

    def median(key: str) -> float | None:
        values = [r[key] for r in repeats if r.get(key) is not None]
        return statistics.median(values) if values else None

    return {"code": tick_code(), "kill_after_s": settings.reconnect_kill_after,
            "repeats": repeats, "median_kill_to_output_s": median("kill_to_output_s"),
            "median_max_gap_s": median("max_gap_s"), "median_s": median("kill_to_output_s"),
            "median_noticed_s": median("noticed_s"),
            "median_last_before_kill_s": median("last_before_kill_s"),
            "host_processes_left": process_names(left),
            "ok": all(r["ok"] and r["same_shell"] for r in repeats) and not left}
