"""Which hosts a fleet run reaches: `--hosts` and `--inventory` into FleetHosts.

`--hosts` takes a comma-separated list of items, each of them

- an SSH target, `[USER@]HOST[:PORT]` or an ssh config alias, resolved later
  exactly as the kernel resolves it (backends.ssh.target.resolve, at connection time);
- `@FILE`: one target (or pattern) per line, `#` starting a comment;
- a pattern with `*`, `?` or `[...]`: the aliases named by `Host` lines of the
  ssh config (literal names only, not patterns themselves) that it matches,
  in the order the config names them.

`--inventory FILE [--limit PATTERN]` asks ansible-core's own inventory API,
so groups, ranges and patterns mean what they mean to `ansible`; a host's
`ansible_host`, `ansible_port` and `ansible_user` make its SSH target, which
the ssh config then applies to as it does for `ssh`.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
from pathlib import Path

from .backends.ssh.target import TargetError, _read_config, default_config_file, parse_target
from .jobs import FleetHost

PATTERN_CHARS = "*?["


class HostsError(ValueError):
    """The host list cannot be used; the message says why and what to do."""


def hosts_from_list(text: str, ssh_config: str | None = None) -> list[FleetHost]:
    """The hosts `--hosts TEXT` names, each once, in the order given."""
    hosts: list[FleetHost] = []
    for item in (word.strip() for word in text.split(",")):
        if not item:
            continue
        if item.startswith("@"):
            for line_item in _file_items(item[1:]):
                hosts += _expand(line_item, ssh_config, item)
        else:
            hosts += _expand(item, ssh_config, "--hosts")
    return _unique(hosts)


def _file_items(path: str) -> list[str]:
    try:
        text = Path(path).expanduser().read_text()
    except OSError as err:
        raise HostsError(f"--hosts @{path}: cannot read the host file ({err.strerror})") from None
    items = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            items += line.replace(",", " ").split()
    return items


def _expand(item: str, ssh_config: str | None, where: str) -> list[FleetHost]:
    if any(char in item for char in PATTERN_CHARS):
        return [FleetHost(alias, alias) for alias in config_aliases(item, ssh_config, where)]
    try:
        parse_target(item)
    except TargetError as err:
        raise HostsError(f"{where}: {err}") from None
    return [FleetHost(item, item)]


def config_aliases(pattern: str, ssh_config: str | None, where: str = "--hosts") -> list[str]:
    """The literal `Host` names of the ssh config that `pattern` matches."""
    path = ssh_config or default_config_file()
    if not os.path.exists(path):
        raise HostsError(f"{where}: {pattern!r} is a pattern, which matches the Host names of "
                         f"the ssh config, but {path} does not exist (give one with --ssh-config)")
    try:
        config = _read_config(path, explicit=True)
    except TargetError as err:
        raise HostsError(f"{where}: {err}") from None
    names: list[str] = []
    for entry in config._config:  # paramiko keeps the blocks in file order
        for name in entry.get("host", []):
            if not any(char in name for char in PATTERN_CHARS + "!") \
                    and fnmatch.fnmatchcase(name, pattern) and name not in names:
                names.append(name)
    if not names:
        raise HostsError(f"{where}: {pattern!r} matches no Host name in {path}")
    return names


def _unique(hosts: list[FleetHost]) -> list[FleetHost]:
    seen: dict[str, FleetHost] = {}
    for host in hosts:
        seen.setdefault(host.name, host)
    return list(seen.values())


# ------------------------------------------------------------------ ansible
def ansible_available() -> bool:
    return importlib.util.find_spec("ansible") is not None


def hosts_from_inventory(path: str, limit: str | None = None) -> list[FleetHost]:
    """Hosts of an Ansible inventory (any format ansible reads), through ansible-core."""
    if not ansible_available():
        raise HostsError("--inventory needs ansible-core: pip install 'shell_kernel[ansible]'")
    if not Path(path).exists():
        raise HostsError(f"--inventory {path}: no such file")
    # A source that no inventory plugin can parse is an error, not a warning
    # followed by an empty inventory (ansible's default).
    os.environ.setdefault("ANSIBLE_INVENTORY_UNPARSED_FAILED", "True")
    os.environ.setdefault("ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED", "True")
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    try:
        inventory = InventoryManager(loader=loader, sources=[str(path)])
        if limit:
            inventory.subset(limit)
        found = inventory.get_hosts("all")
    except AnsibleError as err:
        message = " ".join(str(err).split())
        raise HostsError(f"--inventory {path}: ansible cannot use it: {message}") from None
    variables = VariableManager(loader=loader, inventory=inventory)
    hosts = []
    for host in found:
        facts = variables.get_vars(host=host, include_hostvars=False)
        hosts.append(FleetHost(host.name, _ansible_target(host.name, facts, path)))
    if not hosts:
        raise HostsError(f"--inventory {path}" + (f" --limit {limit}" if limit else "")
                         + ": no hosts")
    return hosts


def _ansible_target(name: str, facts: dict, path: str) -> str:
    host = str(facts.get("ansible_host") or name)
    user, port = facts.get("ansible_user"), facts.get("ansible_port")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    target = (f"{user}@" if user else "") + host + (f":{port}" if port else "")
    try:
        parse_target(target)
    except TargetError as err:
        raise HostsError(f"--inventory {path}: host {name}: {err}") from None
    return target
