"""Figure 9: attaching to a named session that printed 10 MB while no kernel
was attached (issue "Sessions that outlive the kernel").

A kernel with --session runs a cell that sleeps a moment and then prints
10 MB; the kernel is killed with SIGKILL before the cell prints anything;
once the cell has ended on the host, a new kernel with the same --session is
started and runs `true`. Measured from start_kernel() of the new kernel: the
first catch-up output (the cell's first bytes, after the one-line header) and
all 10 MB received, with the caught-up cell's exit status reported.

    .venv/bin/python bench/named_attach.py      # this figure alone, as JSON
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import sshenv
from client import KernelSession

SIZE = 10_000_000
SESSION = "bench-attach"
# 100 000 lines of 99 'x' and a newline: exactly SIZE bytes; status 3.
CELL = f"sleep 1; head -c {SIZE // 100 * 99} /dev/zero | tr '\\0' x | fold -w 99; echo; (exit 3)"


def _spec(ssh) -> str:
    name = "shell-ssh-bench-named"
    subprocess.run([sys.executable, "-m", "shell_kernel", "install", "--prefix", str(ssh.prefix),
                    "--name", name, "--ssh", sshenv.ALIAS, "--ssh-config", str(ssh.ssh_config),
                    "--session", SESSION], check=True, capture_output=True)
    return name


def _kill_session(ssh) -> None:
    subprocess.run([sys.executable, "-m", "shell_kernel", "sessions", "--ssh", sshenv.ALIAS,
                    "--ssh-config", str(ssh.ssh_config), "--kill", SESSION],
                   capture_output=True, timeout=60)


def _cell_done_on_host(ssh) -> None:
    """Wait until the killed kernel's cell has ended on the host."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listing = subprocess.run(
            [sys.executable, "-m", "shell_kernel", "sessions", "--ssh", sshenv.ALIAS,
             "--ssh-config", str(ssh.ssh_config)], capture_output=True, text=True, timeout=60)
        row = next((line.split() for line in listing.stdout.splitlines()
                    if line.startswith(SESSION + " ")), None)
        if row is not None and "cell" not in row:
            return
        time.sleep(0.5)
    raise RuntimeError("the detached cell did not end within 60 s")


def _one(ssh, spec: str, cwd: str, log) -> dict:
    first = KernelSession(spec, cwd, log)
    first.start()
    if not first.execute("true", 30).ok:
        raise RuntimeError("the first kernel's cell failed")
    time.sleep(1)  # the host has its acknowledgement of everything so far
    first.submit(CELL)
    time.sleep(0.3)
    os.kill(first.pid, signal.SIGKILL)
    first.shutdown(now=True)
    _cell_done_on_host(ssh)

    second = KernelSession(spec, cwd, log)
    received = {"stdout": 0}
    marks: dict = {}

    def on_stream(name: str, text: str) -> None:
        now = time.perf_counter()
        if name == "stdout":
            marks.setdefault("first_output", now)
            received["stdout"] += len(text)
        elif "exit status 3" in text:
            marks.setdefault("status", now)

    started = time.perf_counter()
    try:
        second.start()
        ready = time.perf_counter()
        msg_id = second.submit("true")
        ex = second.collect(msg_id, ready, ready + 120, on_stream)
        done = time.perf_counter()
    finally:
        second.shutdown()
    return {"ready_s": ready - started,
            "first_output_s": marks["first_output"] - started if "first_output" in marks else None,
            "all_received_s": done - started, "bytes": received["stdout"],
            "complete": received["stdout"] == SIZE, "status_reported": "status" in marks,
            "cell_ok": ex.ok}


def named_attach(ssh, cwd: str, log, repeats: int = 3) -> dict:
    """`ssh`: the run's sshenv.SSHEnvironment."""
    spec = _spec(ssh)
    runs = []
    try:
        for _ in range(repeats):
            _kill_session(ssh)
            runs.append(_one(ssh, spec, cwd, log))
    finally:
        _kill_session(ssh)

    def median(key: str) -> float | None:
        values = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(values) if values else None

    return {"code": CELL, "bytes_expected": SIZE, "runs": runs,
            "median_ready_s": median("ready_s"), "median_s": median("first_output_s"),
            "median_all_received_s": median("all_received_s"),
            "ok": all(r["complete"] and r["status_reported"] and r["cell_ok"] for r in runs)}


if __name__ == "__main__":
    with sshenv.SSHEnvironment(want_sshkernel=False) as environment, \
            tempfile.TemporaryDirectory() as work:
        print(json.dumps(named_attach(environment, work, None), indent=1))
