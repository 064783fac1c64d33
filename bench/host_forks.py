"""Processes an SSH kernel's session starts on its host: idle, and per cell.

    .venv/bin/python bench/host_forks.py [--settle 60] [--idle 60] [--cells 50]

Starts the test sshd (shell_kernel.testing.sshd.SSHServer, as bench/fleet.py
does) on 127.0.0.1 and attaches `strace -f -e trace=clone,clone3,fork,vfork`
to its listener: every process on the host side (each connection's sshd, the
login shell, the session's detached shell, wrapper, watchdog, copiers, relay
and side shell) descends from it. A new process is a fork or clone without
CLONE_THREAD that returned a pid. For each kernel kind (the default durable
session, --ephemeral, and a named one, --session NAME), installed with
`python -m shell_kernel install --prefix ... --ssh ALIAS --ssh-config CFG`
as bench/sshenv.py does, it starts a kernel (jupyter_client), runs one cell,
lets it settle for --settle seconds (the first minute: the session's start
and the background sweep), counts the new processes over --idle seconds of
idleness, then over --cells cells of `true` run one after the other, and
prints a markdown table. strace slows every process it traces, which does
not change how many there are.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.manager import KernelManager

from shell_kernel.testing import sshd

ALIAS = "forkhost"
SESSION_NAME = "host-forks-bench"
#: Kernel kinds: (label, extra install flags).
KINDS = [
    ("durable (default)", []),
    ("--ephemeral", ["--ephemeral"]),
    (f"named (--session {SESSION_NAME})", ["--session", SESSION_NAME]),
]
# "PID TIME clone(...) = CHILD", or its "<... clone resumed> ...) = CHILD" half.
CALL = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(?:(clone3?|v?fork)\((.*)|<\.\.\. (clone3?|v?fork) resumed>(.*))$")
STARTED = re.compile(r"\)\s+=\s+(\d+)$")


def run(argv: list[str], **kwargs) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-500:]}")


class Tracer:
    """strace -f on a process and all it starts from now on; processes_started
    counts the new processes within a span of time."""

    def __init__(self, pid: int, out: Path):
        self.out = out
        self._proc = subprocess.Popen(
            ["strace", "-f", "-ttt", "-qq", "-e", "trace=clone,clone3,fork,vfork",
             "-e", "signal=none", "-o", str(out), "-p", str(pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while not (out.exists() or self._proc.poll() is not None) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # attached (strace makes the file at once, then attaches)
        if self._proc.poll() is not None:
            raise RuntimeError(f"strace failed: {self._proc.stderr.read().decode()[-500:]}")

    def processes_started(self, since: float, until: float) -> int:
        """Processes (not threads) that a traced process started in [since, until)."""
        count = 0
        pending: dict[int, tuple[float, bool]] = {}  # pid -> (time, is a thread)
        for line in self.out.read_text(errors="replace").splitlines():
            m = CALL.match(line)
            if not m:
                continue
            pid, at = int(m.group(1)), float(m.group(2))
            if m.group(3):  # the call (whole, or unfinished)
                rest = m.group(4)
                thread = "CLONE_THREAD" in rest
                if rest.endswith("<unfinished ...>"):
                    pending[pid] = (at, thread)
                    continue
            else:
                at, thread = pending.pop(pid, (at, False))
                rest = m.group(6)
            if not thread and STARTED.search(rest) and since <= at < until:
                count += 1
        return count

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def execute(client, code: str, timeout: float = 60) -> None:
    reply = client.execute_interactive(code, timeout=timeout, output_hook=lambda msg: None)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"cell {code!r} failed: {reply['content']}")


def measure(spec: str, tracer: Tracer, settle: float, idle: float, cells: int) -> tuple[int, int, float]:
    """(new processes over `idle` seconds, over `cells` cells, the cells' seconds)."""
    manager = KernelManager(kernel_name=spec)
    manager.start_kernel()
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        execute(client, "true")
        time.sleep(settle)
        start = time.time()
        time.sleep(idle)
        idle_forks = tracer.processes_started(start, time.time())
        start = time.time()
        for _ in range(cells):
            execute(client, "true")
        end = time.time()
        time.sleep(1.5)  # the last acknowledgement (at most one a second) comes after the cell
        cell_forks = tracer.processes_started(start, time.time())
        return idle_forks, cell_forks, end - start
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settle", type=float, default=60.0,
                        help="seconds after the first cell before the idle count (default 60)")
    parser.add_argument("--idle", type=float, default=60.0, help="idle seconds counted (default 60)")
    parser.add_argument("--cells", type=int, default=50, help="trivial cells counted (default 50)")
    args = parser.parse_args()
    if not sshd.ssh_available() or shutil.which("strace") is None:
        sys.exit("needs OpenSSH (sshd, ssh, ssh-keygen) and strace")
    root = Path(tempfile.mkdtemp(prefix="shell-kernel-host-forks-"))
    server = sshd.SSHServer(root / "sshd", name="host-forks-sshd")
    old_jupyter_path = os.environ.get("JUPYTER_PATH")
    tracer = None
    rows = []
    try:
        server.start()
        config = server.write_ssh_config(root / "ssh_config", alias=ALIAS)
        prefix = root / "prefix"
        ssh_flags = ["--ssh", ALIAS, "--ssh-config", str(config)]
        specs = []
        for n, (label, flags) in enumerate(KINDS):
            spec = f"host-forks-{n}"
            run([sys.executable, "-m", "shell_kernel", "install", "--prefix", str(prefix),
                 "--name", spec, *ssh_flags, *flags])
            specs.append((label, spec))
        os.environ["JUPYTER_PATH"] = str(prefix / "share" / "jupyter")
        tracer = Tracer(server.pid, root / "strace.out")
        for label, spec in specs:
            idle_forks, cell_forks, seconds = measure(spec, tracer, args.settle, args.idle,
                                                      args.cells)
            rows.append((label, idle_forks * 60 / args.idle, cell_forks / args.cells, seconds))
            print(f"{label}: {idle_forks} in {args.idle:g} s idle, {cell_forks} over "
                  f"{args.cells} cells ({seconds:.1f} s)", file=sys.stderr, flush=True)
        run([sys.executable, "-m", "shell_kernel", "sessions", *ssh_flags, "--kill",
             SESSION_NAME])
    finally:
        if tracer is not None:
            tracer.stop()
        if old_jupyter_path is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = old_jupyter_path
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"Processes started on the host (strace -f on the test sshd), {time.strftime('%Y-%m-%d %H:%M')}"
          f" on {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs; idle counted "
          f"over {args.idle:g} s after {args.settle:g} s, then {args.cells} cells of `true`:\n")
    print("| kernel | idle, per minute | per trivial cell | cells' wall time |")
    print("|---|---|---|---|")
    for label, idle, cell, seconds in rows:
        print(f"| {label} | {idle:g} | {cell:.2f} | {seconds:.1f} s |")


if __name__ == "__main__":
    main()
