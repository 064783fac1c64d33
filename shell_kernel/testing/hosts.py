"""Shapes of the test sshd's "remote host": the environment every session of
every test sshd gets (sshd_config SetEnv), and the userland it finds first
on PATH.

SHELL_KERNEL_TEST_HOST=busybox gives every test sshd's sessions a BusyBox
userland: Debian's busybox applets first on PATH (a directory of symlinks,
as on Alpine), for the tools the kernel's scripts use on a host. bash itself
stays GNU bash (Alpine users install it; the kernel needs it).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

#: The applets that stand for the host's own tools: what shell_kernel's
#: scripts run (sh too: on Alpine /bin/sh is BusyBox's ash).
BUSYBOX_APPLETS = (
    "sh", "ps", "dd", "tail", "awk", "sed", "mktemp", "stat", "cat", "rm", "mkdir", "mkfifo",
    "ls", "date", "sleep", "kill", "head", "tr", "wc", "find", "sort", "tee", "id", "readlink",
    "setsid", "stty", "tty", "mv", "cp", "chmod", "touch", "ln", "env", "grep", "cut",
)


def busybox_bin() -> str:
    """A directory of symlinks to busybox, one per applet (made once per
    process, removed at its exit)."""
    busybox = shutil.which("busybox")
    if busybox is None:
        raise RuntimeError("SHELL_KERNEL_TEST_HOST=busybox needs busybox (apt-get install busybox)")
    folder = tempfile.mkdtemp(prefix="shell-kernel-busybox-")
    atexit.register(shutil.rmtree, folder, True)
    for applet in BUSYBOX_APPLETS:
        os.symlink(busybox, os.path.join(folder, applet))
    os.chmod(folder, 0o755)
    return folder


def _test_host_environment() -> dict[str, str]:
    # This machine's ~/.bashrc runs `pyenv init`, whose rehash takes a lock
    # file; a test that SIGKILLs sessions mid-login leaves it behind, and
    # every later login would then wait 60 s for it. Every session of a test
    # sshd gets this, and the mark by which .ci/leftovers.py finds what a
    # test run left running.
    environment = {"PYENV_REHASH_TIMEOUT": "1"}
    if os.environ.get("SHELL_KERNEL_TEST_RUN"):
        environment["SHELL_KERNEL_TEST_RUN"] = os.environ["SHELL_KERNEL_TEST_RUN"]
    shape = os.environ.get("SHELL_KERNEL_TEST_HOST", "")
    if shape == "busybox":
        environment["PATH"] = busybox_bin() + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
    elif shape:
        raise RuntimeError(f"SHELL_KERNEL_TEST_HOST={shape}: the shapes are: busybox")
    return environment


TEST_HOST_ENVIRONMENT = _test_host_environment()


def setenv_config(environment: dict[str, str]) -> str:
    """An sshd_config ``SetEnv`` line (for ``SSHServer(extra_config=...)``):
    every session gets these variables, overriding sshd's own HOME and PATH,
    which is how a test gives the "remote host" another shape (a HOME with
    noisy rc files, a PATH without some tool, a TMPDIR with spaces). sshd_config
    cannot quote a double quote, so values must not contain one."""
    environment = {**TEST_HOST_ENVIRONMENT, **environment}
    for name, value in environment.items():
        if '"' in value or "\n" in value:
            raise ValueError(f"SetEnv cannot carry {name}={value!r}")
    return "SetEnv " + " ".join(f'"{name}={value}"' for name, value in environment.items())
