"""Benchmark shell_kernel side by side with ipykernel and bash_kernel.

    .venv/bin/python bench/run.py [--kernels shell,shell-tty,bash,python3,shell-ssh,shell-ssh-ephemeral,
                                             shell-ssh-tty,shell-ssh-ephemeral-tty,sshkernel]
                                  [--quick]
                                  [--out bench/README.md]

Every kernel is driven through a real jupyter_client KernelManager, one
kernel at a time. The SSH kernels reach an sshd on 127.0.0.1 that the run
starts and stops itself (bench/sshenv.py). The tables go into the generated section of --out, the
raw numbers into bench/results/latest.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import signal
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

import bytecode  # noqa: E402
import figures  # noqa: E402 - needs psutil
import named_attach  # noqa: E402
import prompt_latency  # noqa: E402
import ratios  # noqa: E402
import report  # noqa: E402
import sshenv  # noqa: E402
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
            "peak_rss_mb", "bytes_received", "timeout", "ok", "tcp_after", "sessions_after",
            "logins", "sessions_after_shutdown", "cell_failures", "diff_ms",
            "paired_diff_median_ms", "median_max_gap_s")
    short = {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items() if k in keys}
    for part in ("durable", "ephemeral"):
        if isinstance(result.get(part), dict):
            short[part] = round(result[part]["median_ms"], 3)
    if "repeats" in result:
        short["repeats"] = [{k: round(r[k], 3) if isinstance(r.get(k), float) else r.get(k)
                             for k in ("kill_to_output_s", "max_gap_s", "complete", "exit_code",
                                       "attempts", "same_shell")} for r in result["repeats"]]
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


def figure_keys(profile: KernelProfile) -> list[str]:
    return ([*SESSION_FIGURES, "start"] + (["connections"] if profile.connection_check else [])
            + (["durable_overhead"] if profile.ephemeral_twin else [])
            + (["reconnect", "named_attach"] if profile.reconnect_check else [])
            + (["prompts"] if profile.prompt_check else []))


def bench_kernel(profile: KernelProfile, settings: figures.Settings, cwd: str, kernel_log,
                 ssh: "sshenv.SSHEnvironment | str | None") -> dict:
    """`ssh`: the run's SSH environment, or why it could not be set up."""
    log(f"{profile.label} (kernelspec {profile.kernelspec})")
    results: dict = {}

    def unavailable(why: str) -> dict:
        log(f"  skipped: {why}")
        return {key: {"error": why} for key in figure_keys(profile)}

    if profile.ssh:
        if not isinstance(ssh, sshenv.SSHEnvironment):
            return unavailable(f"no SSH server: {ssh}")
        if profile.kernelspec in ssh.unavailable:
            return unavailable(f"kernelspec not available: {ssh.unavailable[profile.kernelspec]}")
    if profile.ensure_installed is not None:
        try:
            profile.ensure_installed()
        except Exception as err:  # noqa: BLE001
            return unavailable(f"kernelspec not available: {err}")
    env = ssh.kernel_env(profile.kernelspec) if profile.ssh else None

    def new_session() -> KernelSession:
        return KernelSession(profile.kernelspec, cwd, kernel_log, env=env,
                             setup=profile.setup_code)

    def trivial(session: KernelSession, profile: KernelProfile, settings) -> dict:
        if profile.local_twin is None:
            return figures.trivial_round_trip(session, profile, settings)
        # An SSH kernel takes turns with a local twin (see trivial_round_trip).
        twin = KernelSession(KERNELS[profile.local_twin].kernelspec, cwd, kernel_log)
        try:
            try:
                twin.start()
            except Exception as err:  # noqa: BLE001 - then the table compares with the local row
                log(f"  the local {profile.local_twin} kernel did not start ({err}); "
                    "measuring without it")
                return figures.trivial_round_trip(session, profile, settings)
            return figures.trivial_round_trip(session, profile, settings, twin)
        finally:
            twin.shutdown()

    session = new_session()
    try:
        session.start()
        for key, fn in SESSION_FIGURES.items():
            if not session.is_alive():
                log("  the kernel died; restarting it")
                session.restart()
            results[key] = guarded(key, trivial if key == "trivial" else fn,
                                   session, profile, settings)
        if profile.prompt_check:
            results["prompts"] = guarded("prompts", prompt_latency.prompt_latency,
                                         session, profile, settings)
    except Exception as err:  # noqa: BLE001 - e.g. the kernel never became ready
        traceback.print_exc()
        for key in SESSION_FIGURES:
            results.setdefault(key, {"error": f"{type(err).__name__}: {err}"})
    finally:
        session.shutdown()
    results["start"] = guarded("start", figures.start_to_ready, new_session, settings)
    if profile.connection_check:
        results["connections"] = guarded("connections", figures.connections, new_session,
                                         profile, settings, ssh)
    if profile.ephemeral_twin:
        twin = KERNELS[profile.ephemeral_twin]
        if twin.kernelspec in ssh.unavailable:
            results["durable_overhead"] = {
                "error": f"kernelspec not available: {ssh.unavailable[twin.kernelspec]}"}
        else:
            def new_ephemeral() -> KernelSession:
                return KernelSession(twin.kernelspec, cwd, kernel_log)
            results["durable_overhead"] = guarded("durable_overhead", figures.durable_overhead,
                                                  new_session, new_ephemeral, profile, settings)
    if profile.reconnect_check:
        results["reconnect"] = guarded("reconnect", figures.reconnect, new_session, profile,
                                       settings, ssh)
        results["named_attach"] = guarded("named_attach", named_attach.named_attach, ssh, cwd,
                                          kernel_log)
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
        "load_start": _load(),
        "versions": {dist: _version(dist) for dist in
                     ("shell_kernel", "ipykernel", "bash_kernel", "sshkernel", "paramiko",
                      "jupyter_client", "pyzmq")} | {"OpenSSH": _openssh()},
    }


def _load() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (other work on the machine skews the figures)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _openssh() -> str:
    try:
        done = subprocess.run(["ssh", "-V"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "not installed"
    words = (done.stderr or done.stdout).split()
    return words[0].split("_", 1)[-1].rstrip(",") if words else "unknown"


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


def start_ssh(want_sshkernel: bool) -> "sshenv.SSHEnvironment | str":
    """The SSH environment, or why it could not be started."""
    log("starting sshd on 127.0.0.1 and installing the SSH kernelspecs")
    env = sshenv.SSHEnvironment(want_sshkernel=want_sshkernel)
    try:
        env.start()
    except Exception as err:  # noqa: BLE001 - the SSH kernels report it, the others run
        traceback.print_exc()
        env.stop()
        return f"{type(err).__name__}: {err}"
    log(f"  sshd pid {env.server.pid} on port {env.server.port}"
        + "".join(f"; {spec} unavailable: {why}" for spec, why in env.unavailable.items()))
    return env


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
    parser.add_argument("--fleet", action="store_true",
                        help="also run bench/fleet.py (a notebook on 1 to 200 hosts, beside "
                             "Ansible; about 20 minutes) into the same --out")
    args = parser.parse_args(argv)
    args.kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    unknown = [k for k in args.kernels if k not in KERNELS]
    if unknown:
        parser.error(f"unknown kernel(s) {', '.join(unknown)}; known: {', '.join(KERNELS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bytecode.compile_package()
    settings = figures.Settings.quick() if args.quick else figures.Settings()
    profiles = [KERNELS[name] for name in args.kernels]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    log_path = args.json.parent / "kernels.log"
    started = time.perf_counter()
    # SIGTERM ends the run like Ctrl-C: through the finally blocks below, so
    # kernels, sshd and temporary files are cleaned up.
    signal.signal(signal.SIGTERM, _terminate)
    ssh: sshenv.SSHEnvironment | str | None = None
    try:
        if any(profile.ssh for profile in profiles):
            ssh = start_ssh(want_sshkernel=any(p.kernelspec == sshenv.SSHKERNEL_SPEC
                                               for p in profiles))
        results = {"meta": meta(args.quick), "settings": vars(settings), "kernels": {}}
        # The kernels run in a scratch directory (shell_kernel saves output
        # past its limit there) and log to results/kernels.log.
        with tempfile.TemporaryDirectory(prefix="shell-kernel-bench-") as cwd, \
                open(log_path, "w") as kernel_log:
            try:
                for profile in profiles:
                    results["kernels"][profile.name] = {
                        "kernelspec": profile.kernelspec, "label": profile.label,
                        "figures": bench_kernel(profile, settings, cwd, kernel_log, ssh)}
                if all(name in KERNELS for name in ratios.KERNEL_NAMES):
                    log("start and cell ratios (the kernels taking turns)")
                    results["ratios"] = guarded("ratios", ratios.ratios, settings, cwd)
            finally:
                shutdown_all()
    finally:
        shutdown_all()
        if isinstance(ssh, sshenv.SSHEnvironment):
            log("stopping sshd")
            ssh.stop()
    results["meta"]["total_s"] = time.perf_counter() - started
    results["meta"]["load_end"] = _load()

    args.json.write_text(json.dumps(results, indent=1))
    notes = [note for profile in profiles for note in profile.notes]
    section = report.render(results, profiles, notes, BASELINE)
    report.write_section(args.out, section)
    print(section)
    log(f"wrote {args.out} and {args.json} in {results['meta']['total_s']:.0f} s")
    if args.fleet:
        import fleet
        return fleet.main(["--out", str(args.out)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
