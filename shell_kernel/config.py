"""Kernel configuration: what a kernelspec's argv can set, parsed and checked."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .options import OPTIONS, idle_timeout, output_limit_bytes

if TYPE_CHECKING:  # the kernel's launcher imports this before ipykernel: only what it needs
    from .backends import Backend
    from .backends.local.spawn import SpawnedShell
    from .session import Options


def _option_fields(cls: type) -> type:
    """Make cls a dataclass with one field per declared option, in declaration order."""
    cls.__annotations__ = {option.name: Any for option in OPTIONS}
    for option in OPTIONS:
        setattr(cls, option.name, option.default)
    return dataclass(cls)


@_option_fields
class KernelConfig:
    """The kernel's options (fields: options.OPTIONS) and what they make.

    ssh is [USER@]HOST[:PORT], or None for the local backend.
    """

    @property
    def backend(self) -> str:
        return "ssh" if self.ssh else "local"

    @property
    def spawns_early(self) -> bool:
        """The kernel's launcher spawns this shell itself, at once (launch.py):
        a local shell that is not a named session."""
        return self.ssh is None and not self.session

    def backend_factory(self, side_channel_early: bool = True,
                        spawned: SpawnedShell | None = None) -> Callable[[], Backend]:
        """side_channel_early: an ephemeral SSH shell's side channel opens at
        start, ready for the first interrupt (see SSHBackend). spawned: the
        shell that the launcher spawned (spawns_early), for the first backend."""
        idle = idle_timeout(self.remote_idle_timeout, self.session is not None)
        if self.ssh is None:
            from .backends.local.backend import LocalBackend, LocalNamedBackend
            if self.session:
                return lambda: LocalNamedBackend(self.session, take_over=self.take_over,
                                                 bash=self.bash, clean=self.clean,
                                                 idle_timeout=idle,
                                                 completion=not self.no_completion)
            first = [spawned] if spawned is not None else []
            return lambda: LocalBackend(bash=self.bash, clean=self.clean,
                                        spawned=first.pop() if first else None,
                                        completion=not self.no_completion)
        from .backends.ssh.backend import SSHBackend
        from .backends.ssh.target import resolve

        def ssh_backend() -> Backend:
            # Resolved at every (re)connection: the ssh config may have changed.
            return SSHBackend(resolve(self.ssh, self.ssh_config), clean=self.clean,
                              accept_new_host_key=self.accept_new_host_key, bash=self.bash,
                              resolve_jump=lambda alias: resolve(alias, self.ssh_config),
                              # A named session outlives even the kernel.
                              durable=not self.ephemeral or self.session is not None,
                              idle_timeout=idle,
                              session=self.session, take_over=self.take_over,
                              side_channel_early=side_channel_early,
                              completion=not self.no_completion)
        return ssh_backend

    def session_options(self) -> Options:
        from .session import Options
        return Options(
            interrupt_grace=self.interrupt_grace,
            output_limit=output_limit_bytes(self.output_limit_mb),
            spill_dir=Path(self.spill_dir).expanduser().absolute(),
            start_timeout=self.start_timeout,
            snapshot_exports=self.ssh is not None and self.ephemeral,
            tty=self.tty,
        )

    def to_argv(self) -> list[str]:
        """The options as kernel command-line flags (defaults left out)."""
        return [arg for option in OPTIONS for arg in option.argv(getattr(self, option.name))]


def add_options(parser: argparse.ArgumentParser) -> None:
    """Flags shared by `install` (written into the kernelspec) and `kernel`."""
    for title in dict.fromkeys(option.group for option in OPTIONS):  # in order of first use
        group = parser.add_argument_group(title)
        for option in OPTIONS:
            if option.group == title:
                option.add_to(group)


def config_from_args(args: argparse.Namespace) -> KernelConfig:
    ssh_only = [option for option in OPTIONS if option.needs_ssh]
    if not args.ssh and any(getattr(args, option.name) for option in ssh_only):
        raise ValueError(f"{_and_list([option.flag for option in ssh_only])} need --ssh HOST")
    return KernelConfig(**{option.name: getattr(args, option.name) for option in OPTIONS})


def _and_list(words: list[str]) -> str:
    """["a", "b", "c"] -> "a, b and c"."""
    if len(words) == 1:
        return words[0]
    return f"{', '.join(words[:-1])} and {words[-1]}"
