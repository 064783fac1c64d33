"""The fleet's memory figure: N hosts whose one cell prints M MB each; the
peak RSS of the runner.

    .venv/bin/python bench/fleet_memory.py [--hosts 4] [--mb 100] [--out bench/README.md]

The hosts are bench/fleet.py's: one OpenSSH server on 127.0.0.1 under N ssh
config aliases. The notebook's first cell prints M MB (lines of text), its
second `echo done`. `python -m shell_kernel run NB --hosts h1,...,hN --jobs
N` runs it once with that output and once with the first cell printing
nothing (the runner's size without output). The figure is the runner's
ru_maxrss, read by a small Python that starts it (a child's ru_maxrss
includes the RSS of the process it was forked from, so this script, not
the runner, would show otherwise). Each host's notebook is checked: the
first --output-limit-mb of the output, then the spill file holding the
rest. Writes the FLEET MEMORY section of --out.
"""

from __future__ import annotations

import argparse
import json
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

BEGIN = "<!-- BEGIN FLEET MEMORY by bench/fleet_memory.py: edits below this line are overwritten -->"
END = "<!-- END FLEET MEMORY -->"
LINE = "0123456789 the output of a chatty cell, line after line\n"
PEAK_RSS = ("import resource, subprocess, sys\n"
            "status = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
            "sys.exit(status)\n")


def notebook(path: Path, mb: float) -> tuple[Path, int]:
    """A notebook whose first cell prints about mb MB; and the lines it prints."""
    import nbformat
    lines = int(mb * 1e6) // len(LINE) // 1000 * 1000
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {
        "name": "shell", "display_name": "shell", "language": "bash"}})
    nb.cells = [nbformat.v4.new_code_cell(
        f"for i in $(seq {lines // 1000}); do printf '{LINE.strip()}\\n%.0s' $(seq 1000); done"),
        nbformat.v4.new_code_cell("echo done")]
    nbformat.write(nb, path)
    return path, lines


def run(hosts: Hosts, nb: Path, out_dir: Path) -> dict:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PEAK_RSS, sys.executable, "-m", "shell_kernel",
                           "run", str(nb), "--hosts", ",".join(hosts.names), "--jobs",
                           str(hosts.count), "--ssh-config", str(hosts.config),
                           "--output-dir", str(out_dir)],
                          capture_output=True, text=True, timeout=1800)
    return {"wall_s": round(time.perf_counter() - started, 2), "status": proc.returncode,
            "peak_rss_mb": round(int(proc.stdout.split()[-1]) / 1024, 1),
            "stderr_tail": proc.stderr[-1000:]}


def check(hosts: Hosts, out_dir: Path, lines: int) -> str:
    """"ok", or what is wrong with the host notebooks (read a host at a time)."""
    import nbformat
    for name in hosts.names:
        cells = nbformat.read(out_dir / f"{name}.ipynb", as_version=4).cells
        texts = [o.get("text", "") for o in cells[0].outputs]
        meta = cells[0].metadata.get("shell_kernel", {})
        if "output_file" not in meta:
            return f"{name}: no output file, {len(texts)} outputs"
        with open(meta["output_file"]) as rest:
            whole = texts[0] + rest.read()
        if whole != LINE * lines or "output stops here" not in texts[1]:
            return f"{name}: the notebook's head and the output file are not the output"
        if cells[1].outputs[0].text != "done\n":
            return f"{name}: the second cell's output is wrong"
    return "ok"


def render(results: dict) -> str:
    meta, rows = results["meta"], results["rows"]
    lines = [BEGIN, "", "### Fleet memory: N hosts print M MB each in one cell "
             "(bench/fleet_memory.py)", "",
             f"Measured {meta['date']} on {meta['machine']}, load average {meta['load_start']} "
             f"at the start; OpenSSH {meta['openssh']}. Peak RSS is the runner's ru_maxrss.", "",
             "| hosts | output per host | wall | runner peak RSS | exit | notebooks |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['hosts']} | {row['mb']:g} MB | {row['wall_s']:.1f} s | "
                     f"{row['peak_rss_mb']:.1f} MB | {row['status']} | {row['check']} |")
    return "\n".join(lines + ["", END])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--out", type=Path, default=HERE / "README.md")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "fleet_memory.json")
    args = parser.parse_args(argv)
    results = {"meta": _meta(), "rows": []}
    work = Path(tempfile.mkdtemp(prefix="shell-kernel-fleet-memory-"))
    hosts = Hosts(work / "hosts", args.hosts)
    try:
        for mb in (0, args.mb):
            nb, lines = notebook(work / f"nb-{mb:g}.ipynb", mb)
            out_dir = work / f"out-{mb:g}"
            log(f"{args.hosts} hosts x {mb:g} MB")
            row = {"hosts": args.hosts, "mb": mb, **run(hosts, nb, out_dir)}
            row["check"] = check(hosts, out_dir, lines) if mb else "-"
            log("  " + json.dumps({k: v for k, v in row.items() if k != "stderr_tail"}))
            results["rows"].append(row)
            shutil.rmtree(out_dir, ignore_errors=True)
    finally:
        hosts.stop()
        shutil.rmtree(work, ignore_errors=True)
    results["meta"]["load_end"] = _load()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1))
    section = render(results)
    write_section(args.out, section, BEGIN, END)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
