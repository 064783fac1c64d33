"""The thread table (shell_kernel/threads.py, rendered in docs/architecture.md)
against the threads each kind of session really starts: a session is started,
runs cells with output, is interrupted and closed, with every Thread.start
recorded (the threads run as they would; only their names are noted)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from named_support import host  # noqa: F401 - the fixture
from shell_kernel import threads
from shell_kernel.config import KernelConfig
from shell_kernel.session import ShellSession

KINDS = {
    threads.LOCAL: {},
    threads.LOCAL_NAMED: {"session": "threads-local"},
    threads.SSH: {"ssh": "testhost"},
    threads.SSH_EPHEMERAL: {"ssh": "testhost", "ephemeral": True},
    threads.SSH_NAMED: {"ssh": "testhost", "session": "threads-ssh"},
}


@pytest.fixture(scope="module")
def sessions_tmp(host):
    """The local named session's TMPDIR is the test host's: its stop ends both."""
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(host.sessions_dir.parent)
    yield
    if old is None:
        del os.environ["TMPDIR"]
    else:
        os.environ["TMPDIR"] = old


@pytest.fixture
def started(monkeypatch):
    """The names of the threads started from now on."""
    names: list[str] = []
    start = threading.Thread.start

    def noting(thread, *args, **kwargs):
        names.append(thread.name)
        return start(thread, *args, **kwargs)

    monkeypatch.setattr(threading.Thread, "start", noting)
    return names


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_session_starts_the_threads_the_table_gives(kind, host, sessions_tmp, started):
    config = KernelConfig(ssh_config=str(host.ssh_config), **KINDS[kind])
    session = ShellSession(config.backend_factory(), lambda stream, text: None,
                           config.session_options())
    try:
        session.start()
        assert session.run("seq 1 20000 | tail -1").exit_code == 0
        sleeper = threading.Thread(target=lambda: session.run("sleep 60"), name="test-sleeper")
        sleeper.start()
        time.sleep(1.0)
        session.interrupt()
        sleeper.join(30)
        assert not sleeper.is_alive()
        assert session.run("true").exit_code == 0
        time.sleep(1.5)  # an acknowledgement of the output is due within a second
    finally:
        session.close()
    ours = {name for name in started if name != "test-sleeper"}
    unknown = {name for name in ours if threads.by_name(name) is None and
               not name.startswith("Thread-")}  # paramiko's transport and its timers
    assert unknown == set()
    expected = threads.started_by(kind, {threads.OUTPUT})
    assert {name for name in ours if threads.by_name(name)} - {
        "shell-kernel-ssh-keepalive-ping"} == expected
