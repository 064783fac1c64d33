"""Fixtures: kernelspecs installed by our own installer into a private
Jupyter path, and kernels started from them through jupyter_client."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

# Each xdist worker marks what its kernels and sessions start with a mark of
# its own (RUN.gwN, which .ci/leftovers.py counts as the run's), before
# harness.py reads it: pids_matching then sees this worker's processes only,
# not those of the same test's other backend, which `pytest -n 2` (tests dealt
# one by one, not --dist loadfile) runs on the other worker at the same time
# with the same marker in its command line.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["SHELL_KERNEL_TEST_RUN"] = ".".join(
        [os.environ.get("SHELL_KERNEL_TEST_RUN") or secrets.token_hex(8),
         os.environ["PYTEST_XDIST_WORKER"]])

from harness import KernelHarness  # noqa: E402 - after the mark
from shell_kernel.testing.sshd import SSHServer


# pyenv's rehash lock: this machine's ~/.bashrc runs `pyenv init`, and a
# login shell that a test kills mid-rehash (the faults the tests model) leaves
# the lock, on which every later login would wait. The run removes it if it
# was not there before (.ci/leftovers.py fails a run that leaves it).
PYENV_LOCK = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "shims" / ".pyenv-shim"
_pyenv_lock_before = PYENV_LOCK.exists()


def pytest_sessionfinish(session):
    if not _pyenv_lock_before:
        PYENV_LOCK.unlink(missing_ok=True)


# name -> extra install flags
LOCAL_SPECS = {
    "shell-test": [],
    "shell-test-clean": ["--clean"],
    "shell-test-limit": ["--output-limit-mb", "5"],
}


# SHELL_KERNEL_TEST_BASH=PATH: every kernelspec the tests install runs that
# bash (`--bash PATH`), locally and over SSH: the test sshd runs on this
# machine, as this user, so the remote bash is the same file. .ci/run sets it
# to the old bashes it builds (3.2: every Mac; 4.2: RHEL 7).
TEST_BASH = os.environ.get("SHELL_KERNEL_TEST_BASH") or None
if TEST_BASH is not None and not os.access(TEST_BASH, os.X_OK):
    raise RuntimeError(f"SHELL_KERNEL_TEST_BASH={TEST_BASH} is not an executable file")


def install_spec(prefix: Path, name: str, flags: list[str]) -> dict:
    if TEST_BASH is not None and "--bash" not in flags:
        flags = [*flags, "--bash", TEST_BASH]
    subprocess.run([sys.executable, "-m", "shell_kernel", "install", "--prefix", str(prefix),
                    "--name", name, *flags], check=True, capture_output=True, text=True)
    spec_file = prefix / "share" / "jupyter" / "kernels" / name / "kernel.json"
    return json.loads(spec_file.read_text())


def install_wrapped_spec(prefix: Path, name: str, flags: list[str], script: str) -> None:
    """A kernelspec that runs the test script (a wrapper around the real
    kernel, such as tests/faulty_kernel.py) instead of `-m shell_kernel`."""
    spec = install_spec(prefix, name, flags)
    at = spec["argv"].index("-m")
    spec["argv"][at:at + 2] = [script]
    spec_file = prefix / "share" / "jupyter" / "kernels" / name / "kernel.json"
    spec_file.write_text(json.dumps(spec))


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """A real OpenSSH server on 127.0.0.1 with its own keys, for the whole run."""
    server = SSHServer(tmp_path_factory.mktemp("sshd"))
    server.start()
    server.ssh_config = server.write_ssh_config(server.workdir / "ssh_config", alias="testhost")
    yield server
    server.stop()


@pytest.fixture
def server(tmp_path):
    """A private sshd for one test, which may break, restart or inspect it."""
    srv = SSHServer(tmp_path / "sshd", name="private-sshd")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def jupyter_prefix(tmp_path_factory, sshd) -> Path:
    prefix = tmp_path_factory.mktemp("jupyter-prefix")
    for name, flags in LOCAL_SPECS.items():
        install_spec(prefix, name, flags)
    install_spec(prefix, "shell-ssh-test", ["--ssh", "testhost", "--ssh-config", str(sshd.ssh_config)])
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(prefix / "share" / "jupyter") + (os.pathsep + old if old else "")
    yield prefix
    if old is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = old


def kernel_env(tmpdir: Path, **overrides) -> dict:
    env = dict(os.environ)
    env["TMPDIR"] = str(tmpdir)
    env.update(overrides)
    return env


SPEC_FOR_BACKEND = {"local": "shell-test", "ssh": "shell-ssh-test"}


@pytest.fixture(scope="module", params=list(SPEC_FOR_BACKEND))
def backend(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def kernel(backend, jupyter_prefix, tmp_path_factory):
    """One kernel per test module and backend; tests keep their own variables."""
    tmpdir = tmp_path_factory.mktemp(f"{backend}-tmp")
    tmpdir.chmod(0o755)
    harness = KernelHarness(SPEC_FOR_BACKEND[backend], env=kernel_env(tmpdir), cwd=str(tmpdir))
    harness.backend = backend
    harness.tmpdir = tmpdir
    harness.home_dir = harness.ok("pwd").strip()  # where a new shell starts
    if backend == "ssh":
        # The test sshd's shells start in its user's home, which every test
        # run on this machine shares (a file one test writes there, another
        # test run's removes): cells work in the module's own directory, as
        # a local kernel's do.
        harness.ok(f"cd {shlex.quote(str(tmpdir))}")
    yield harness
    harness.shutdown()


@pytest.fixture
def start_kernel(jupyter_prefix, tmp_path):
    """Start extra kernels (own spec, env or home) for one test; all shut down after."""
    started = []

    def start(name="shell-test", wait_shell=True, transport="ipc", **env_overrides) -> KernelHarness:
        tmpdir = tmp_path / f"tmp{len(started)}"
        tmpdir.mkdir(mode=0o755)
        harness = KernelHarness(name, env=kernel_env(tmpdir, **env_overrides), cwd=str(tmp_path),
                                wait_shell=wait_shell, transport=transport)
        harness.tmpdir = tmpdir
        started.append(harness)
        return harness

    yield start
    for harness in started:
        harness.shutdown()


@pytest.fixture
def ssh_kernel(jupyter_prefix, start_kernel, tmp_path):
    """Install a kernelspec for an ssh config and start a kernel from it."""
    counter = [0]

    def start(config: Path, alias: str = "testhost", flags=(), **env):
        counter[0] += 1
        name = f"shell-ssh-case-{os.getpid()}-{counter[0]}"
        install_spec(jupyter_prefix, name, ["--ssh", alias, "--ssh-config", str(config), *flags])
        return start_kernel(name, **env)

    return start


@pytest.fixture
def busy_cpus():
    """Two CPUs kept busy beside the test (the machine has two): races that
    a quiet machine hides show under this load. Two spinning processes,
    unless the machine is at least that loaded already: its load average as
    high as its CPUs plus two (a parallel run such as .ci/run's, whose six
    to eight workers keep the CPUs busy), where spinners would only slow
    the run down, not load the machine more than it is."""
    if os.getloadavg()[0] >= (os.cpu_count() or 2) + 2:
        yield
        return
    spinners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(2)]
    yield
    for spinner in spinners:
        spinner.kill()
        spinner.wait()
