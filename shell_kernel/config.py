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
    ssh: str | None = None  # [USER@]HOST[:PORT]; None: the local backend
    ssh_config: str | None = None  # like `ssh -F`
    accept_new_host_key: bool = False
    ephemeral: bool = False  # SSH: the shell ends with its connection
    remote_idle_timeout: float = 3600.0  # SSH durable: reap a session left alone this long
    clean: bool = False
    bash: str = "bash"
    interrupt_grace: float = 1.0
    output_limit_mb: float = 64.0
    spill_dir: str = "shell_kernel_output"
    start_timeout: float = 30.0

    @property
    def backend(self) -> str:
        return "ssh" if self.ssh else "local"

    def backend_factory(self) -> Callable[[], Backend]:
        if self.ssh is None:
            from .backends.local import LocalBackend
            return lambda: LocalBackend(bash=self.bash, clean=self.clean)
        from .backends.ssh import SSHBackend
        from .backends.ssh_target import resolve

        def ssh_backend() -> Backend:
            # Resolved at every (re)connection: the ssh config may have changed.
            return SSHBackend(resolve(self.ssh, self.ssh_config), clean=self.clean,
                              accept_new_host_key=self.accept_new_host_key, bash=self.bash,
                              resolve_jump=lambda alias: resolve(alias, self.ssh_config),
                              durable=not self.ephemeral,
                              idle_timeout=self.remote_idle_timeout)
        return ssh_backend

    def session_options(self) -> Options:
        return Options(
            interrupt_grace=self.interrupt_grace,
            output_limit=int(self.output_limit_mb * 1_000_000),
            spill_dir=Path(self.spill_dir).expanduser().absolute(),
            start_timeout=self.start_timeout,
            snapshot_exports=self.ssh is not None and self.ephemeral,
        )

    def to_argv(self) -> list[str]:
        """The options as kernel command-line flags (defaults left out)."""
        default = KernelConfig()
        argv = []
        if self.ssh:
            argv += ["--ssh", self.ssh]
        if self.ssh_config:
            argv += ["--ssh-config", self.ssh_config]
        if self.accept_new_host_key:
            argv.append("--accept-new-host-key")
        if self.ephemeral:
            argv.append("--ephemeral")
        if self.clean:
            argv.append("--clean")
        for name in ("remote_idle_timeout", "bash", "interrupt_grace", "output_limit_mb", "spill_dir", "start_timeout"):
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
    remote = parser.add_argument_group("SSH backend")
    remote.add_argument("--ssh", metavar="[USER@]HOST[:PORT]", type=_ssh_target,
                        help="run the shell on this host (an ssh config alias works too)")
    remote.add_argument("--ssh-config", metavar="FILE", type=_existing_file,
                        help="ssh config file to use instead of ~/.ssh/config (like ssh -F)")
    remote.add_argument("--accept-new-host-key", action="store_true",
                        help="record the host key in known_hosts on first connection when it is "
                             "unknown (never when it changed), like StrictHostKeyChecking=accept-new")
    remote.add_argument("--ephemeral", action="store_true",
                        help="end the remote shell with its connection (default: the shell and its "
                             "running cell survive a dropped connection and the kernel reattaches)")
    remote.add_argument("--remote-idle-timeout", type=_positive, default=3600.0, metavar="S",
                        help="stop a remote session whose kernel has been gone this long "
                             "(default: 3600)")
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


def _ssh_target(text: str) -> str:
    from .backends.ssh_target import TargetError, parse_target
    try:
        parse_target(text)
    except TargetError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _existing_file(text: str) -> str:
    path = Path(text).expanduser()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file")
    return str(path.absolute())


def config_from_args(args: argparse.Namespace) -> KernelConfig:
    if (args.ssh_config or args.accept_new_host_key or args.ephemeral) and not args.ssh:
        raise ValueError("--ssh-config, --accept-new-host-key and --ephemeral need --ssh HOST")
    return KernelConfig(
        ssh=args.ssh, ssh_config=args.ssh_config, accept_new_host_key=args.accept_new_host_key,
        ephemeral=args.ephemeral, remote_idle_timeout=args.remote_idle_timeout,
        clean=args.clean, bash=args.bash, interrupt_grace=args.interrupt_grace,
        output_limit_mb=args.output_limit_mb, spill_dir=args.spill_dir,
        start_timeout=args.start_timeout,
    )
