"""Benchmark shell_kernel side by side with ipykernel and bash_kernel.

    .venv/bin/python bench/run.py [--kernels shell,bash,python3] [--quick] [--out bench/README.md]

Every kernel is driven through a real jupyter_client KernelManager, one
kernel at a time. The tables go into the generated section of --out, the
raw numbers into bench/results/latest.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def ensure_psutil() -> None:
    try:
        import psutil  # noqa: F401
    except ImportError:
        print("psutil missing; installing it with pip", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "psutil"], check=True)


ensure_psutil()

import figures  # noqa: E402 - needs psutil
import report  # noqa: E402
from client import KernelSession, shutdown_all  # noqa: E402
from kernels import BASELINE, KERNELS, KernelProfile  # noqa: E402


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S ") + message, file=sys.stderr, flush=True)


def guarded(what: str, fn, *args) -> dict:
    """Run one figure; a failure becomes {"error": ...} in the results."""
    started = time.perf_counter()
    try:
        result = fn(*args)
    except Exception as err:  # noqa: BLE001 - reported in the table, the run goes on
        traceback.print_exc()
        result = {"error": f"{type(err).__name__}: {err}"}
    log(f"  {what}: {_summary(result)} ({time.perf_counter() - started:.1f} s)")
    return result


def _summary(result: dict) -> str:
    keys = ("error", "median_ms", "p90_ms", "mb_per_s", "complete", "median_s",
            "peak_rss_mb", "bytes_received", "timeout")
    short = {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items() if k in keys}
    if "cases" in result:
        short["cases"] = [{k: c.get(k) for k in ("case", "reply_s", "survivors", "works_after", "error")}
                          for c in result["cases"]]
    return json.dumps(short)


#: Figures measured on one long-lived kernel, in this order.
SESSION_FIGURES = {
    "trivial": figures.trivial_round_trip,
    "memory": figures.memory,
    "throughput": figures.throughput,
    "interrupt": figures.interrupts,
}
FIGURE_KEYS = [*SESSION_FIGURES, "start"]


def bench_kernel(profile: KernelProfile, settings: figures.Settings, cwd: str, kernel_log) -> dict:
    log(f"{profile.label} (kernelspec {profile.kernelspec})")
    results: dict = {}
    if profile.ensure_installed is not None:
        try:
            profile.ensure_installed()
        except Exception as err:  # noqa: BLE001
            return {key: {"error": f"kernelspec not available: {err}"} for key in FIGURE_KEYS}

    def new_session() -> KernelSession:
        return KernelSession(profile.kernelspec, cwd, kernel_log)

    session = new_session()
    try:
        session.start()
        for key, fn in SESSION_FIGURES.items():
            if not session.is_alive():
                log("  the kernel died; restarting it")
                session.restart()
            results[key] = guarded(key, fn, session, profile, settings)
    except Exception as err:  # noqa: BLE001 - e.g. the kernel never became ready
        traceback.print_exc()
        for key in SESSION_FIGURES:
            results.setdefault(key, {"error": f"{type(err).__name__}: {err}"})
    finally:
        session.shutdown()
    results["start"] = guarded("start", figures.start_to_ready, new_session, settings)
    return results


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({cpu})"


def meta(quick: bool) -> dict:
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "mode": "quick" if quick else "full",
        "machine": _machine(),
        "python": platform.python_version(),
        "versions": {dist: _version(dist) for dist in
                     ("shell_kernel", "ipykernel", "bash_kernel", "jupyter_client", "pyzmq")},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", default=",".join(KERNELS),
                        help=f"comma-separated, from: {', '.join(KERNELS)} (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer iterations and 1/10 of the output sizes (a smoke test)")
    parser.add_argument("--out", type=Path, default=HERE / "README.md",
                        help="markdown file whose generated section is rewritten "
                             "(default: bench/README.md)")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "latest.json",
                        help="raw results (default: bench/results/latest.json)")
    args = parser.parse_args(argv)
    args.kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    unknown = [k for k in args.kernels if k not in KERNELS]
    if unknown:
        parser.error(f"unknown kernel(s) {', '.join(unknown)}; known: {', '.join(KERNELS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = figures.Settings.quick() if args.quick else figures.Settings()
    profiles = [KERNELS[name] for name in args.kernels]
    results = {"meta": meta(args.quick), "settings": vars(settings), "kernels": {}}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    log_path = args.json.parent / "kernels.log"
    started = time.perf_counter()
    try:
        # The kernels run in a scratch directory (shell_kernel saves output
        # past its limit there) and log to results/kernels.log.
        with tempfile.TemporaryDirectory(prefix="shell-kernel-bench-") as cwd, \
                open(log_path, "w") as kernel_log:
            for profile in profiles:
                results["kernels"][profile.name] = {
                    "kernelspec": profile.kernelspec, "label": profile.label,
                    "figures": bench_kernel(profile, settings, cwd, kernel_log)}
    finally:
        shutdown_all()
    results["meta"]["total_s"] = time.perf_counter() - started

    args.json.write_text(json.dumps(results, indent=1))
    notes = [note for profile in profiles for note in profile.notes]
    section = report.render(results, {p.name: p.label for p in profiles}, notes, BASELINE)
    report.write_section(args.out, section)
    print(section)
    log(f"wrote {args.out} and {args.json} in {results['meta']['total_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
