"""What the benchmark runs on each kernel: equivalent code per language,
and the per-kernel sizes, limits and notes.

To add a kernel, add a KernelProfile to KERNELS (and, for a new language,
a Snippets entry to SNIPPETS). Nothing else in the benchmark names kernels.
An SSH variant would be one more line, e.g.
    KernelProfile(name="shell-ssh-test", label="shell_kernel over SSH",
                  kernelspec="shell-ssh-test", language="bash")
(the interrupt figure finds the cell's processes with psutil, so it needs
them on this machine, as with a test sshd on localhost).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel


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
        subprocess.run(install, check=True, stdout=subprocess.DEVNULL)
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

    @property
    def snippets(self) -> Snippets:
        return SNIPPETS[self.language]


KERNELS: dict[str, KernelProfile] = {
    profile.name: profile
    for profile in (
        KernelProfile(name="shell", label="shell_kernel", kernelspec="shell", language="bash"),
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
    )
}

#: Ratios are given relative to this kernel, when it is part of the run.
BASELINE = "python3"
