"""Where a fleet session's CPU goes, per host: the runner's threads, and the
host's bash by piece. The fleet figure (bench/fleet.py) says how long a run
takes; this says which part of a session to make cheaper.

    .venv/bin/python bench/session_cost.py [--hosts 100] [--repeat 3] [--bash-runs 100]

Runner: `run five.ipynb --hosts` on the loopback sshd (bench/fleet.py's
hosts) at --jobs 1 (20 hosts, one session at a time) and at --jobs N (N
hosts at once), and the session floor (bench/fleet.py's, a bare paramiko
thread per host fed a session's bytes), each with every thread's CPU time
(time.thread_time at its end, summed by kind of thread) in milliseconds
per host. Same figures at --jobs 1 and --jobs N mean the cost is the work
itself, not the threads' contention for the GIL.

Host: the same login bash a session starts, run locally --bash-runs times
per row on what a session sends it, cut after each piece (the login shell
alone, + the session script, + the hidden first cell and five `:` cells,
+ the five real cells, + the close), beside `bash -c` of the five commands
(what parallel-ssh's host runs): CPU of bash and what it forks, in ms per
session (rusage of the children), the median of --repeat rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from fleet import FLOOR_CODE, STEPS, Hosts, measure, notebook  # noqa: E402

#: Put first on the runner's PYTHONPATH: each thread's CPU time at its end,
#: by kind, written as JSON to $SESSION_COST_OUT when the runner exits.
ACCOUNTING = '''
import atexit, collections, json, os, threading, time
_cpu = collections.Counter()
_start = threading.Thread.start

def _kind(thread):
    if type(thread).__name__ == "Transport":
        return "paramiko transport"
    from shell_kernel.threads import by_name
    kind = by_name(thread.name)
    return kind.name if kind else type(thread).__name__

def start(self):
    run, kind = self.run, _kind(self)
    def counted():
        try:
            run()
        finally:
            _cpu[kind] += time.thread_time()
    self.run = counted
    _start(self)

threading.Thread.start = start

def report():
    # Threads still ending (a closed connection's transport) are waited for,
    # so that they count; one that will not end is named in the table.
    deadline = time.monotonic() + 5
    for thread in threading.enumerate():
        if thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
    left = sum(thread.is_alive() for thread in threading.enumerate()
               if thread is not threading.current_thread())
    _cpu["main (start-up, the run's loop)"] = time.thread_time()
    if left:
        _cpu[f"({left} threads still running: not counted)"] = 0.0
    open(os.environ["SESSION_COST_OUT"], "w").write(json.dumps(_cpu))

atexit.register(report)
'''


def runner_threads(hosts: Hosts, work: Path, n: int, jobs: int, floor: bool) -> dict:
    out = work / "threads.json"
    env = {**os.environ, "PYTHONPATH": f"{work}:{HERE.parent}", "SESSION_COST_OUT": str(out)}
    if floor:
        argv = [sys.executable, "-c", FLOOR_CODE, ",".join(hosts.names[:n]), hosts.config,
                "--session", *STEPS]
    else:
        argv = [sys.executable, "-m", "shell_kernel", "run", work / "five.ipynb", "--hosts",
                f"@{hosts.host_file(n)}", "--ssh-config", hosts.config, "--jobs", jobs,
                "--output-dir", work / "out"]
    result = measure(argv, hosts, env=env, cwd=str(work))
    shutil.rmtree(work / "out", ignore_errors=True)
    if result["status"] != 0:
        raise SystemExit(f"the run failed: {result['output_tail']}")
    per_host = {kind: seconds * 1000 / n for kind, seconds in json.loads(out.read_text()).items()}
    return {"per_host_ms": per_host, "runner_ms_per_host": result["cpu_s"] * 1000 / n,
            "wall_s": result["wall_s"]}


def host_pieces(runs: int, repeat: int) -> dict:
    """ms of CPU per session of the login bash, cut after each piece."""
    from shell_kernel import protocol, provenance
    from shell_kernel.backends import bash_argv
    root = Path(tempfile.mkdtemp(prefix="session-cost-"))
    (root / "home").mkdir()
    (root / "tmp").mkdir()
    for rc in (".bashrc", ".profile"):
        (root / "home" / rc).write_text("")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root / "home"),
           "TMPDIR": str(root / "tmp"), "USER": "bench", "LOGNAME": "bench", "LANG": "C.UTF-8"}
    token = secrets.token_hex(8)

    def cells(sources):
        return b"".join(protocol.eval_lines(protocol.prepare_cell(source).source, seq)
                        for seq, source in enumerate(sources, 1))

    boot = protocol.bootstrap_lines(protocol.session_script(token, queries=False)) \
        + protocol.stdin_line(None)
    hooks = cells([provenance.PROBE] + [":"] * len(STEPS))
    login = bash_argv("bash", clean=False, completion=False)
    rows = {
        "bash -c (parallel-ssh's host)": (["bash", "-c", "; ".join(STEPS)], b""),
        "login shell": (login, b""),
        "+ session script": (login, boot),
        "+ first cell, five `:` cells": (login, boot + hooks),
        "+ the five cells instead": (login, boot + cells([provenance.PROBE, *STEPS])),
        "+ close (whole session)": (login, boot + cells([provenance.PROBE, *STEPS])
                                    + protocol.close_line(secrets.token_hex(8))),
    }
    rounds: dict[str, list[float]] = {name: [] for name in rows}
    try:
        for _ in range(repeat):
            for name, (argv, data) in rows.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                for _ in range(runs):
                    subprocess.run(argv, input=data, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, env=env, cwd=root)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                rounds[name].append(cpu * 1000 / runs)
                for left in (root / "tmp").iterdir():  # the rows without a close
                    shutil.rmtree(left, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {name: statistics.median(values) for name, values in rounds.items()}


def render(threads: dict[str, dict], pieces: dict[str, float]) -> str:
    columns = list(threads)
    kinds = sorted({kind for row in threads.values() for kind in row["per_host_ms"]},
                   key=lambda kind: -max(row["per_host_ms"].get(kind, 0) for row in threads.values()))
    lines = ["Runner CPU, ms per host, by thread:", "",
             "| thread | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for kind in kinds:
        lines.append(f"| {kind} | " + " | ".join(
            f"{threads[c]['per_host_ms'].get(kind, 0):.2f}" for c in columns) + " |")
    lines.append("| **runner process (rusage)** | " + " | ".join(
        f"**{threads[c]['runner_ms_per_host']:.1f}**" for c in columns) + " |")
    lines += ["", "Host CPU of one session's bash and what it forks, ms:", "",
              "| what the bash is given | ms | added |", "|---|---|---|"]
    previous = None
    for name, ms in pieces.items():
        added = "" if previous is None or name.startswith("bash -c") else f"{ms - previous:+.2f}"
        lines.append(f"| {name} | {ms:.2f} | {added} |")
        previous = None if name.startswith("bash -c") else ms
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bash-runs", type=int, default=100)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="session-cost-"))
    (work / "sitecustomize.py").write_text(ACCOUNTING)
    notebook(work / "five.ipynb")
    hosts = Hosts(work / "hosts", args.hosts)
    try:
        few = min(20, args.hosts)
        threads = {f"{few} hosts, --jobs 1": runner_threads(hosts, work, few, 1, False),
                   f"{args.hosts} hosts, --jobs {args.hosts}":
                       runner_threads(hosts, work, args.hosts, args.hosts, False),
                   f"session floor, {args.hosts} hosts":
                       runner_threads(hosts, work, args.hosts, args.hosts, True)}
    finally:
        hosts.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(render(threads, host_pieces(args.bash_runs, args.repeat)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
