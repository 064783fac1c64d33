"""A fleet run against hosts too busy to take every connection at once:
connection set-up that fails for a passing reason is tried again, so every
host ends ok; a refusal that retrying cannot change (a changed host key) is
not tried again.

A saturated host is the test sshd with `MaxStartups 5:100:5`: past three
connections that have not logged in yet, it drops every new one (as a host
under load does, and as a controller starting 30 connections at once makes
it do): the client reads no banner, or its key exchange is reset.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from notebook_files import write_notebook
from shell_kernel.runner import EXIT_FAILED
from shell_kernel.testing.sshd import SSHServer, setenv_config, ssh_available

pytestmark = pytest.mark.skipif(not ssh_available(), reason="OpenSSH is not installed")

HOSTS = [f"busy{n}" for n in range(30)]


@pytest.mark.timeout(180)
def test_a_saturated_host_is_retried_not_failed(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    for rc in (".bashrc", ".profile", ".bash_profile"):
        (home / rc).write_text("")
    server = SSHServer(tmp_path / "sshd", name="busy-sshd",
                       extra_config="MaxStartups 5:100:5\n"
                       + setenv_config({"HOME": str(home)})).start()
    try:
        config = server.write_ssh_config(tmp_path / "ssh_config", alias=" ".join(HOSTS))
        server.write_rekeyed_alias(config, tmp_path)
        notebook = write_notebook(tmp_path / "busy.ipynb", "echo one", "echo two")
        out = tmp_path / "out"
        proc = subprocess.run(
            [sys.executable, "-m", "shell_kernel", "run", notebook, "--hosts",
             ",".join(HOSTS + ["rekeyed"]), "--ssh-config", config, "--output-dir", out,
             "--jobs", "31"], capture_output=True, text=True, timeout=150)
        hosts = json.loads((out / "summary.json").read_text())["hosts"]
        # The server did drop connections: the hosts were saturated.
        assert "exceeded MaxStartups" in server.log_text() or \
            "drop connection" in server.log_text(), server.log_text()[-2000:]
        assert proc.returncode == EXIT_FAILED, proc.stdout + proc.stderr  # rekeyed only
        assert {name: host["status"] for name, host in hosts.items() if host["status"] != "ok"} \
            == {"rekeyed": "unreachable"}, proc.stdout
        assert "has CHANGED" in hosts["rekeyed"]["error"]
        assert "times over" not in hosts["rekeyed"]["error"]  # refused at once, not tried again
    finally:
        server.stop()
