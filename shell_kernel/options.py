"""Every kernel option, declared once.

config.py derives from OPTIONS the flags of `install` and `kernel`, the
KernelConfig fields and the kernelspec argv; session.Options takes its
defaults from here. Adding an option is adding one entry to OPTIONS.

Nothing from the rest of the package is imported at the top, so that
session/types.py can take its defaults from here.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

SSH_GROUP = "SSH backend"
SHELL_GROUP = "shell options"


@dataclass(frozen=True)
class KernelOption:
    """One option: the flag is --NAME with dashes, the config field is NAME.

    A False default makes it a switch (a bare flag, absent when off); any other
    default makes it take a value, checked and converted by `parse`.
    """

    name: str
    default: Any
    help: str
    group: str
    parse: Callable[[str], Any] = str
    metavar: str | None = None
    #: Only meaningful with --ssh: giving it without --ssh is a usage error.
    needs_ssh: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def is_switch(self) -> bool:
        return self.default is False

    @property
    def full_help(self) -> str:
        # The default is written once, in the declaration, and shown from there.
        if self.is_switch or self.default is None:
            return self.help
        return f"{self.help} (default: {_shown(self.default)})"

    def add_to(self, group) -> None:
        """Declare the flag in an argparse parser or argument group."""
        if self.is_switch:
            group.add_argument(self.flag, action="store_true", help=self.full_help)
        else:
            group.add_argument(self.flag, type=self.parse, default=self.default,
                               metavar=self.metavar, help=self.full_help)

    def argv(self, value: Any) -> list[str]:
        """The flags that set this option to value in a kernelspec (none for the default)."""
        if value == self.default:
            return []
        return [self.flag] if self.is_switch else [self.flag, str(value)]


def _shown(value: Any) -> str:
    """A default as --help shows it: 3600.0 as 3600."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def positive(text: str) -> float:
    """An argparse type: a finite number greater than 0 (nan would pass any
    comparison's test and fail later, inf would overflow a timer)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


#: How long a durable session waits for a kernel, unless --remote-idle-timeout
#: says otherwise: an unnamed one is only waiting out a dropped connection, a
#: named one for its user to come back (the next morning, after a weekend).
IDLE_TIMEOUT = 3600.0
NAMED_IDLE_TIMEOUT = 7 * 24 * 3600.0


def idle_timeout(value: float | None, named: bool) -> float:
    """--remote-idle-timeout as given, else the default for the kind of session."""
    if value is not None:
        return value
    return NAMED_IDLE_TIMEOUT if named else IDLE_TIMEOUT


def session_name(text: str) -> str:
    """A --session NAME: it names a directory on the host, so only [A-Za-z0-9._-]."""
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", text) or text.startswith(("-", ".")):
        raise argparse.ArgumentTypeError(
            f"{text!r} cannot name a session: use 1 to 64 letters, digits, '.', '_' and '-' "
            "(not starting with '-' or '.')")
    return text


def _ssh_target(text: str) -> str:
    from .backends.ssh.target import TargetError, parse_target
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


# In the order the kernelspec argv lists them; --help shows them by group.
OPTIONS: tuple[KernelOption, ...] = (
    KernelOption("ssh", None, "run the shell on this host (an ssh config alias works too)",
                 SSH_GROUP, _ssh_target, "[USER@]HOST[:PORT]"),
    KernelOption("ssh_config", None,
                 "ssh config file to use instead of ~/.ssh/config (like ssh -F)",
                 SSH_GROUP, _existing_file, "FILE", needs_ssh=True),
    KernelOption("accept_new_host_key", False,
                 "record the host key in known_hosts on first connection when it is "
                 "unknown (never when it changed), like StrictHostKeyChecking=accept-new",
                 SSH_GROUP, needs_ssh=True),
    KernelOption("ephemeral", False,
                 "end the remote shell with its connection (default: the shell and its "
                 "running cell survive a dropped connection and the kernel reattaches)",
                 SSH_GROUP, needs_ssh=True),
    KernelOption("clean", False,
                 "start bash without profile or bashrc (bash --noprofile --norc)", SHELL_GROUP),
    KernelOption("no_completion", False,
                 "start bash with programmable completion off, so that its startup files "
                 "skip bash-completion, for a kernel that is never asked to complete (`run` "
                 "starts its kernels so); cells get the shell options bash-completion would "
                 "have set", SHELL_GROUP),
    KernelOption("session", None,
                 "a named session: the shell outlives the kernel, and a kernel started with "
                 "the same NAME (on the same host) attaches to it, with a running cell's "
                 "output (with --ssh it is always durable, --ephemeral notwithstanding); "
                 "see `python -m shell_kernel sessions`",
                 SHELL_GROUP, session_name, "NAME"),
    KernelOption("take_over", False,
                 "with --session: attach even when another kernel holds the session (that "
                 "kernel is told so in its next cell); without --session it does nothing",
                 SHELL_GROUP),
    KernelOption("remote_idle_timeout", None,
                 f"stop a durable session whose kernel has been gone this long (default: "
                 f"{IDLE_TIMEOUT:g}, or {NAMED_IDLE_TIMEOUT:g} = 7 days for a --session)",
                 SSH_GROUP, positive, "S"),
    KernelOption("tty", False,
                 "cells write to two pseudo-terminals (stdout, stderr) on the shell's host "
                 "instead of pipes, so that programs colour and line-buffer as in a terminal "
                 "(TERM=xterm-256color, 80x24; needs util-linux `script` there)",
                 SHELL_GROUP),
    KernelOption("bash", "bash", "the bash to run", SHELL_GROUP, metavar="PATH"),
    KernelOption("interrupt_grace", 1.0,
                 "seconds between SIGINT and SIGTERM/SIGKILL on interrupt",
                 SHELL_GROUP, positive, "S"),
    KernelOption("output_limit_mb", 64.0,
                 "output of one cell (displays included) sent to the notebook before the "
                 "rest goes to files",
                 SHELL_GROUP, positive, "MB"),
    KernelOption("spill_dir", "shell_kernel_output",
                 "where output past the limit is saved, relative to the kernel's "
                 "working directory", SHELL_GROUP, metavar="DIR"),
    KernelOption("start_timeout", 30.0, "how long the shell may take to start",
                 SHELL_GROUP, positive, "S"),
)

#: `run --hosts`: a cell's output past this goes to a file (the session's
#: OutputLimit, as in a kernel) instead of the runner's memory, where every
#: running host's output would be held until its notebook is written.
FLEET_OUTPUT_LIMIT_MB = 1.0
#: `run --hosts`: hosts at a time (--jobs).
FLEET_JOBS = 10

_BY_NAME = {option.name: option for option in OPTIONS}


def default(name: str) -> Any:
    """The declared default of one option, e.g. default("interrupt_grace")."""
    return _BY_NAME[name].default


def output_limit_bytes(output_limit_mb: float) -> int:
    """--output-limit-mb is in megabytes (10^6 bytes); the session counts bytes."""
    return int(output_limit_mb * 1_000_000)
