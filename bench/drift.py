"""The drift figure: what grouping hosts by output (shell_kernel/fleet_drift.py)
adds to a fleet run.

    .venv/bin/python bench/drift.py [--hosts 100] [--repeat 3] [--shards 2] [--out bench/README.md]

The hosts are bench/fleet.py's: one OpenSSH server on 127.0.0.1 under N ssh
config aliases. The notebook has five cells, one of which prints something
else on 3 hosts, one about 110 KB per host (`seq 1 20000`). Each repeat runs
`python -m shell_kernel run NB --hosts h1,...,hN --jobs N` and takes its wall
time and CPU (the runner's rusage). The grouping's own cost is then measured
on what that run wrote, doing what the runner does: every cell of every host
notebook fingerprinted (its host's names replaced, the digest made) as the
runner does when a cell ends, and the groups made from summary.json's hosts
as the report does; the CPU time of that, against the run's wall time and
CPU, is the figure (the repeat with the median wall time). The run's own
groups are checked: the drifted cell splits 97 / 3 on 100 hosts, and each
host's digests in summary.json are the ones made here. Then the same run as
--shards slices (`--shard I/N`, all at once, as N controllers would run them)
and `merge`: its summary.json must be the last whole run's, timings aside.
Writes the DRIFT section of --out and bench/results/drift.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fleet import Hosts, _load, _meta, log  # noqa: E402 - after the path
from report import write_section  # noqa: E402

BEGIN = "<!-- BEGIN DRIFT by bench/drift.py: edits below this line are overwritten -->"
END = "<!-- END DRIFT -->"
DRIFTED = "h1[0-2]"  # h10, h11, h12
CELLS = [
    '# Who\necho "$SHELL_KERNEL_HOST on $(hostname) as $(id -un)"',
    "# Accounts\nsha256sum /etc/passwd",
    f'# sshd setting\ncase "$SHELL_KERNEL_HOST" in {DRIFTED}) echo "PermitRootLogin yes";; '
    '*) echo "PermitRootLogin no";; esac',
    "# Packages\nseq 1 20000",
    "# Kernel\nuname -sr",
]


def notebook(path: Path) -> Path:
    import nbformat
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {
        "name": "shell", "display_name": "shell", "language": "bash"}})
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    nbformat.write(nb, path)
    return path


def run(hosts: Hosts, nb: Path, out_dir: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "shell_kernel", "run", str(nb), "--hosts",
                           ",".join(hosts.names), "--jobs", str(hosts.count), "--ssh-config",
                           str(hosts.config), "--output-dir", str(out_dir)],
                          capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "status": proc.returncode,
            "stdout_tail": proc.stdout[-1500:]}


def grouping_cost(out_dir: Path) -> dict:
    """The CPU seconds of fingerprinting every host's cells and grouping them,
    on the run's own files; and whether they agree with the run's."""
    import nbformat

    from shell_kernel.fleet_drift import fingerprint, own_names
    from shell_kernel.fleet_report import cells_summary

    data = json.loads((out_dir / "summary.json").read_text())
    notebooks = {name: nbformat.read(out_dir / host["notebook"], as_version=4)
                 for name, host in data["hosts"].items() if host["notebook"]}
    hostname = _hostname()
    cpu = 0.0
    agree = True
    for name, nb in notebooks.items():
        digests = {cell["index"]: cell["digest"] for cell in data["hosts"][name]["cells"]}
        for index, cell in enumerate(nb.cells):
            started = time.process_time()
            digest = fingerprint(cell.outputs, own_names(name, hostname)).digest
            cpu += time.process_time() - started
            agree = agree and digests.get(index) == digest
    cells = [(cell["index"], cell["title"]) for cell in data["cells"]]
    samples = {group["digest"]: group["sample"] for cell in data["cells"]
               for group in cell["groups"]}
    started = time.process_time()
    grouped = cells_summary(cells, data["hosts"], samples)
    group_cpu = time.process_time() - started
    agree = agree and grouped == data["cells"]
    return {"fingerprint_cpu_s": round(cpu, 4), "group_cpu_s": round(group_cpu, 4),
            "drift_cpu_s": round(cpu + group_cpu, 4), "agrees_with_run": agree,
            "groups": [[len(group["hosts"]) for group in cell["groups"]] for cell in data["cells"]],
            "output_bytes": sum(len(o.get("text", "")) for nb in notebooks.values()
                                for cell in nb.cells for o in cell.outputs)}


def shards(hosts: Hosts, nb: Path, root: Path, count: int, whole: dict) -> dict:
    """The run as `count` shards at once, merged; the same summary as one run?"""
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "shell_kernel", "run", str(nb), "--hosts",
                               ",".join(hosts.names), "--jobs", str(hosts.count), "--ssh-config",
                               str(hosts.config), "--output-dir", str(root / f"shard-{number}"),
                               "--shard", f"{number}/{count}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for number in range(1, count + 1)]
    statuses = [proc.wait(timeout=1800) for proc in procs]
    wall = time.perf_counter() - started
    started = time.perf_counter()
    merge = subprocess.run([sys.executable, "-m", "shell_kernel", "merge",
                            *[str(root / f"shard-{number}") for number in range(1, count + 1)],
                            "-o", str(root / "merged")], capture_output=True, text=True, timeout=600)
    merge_wall = time.perf_counter() - started
    merged = json.loads((root / "merged" / "summary.json").read_text())
    return {"shards": count, "statuses": statuses, "wall_s": round(wall, 3),
            "merge_status": merge.returncode, "merge_wall_s": round(merge_wall, 3),
            "same_as_one_run": _untimed(merged) == _untimed(whole)}


def _untimed(data: dict) -> dict:
    """summary.json without what differs from run to run: its times."""
    data = {key: value for key, value in data.items() if key not in ("started", "finished")}
    data["hosts"] = {name: {**host, "duration_s": None,
                            "cells": [{**cell, "duration_s": None} for cell in host["cells"]]}
                     for name, host in data["hosts"].items()}
    return data


def _hostname() -> str:
    return subprocess.run(["bash", "-c", 'printf %s "$HOSTNAME"'], capture_output=True,
                          text=True).stdout


def render(results: dict) -> str:
    meta, best = results["meta"], results["median"]
    rows = [f"| {r['run']['wall_s']:.2f} s | {r['run']['cpu_s']:.2f} s | "
            f"{r['cost']['fingerprint_cpu_s'] * 1000:.1f} ms | {r['cost']['group_cpu_s'] * 1000:.1f} ms | "
            f"{100 * r['cost']['drift_cpu_s'] / r['run']['wall_s']:.2f}% | "
            f"{100 * r['cost']['drift_cpu_s'] / r['run']['cpu_s']:.2f}% | "
            f"{'yes' if r['cost']['agrees_with_run'] else 'NO'} |" for r in results["runs"]]
    return "\n".join([
        BEGIN, "",
        f"### Drift: grouping {meta['hosts']} hosts by output (bench/drift.py)", "",
        f"Measured {meta['date']} on {meta['machine']}, load average {meta['load_start']} at "
        f"the start and {meta['load_end']} at the end. Five cells on {meta['hosts']} hosts, "
        f"--jobs {meta['hosts']}, {best['cost']['output_bytes'] / 1e6:.1f} MB of output in all; "
        f"groups per cell {best['cost']['groups']}. The grouping's cost is its CPU time "
        "(fingerprinting every host's cells as they end, then grouping), against the run's "
        "wall time and the runner's CPU time; one row per repeat.", "",
        "| run wall | runner CPU | fingerprints | grouping | drift / wall | drift / CPU | "
        "digests as the run's |",
        "|---|---|---|---|---|---|---|",
        *rows, "",
        f"Median run: the grouping adds {100 * best['cost']['drift_cpu_s'] / best['run']['wall_s']:.2f}% "
        f"to the run's wall time at most (it runs on the hosts' worker threads while others "
        f"wait for their hosts) and is {100 * best['cost']['drift_cpu_s'] / best['run']['cpu_s']:.2f}% "
        "of the runner's CPU.", "",
        *([f"The same run as {results['shards']['shards']} shards at once (`--shard I/"
           f"{results['shards']['shards']}`, {results['shards']['wall_s']:.1f} s) merged "
           f"({results['shards']['merge_wall_s']:.1f} s): the merged summary.json "
           + ("is the one run's, timings aside." if results["shards"]["same_as_one_run"]
              else "DIFFERS from the one run's."), ""] if results.get("shards") else []),
        END])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shards", type=int, default=2, help="0: no shard run")
    parser.add_argument("--out", type=Path, default=HERE / "README.md")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="drift-bench-"))
    hosts = Hosts(root, args.hosts)
    results = {"meta": {**_meta(), "hosts": args.hosts, "load_start": _load()}, "runs": []}
    try:
        nb = notebook(root / "drift.ipynb")
        for number in range(args.repeat):
            out_dir = root / f"out-{number}"
            measured = run(hosts, nb, out_dir)
            log(f"run {number + 1}: {measured['wall_s']} s wall, {measured['cpu_s']} s CPU, "
                f"exit {measured['status']}")
            if measured["status"] != 0:
                raise SystemExit(f"the run failed:\n{measured['stdout_tail']}")
            cost = grouping_cost(out_dir)
            log(f"  grouping: {cost}")
            results["runs"].append({"run": measured, "cost": cost})
        if args.shards:
            whole = json.loads((out_dir / "summary.json").read_text())
            results["shards"] = shards(hosts, nb, root, args.shards, whole)
            log(f"shards: {results['shards']}")
    finally:
        hosts.stop()
        shutil.rmtree(root, ignore_errors=True)
    results["meta"]["load_end"] = _load()
    results["median"] = sorted(results["runs"], key=lambda r: r["run"]["wall_s"])[len(results["runs"]) // 2]
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "drift.json").write_text(json.dumps(results, indent=1) + "\n")
    section = render(results)
    write_section(args.out, section, BEGIN, END)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
