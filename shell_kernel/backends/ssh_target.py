"""Where an SSH kernel connects: `[USER@]HOST[:PORT]` resolved through ssh_config."""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

TARGET_PATTERN = re.compile(r"^(?:(?P<user>[^@\s:]+)@)?(?P<host>[A-Za-z0-9._-]+|\[[0-9a-fA-F:]+\])"
                            r"(?::(?P<port>\d{1,5}))?$")


class TargetError(ValueError):
    """The SSH target or its configuration is unusable; the message says why."""


@dataclass
class SSHTarget:
    alias: str  # what the user wrote (the ssh_config Host pattern matches this)
    hostname: str
    port: int = 22
    user: str = field(default_factory=getpass.getuser)
    identity_files: list[str] = field(default_factory=list)
    identities_only: bool = False
    proxy_jump: str | None = None
    proxy_command: str | None = None
    keepalive_interval: float = 15.0
    keepalive_count_max: int = 3
    known_hosts_files: list[str] = field(default_factory=list)
    config_file: str | None = None

    @property
    def known_hosts_name(self) -> str:
        """The name known_hosts uses for this host and port."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    def describe(self) -> str:
        port = "" if self.port == 22 else f":{self.port}"
        return f"{self.user}@{self.hostname}{port}"


def parse_target(text: str) -> tuple[str | None, str, int | None]:
    """Split `[USER@]HOST[:PORT]`, with a clear error for anything else."""
    match = TARGET_PATTERN.match(text.strip())
    if not match:
        raise TargetError(f"{text!r} is not an SSH target; write [USER@]HOST[:PORT], "
                          "e.g. alice@db1.example.com:2222 or an alias from your ssh config")
    port = match.group("port")
    if port is not None and not 0 < int(port) < 65536:
        raise TargetError(f"port {port} in {text!r} is out of range")
    return match.group("user"), match.group("host").strip("[]"), int(port) if port else None


def default_config_file() -> str:
    return os.path.expanduser("~/.ssh/config")


def resolve(text: str, config_file: str | None = None) -> SSHTarget:
    """Apply ssh_config (like `ssh -F FILE`) to a target given on the command line."""
    user, host, port = parse_target(text)
    path = config_file or default_config_file()
    config = paramiko.SSHConfig()
    if os.path.exists(path):
        try:
            config = paramiko.SSHConfig.from_path(path)
        except (OSError, ValueError) as err:
            raise TargetError(f"could not read ssh config {path}: {err}") from err
    elif config_file:
        raise TargetError(f"ssh config file {config_file} does not exist")
    options = config.lookup(host)
    target = SSHTarget(alias=host, hostname=options.get("hostname", host), config_file=path)
    target.user = user or options.get("user") or getpass.getuser()
    target.port = port or int(options.get("port", 22))
    target.identity_files = [os.path.expanduser(p) for p in options.get("identityfile", [])]
    target.identities_only = options.get("identitiesonly", "no").lower() == "yes"
    target.proxy_jump = options.get("proxyjump")
    target.proxy_command = options.get("proxycommand")
    if target.proxy_command and target.proxy_command.lower() == "none":
        target.proxy_command = None
    if "serveraliveinterval" in options and int(options["serveraliveinterval"]) > 0:
        target.keepalive_interval = float(options["serveraliveinterval"])
    if "serveralivecountmax" in options:
        target.keepalive_count_max = max(1, int(options["serveralivecountmax"]))
    files = options.get("userknownhostsfile")
    if files:
        target.known_hosts_files = [os.path.expanduser(p) for p in files.split()]
    else:
        target.known_hosts_files = [os.path.expanduser("~/.ssh/known_hosts")]
    return target


def spec_name_for(text: str) -> str:
    """Default kernelspec name for a target, e.g. shell-ssh-db1."""
    _, host, port = parse_target(text)
    name = re.sub(r"[^a-z0-9._-]+", "-", host.lower()).strip("-") or "host"
    return f"shell-ssh-{name}" + (f"-{port}" if port else "")


def ensure_file_parent(path: str) -> None:
    Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
