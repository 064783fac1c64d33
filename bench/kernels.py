"""What the benchmark runs on each kernel: equivalent code per language,
and the per-kernel sizes, limits and notes.

To add a kernel, add a KernelProfile to KERNELS (and, for a new language,
a Snippets entry to SNIPPETS). Nothing else in the benchmark names kernels.

The SSH kernels (ssh=True) reach a throw-away sshd on 127.0.0.1 that
bench/sshenv.py starts for the run, with kernelspecs in a private prefix:
the "remote" processes run on this machine, so the interrupt figure finds
them with psutil as it does for the local kernels.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

import sshenv


@dataclass(frozen=True)
class Snippets:
    """Equivalent cells in one kernel language."""

    #: A cell that does nothing.
    trivial: str
    #: prints the numbers 1..n, one per line (exactly like `seq 1 n`).
    count_lines: Callable[[int], str]
    #: Sleeps for `seconds` (a string such as "1000.123", unique per run).
    sleep: Callable[[str], str]
    #: Runs an external program given as an argv list and waits for it.
    run_program: Callable[[list[str]], str]
    #: Prints n lines of 100 'x' characters.
    flood: Callable[[int], str]
    #: Whether `sleep` starts a process that can be found by its command line.
    sleep_is_process: bool


def _bash_flood(lines: int) -> str:
    # The final echo ends the last line, so both languages print lines * 101 bytes.
    return f"head -c {lines * 100} /dev/zero | tr '\\0' 'x' | fold -w 100; echo"


def _python_run_program(argv: list[str]) -> str:
    return f"import subprocess; subprocess.run({argv!r})"


SNIPPETS: dict[str, Snippets] = {
    "bash": Snippets(
        trivial="true",
        count_lines=lambda n: f"seq 1 {n}",
        sleep=lambda seconds: f"sleep {seconds}",
        run_program=lambda argv: shlex.join(argv),
        flood=_bash_flood,
        sleep_is_process=True,
    ),
    "python": Snippets(
        trivial="pass",
        count_lines=lambda n: f'print("\\n".join(map(str, range(1, {n + 1}))))',
        sleep=lambda seconds: f"import time; time.sleep({seconds})",
        run_program=_python_run_program,
        flood=lambda n: f'for _ in range({n}):\n    print("x" * 100)',
        sleep_is_process=False,
    ),
}


def ensure_kernelspec(name: str, install: list[str]) -> Callable[[], None]:
    """A check that installs kernelspec `name` with `install` if it is absent."""

    def ensure() -> None:
        try:
            KernelSpecManager().get_kernel_spec(name)
            return
        except NoSuchKernel:
            pass
        print(f"kernelspec {name!r} missing; running: {' '.join(install)}", file=sys.stderr)
        done = subprocess.run(install, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise SystemExit(
                f"could not install kernelspec {name!r}: {done.stderr.strip()}\n"
                "The contenders come with the bench extra: .venv/bin/pip install -e '.[bench]'")
        KernelSpecManager().get_kernel_spec(name)  # raises if it is still missing

    return ensure


@dataclass(frozen=True)
class KernelProfile:
    """One kernel under test and how hard to push it."""

    name: str  # the name used on the command line
    label: str  # how the tables name it
    kernelspec: str
    language: str  # key into SNIPPETS
    throughput_lines: int = 2_000_000
    throughput_timeout: float = 60.0
    #: Lines of 100 'x' for the memory figure; None skips it.
    flood_lines: int | None = 1_000_000
    flood_timeout: float = 120.0
    #: Replies later than this after an interrupt count as "no reply".
    interrupt_cap: float = 15.0
    #: Hand-written remarks shown under the tables.
    notes: tuple[str, ...] = ()
    ensure_installed: Callable[[], None] | None = None
    #: Needs the benchmark's sshd and private kernelspecs (bench/sshenv.py).
    ssh: bool = False
    #: A cell run after every start before the kernel counts as usable
    #: (sshkernel connects only in its `%login` cell); part of the start figure.
    setup_code: str | None = None
    #: A regular expression for text the kernel prints before every cell's own
    #: output; removed from the start of stdout before the completeness check.
    stdout_preamble: str | None = None
    #: Round trips of fewer cells (the default is Settings.trivial_runs).
    trivial_runs: int | None = None
    #: The local kernel this one is the SSH form of: the round-trip table
    #: gives the difference to it, against a budget of `ssh_budget_ms`.
    local_twin: str | None = None
    ssh_budget_ms: float = 5.0
    #: Count TCP connections and sshd sessions after 50 cells (figure 6).
    connection_check: bool = False
    #: The --ephemeral form of this (durable) SSH kernel: figure 7 alternates
    #: trivial cells between the two, against a budget of `durable_budget_ms`.
    ephemeral_twin: str | None = None
    durable_budget_ms: float = 1.0
    #: Drop the SSH connection in the middle of a cell and time the resumed
    #: output (figure 8; durable SSH kernels only).
    reconnect_check: bool = False
    #: Time prompts: printed → input_request, answer → next output (figure 10).
    prompt_check: bool = False

    @property
    def snippets(self) -> Snippets:
        return SNIPPETS[self.language]


TTY_NOTE = ("--tty kernels (shell-tty, shell-ssh-tty, shell-ssh-ephemeral-tty): figures 1 to 3 "
            "and the start figure only; the memory figure is skipped (the kernel's output path "
            "is the default kernel's; only the host side differs).")


KERNELS: dict[str, KernelProfile] = {
    profile.name: profile
    for profile in (
        KernelProfile(name="shell", label="shell_kernel", kernelspec="shell", language="bash",
                      prompt_check=True),
        KernelProfile(
            name="shell-tty", label="shell_kernel --tty", kernelspec="shell-tty",
            language="bash", flood_lines=None, notes=(TTY_NOTE,),
            ensure_installed=ensure_kernelspec("shell-tty", [
                sys.executable, "-m", "shell_kernel", "install", "--sys-prefix",
                "--name", "shell-tty", "--display-name", "Bash (shell_kernel, --tty)", "--tty"]),
        ),
        KernelProfile(
            name="bash", label="bash_kernel", kernelspec="bash", language="bash",
            # bash_kernel reads its pty line by line through pexpect, about
            # 0.05 MB/s: the full sizes would take minutes to hours.
            throughput_lines=200_000, throughput_timeout=120.0,
            flood_lines=10_000, flood_timeout=120.0,
            notes=("bash_kernel: throughput uses `seq 1 200000` (not 2000000) and the memory "
                   "figure 10,000 lines (1 MB, not 100 MB): it streams through pexpect line by "
                   "line at about 0.05 MB/s, so the full sizes would take minutes to hours.",),
            ensure_installed=ensure_kernelspec(
                "bash", [sys.executable, "-m", "bash_kernel.install", "--sys-prefix"]),
        ),
        KernelProfile(name="python3", label="ipykernel", kernelspec="python3", language="python"),
        KernelProfile(
            name="shell-ssh", label="shell-ssh (durable, default)",
            kernelspec=sshenv.SHELL_SSH_SPEC, language="bash", ssh=True, local_twin="shell",
            connection_check=True, ephemeral_twin="shell-ssh-ephemeral", reconnect_check=True,
            prompt_check=True,
        ),
        KernelProfile(
            name="shell-ssh-ephemeral", label="shell-ssh --ephemeral",
            kernelspec=sshenv.SHELL_SSH_EPHEMERAL_SPEC, language="bash", ssh=True,
            local_twin="shell", flood_lines=None, prompt_check=True,
            notes=("shell-ssh --ephemeral: the memory figure is skipped (the output path in the "
                   "kernel is the same as the durable kernel's), and so are the connection and "
                   "reconnect figures (6 and 8), which are about the durable default.",),
        ),
        KernelProfile(
            name="shell-ssh-tty", label="shell-ssh --tty", kernelspec=sshenv.SHELL_SSH_TTY_SPEC,
            language="bash", ssh=True, local_twin="shell-tty", flood_lines=None,
        ),
        KernelProfile(
            name="shell-ssh-ephemeral-tty", label="shell-ssh --ephemeral --tty",
            kernelspec=sshenv.SHELL_SSH_EPHEMERAL_TTY_SPEC, language="bash", ssh=True,
            local_twin="shell-tty", flood_lines=None,
        ),
        KernelProfile(
            name="sshkernel", label="sshkernel", kernelspec=sshenv.SSHKERNEL_SPEC,
            language="bash", ssh=True, local_twin="shell",
            setup_code=sshenv.SSHKERNEL_LOGIN,
            # Every cell starts with "[ssh] host = benchhost, cwd = /root".
            stdout_preamble=r"\[ssh\] host = [^\n]*, cwd = [^\n]*\n",
            trivial_runs=100,
            throughput_lines=200_000, throughput_timeout=180.0,
            flood_lines=10_000, flood_timeout=120.0,
            notes=("sshkernel: throughput uses `seq 1 200000` (not 2000000), the memory figure "
                   "10,000 lines (1 MB, not 100 MB) and the round trip 100 cells (not 200): "
                   "every cell is a new `bash -c` on a new SSH channel and every output line "
                   "its own stream message. Its connection is opened by the `%login benchhost` "
                   "cell, which the start figure includes. Every cell's stdout begins with "
                   "`[ssh] host = benchhost, cwd = …`; that line is removed before the "
                   "completeness check.",),
        ),
    )
}

#: Ratios are given relative to this kernel, when it is part of the run.
BASELINE = "python3"
