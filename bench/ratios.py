"""Start and trivial-cell ratios of shell_kernel against ipykernel and bash_kernel, in one run.

    .venv/bin/python bench/ratios.py [--starts 5] [--cells 200]

The kernels take turns: start by start (in every order in turn), then cell
by cell on one kernel of each, so that all see the same load on the
machine. A start is timed from start_kernel() to the first kernel_info
reply (client.KernelSession.start); "first cell" from start_kernel() to the
reply of a trivial cell sent right after it (what nbclient waits for before
its first output: a kernel that answers kernel_info early but is slow to run
cells shows here). bench/run.py records the same figures as "ratios".
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time

import bytecode
import figures
from client import KernelSession, shutdown_all
from kernels import BASELINE, KERNELS

#: shell_kernel, and what it is compared with.
KERNEL_NAMES = ("shell", BASELINE, "bash")
#: After each kernel's shutdown, before the next start.
SETTLE_S = 0.3


def alternating_starts(names: list[str], starts: int, cwd: str,
                       cell_timeout: float) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(start samples, first-cell samples) per kernel, in seconds."""
    samples: dict[str, list[float]] = {name: [] for name in names}
    first_cells: dict[str, list[float]] = {name: [] for name in names}
    # Every order in turn, so that each kernel starts after each other one
    # equally often (bash_kernel's shutdown leaves its bash exiting: a plain
    # rotation of three put shell_kernel right after it two turns in three),
    # and a pause after each shutdown for what it leaves to finish.
    orders = list(itertools.permutations(names))
    for turn in range(starts):
        for name in orders[turn % len(orders)]:
            session = KernelSession(KERNELS[name].kernelspec, cwd)
            try:
                ready = session.start()
                ex = session.execute(KERNELS[name].snippets.trivial, cell_timeout)
                figures._expect_ok(ex, "first cell")
                samples[name].append(ready)
                first_cells[name].append(ready + ex.elapsed)
            finally:
                session.shutdown()
            time.sleep(SETTLE_S)
    return samples, first_cells


def ratios(settings: figures.Settings, cwd: str, kernel_names: tuple = KERNEL_NAMES) -> dict:
    names = list(kernel_names)
    for name in names:
        if KERNELS[name].ensure_installed is not None:
            KERNELS[name].ensure_installed()
    starts, first_cells = alternating_starts(names, settings.starts, cwd, settings.cell_timeout)
    sessions = {name: KernelSession(KERNELS[name].kernelspec, cwd) for name in names}
    try:
        for session in sessions.values():
            session.start()
        # One trivial cell per kernel language: each kernel runs its own.
        cells: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(settings.trivial_warmup):
            for name, session in sessions.items():
                session.execute(KERNELS[name].snippets.trivial, settings.cell_timeout)
        for i in range(settings.trivial_runs):
            order = names if i % 2 == 0 else names[::-1]
            for name in order:
                ex = sessions[name].execute(KERNELS[name].snippets.trivial, settings.cell_timeout)
                figures._expect_ok(ex, "trivial cell")
                cells[name].append(ex.elapsed * 1000)
    finally:
        for session in sessions.values():
            session.shutdown()
    result = {name: {"start_median_s": statistics.median(starts[name]), "start_samples_s": starts[name],
                     "first_cell_median_s": statistics.median(first_cells[name]),
                     "cell_median_ms": statistics.median(cells[name])} for name in names}
    shell = result["shell"]
    for base in names[1:]:
        shell[f"start_ratio_vs_{base}"] = shell["start_median_s"] / result[base]["start_median_s"]
        shell[f"first_cell_ratio_vs_{base}"] = (shell["first_cell_median_s"]
                                                / result[base]["first_cell_median_s"])
        shell[f"cell_ratio_vs_{base}"] = shell["cell_median_ms"] / result[base]["cell_median_ms"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--cells", type=int, default=200)
    args = parser.parse_args()
    bytecode.compile_package()
    settings = figures.Settings(starts=args.starts, trivial_runs=args.cells)
    with tempfile.TemporaryDirectory() as cwd:
        try:
            result = ratios(settings, cwd)
        finally:
            shutdown_all()
    for name, fig in result.items():
        print(f"{KERNELS[name].label:14} start {fig['start_median_s']:.3f} s  "
              f"first cell {fig['first_cell_median_s']:.3f} s  cell {fig['cell_median_ms']:.2f} ms")
    shell = result["shell"]
    for base in KERNEL_NAMES[1:]:
        print(f"shell_kernel / {KERNELS[base].label}: start {shell[f'start_ratio_vs_{base}']:.2f}x, "
              f"first cell {shell[f'first_cell_ratio_vs_{base}']:.2f}x, "
              f"cell {shell[f'cell_ratio_vs_{base}']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
