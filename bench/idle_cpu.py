"""What an idle kernel costs the machine it runs on: CPU time per minute.

    .venv/bin/python bench/idle_cpu.py [--kernels shell,shell-ssh,...] [--settle 20]
                                       [--idle 60] [--turns 2]

For each kernel (bench/kernels.py's profiles; the SSH ones reach the throw-away
sshd of bench/sshenv.py), started with jupyter_client: one trivial cell, then
--settle seconds, then the CPU time (user + system) of the kernel process and
its descendants on this machine over --idle seconds of doing nothing; for the
SSH kernels also the host side: the processes under the test sshd (the
session's shell, its prompt watcher, relay and watchdog; what they fork is
bench/host_forks.py's count). The kernels take turns (--turns rounds, the
median reported), all in one run, with the ratio to ipykernel's.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import psutil
from jupyter_client.manager import KernelManager

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels import KERNELS  # noqa: E402
from sshenv import SSHEnvironment  # noqa: E402

DEFAULT_KERNELS = "shell,shell-ssh,shell-ssh-ephemeral,bash,python3"


def tree_cpu(root: psutil.Process) -> float:
    """CPU seconds of root and its living descendants: every thread's time on
    a CPU from /proc/PID/task/TID/schedstat, in nanoseconds (rusage and
    psutil count clock ticks, too coarse for an idle minute)."""
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        for stat in Path(f"/proc/{proc.pid}/task").glob("*/schedstat"):
            try:
                total += int(stat.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # a thread or process that ended meanwhile
    return total / 1e9


def idle_cpu(spec: str, env: dict | None, setup: str | None, trivial: str, settle: float,
             idle: float, host: psutil.Process | None) -> tuple[float, float | None]:
    """CPU milliseconds per minute of one idle kernel, and of the processes
    under host (the test sshd) meanwhile."""
    manager = KernelManager(kernel_name=spec)
    manager.start_kernel(env=env or dict(os.environ))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        for code in filter(None, [setup, trivial]):
            reply = client.execute_interactive(code, timeout=60, output_hook=lambda msg: None)
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"{spec}: {code!r} failed: {reply['content']}")
        time.sleep(settle)
        kernel = psutil.Process(manager.provisioner.pid)
        before, started = tree_cpu(kernel), time.monotonic()
        host_before = tree_cpu(host) if host is not None else 0.0
        time.sleep(idle)
        per_minute = 1000 * 60 / (time.monotonic() - started)
        host_cpu = (tree_cpu(host) - host_before) * per_minute if host is not None else None
        return (tree_cpu(kernel) - before) * per_minute, host_cpu
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", default=DEFAULT_KERNELS)
    parser.add_argument("--settle", type=float, default=20.0,
                        help="seconds after the first cell before counting (default 20)")
    parser.add_argument("--idle", type=float, default=60.0, help="idle seconds counted (default 60)")
    parser.add_argument("--turns", type=int, default=2, help="rounds, the kernels in turn (default 2)")
    args = parser.parse_args()
    names = args.kernels.split(",")
    unknown = [name for name in names if name not in KERNELS]
    if unknown:
        sys.exit(f"unknown kernels: {', '.join(unknown)} (known: {', '.join(KERNELS)})")
    profiles = [KERNELS[name] for name in names]
    for profile in profiles:
        if profile.ensure_installed is not None:
            profile.ensure_installed()
    figures: dict[str, list[float]] = {name: [] for name in names}
    host_figures: dict[str, list[float]] = {name: [] for name in names}
    load = os.getloadavg()
    with SSHEnvironment(want_sshkernel="sshkernel" in names) as ssh:
        for turn in range(args.turns):
            for profile in profiles:
                if profile.kernelspec in ssh.unavailable:
                    continue
                figure, host = idle_cpu(
                    profile.kernelspec, ssh.kernel_env(profile.kernelspec), profile.setup_code,
                    profile.snippets.trivial, args.settle, args.idle,
                    psutil.Process(ssh.server.pid) if profile.ssh else None)
                figures[profile.name].append(figure)
                if host is not None:
                    host_figures[profile.name].append(host)
                print(f"turn {turn + 1}: {profile.label}: {figure:.1f} ms CPU per idle minute"
                      + (f", host side {host:.1f}" if host is not None else ""),
                      file=sys.stderr, flush=True)
    medians = {name: statistics.median(values) for name, values in figures.items() if values}
    host_medians = {name: statistics.median(values) for name, values in host_figures.items()
                    if values}
    base = medians.get("python3")
    print(f"Idle kernels: CPU time of the kernel's processes on this machine per minute of "
          f"idleness, {time.strftime('%Y-%m-%d %H:%M')} on {platform.system()} "
          f"{platform.machine()}, {os.cpu_count()} CPUs, load {load[0]:.2f} at the start; "
          f"{args.idle:g} s counted after {args.settle:g} s, median of {args.turns} turns:\n")
    print("| kernel | ms CPU per idle minute | vs ipykernel | on the SSH host |")
    print("|---|---|---|---|")
    for profile in profiles:
        if profile.name in medians:
            ratio = f"{medians[profile.name] / base:.2f}×" if base else "n/a"
            host = f"{host_medians[profile.name]:.1f}" if profile.name in host_medians else ""
            print(f"| {profile.label} | {medians[profile.name]:.1f} | {ratio} | {host} |")
        else:
            print(f"| {profile.label} | not measured: {ssh.unavailable.get(profile.kernelspec)} | | |")


if __name__ == "__main__":
    main()
