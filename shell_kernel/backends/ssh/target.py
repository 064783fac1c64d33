"""Where an SSH kernel connects: `[USER@]HOST[:PORT]` resolved through ssh_config."""

from __future__ import annotations

import fnmatch
import functools
import getpass
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

TARGET_PATTERN = re.compile(r"^(?:(?P<user>[^@\s:]+)@)?(?P<host>[A-Za-z0-9._-]+|\[[0-9a-fA-F:]+\])"
                            r"(?::(?P<port>\d{1,5}))?$")


# What OpenSSH uses when the config names nothing (its id_*_sk, id_xmss and id_dsa
# identities are left out: paramiko cannot use them).
DEFAULT_IDENTITY_FILES = ["~/.ssh/id_rsa", "~/.ssh/id_ecdsa", "~/.ssh/id_ed25519"]
DEFAULT_USER_KNOWN_HOSTS = "~/.ssh/known_hosts ~/.ssh/known_hosts2"
DEFAULT_GLOBAL_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2"


class TargetError(ValueError):
    """The SSH target or its configuration is unusable; the message says why."""


class _OpenSSHConfig(paramiko.SSHConfig):
    """paramiko's parser, except that ProxyCommand keeps its %-tokens until the final
    host, port and user are known (the command line may override the config's), and
    keeps `~`, which the shell running the command expands, as with OpenSSH."""

    TOKENS_BY_CONFIG_KEY = {**paramiko.SSHConfig.TOKENS_BY_CONFIG_KEY, "proxycommand": []}

    def _pattern_matches(self, patterns, target) -> bool:
        """paramiko's rule (no match if a `!pattern` matches, else a match if
        any pattern does), with each list of patterns compiled once: paramiko
        runs fnmatch per pattern per lookup, which made resolving a fleet's
        hosts quadratic in the number of aliases."""
        if hasattr(patterns, "split"):
            patterns = patterns.split(",")
        excluded, included = _compiled_patterns(tuple(patterns))
        return not (excluded and excluded.match(target)) and bool(included and included.match(target))


@functools.lru_cache(maxsize=4096)
def _compiled_patterns(patterns: tuple[str, ...]) -> tuple[re.Pattern | None, re.Pattern | None]:
    """The negated and the plain patterns of a Host or Match list, each as one regex."""
    def joined(globs: list[str]) -> re.Pattern | None:
        return re.compile("|".join(fnmatch.translate(glob) for glob in globs)) if globs else None
    return (joined([p[1:] for p in patterns if p.startswith("!")]),
            joined([p for p in patterns if not p.startswith("!")]))


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
    known_hosts_files: list[str] = field(default_factory=list)  # the first one is written to
    global_known_hosts_files: list[str] = field(default_factory=list)
    hash_known_hosts: bool = False
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
    user, host, port = match.group("user"), match.group("host"), match.group("port")
    if host.startswith("-") or (user is not None and not _valid_user(user)):
        # OpenSSH 9.6 refuses these too (CVE-2023-51385): %r and %h reach commands
        # such as ProxyCommand, which the shell runs, and "-..." reads as an option.
        what = f"the user {user!r}" if host[0] != "-" else f"the host {host!r}"
        raise TargetError(f"{text!r}: {what} holds shell metacharacters or starts with '-', "
                          "which OpenSSH refuses on the command line as well; write the "
                          "real name, or set an unusual one with User in the ssh config")
    if port is not None and not 0 < int(port) < 65536:
        raise TargetError(f"port {port} in {text!r} is out of range")
    return user, host.strip("[]"), int(port) if port else None


def _valid_user(user: str) -> bool:
    """OpenSSH's valid_ruser() (ssh.c): no shell quoting, command or grouping
    characters, no control characters, no leading '-' nor a trailing backslash."""
    return not (user.startswith("-") or user.endswith("\\")
                or any(char in "'`\";&<>|(){}" or ord(char) < 32 or ord(char) == 127
                       for char in user))


def default_config_file() -> str:
    return os.path.expanduser("~/.ssh/config")


def resolve(text: str, config_file: str | None = None) -> SSHTarget:
    """Apply ssh_config (like `ssh -F FILE`) to a target given on the command line."""
    user, host, port = parse_target(text)
    path = config_file or default_config_file()
    options = _lookup(_read_config(path, explicit=bool(config_file)), host, path)
    target = SSHTarget(alias=host, hostname=options.get("hostname", host), config_file=path)
    target.user = user or options.get("user") or getpass.getuser()
    target.port = port or _number(options, "Port", path, default=22)
    if not 0 < target.port < 65536:
        raise TargetError(f"ssh config {path}: Port {target.port} is out of range (1-65535); "
                          "fix it there and run the cell again.")
    target.identity_files = _paths(options.get("identityfile") or DEFAULT_IDENTITY_FILES)
    target.identities_only = _yes(options, "identitiesonly")
    target.proxy_jump = _unless_none(options.get("proxyjump"))
    command = _unless_none(options.get("proxycommand"))
    target.proxy_command = command and _expand_proxy_command(command, target, path)
    interval = _number(options, "ServerAliveInterval", path, default=0)
    if interval > 0:
        target.keepalive_interval = float(interval)
    if "serveralivecountmax" in options:
        target.keepalive_count_max = max(1, _number(options, "ServerAliveCountMax", path))
    target.known_hosts_files = _paths(
        options.get("userknownhostsfile", DEFAULT_USER_KNOWN_HOSTS).split())
    target.global_known_hosts_files = _paths(
        options.get("globalknownhostsfile", DEFAULT_GLOBAL_KNOWN_HOSTS).split())
    target.hash_known_hosts = _yes(options, "hashknownhosts")
    return target


def _read_config(path: str, explicit: bool) -> paramiko.SSHConfig:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        if explicit:
            raise TargetError(f"ssh config file {path} does not exist") from None
        return _OpenSSHConfig()
    except OSError as err:
        raise TargetError(f"could not read ssh config {path}: {err}. Fix the file "
                          "and run the cell again.") from err
    return _parsed_config(path, stat.st_ino, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _parsed_config(path: str, inode: int, mtime_ns: int, size: int) -> paramiko.SSHConfig:
    """One parse per version of the file (a fleet resolves hundreds of hosts
    through it; lookups leave the parsed config as it is)."""
    try:
        return _OpenSSHConfig.from_path(path)
    except (OSError, ValueError, paramiko.SSHException) as err:
        raise TargetError(f"could not read ssh config {path}: {err}. Fix the file "
                          "and run the cell again.") from err


def _lookup(config: paramiko.SSHConfig, host: str, path: str) -> dict:
    try:
        return config.lookup(host)
    # paramiko raises ValueError for numbers it reads itself, SSHException for patterns
    # and ImportError for `Match exec` without invoke; none of it may escape as a crash.
    except Exception as err:  # noqa: BLE001
        raise TargetError(f"could not apply ssh config {path} to {host}: {err}. Fix the file "
                          "and run the cell again.") from err


def _number(options: dict, name: str, path: str, default: int | None = None) -> int:
    value = options.get(name.lower(), default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise TargetError(f"ssh config {path}: {name} {value!r} is not a whole number; fix it "
                          "there and run the cell again.") from None


def _yes(options: dict, key: str) -> bool:
    return options.get(key, "no").lower() == "yes"


def _unless_none(value: str | None) -> str | None:
    """OpenSSH's `none` switches a proxy option off."""
    return None if value is None or value.lower() == "none" else value


def _paths(paths: list[str]) -> list[str]:
    return [os.path.expanduser(p) for p in paths]


def _expand_proxy_command(command: str, target: SSHTarget, path: str) -> str:
    """The tokens OpenSSH expands in ProxyCommand: %h %p %r %n and %%, each one
    word for the shell."""
    # Each value is quoted for the shell that runs the command: the ssh config's
    # HostName and User are not checked as command-line names are.
    values = {key: shlex.quote(value) for key, value in (
        ("h", target.hostname), ("p", str(target.port)), ("r", target.user), ("n", target.alias))}
    values["%"] = "%"

    def value_of(token: re.Match) -> str:
        if token.group(1) not in values:
            raise TargetError(f"ssh config {path}: ProxyCommand {command!r} uses %{token.group(1)}"
                              ", which is none of %h %p %r %n %%; fix it there and run the cell "
                              "again.")
        return values[token.group(1)]

    return re.sub(r"%(.?)", value_of, command)


def spec_name_for(text: str) -> str:
    """Default kernelspec name for a target, e.g. shell-ssh-db1."""
    _, host, port = parse_target(text)
    name = re.sub(r"[^a-z0-9._-]+", "-", host.lower()).strip("-") or "host"
    return f"shell-ssh-{name}" + (f"-{port}" if port else "")


def ensure_file_parent(path: str) -> None:
    Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
