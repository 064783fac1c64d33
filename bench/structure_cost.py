"""What the session engine's structure costs a fleet: `run --hosts` beside
two runners that do the same host-side work without the engine
(bench/lean_runner.py: one thread a host, and the same work handed between
a pump, an I/O and a reader thread a host), and parallel-ssh as the
yardstick, on the loopback sshd's hosts (bench/fleet.py's), all at once.

    .venv/bin/python bench/structure_cost.py [--hosts 100] [--repeat 7] [--variants]

Every contender runs --repeat times, in turns (A B C D A B C D ...); the
median-wall run of each is shown: wall, the runner's CPU (user part),
the host side's CPU, and the runner's context switches (all its threads,
rusage) per host. A runner that hands a cell's work between threads pays
for it in switches and CPU at every cell of every host.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from fleet import Hosts, measure, notebook, paired, pssh_run, shell_kernel_run  # noqa: E402


#: --variants: the threaded runner with one thread out of the chain at a time.
VARIANTS = {
    "the same, a cell's lines sent by the pump (no I/O thread a cell)": ["--sends", "pump"],
    "the same, paramiko's thread feeding the pump (no reader thread)": ["--reader", "paramiko"],
    "the same, the pump's work done by the caller as it waits": ["--pump", "caller"],
    "the same, the caller as the pump, fed by paramiko's thread":
        ["--pump", "caller", "--reader", "paramiko"],
}


def lean_run(hosts: Hosts, nb: Path, n: int, work: Path, shape: str, *flags: str) -> dict:
    out = work / f"lean-{shape}"
    result = measure([sys.executable, HERE / "lean_runner.py", "--shape", shape, *flags,
                      ",".join(hosts.names[:n]), hosts.config, nb, out], hosts)
    words = result["output_tail"].split()
    result["ok_hosts"] = int(words[-1]) if words[-2:-1] == ["ok"] else 0
    shutil.rmtree(out, ignore_errors=True)
    return result


def render(results: dict[str, dict], n: int) -> str:
    yardstick = results.get("parallel-ssh (pool = hosts)", {}).get("wall_s")
    lean = results["one thread a host (lean_runner.py --shape lean)"]
    lines = [f"{n} hosts at once, five trivial cells; medians of the turns:", "",
             "| runner | wall | vs parallel-ssh | runner CPU (user) | vs lean | host CPU "
             "| context switches a host | hosts ok |",
             "|---|---|---|---|---|---|---|---|"]
    for name, row in results.items():
        versus = f"{row['wall_s'] / yardstick:.2f}x" if yardstick else "-"
        lines.append(f"| {name} | {row['wall_s']:.2f} s | {versus} | {row['cpu_s']:.2f} s "
                     f"({row['user_s']:.2f}) | {row['cpu_s'] / lean['cpu_s']:.2f}x | "
                     f"{row['host_cpu_s']:.2f} s | {row['context_switches'] / n:.0f} | "
                     f"{row['ok_hosts']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--variants", action="store_true",
                        help="also the threaded runner with one thread out of the chain at a "
                             "time (VARIANTS), in the same turns")
    parser.add_argument("--json", type=Path, default=None, help="also write the runs here")
    args = parser.parse_args(argv)
    n = args.hosts
    work = Path(tempfile.mkdtemp(prefix="structure-cost-"))
    try:
        nb = notebook(work / "five.ipynb")
        runs = {
            "run --hosts": lambda on: shell_kernel_run(on, nb, n, n, work),
            "pump, I/O and reader threads a host (lean_runner.py --shape threads)":
                lambda on: lean_run(on, nb, n, work, "threads"),
            **({name: lambda on, flags=flags: lean_run(on, nb, n, work, "threads", *flags)
                for name, flags in VARIANTS.items()} if args.variants else {}),
            "one thread a host (lean_runner.py --shape lean)":
                lambda on: lean_run(on, nb, n, work, "lean"),
            "parallel-ssh (pool = hosts)": lambda on: pssh_run(on, n, n),
        }
        results = paired(args.repeat, runs, lambda number: Hosts(work / f"round-{number}", n))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(render(results, n), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
