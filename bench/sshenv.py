"""The SSH side of the benchmark: a throw-away OpenSSH server on 127.0.0.1
and the kernelspecs that reach it, all under one temporary directory.

    with SSHEnvironment() as env:    # sshd started, kernelspecs installed
        ...                          # JUPYTER_PATH points at env.prefix
    # sshd stopped (with every session), JUPYTER_PATH restored, files gone

The server is shell_kernel/testing/sshd.py's SSHServer (shared with the tests). Five
kernelspecs go into a private prefix:

- shell-ssh-bench: shell_kernel's SSH backend, installed with shell_kernel's
  own installer (`--ssh benchhost --ssh-config CFG`): a durable session, the
  default;
- shell-ssh-ephemeral-bench: the same with `--ephemeral` added (the shell
  ends with its connection, as before durable sessions);
- shell-ssh-tty-bench and shell-ssh-ephemeral-tty-bench: those two with
  `--tty` added (the cells' output goes through pseudo-terminals);
- sshkernel-bench: the PyPI package sshkernel, installed with its own
  installer (`python -m sshkernel install --prefix ...`). sshkernel always
  reads ~/.ssh/config and ~/.ssh/known_hosts, so its kernel process gets a
  temporary HOME (see `kernel_env`) whose .ssh holds the benchhost entry;
  this machine's ~/.ssh is never read or written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from shell_kernel.testing import sshd

ALIAS = "benchhost"
SHELL_SSH_SPEC = "shell-ssh-bench"
SHELL_SSH_EPHEMERAL_SPEC = "shell-ssh-ephemeral-bench"
SHELL_SSH_TTY_SPEC = "shell-ssh-tty-bench"
SHELL_SSH_EPHEMERAL_TTY_SPEC = "shell-ssh-ephemeral-tty-bench"
#: The variants of shell-ssh-bench, by their extra install flags.
SHELL_SSH_VARIANTS = {
    SHELL_SSH_EPHEMERAL_SPEC: ["--ephemeral"],
    SHELL_SSH_TTY_SPEC: ["--tty"],
    SHELL_SSH_EPHEMERAL_TTY_SPEC: ["--ephemeral", "--tty"],
}
SSHKERNEL_SPEC = "sshkernel-bench"
#: The first cell of every sshkernel kernel: it connects (sshkernel does not
#: connect before it).
SSHKERNEL_LOGIN = f"%login {ALIAS}"


def ensure_sshkernel() -> None:
    """pip-install sshkernel into this Python if it is missing."""
    try:
        import sshkernel  # noqa: F401
    except ImportError:
        print("sshkernel missing; installing it with pip", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "sshkernel"], check=True)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-500:]}")


class SSHEnvironment:
    """sshd + kernelspecs + the temporary HOME for sshkernel."""

    def __init__(self, want_sshkernel: bool = True):
        self.want_sshkernel = want_sshkernel
        self.root: Path | None = None
        self.server = None
        self.ssh_config: Path | None = None
        self.prefix: Path | None = None
        self.home: Path | None = None
        #: Why a kernelspec could not be installed: spec name -> message.
        self.unavailable: dict[str, str] = {}
        self._old_jupyter_path: str | None = None
        self._path_set = False

    # ------------------------------------------------------------ lifecycle
    def start(self) -> "SSHEnvironment":
        if not sshd.ssh_available():
            raise RuntimeError("OpenSSH (sshd, ssh, ssh-keygen) is not installed")
        self.root = Path(tempfile.mkdtemp(prefix="shell-kernel-bench-ssh-"))
        self.server = sshd.SSHServer(self.root / "sshd", name="bench-sshd")
        self.server.start()
        self.ssh_config = self.server.write_ssh_config(self.root / "ssh_config", alias=ALIAS)
        self.prefix = self.root / "prefix"
        ssh_flags = ["--ssh", ALIAS, "--ssh-config", str(self.ssh_config)]
        _run([sys.executable, "-m", "shell_kernel", "install", "--prefix", str(self.prefix),
              "--name", SHELL_SSH_SPEC, *ssh_flags])
        for spec, flags in SHELL_SSH_VARIANTS.items():
            try:
                _run([sys.executable, "-m", "shell_kernel", "install", "--prefix",
                      str(self.prefix), "--name", spec, *ssh_flags, *flags])
            except Exception as err:  # noqa: BLE001 - reported as that kernel's error
                self.unavailable[spec] = f"{type(err).__name__}: {err}"
        if self.want_sshkernel:
            try:
                self._install_sshkernel()
            except Exception as err:  # noqa: BLE001 - reported as that kernel's error
                self.unavailable[SSHKERNEL_SPEC] = f"{type(err).__name__}: {err}"
        self._old_jupyter_path = os.environ.get("JUPYTER_PATH")
        jupyter_dir = str(self.prefix / "share" / "jupyter")
        os.environ["JUPYTER_PATH"] = jupyter_dir + (
            os.pathsep + self._old_jupyter_path if self._old_jupyter_path else "")
        self._path_set = True
        return self

    def _install_sshkernel(self) -> None:
        ensure_sshkernel()
        _run([sys.executable, "-m", "sshkernel", "install", "--prefix", str(self.prefix),
              "--name", SSHKERNEL_SPEC])
        # The HOME sshkernel's kernel runs with: ~/.ssh/config with the
        # benchhost entry (the same one shell_kernel is given with
        # --ssh-config) and ~/.ssh/known_hosts with the server's host key.
        self.home = self.root / "home"
        ssh_dir = self.home / ".ssh"
        ssh_dir.mkdir(parents=True, mode=0o700)
        shutil.copy(self.ssh_config, ssh_dir / "config")
        shutil.copy(self.server.known_hosts_path, ssh_dir / "known_hosts")

    def stop(self) -> None:
        """Idempotent; safe after a failed start()."""
        if self._path_set:
            if self._old_jupyter_path is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = self._old_jupyter_path
            self._path_set = False
        try:
            if self.server is not None:
                self.server.stop()
        finally:
            self.server = None
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
                self.root = None

    def __enter__(self) -> "SSHEnvironment":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------- queries
    def kernel_env(self, spec: str) -> dict | None:
        """The environment to start kernelspec `spec` with (None: inherit ours)."""
        if spec == SSHKERNEL_SPEC and self.home is not None:
            return {**os.environ, "HOME": str(self.home)}
        return None

    def logins(self) -> int:
        """Logins the server has accepted so far (from its log)."""
        return self.server.log_text().count("Accepted publickey") if self.server else 0
