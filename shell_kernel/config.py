"""Kernel configuration: what a kernelspec's argv can set, parsed and checked."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .backends import Backend
from .session import Options


@dataclass
class KernelConfig:
    backend: str = "local"
    clean: bool = False
    bash: str = "bash"
    interrupt_grace: float = 1.0
    output_limit_mb: float = 64.0
    spill_dir: str = "shell_kernel_output"
    start_timeout: float = 30.0

    def backend_factory(self) -> Callable[[], Backend]:
        if self.backend == "local":
            from .backends.local import LocalBackend
            return lambda: LocalBackend(bash=self.bash, clean=self.clean)
        raise ValueError(f"unknown backend {self.backend!r}")

    def session_options(self) -> Options:
        return Options(
            interrupt_grace=self.interrupt_grace,
            output_limit=int(self.output_limit_mb * 1_000_000),
            spill_dir=Path(self.spill_dir).expanduser().absolute(),
            start_timeout=self.start_timeout,
        )

    def to_argv(self) -> list[str]:
        """The options as kernel command-line flags (defaults left out)."""
        default = KernelConfig()
        argv = []
        if self.clean:
            argv.append("--clean")
        for name in ("bash", "interrupt_grace", "output_limit_mb", "spill_dir", "start_timeout"):
            value = getattr(self, name)
            if value != getattr(default, name):
                argv += ["--" + name.replace("_", "-"), str(value)]
        return argv


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def add_options(parser: argparse.ArgumentParser) -> None:
    """Flags shared by `install` (written into the kernelspec) and `kernel`."""
    group = parser.add_argument_group("shell options")
    group.add_argument("--clean", action="store_true",
                       help="start bash without profile or bashrc (bash --noprofile --norc)")
    group.add_argument("--bash", default="bash", metavar="PATH", help="the bash to run (default: bash)")
    group.add_argument("--interrupt-grace", type=_positive, default=1.0, metavar="S",
                       help="seconds between SIGINT and SIGTERM/SIGKILL on interrupt (default: 1)")
    group.add_argument("--output-limit-mb", type=_positive, default=64.0, metavar="MB",
                       help="output of one cell sent to the notebook before the rest goes "
                            "to a file (default: 64)")
    group.add_argument("--spill-dir", default="shell_kernel_output", metavar="DIR",
                       help="where output past the limit is saved, relative to the kernel's "
                            "working directory (default: shell_kernel_output)")
    group.add_argument("--start-timeout", type=_positive, default=30.0, metavar="S",
                       help="how long the shell may take to start (default: 30)")


def config_from_args(args: argparse.Namespace) -> KernelConfig:
    return KernelConfig(
        clean=args.clean, bash=args.bash, interrupt_grace=args.interrupt_grace,
        output_limit_mb=args.output_limit_mb, spill_dir=args.spill_dir,
        start_timeout=args.start_timeout,
    )
