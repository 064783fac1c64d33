"""Kernelspecs: write one from the kernelspec/ template, or remove one."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

from .config import KernelConfig
from .options import default

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]*$", re.IGNORECASE)


class InstallError(RuntimeError):
    """A kernelspec could not be written or removed; the message says why."""


def template_dir() -> Path:
    """kernelspec/ ships inside the wheel as shell_kernel/kernelspec; a source
    checkout (editable install) has it beside the package."""
    packaged = Path(str(resources.files("shell_kernel").joinpath("kernelspec")))
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "kernelspec"


def check_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise InstallError(f"kernel name {name!r} is not valid: use letters, digits, '.', '_' "
                           "and '-', starting with a letter or digit")
    return name


@functools.lru_cache(maxsize=None)
def bash_version(path: str) -> str | None:
    """"3.2" for a bash whose --version says "GNU bash, version 3.2.57(1)...";
    None when path runs no bash here (not yet installed, or not a bash)."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10,
                              stdin=subprocess.DEVNULL, errors="replace")
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"\bbash, version (\d+\.\d+)", done.stdout.partition("\n")[0])
    return match.group(1) if match else None


def _bash(config: KernelConfig) -> str | None:
    """Which bash, in words, when it is not the one on PATH: the version it
    says it is, or else (over SSH, where it is not run at install; a path
    that runs no bash here) its path."""
    if config.bash == default("bash"):
        return None
    version = bash_version(config.bash) if config.ssh is None else None
    return f"bash {version or config.bash}"


def _variant(config: KernelConfig) -> list[str]:
    """What sets this kernelspec apart from the plain one of its host, in
    words: a launcher shows variants side by side."""
    words = [word for word, on in (("clean", config.clean), ("tty", config.tty)) if on]
    if config.session:
        words.append(f"session {config.session}")
    return words


def default_name(config: KernelConfig) -> str:
    if config.ssh is None:
        name = "shell"
    else:
        from .backends.ssh.target import spec_name_for
        name = spec_name_for(config.ssh)
    bash = _bash(config)
    words = [re.sub(r"[^a-z0-9.]+", "-", bash.lower()).strip("-")] if bash else []
    # A variant gets a name of its own, so that it does not replace the plain one.
    return "-".join([name, *words, *(word.replace(" ", "-") for word in _variant(config))])


def default_display_name(config: KernelConfig) -> str | None:
    """None: the template's "Bash (shell_kernel)"."""
    words, bash = _variant(config), _bash(config)
    if config.ssh is not None:
        return f"Bash on {config.ssh} ({', '.join(['SSH', *([bash] if bash else []), *words])})"
    shell = "B" + bash[1:] if bash else "Bash"  # (not capitalize(): it lowercases a path)
    return f"{shell} ({', '.join(words or ['shell_kernel'])})" if words or bash else None


def build_spec(config: KernelConfig, display_name: str | None) -> dict:
    spec = json.loads((template_dir() / "kernel.json").read_text())
    argv = [sys.executable if part == "{python}" else part for part in spec["argv"]]
    at = argv.index("kernel") + 1
    spec["argv"] = argv[:at] + config.to_argv() + argv[at:]
    if display_name:
        spec["display_name"] = display_name
    spec["metadata"]["shell_kernel"] = {"backend": config.backend}
    if config.ssh:
        spec["metadata"]["shell_kernel"]["host"] = config.ssh
    return spec


def install(config: KernelConfig, name: str = "shell", display_name: str | None = None,
            user: bool = False, sys_prefix: bool = False, prefix: str | None = None) -> str:
    check_name(name)
    if sys_prefix:
        prefix = sys.prefix
    spec = build_spec(config, display_name)
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        for logo in template_dir().glob("logo-*"):
            shutil.copy(logo, tmp)
        (Path(tmp) / "kernel.json").write_text(json.dumps(spec, indent=2) + "\n")
        try:
            return KernelSpecManager().install_kernel_spec(tmp, name, user=user, prefix=prefix,
                                                           replace=True)
        except OSError as err:
            hint = "" if user else " (try --user, or --sys-prefix inside a virtual environment)"
            raise InstallError(f"could not install kernelspec {name!r}: {err}{hint}") from err


def uninstall(name: str) -> str:
    manager = KernelSpecManager()
    try:
        path = manager.get_kernel_spec(name).resource_dir
    except NoSuchKernel:
        known = ", ".join(sorted(manager.find_kernel_specs())) or "none"
        raise InstallError(f"no kernelspec named {name!r} (installed: {known})") from None
    manager.remove_kernel_spec(name)
    return path
