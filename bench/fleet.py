"""The fleet figure: one five-cell runbook on N hosts, side by side with Ansible,
the naive way and the floor.

    .venv/bin/python bench/fleet.py [--sizes 1,10,50,100,200] [--naive-max 10]
                                    [--ansible-max 200] [--repeat 3] [--out bench/README.md]

The "hosts" are one OpenSSH server on 127.0.0.1 (shell_kernel/testing/sshd.py) under
N ssh config aliases; each host's shell really runs. The hosts get a HOME
with empty rc files (the same for every contender). Contenders, for each N,
with jobs (forks) = N and = 10:

- shell_kernel: `python -m shell_kernel run NB --hosts @FILE --jobs J` (each
  host's shell ends with its connection, the default), and with --durable
  (shells that survive a dropped connection) at jobs = N;
- ansible-playbook: the same five steps as `shell` tasks, forks = J,
  gather_facts off, its default ssh connection (ControlPersist);
- naive: one `python -m shell_kernel run NB --kernel shell-ssh-hI` per host,
  one after the other, on a kernelspec per host: measured up to --naive-max
  hosts and extrapolated (per-host mean x N) beyond, as the table says;
- floor: one Python process, one thread and one paramiko connection per host
  (shell_kernel's own connect()), the five commands in one `bash -c`.
- parallel-ssh (`pip install parallel-ssh`: libssh2 under gevent), when it is
  installed: its ParallelSSHClient with pool size = jobs, the same five
  commands in one `bash -c` per host.

Measured per run: wall time; CPU seconds of the runner (its rusage, which
includes the processes it waited for: ansible's forks and ssh clients); CPU
seconds on the host side (the sshd listener's reaped children); peak RSS
(the runner's process, and the sum over its process tree, both sampled:
see measure()); hosts ok; processes or files left on the hosts.
shell_kernel's default form and the floor run --repeat times per row, and
the run with the median wall time is reported (with the range). shell_kernel
(and --old), parallel-ssh and the session floor take turns, each round on a
new sshd (keys and a port of its own: see paired()), and the rounds' walls
are listed under the table. Raw numbers:
bench/results/fleet.json; the table: the FLEET section of --out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bytecode  # noqa: E402

STEPS = ["id -un", "df -P / | tail -1", "cat /proc/loadavg", "ls /tmp | wc -l", "echo done"]
BEGIN = "<!-- BEGIN FLEET by bench/fleet.py: edits below this line are overwritten -->"
END = "<!-- END FLEET -->"
TIMEOUT = 900  # seconds for one run of any contender


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S ") + message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ the hosts
class Hosts:
    def __init__(self, root: Path, count: int):
        from shell_kernel.testing.sshd import SSHServer, setenv_config
        self.root, self.count = root, count
        home, self.tmp = root / "home", root / "host-tmp"
        home.mkdir(parents=True)
        self.tmp.mkdir()
        for rc in (".bashrc", ".profile"):
            (home / rc).write_text("")
        self.server = SSHServer(root / "sshd", name="fleet-sshd", extra_config=(
            "MaxStartups 2000\n" + setenv_config({"HOME": str(home), "TMPDIR": str(self.tmp)})))
        self.server.start()
        self.names = [f"h{i}" for i in range(1, count + 1)]
        self.config = root / "ssh_config"
        self.server.write_ssh_config(self.config, alias=" ".join(self.names))

    def host_file(self, n: int) -> Path:
        path = self.root / f"hosts-{n}.txt"
        path.write_text("\n".join(self.names[:n]) + "\n")
        return path

    def host_cpu(self) -> float:
        """CPU seconds of everything the sshd listener has reaped so far."""
        fields = Path(f"/proc/{self.server.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks  # utime stime cutime cstime

    def leftovers(self, timeout: float = 15.0) -> int:
        from shell_kernel.testing.processes import descendants
        deadline = time.monotonic() + timeout
        while True:
            left = len(descendants([self.server.pid]) - {self.server.pid})
            # (The user's directory of named sessions, holding the sweep's stamp, stays.)
            own = self.tmp / f"shell_kernel-{os.getuid()}"
            left += sum(1 for path in self.tmp.iterdir()
                        if path != own or {p.name for p in own.iterdir()} - {".swept"})
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.2)

    def stop(self) -> None:
        self.server.stop()


# ------------------------------------------------------------- measuring
#: How often the runner's RSS is read, and what share of a CPU the walk of its
#: process tree may take (see measure()).
SAMPLE_S = 0.05
SAMPLER_SHARE = 0.02


def measure(argv: list, hosts: Hosts, env: dict | None = None, cwd: str | None = None,
            finish=None) -> dict:
    """Run argv to its end: wall, CPU (and its user part), the context
    switches of all its threads, peak RSS (the process every 50 ms, its
    tree as often as costs at most 2% of a CPU: rusage's ru_maxrss would
    count the benchmark's own RSS at fork), status. `finish` runs after
    it, before the host side is measured (e.g. to end what the run left on
    purpose)."""
    cpu_before = hosts.host_cpu()
    started = time.perf_counter()
    proc = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, cwd=cwd)
    peak, tree_peak = [0], [0]
    done = threading.Event()

    def sample() -> None:
        # The walk of the tree reads a file for each thread of the runner (any
        # thread may fork): 5-9 ms for a runner of 700 threads, which every
        # 50 ms took a sixth of a CPU from the run being measured (4% of its
        # wall, on 2 CPUs), and almost nothing from a runner of one thread.
        # Its interval stretches so that it costs at most SAMPLER_SHARE of a CPU.
        walk_due = 0.0
        while not done.is_set():
            own = _rss(proc.pid)
            peak[0] = max(peak[0], own)
            if time.monotonic() >= walk_due:
                before = time.thread_time()
                total = own + sum(_rss(child) for child in _descendants_of(proc.pid))
                tree_peak[0] = max(tree_peak[0], total)
                walk_due = time.monotonic() + (time.thread_time() - before) / SAMPLER_SHARE
            done.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output = []
    reader = threading.Thread(target=lambda: output.append(proc.stdout.read()), daemon=True)
    reader.start()
    deadline = time.monotonic() + TIMEOUT
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
        time.sleep(0.01)
    wall = time.perf_counter() - started
    done.set()
    reader.join(5)
    if finish is not None:
        finish()
    left = hosts.leftovers()
    return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "user_s": round(usage.ru_utime, 3), "context_switches": usage.ru_nvcsw + usage.ru_nivcsw,
            "peak_rss_mb": round(peak[0] / 2**20, 1),
            "tree_peak_rss_mb": round(max(peak[0], tree_peak[0]) / 2**20, 1),
            "host_cpu_s": round(hosts.host_cpu() - cpu_before, 3),
            "status": os.waitstatus_to_exitcode(status), "leftovers": left,
            "output_tail": (output[0] if output else b"").decode(errors="replace")[-1500:]}


def _rss(pid: int) -> int:
    """Resident bytes of pid (0 once it is gone): /proc/PID/statm."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _descendants_of(pid: int) -> list[int]:
    """pid's descendants, from /proc/PID/task/TID/children: a few small reads,
    where psutil's children() reads the stat file of every process on the
    machine, which with a hundred sessions' processes about cost the runner
    under test a CPU of its own at a 50 ms sampling interval."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{parent}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                found.append(child)
                todo.append(child)
    return found


def notebook(path: Path) -> Path:
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook
    nb = new_notebook(metadata={"kernelspec": {"name": "shell", "display_name": "Bash",
                                               "language": "bash"}})
    nb.cells = [new_code_cell(step) for step in STEPS]
    nbformat.write(nb, path)
    return path


def shell_kernel_run(hosts: Hosts, nb: Path, n: int, jobs: int, work: Path,
                     durable: bool = False, code: Path | None = None) -> dict:
    """code: a checkout of other shell_kernel code to run instead (put first
    on PYTHONPATH), e.g. a git worktree of an older commit."""
    out = work / f"sk-{n}-{jobs}-{'d' if durable else 'c'}"
    env = {**os.environ, "PYTHONPATH": str(code)} if code else None
    result = measure([sys.executable, "-m", "shell_kernel", "run", nb, "--hosts",
                      f"@{hosts.host_file(n)}", "--ssh-config", hosts.config, "--jobs", jobs,
                      "--output-dir", out] + (["--durable"] if durable else []), hosts, env=env,
                     cwd=str(work))  # (-m would find the package in the current directory first)
    try:
        statuses = [h["status"] for h in json.loads((out / "summary.json").read_text())["hosts"].values()]
        result["ok_hosts"] = statuses.count("ok")
    except (OSError, ValueError):
        result["ok_hosts"] = 0
    shutil.rmtree(out, ignore_errors=True)
    return result


def ansible_run(hosts: Hosts, n: int, jobs: int, work: Path) -> dict:
    base = work / f"ansible-{n}-{jobs}"
    base.mkdir()
    (base / "inventory.ini").write_text("[fleet]\n" + "\n".join(hosts.names[:n]) + "\n")
    tasks = "".join(f"    - name: step {i}\n      shell: {json.dumps(step)}\n"
                    for i, step in enumerate(STEPS, 1))
    (base / "play.yml").write_text(f"- hosts: fleet\n  gather_facts: false\n  tasks:\n{tasks}")
    control = Path(tempfile.mkdtemp(prefix="cp-", dir="/tmp"))  # ssh's socket paths are short
    (base / "ansible.cfg").write_text(
        "[defaults]\nhost_key_checking = True\ninterpreter_python = /usr/bin/python3\n"
        f"forks = {jobs}\nlocal_tmp = {base}/tmp\n"
        "[ssh_connection]\n"
        f"ssh_args = -F {hosts.config} -C -o ControlMaster=auto -o ControlPersist=60s\n"
        f"control_path_dir = {control}\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(base / "ansible.cfg"), "ANSIBLE_HOME": str(base),
           "ANSIBLE_NOCOLOR": "1"}
    playbook = Path(sys.executable).with_name("ansible-playbook")
    result = measure([playbook, "-i", base / "inventory.ini", base / "play.yml"], hosts,
                     env=env, finish=lambda: _stop_ssh_masters(control))
    recap = [line for line in result["output_tail"].splitlines() if "ok=" in line]
    result["ok_hosts"] = None if len(recap) < min(n, 10) else \
        sum(1 for line in recap if "failed=0" in line and "unreachable=0" in line)
    if result["status"] == 0:
        result["ok_hosts"] = n
    shutil.rmtree(base, ignore_errors=True)
    return result


def _stop_ssh_masters(control: Path) -> None:
    """ansible's ControlPersist masters outlive the playbook: end them (by pid)."""
    import psutil
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any(str(control) in arg for arg in proc.info["cmdline"] or []):
            try:
                proc.terminate()
            except psutil.Error:
                pass
    shutil.rmtree(control, ignore_errors=True)


def naive_run(hosts: Hosts, nb: Path, n: int, work: Path, prefix: Path) -> dict:
    """One `run` per host, one after the other, on a kernelspec per host."""
    env = {**os.environ, "JUPYTER_PATH": str(prefix / "share" / "jupyter")}
    for name in hosts.names[:n]:
        if not (prefix / "share" / "jupyter" / "kernels" / f"shell-ssh-{name}").exists():
            subprocess.run([sys.executable, "-m", "shell_kernel", "install", "--prefix", prefix,
                            "--name", f"shell-ssh-{name}", "--ssh", name, "--ssh-config",
                            hosts.config], check=True, capture_output=True)
    script = work / f"naive-{n}.sh"
    script.write_text("status=0\n" + "".join(
        f"{sys.executable} -m shell_kernel run {nb} --kernel shell-ssh-{name} "
        f"-o {work}/naive-{name}.ipynb >/dev/null 2>&1 || status=1\n"
        for name in hosts.names[:n]) + "exit $status\n")
    result = measure(["bash", script], hosts, env=env, cwd=str(work))
    result["ok_hosts"] = n if result["status"] == 0 else None
    return result


FLOOR_CODE = """
import secrets, shlex, sys, threading
from shell_kernel.backends.ssh.connect import connect
from shell_kernel.backends.ssh.target import resolve
names, config, command, steps = sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4:]
data, last_ended = b"", None
if command == "--session":
    # The session floor: what a `run --hosts` session sends its shell (the
    # session script, the provenance cell, the cells, the close), at once.
    from shell_kernel import protocol, provenance
    from shell_kernel.backends import bash_argv
    from shell_kernel.frames import FIELD_SEP
    token = secrets.token_hex(8)
    cells = [provenance.PROBE, *steps]
    data = (protocol.bootstrap_lines(protocol.session_script(token, queries=False))
            + protocol.stdin_line(None)
            + b"".join(protocol.eval_lines(protocol.prepare_cell(cell).source, seq)
                       for seq, cell in enumerate(cells, 1))
            + protocol.close_line(secrets.token_hex(8)))
    command = "exec " + shlex.join(bash_argv("bash", clean=False, completion=False))
    # The last cell's end frame, exit status 0.
    last_ended = FIELD_SEP.join([b"", token.encode(), b"end", b"%d" % len(cells), b"0", b""])
ok = []
def one(name):
    clients = connect(resolve(name, config))
    channel = clients[-1].get_transport().open_session()
    channel.exec_command(command)
    channel.sendall(data)
    channel.shutdown_write()
    out = b""
    while chunk := channel.recv(65536):
        out += chunk
    status = channel.recv_exit_status()
    if (last_ended in out) if last_ended else status == 0:
        ok.append(name)
    for client in clients:
        client.close()
threads = [threading.Thread(target=one, args=(name,)) for name in names]
for thread in threads: thread.start()
for thread in threads: thread.join()
print("ok", len(ok))
"""


def floor_run(hosts: Hosts, n: int, session: bool = False) -> dict:
    """The floor: a thread and a bare paramiko connection per host, running the
    five commands in one `bash -c`. session: the session floor, the same with
    this product's host side: each host's shell gets the bytes a `run --hosts`
    session sends it (the login bash, the session script, the provenance cell,
    the five cells, the close), all at once: what the host must do for a
    session, with a runner that costs next to nothing."""
    command = "--session" if session else "bash -c " + json.dumps("; ".join(STEPS))
    result = measure([sys.executable, "-c", FLOOR_CODE, ",".join(hosts.names[:n]),
                      hosts.config, command, *STEPS], hosts)
    words = result["output_tail"].split()
    result["ok_hosts"] = int(words[-1]) if words[-2:-1] == ["ok"] else 0
    return result


PSSH_CODE = """
import sys
from pssh.clients import ParallelSSHClient
n, port, user, key, jobs, command = sys.argv[1:]
client = ParallelSSHClient(["127.0.0.1"] * int(n), user=user, port=int(port), pkey=key,
                           pool_size=int(jobs), num_retries=1, timeout=120)
output = client.run_command(command)
client.join(output)
ok = 0
for host in output:
    for _ in host.stdout:
        pass
    ok += host.exit_code == 0
print("ok", ok)
"""


def pssh_run(hosts: Hosts, n: int, jobs: int) -> dict:
    """parallel-ssh (libssh2, gevent): ParallelSSHClient with pool size = jobs,
    the five commands in one `bash -c` per host, as the floor runs them."""
    command = "bash -c " + json.dumps("; ".join(STEPS))
    server = hosts.server
    result = measure([sys.executable, "-c", PSSH_CODE, n, server.port, server.user,
                      server.user_key_path, jobs, command], hosts)
    words = result["output_tail"].split()
    result["ok_hosts"] = int(words[-1]) if words[-2:-1] == ["ok"] else 0
    return result


def has_pssh() -> bool:
    try:
        import pssh  # noqa: F401 - only whether it is there
    except ImportError:
        return False
    return True


def median_of(repeat: int, run) -> dict:
    """The run with the median wall time of `repeat` runs, with every wall
    time (a 2-CPU machine shared with a hundred hosts' shells varies by a
    quarter from run to run)."""
    return _median([run() for _ in range(repeat)])


def _median(results: list[dict]) -> dict:
    results = sorted(results, key=lambda result: result["wall_s"])
    chosen = results[len(results) // 2]
    chosen["walls_s"] = [result["wall_s"] for result in results]
    return chosen


def paired(repeat: int, runs: dict, new_hosts) -> dict:
    """Each of runs (name: run(hosts)) `repeat` times, taking turns (A B C A B
    C...), so that the machine's drift (other work on it) falls on all alike,
    each round on hosts of its own (new_hosts(round): a new sshd, with keys and
    a port of its own); the median-wall run of each, by name, with every round's wall
    (walls_by_round_s) and the rounds' ports. The server is new each round
    because parallel-ssh's wall depends on the server it connects to, its host
    key and its port: 100 hosts took 2.65-2.78 s on one port and 2.22-2.40 s
    on another of the same server, 2.13-2.19 s and 2.62-2.75 s with two host
    keys of one server on one port (a new user key changed nothing); a server
    started again on its files gave its time again; 2.0-2.8 s over a dozen
    servers, where shell_kernel's stayed at 2.45-2.75 s on the six it ran on in
    turns with it.
    On one server for the whole run, its ratio was a draw of the server."""
    done = {name: [] for name in runs}
    ports = []
    for number in range(repeat):
        hosts = new_hosts(number)
        try:
            ports.append(hosts.server.port)
            for name, run in runs.items():
                done[name].append(run(hosts))
        finally:
            hosts.stop()
    medians = {}
    for name, results in done.items():
        by_round = [result["wall_s"] for result in results]
        medians[name] = {**_median(results), "walls_by_round_s": by_round, "ports": ports}
    return medians


def startup_run(hosts: Hosts) -> dict:
    """What `run --hosts` costs before any host: the interpreter and its imports
    (without the one that cli.py turns away for `run --hosts`)."""
    return measure([sys.executable, "-c", "import sys; sys.modules['rfc3987_syntax'] = None; "
                    "import shell_kernel.fleet, shell_kernel.fleet_report, "
                    "shell_kernel.backends.ssh.backend, nbformat"], hosts)


# ------------------------------------------------------------------ report
def _s(value) -> str:
    return "–" if value is None else f"{value:.2f} s"


def render(results: dict) -> str:
    meta = results["meta"]
    lines = [BEGIN, "", "### Fleet: one five-cell runbook on N hosts (bench/fleet.py)", "",
             f"Measured {meta['date']} on {meta['machine']}, load average "
             f"{meta['load_start']} at the start and {meta['load_end']} at the end; "
             f"OpenSSH {meta['openssh']}, ansible-core {meta['ansible']}. The runner's start-up "
             f"(interpreter and imports, no host) alone: {_s(results['startup']['wall_s'])} wall, "
             f"{_s(results['startup']['cpu_s'])} CPU, {results['startup']['peak_rss_mb']} MB.",
             "",
             "| hosts | jobs | contender | wall | per host | runner CPU | host-side CPU | peak RSS "
             "(process / tree) | hosts ok | left on hosts | wall vs shell_kernel |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in results["rows"]:
        r, base = row["result"], row.get("shell_kernel_wall_s")
        if "error" in r:
            lines.append(f"| {row['n']} | {row['jobs']} | {row['contender']} | failed: "
                         f"{r['error'][:120]} | | | | | | | |")
            continue
        ratio = f"{r['wall_s'] / base:.1f}×" if base and row["contender"] != "shell_kernel" else ""
        wall = _s(r["wall_s"]) + (" (extrapolated)" if r.get("extrapolated") else "")
        if len(r.get("walls_s", [])) > 1:
            wall += f" (median of {len(r['walls_s'])}: {r['walls_s'][0]:.2f}–{r['walls_s'][-1]:.2f})"
        lines.append(
            f"| {row['n']} | {row['jobs']} | {row['contender']} | {wall} | "
            f"{r['wall_s'] / row['n']:.3f} s | {_s(r.get('cpu_s'))} | {_s(r.get('host_cpu_s'))} | "
            f"{r.get('peak_rss_mb', '–')} / {r.get('tree_peak_rss_mb', '–')} MB | "
            f"{r.get('ok_hosts', '–')}/{row['n']} | {r.get('leftovers', '–')} | {ratio} |")
    rounds: dict = {}  # (n, jobs): [(contender, result)] of the contenders that took turns
    for row in results["rows"]:
        if "walls_by_round_s" in row["result"]:
            rounds.setdefault((row["n"], row["jobs"]), []).append((row["contender"], row["result"]))
    if rounds:
        lines += ["", "Each round of the turns on a new sshd (its port), wall in seconds:", ""]
        for (n, jobs), taken in rounds.items():
            walls = "; ".join(f"{name} {' '.join(f'{wall:.2f}' for wall in result['walls_by_round_s'])}"
                              for name, result in taken)
            ports = ", ".join(str(port) for port in taken[0][1]["ports"])
            lines.append(f"- {n} hosts, jobs {jobs} (ports {ports}): {walls}")
    lines += ["", END]
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    from report import write_section as write
    write(path, section, BEGIN, END)


# --------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,10,50,100,200")
    parser.add_argument("--fixed-jobs", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of shell_kernel (default) and the floor per row: the "
                             "median-wall run is reported (the others run once)")
    parser.add_argument("--naive-max", type=int, default=10,
                        help="measure the naive way up to this many hosts, extrapolate beyond")
    parser.add_argument("--ansible-max", type=int, default=200,
                        help="run ansible-playbook up to this many hosts")
    parser.add_argument("--jobs", type=int, default=None,
                        help="only this --jobs for every size (instead of N and --fixed-jobs)")
    parser.add_argument("--old", type=Path, default=None,
                        help="also run shell_kernel from this checkout (e.g. a git worktree of "
                             "an older commit), in turns with this one: 'shell_kernel (old)'")
    parser.add_argument("--only", default=None,
                        help="comma-separated contenders to run: a name, or its start before "
                             "' (' (shell_kernel,parallel-ssh,floor,session floor: the first "
                             "also takes 'shell_kernel (old)', not 'shell_kernel --durable')")
    parser.add_argument("--out", type=Path, default=HERE / "README.md")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "fleet.json")
    args = parser.parse_args(argv)
    bytecode.compile_package()
    if args.old:
        bytecode.compile_package(args.old)
    sizes = [int(s) for s in args.sizes.split(",")]
    has_ansible = Path(sys.executable).with_name("ansible-playbook").exists()
    pssh_available = has_pssh()
    results = {"meta": _meta(), "startup": {}, "rows": []}
    work = Path(tempfile.mkdtemp(prefix="shell-kernel-fleet-bench-"))
    hosts = Hosts(work / "hosts", max(sizes))
    try:
        nb = notebook(work / "runbook.ipynb")
        results["startup"] = startup_run(hosts)
        naive_per_host = None
        for n in sizes:
            for jobs in [args.jobs] if args.jobs else dict.fromkeys([n, min(args.fixed_jobs, n)]):
                turns = {"shell_kernel": lambda on: shell_kernel_run(on, nb, n, jobs, work)}
                if args.old:
                    turns["shell_kernel (old)"] = lambda on: shell_kernel_run(on, nb, n, jobs, work,
                                                                              code=args.old)
                if pssh_available:
                    turns["parallel-ssh (pool = jobs)"] = lambda on: pssh_run(on, n, jobs)
                if jobs == n:
                    turns["session floor (paramiko threads, a session's bytes at once)"] = \
                        lambda on: floor_run(on, n, session=True)
                medians: dict = {}

                def taking_turns(name: str, turns=turns, medians=medians, n=n, jobs=jobs) -> dict:
                    if not medians:  # every one of them, once, for all their rows
                        medians.update(paired(args.repeat, turns, lambda number: Hosts(
                            work / f"round-{n}-{jobs}-{number}", n)))
                    return medians[name]

                contenders = [(name, lambda name=name: taking_turns(name)) for name in turns]
                if jobs == n:
                    contenders.append(("shell_kernel --durable",
                                       lambda: shell_kernel_run(hosts, nb, n, jobs, work, True)))
                    contenders.append(("floor (paramiko threads)",
                                       lambda: median_of(args.repeat, lambda: floor_run(hosts, n))))
                if has_ansible and n <= args.ansible_max:
                    contenders.append(("ansible-playbook", lambda: ansible_run(hosts, n, jobs, work)))
                if jobs == min(args.fixed_jobs, n) and (n <= args.naive_max or naive_per_host):
                    contenders.append(("naive (one run per host)",
                                       lambda: naive_run(hosts, nb, n, work, work / "prefix")
                                       if n <= args.naive_max else None))
                if args.only:
                    wanted = args.only.split(",")
                    contenders = [(name, run) for name, run in contenders
                                  if any(name == w or name.startswith(w + " (") for w in wanted)]
                base = None
                for name, run in contenders:
                    log(f"N={n} jobs={jobs}: {name}")
                    try:
                        result = run()
                        if result is None:  # the naive way beyond --naive-max
                            result = {"wall_s": naive_per_host * n, "extrapolated": True}
                        elif name.startswith("naive"):
                            naive_per_host = result["wall_s"] / n
                    except Exception as err:  # noqa: BLE001 - the row says so, the run goes on
                        result = {"error": f"{type(err).__name__}: {err}"}
                    if name == "shell_kernel":
                        base = result.get("wall_s")
                    log("  " + json.dumps({k: v for k, v in result.items() if k != "output_tail"}))
                    results["rows"].append({"n": n, "jobs": jobs, "contender": name,
                                            "result": result, "shell_kernel_wall_s": base})
    finally:
        hosts.stop()
        shutil.rmtree(work, ignore_errors=True)
    results["meta"]["load_end"] = _load()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1))
    section = render(results)
    write_section(args.out, section)
    print(section)
    return 0


def _load():
    return [round(x, 2) for x in os.getloadavg()]


def _meta() -> dict:
    import importlib.metadata
    import run as bench_run
    try:
        ansible = importlib.metadata.version("ansible-core")
    except importlib.metadata.PackageNotFoundError:
        ansible = "not installed"
    return {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "machine": bench_run._machine(), "openssh": bench_run._openssh(),
            "ansible": ansible, "load_start": _load()}


if __name__ == "__main__":
    sys.exit(main())
