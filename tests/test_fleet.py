"""`python -m shell_kernel run NOTEBOOK --hosts ...`: one notebook on a fleet.

The fleet is one real sshd on 127.0.0.1 under many ssh config aliases (each
"host" runs its own shell), plus the bad hosts a fleet has: one on a
closed port, one whose known_hosts holds another key, one where a cell
fails, and one on a second sshd that is restarted mid-run (its session is
gone, as after a reboot). Hosts get a HOME with empty rc files and a TMPDIR
of their own, so that "nothing left on the host" can be checked there too.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from shell_kernel.cli import main
from shell_kernel.fleet import CellOutputs, batch_sizes, file_name, file_names
from shell_kernel.fleet_targets import (HostsError, ansible_available, hosts_from_inventory,
                                        hosts_from_list)
from shell_kernel.runner import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, RunError
from notebook_files import write_notebook
from shell_kernel.testing.processes import descendants
from shell_kernel.testing.sshd import SSHServer, cmdline, setenv_config, ssh_available

pytestmark = pytest.mark.skipif(not ssh_available(), reason="OpenSSH is not installed")

RUNBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "fleet_runbook.ipynb"
GOOD = ["web1", "web2", "web3", "web4"]
FAILING = "web3"  # its third cell fails


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Fleet:
    """The servers, the ssh config with every alias, and the hosts' directories."""

    def __init__(self, root: Path):
        self.root = root
        self.home = root / "home"
        self.home.mkdir()
        for rc in (".bashrc", ".profile", ".bash_profile"):
            (self.home / rc).write_text("")
        self.tmp = root / "host-tmp"
        self.tmp.mkdir()
        shape = setenv_config({"HOME": str(self.home), "TMPDIR": str(self.tmp)})
        self.server = SSHServer(root / "sshd", extra_config=shape).start()
        self.flaky = SSHServer(root / "flaky-sshd", name="flaky-sshd", extra_config=shape).start()
        self.config = root / "ssh_config"
        self.server.write_ssh_config(self.config, alias=" ".join(GOOD))
        self.flaky.write_ssh_config(self.config, alias="flaky")
        self.server.write_ssh_config(self.config, alias="down", extra=f"Port {_free_port()}")
        self.server.write_rekeyed_alias(self.config, root)

    def stop(self) -> None:
        self.server.stop()
        self.flaky.stop()

    def logins(self) -> int:
        return (self.server.log_text().count("Accepted publickey")
                + self.flaky.log_text().count("Accepted publickey"))

    def leftovers(self, timeout: float = 10.0) -> list[str]:
        """Processes still running under either sshd, and files in the hosts'
        TMPDIR, once the run is over (waiting a little for exits to finish)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [f"pid {pid}: {cmdline(pid)}"
                     for server in (self.server, self.flaky) if server.running
                     for pid in descendants([server.pid]) if pid != server.pid]
            # (but for the user's directory holding only launch.sh sweep's stamp)
            own = self.tmp / f"shell_kernel-{os.getuid()}"
            found += [f"file {path}" for path in self.tmp.iterdir()
                      if path != own or {p.name for p in own.iterdir()} - {".swept"}]
            if not found or time.monotonic() > deadline:
                return found
            time.sleep(0.1)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    env = Fleet(tmp_path_factory.mktemp("fleet"))
    yield env
    env.stop()


def run_cli(argv: list, capsys) -> tuple[int, str, str]:
    status = main(["run", *map(str, argv)])
    out, err = capsys.readouterr()
    return status, out, err


def summary(out_dir: Path) -> dict:
    return json.loads((out_dir / "summary.json").read_text())


class Page(HTMLParser):
    """summary.html as rows (host, status, squares) and failure sections."""

    def __init__(self, text: str):
        super().__init__()
        self.rows: list[dict] = []
        self.details: dict[str, str] = {}
        self.external: list[str] = []
        self._square: dict | None = None
        self._section: str | None = None
        self._text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("script", "link", "img") or (tag == "a" and "://" in attrs.get("href", "")):
            self.external.append(tag)
        if tag == "tr" and "data-host" in attrs:
            self.rows.append({"host": attrs["data-host"], "status": attrs["data-status"],
                              "squares": []})
        if tag == "td" and "cell" in attrs.get("class", "").split():
            self._square = {"class": attrs["class"], "index": attrs.get("data-index"),
                            "exit": attrs.get("data-exit")}
            self.rows[-1]["squares"].append(self._square)
        if tag == "section" and "data-host" in attrs:  # a host's failure, not a cell's groups
            self._section, self._text = attrs["data-host"], []

    def handle_endtag(self, tag):
        if tag == "section" and self._section is not None:
            self.details[self._section] = "".join(self._text)
            self._section = None

    def handle_data(self, data):
        if self._section is not None:
            self._text.append(data)


# ------------------------------------------------------------- the main run
@pytest.fixture(scope="module")
def main_run(fleet, tmp_path_factory):
    """The test notebook on four good hosts and two bad ones, with a parameter."""
    root = tmp_path_factory.mktemp("main-run")
    notebook = write_notebook(
        root / "checks.ipynb",
        ("greeting=hello", ["parameters"]),
        # With jobs that closing the host's shell must end: plain, orphaned,
        # nohup'd and disowned, and one that ignores SIGTERM.
        'echo "$greeting from $SHELL_KERNEL_HOST"; cd /tmp; sleep 1000.611 & (sleep 1000.612 &); '
        "nohup sleep 1000.83 >/dev/null 2>&1 & disown; sh -c 'trap \"\" TERM; sleep 1000.84' &",
        f'if [ "$SHELL_KERNEL_HOST" = {FAILING} ]; then echo "disk full on $SHELL_KERNEL_HOST" >&2; '
        'exit 3; fi; echo fine',
        ("", []),  # empty: not run, as nbclient skips it
        "printf '<b>%s</b>' \"$SHELL_KERNEL_HOST\" | display --mime text/html; pwd",
    )
    out_dir = root / "out"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "shell_kernel", "run", notebook, "--hosts",
         "web1,web2,web3,web4,down,rekeyed", "--ssh-config", fleet.config, "--jobs", "3",
         "--output-dir", out_dir, "-p", "greeting", "it's $HOME"],
        capture_output=True, text=True, timeout=120)
    proc.took = time.monotonic() - started
    proc.out_dir, proc.notebook = out_dir, notebook
    return proc


def test_exit_status_and_table(main_run):
    assert main_run.returncode == EXIT_FAILED, main_run.stderr
    lines = main_run.stdout.splitlines()
    table = {line.split()[0]: line.split()[1] for line in lines if line.split()
             and line.split()[0] in GOOD + ["down", "rekeyed"]}
    assert table == {"web1": "ok", "web2": "ok", "web3": "failed", "web4": "ok",
                     "down": "unreachable", "rekeyed": "unreachable"}
    # failures first
    order = [line.split()[0] for line in lines if line.split() and line.split()[0] in table]
    assert order[:3] == ["web3", "down", "rekeyed"]
    assert "FAILED: 6 hosts: 1 failed, 2 unreachable, 3 ok" in main_run.stdout
    assert str(main_run.out_dir / "summary.json") in main_run.stdout
    # not a terminal: one line per event on stderr
    assert "web3: failed: cell 3 failed: ExitCode: exit status 3 from 'exit 3' (line 1)" in main_run.stderr
    assert "Traceback" not in main_run.stderr


def test_summary_json_field_by_field(main_run):
    data = summary(main_run.out_dir)
    assert data["notebook"] == str(main_run.notebook)
    assert time.strptime(data["started"][:19], "%Y-%m-%dT%H:%M:%S")
    assert data["parameters"] == {"greeting": "it's $HOME"}
    assert data["exit_status"] == EXIT_FAILED
    hosts = data["hosts"]
    assert list(hosts) == ["web1", "web2", "web3", "web4", "down", "rekeyed"]
    # cells: 0 parameters, 1 injected, 2 echo, 3 the failing one, 4 empty, 5 display
    for name in ("web1", "web2", "web4"):
        host = hosts[name]
        assert set(host) == {"status", "error", "cells", "notebook", "duration_s", "failed_cell",
                             "stderr_tail"}
        assert isinstance(host["duration_s"], float) and host["failed_cell"] is None
        assert host["stderr_tail"] == ""
        assert host["notebook"] == f"{name}.ipynb"
        assert host["status"] == "ok" and host["error"] is None
        assert [c["index"] for c in host["cells"]] == [0, 1, 2, 3, 5]
        assert [c["exit_code"] for c in host["cells"]] == [0, 0, 0, 0, 0]
        assert all(set(c) == {"index", "exit_code", "duration_s", "digest"} for c in host["cells"])
        assert all(isinstance(c["duration_s"], float) and 0 <= c["duration_s"] < 30
                   for c in host["cells"])
    failed = hosts[FAILING]
    assert failed["status"] == "failed"
    assert failed["error"] == "cell 3 failed: ExitCode: exit status 3 from 'exit 3' (line 1)"
    assert [(c["index"], c["exit_code"]) for c in failed["cells"]] == [(0, 0), (1, 0), (2, 0), (3, 3)]
    assert failed["failed_cell"] == 3 and failed["stderr_tail"] == "disk full on web3"
    down = hosts["down"]
    assert down["status"] == "unreachable" and down["cells"] == [] and down["notebook"] is None
    assert down["error"].startswith("Could not start the shell: could not connect to ")
    assert "Unable to connect to port" in down["error"]
    rekeyed = hosts["rekeyed"]
    assert rekeyed["status"] == "unreachable" and rekeyed["cells"] == []
    assert "has CHANGED" in rekeyed["error"] and "Nothing was sent" in rekeyed["error"]


def test_host_notebooks(main_run):
    out = main_run.out_dir
    assert sorted(p.name for p in out.glob("*.ipynb")) == ["web1.ipynb", "web2.ipynb",
                                                             "web3.ipynb", "web4.ipynb"]
    nb = nbformat.read(out / "web2.ipynb", as_version=4)
    nbformat.validate(nb)
    injected = nb.cells[1]
    assert injected.metadata.tags == ["injected-parameters"]
    assert injected.source == "# Parameters\ngreeting='it'\"'\"'s $HOME'\n"
    echo = nb.cells[2]
    assert echo.outputs[0].output_type == "stream" and echo.outputs[0].name == "stdout"
    assert echo.outputs[0].text == "it's $HOME from web2\n"
    meta = echo.metadata.shell_kernel
    assert meta["exit_code"] == 0 and meta["host"] == "web2"
    assert isinstance(meta["duration_s"], float) and meta["cwd"] == "/tmp"
    assert [c.execution_count for c in nb.cells] == [1, 2, 3, 4, None, 5]
    assert "shell_kernel" not in nb.cells[4].metadata  # the empty cell did not run
    shown = nb.cells[5].outputs
    assert shown[0].output_type == "display_data"
    assert shown[0].data["text/html"] == "<b>web2</b>"
    assert shown[1].text == "/tmp\n"
    assert nb.metadata.shell_kernel["host"] == "web2"
    assert nb.metadata.kernelspec["language"] == "bash"

    failed = nbformat.read(out / "web3.ipynb", as_version=4)
    cell = failed.cells[3]
    assert cell.metadata.shell_kernel["exit_code"] == 3
    assert [o.output_type for o in cell.outputs] == ["stream", "error"]
    assert cell.outputs[0].text == "disk full on web3\n"
    # the error the kernel gives (ename, evalue, one traceback line)
    assert (cell.outputs[1].ename, cell.outputs[1].evalue, cell.outputs[1].traceback) == (
        "ExitCode", "exit status 3 from 'exit 3' (line 1)",
        ["ExitCode: exit status 3 from 'exit 3' (line 1)"])
    assert (cell.metadata.shell_kernel["command"], cell.metadata.shell_kernel["line"]) == ("exit 3", 1)
    assert "shell_kernel" not in failed.cells[5].metadata and not failed.cells[5].outputs


def test_summary_html(main_run):
    page = Page((main_run.out_dir / "summary.html").read_text())
    assert page.external == []  # self-contained
    assert [row["host"] for row in page.rows][:3] == ["web3", "down", "rekeyed"]
    by_host = {row["host"]: row for row in page.rows}
    assert {h: r["status"] for h, r in by_host.items()} == {
        "web1": "ok", "web2": "ok", "web3": "failed", "web4": "ok",
        "down": "unreachable", "rekeyed": "unreachable"}
    squares = by_host["web3"]["squares"]
    assert [s["exit"] for s in squares] == ["0", "0", "0", "3", None]
    assert "exit-fail" in squares[3]["class"] and "not-run" in squares[4]["class"]
    assert all("exit-ok" in s["class"] for s in by_host["web1"]["squares"])
    assert all("not-run" in s["class"] for s in by_host["down"]["squares"])
    assert "disk full on web3" in page.details["web3"]
    assert "Unable to connect to port" in page.details["down"]
    assert set(page.details) == {"web3", "down", "rekeyed"}


def test_nothing_left_on_the_hosts(main_run, fleet):
    assert fleet.leftovers() == []


def start_run(notebook: Path, hosts: str, fleet, out_dir: Path, *flags: str) -> subprocess.Popen:
    """`python -m shell_kernel run NOTEBOOK --hosts HOSTS` as a subprocess."""
    return subprocess.Popen(
        [sys.executable, "-m", "shell_kernel", "run", notebook, "--hosts", hosts,
         "--ssh-config", fleet.config, "--output-dir", out_dir, *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_while_running(proc: subprocess.Popen, condition, timeout: float = 60) -> None:
    """Wait while condition() holds; the run must not end meanwhile."""
    deadline = time.monotonic() + timeout
    while condition():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)


# ------------------------------------------------------- a host that drops
# By default a host's shell ends with its connection; a --durable one would
# survive a dropped connection, but not a reboot: the runner reattaches and
# finds the session gone.
@pytest.mark.parametrize("flags, message", [
    ((), "was lost while this cell ran"),
    (("--durable",), "the remote session is gone"),
], ids=["default", "durable"])
def test_host_rebooted_mid_run(fleet, tmp_path, capsys, flags, message):
    marker = tmp_path / "flaky-is-running"
    notebook = write_notebook(
        tmp_path / "slow.ipynb",
        f'if [ "$SHELL_KERNEL_HOST" = flaky ]; then touch {marker}; sleep 60; fi; echo first',
        "echo second")
    out_dir = tmp_path / "out"
    proc = start_run(notebook, "web1,flaky", fleet, out_dir, *flags)
    try:
        wait_while_running(proc, lambda: not marker.exists())
        fleet.flaky.stop()  # the host goes down with every process on it ...
        fleet.flaky.start()  # ... and comes back without the session
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_FAILED, err
    hosts = summary(out_dir)["hosts"]
    assert hosts["web1"]["status"] == "ok"
    assert [c["index"] for c in hosts["web1"]["cells"]] == [0, 1]
    flaky = hosts["flaky"]
    assert flaky["status"] == "failed"
    assert flaky["error"].startswith("cell 0: ") and message in flaky["error"]
    assert [c["index"] for c in flaky["cells"]] == [0]
    cell = nbformat.read(out_dir / "flaky.ipynb", as_version=4).cells[0]
    assert cell.outputs[-1].ename == "ShellExited"
    assert fleet.leftovers() == []


# ----------------------------------------------------- batches and max-fail
def test_batches_stop_after_too_many_failures(fleet, tmp_path, capsys):
    notebook = write_notebook(tmp_path / "nb.ipynb",
                              f'[ "$SHELL_KERNEL_HOST" != {FAILING} ] || exit 7')
    out_dir = tmp_path / "out"
    status, out, err = run_cli([notebook, "--hosts", "web1,web3,web2,web4", "--batch", "2",
                                "--ssh-config", fleet.config, "--output-dir", out_dir], capsys)
    assert status == EXIT_FAILED
    hosts = summary(out_dir)["hosts"]
    assert [hosts[h]["status"] for h in ("web1", "web3", "web2", "web4")] == \
        ["ok", "failed", "skipped", "skipped"]
    assert hosts["web2"]["error"] == ("not started: 1 host failed in earlier batches, more than "
                                      "--max-fail 0")
    assert hosts["web2"]["cells"] == []
    assert "batch 1/2: 2 hosts" in err and "batch 2/2" not in err
    assert not (out_dir / "web2.ipynb").exists()


def test_max_fail_lets_the_rollout_go_on(fleet, tmp_path, capsys):
    notebook = write_notebook(tmp_path / "nb.ipynb",
                              f'[ "$SHELL_KERNEL_HOST" != {FAILING} ] || exit 7')
    out_dir = tmp_path / "out"
    status, out, err = run_cli([notebook, "--hosts", "web3,web1,web2,web4", "--batch", "1,50%",
                                "--max-fail", "1", "--jobs", "1", "--ssh-config", fleet.config,
                                "--output-dir", out_dir], capsys)
    assert status == EXIT_FAILED
    hosts = summary(out_dir)["hosts"]
    assert {h: hosts[h]["status"] for h in hosts} == {
        "web3": "failed", "web1": "ok", "web2": "ok", "web4": "ok"}
    # 1, then 50% of 4 = 2, then the last size again for the one left
    assert "batch 1/3: 1 host" in err and "batch 2/3: 2 hosts" in err and "batch 3/3: 1 host" in err


def test_batch_sizes():
    assert batch_sizes(None, 7) == [7]
    assert batch_sizes("5", 12) == [5, 5, 2]
    assert batch_sizes("1,10%,100%", 200) == [1, 20, 179]
    assert batch_sizes("1,10%", 25) == [1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]
    assert batch_sizes("50%", 1) == [1]
    for bad in ("0", "x", "10%%", "150%", "1,,2"):
        with pytest.raises(RunError):
            batch_sizes(bad, 10)


def test_displays_are_recorded_as_the_kernel_sends_them():
    outputs = CellOutputs()
    outputs.display("", b"<html>sniffed", "")  # no --mime: the type is sniffed
    outputs.display("", bytes(range(256)), "")  # not a type anyone can tell
    outputs.display("application/json", b'{"a": 1}', "d1")
    outputs.display("application/json", b'{"a": 2}', "d1")  # updated in place
    html, error, shown = outputs.outputs
    assert html.data == {"text/plain": "<text/html, 13 bytes>", "text/html": "<html>sniffed"}
    assert error.output_type == "stream" and error.name == "stderr"
    assert error.text.startswith("display: cannot tell the type of these 256 bytes")
    assert shown.data["application/json"] == {"a": 2}


def test_allow_errors_timeout_and_expected_failures(fleet, tmp_path, capsys):
    notebook = write_notebook(tmp_path / "nb.ipynb",
                              ("exit 5", ["raises-exception"]),
                              "false",
                              "sleep 30",
                              "echo after")
    out_dir = tmp_path / "out"
    status, out, err = run_cli([notebook, "--hosts", "web1", "--allow-errors", "--timeout", "1",
                                "--ssh-config", fleet.config, "--output-dir", out_dir], capsys)
    assert status == EXIT_FAILED
    host = summary(out_dir)["hosts"]["web1"]
    assert host["status"] == "failed" and host["error"] == "cell 1 failed: ExitCode: exit status 1 from 'false' (line 1)"
    assert [(c["index"], c["exit_code"]) for c in host["cells"]][:2] == [(0, 5), (1, 1)]
    assert [c["index"] for c in host["cells"]] == [0, 1, 2, 3]
    assert host["cells"][2]["exit_code"] != 0 and 1 <= host["cells"][2]["duration_s"] < 25
    assert host["cells"][3]["exit_code"] == 0
    nb = nbformat.read(out_dir / "web1.ipynb", as_version=4)
    assert nb.cells[2].outputs[-1].ename == "KeyboardInterrupt"
    assert nb.cells[3].outputs[0].text == "after\n"

    # Without --allow-errors the timed-out cell ends the host's run.
    status, out, err = run_cli([notebook, "--hosts", "web1", "--timeout", "1",
                                "--ssh-config", fleet.config, "--output-dir", out_dir], capsys)
    host = summary(out_dir)["hosts"]["web1"]
    assert host["error"] == "cell 1 failed: ExitCode: exit status 1 from 'false' (line 1)" and len(host["cells"]) == 2
    notebook = write_notebook(tmp_path / "slow.ipynb", "sleep 30", "echo never")
    status, out, err = run_cli([notebook, "--hosts", "web1", "--timeout", "1",
                                "--ssh-config", fleet.config, "--output-dir", out_dir], capsys)
    host = summary(out_dir)["hosts"]["web1"]
    assert status == EXIT_FAILED and host["status"] == "failed"
    assert host["error"].startswith("cell 0 ran longer than --timeout 1 s and was interrupted")
    assert [c["index"] for c in host["cells"]] == [0]


# ------------------------------------------------------- bash-completion
OPTIONS_BASH_COMPLETION_SETS = "shopt -p progcomp extglob hostcomplete || true"


@pytest.mark.parametrize("flags", [[], ["--durable"]], ids=["ephemeral", "durable"])
def test_a_job_skips_bash_completion_with_the_options_it_would_have_set(fleet, tmp_path, capsys,
                                                                          flags):
    """A job's login leaves bash-completion out (nobody asks a job to complete),
    and its cells get the shell options that a login shell on the host has,
    bash-completion's among them where the host has it (as this one may)."""
    login = subprocess.run(["bash", "-l", "-i"], input=OPTIONS_BASH_COMPLETION_SETS + "\n",
                           capture_output=True, text=True, cwd=fleet.home,
                           env={**os.environ, "HOME": str(fleet.home)})
    notebook = write_notebook(tmp_path / "nb.ipynb", OPTIONS_BASH_COMPLETION_SETS,
                              'echo "${BASH_COMPLETION_VERSINFO-none}"; complete -p | wc -l')
    out_dir = tmp_path / "out"
    status, out, err = run_cli([notebook, "--hosts", "web1", "--ssh-config", fleet.config,
                                "--output-dir", out_dir, *flags], capsys)
    assert status == EXIT_OK, err
    nb = nbformat.read(out_dir / "web1.ipynb", as_version=4)
    assert nb.cells[0].outputs[0].text == login.stdout
    assert nb.cells[1].outputs[0].text.split() == ["none", "0"]


# ---------------------------------------------------------------- Ctrl-C
def test_ctrl_c_stops_every_host_and_leaves_nothing(fleet, tmp_path):
    notebook = write_notebook(tmp_path / "slow.ipynb", "echo started; sleep 300 & sleep 200",
                              "echo never")
    out_dir = tmp_path / "out"
    proc = start_run(notebook, "web1,web2,web4", fleet, out_dir)
    try:
        wait_while_running(proc, lambda: len([p for p in descendants([fleet.server.pid])
                                               if cmdline(p) == "sleep 200"]) < 3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "interrupted: stopping every running cell" in err
    data = summary(out_dir)
    assert data["exit_status"] == EXIT_INTERRUPTED
    for name in ("web1", "web2", "web4"):
        host = data["hosts"][name]
        assert host["status"] == "interrupted" and host["error"] == "interrupted in cell 0"
        assert [c["index"] for c in host["cells"]] == [0]
        assert host["cells"][0]["exit_code"] != 0
        cell = nbformat.read(out_dir / f"{name}.ipynb", as_version=4).cells[0]
        stdout = "".join(o.text for o in cell.outputs if o.get("name") == "stdout")
        assert stdout == "started\n" and cell.outputs[-1].ename == "KeyboardInterrupt"
    assert "INTERRUPTED: 3 hosts: 3 interrupted" in out
    assert fleet.leftovers() == []
    assert fleet.server.session_pids() == []


# ------------------------------------------------------------ the runbook
def test_fleet_runbook_notebook(fleet, tmp_path, capsys):
    out_dir = tmp_path / "reports"
    status, out, err = run_cli([RUNBOOK, "--hosts", "web*", "--ssh-config", fleet.config,
                                "--output-dir", out_dir, "-p", "warn_percent", "100"], capsys)
    assert status == EXIT_OK, out + err
    hosts = summary(out_dir)["hosts"]
    assert list(hosts) == GOOD and all(h["status"] == "ok" for h in hosts.values())
    nb = nbformat.read(out_dir / "web4.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "host:    web4 (" in text and "sshd: running" in text
    assert "| web4 | 100% | sshd |" in nb.cells[-1].outputs[0].data["text/markdown"]

    # A service that is not running fails every host at that cell.
    out_dir = tmp_path / "missing"
    status, out, err = run_cli([RUNBOOK, "--hosts", "web1,web2", "--ssh-config", fleet.config,
                                "--output-dir", out_dir, "-p", "services", "sshd no-such-daemon"],
                               capsys)
    assert status == EXIT_FAILED
    for host in summary(out_dir)["hosts"].values():
        assert host["status"] == "failed" and host["error"].endswith(
            """ExitCode: exit status 1 from '[ "$missing" -eq 0 ]' (line 10)""")
    assert "no-such-daemon: NOT RUNNING" in (out_dir / "summary.html").read_text()


# ------------------------------------------------------------------ memory
LINE = "0123456789 the output of a chatty cell, line after line\n"
CHATTY_BYTES = 40_000_000


# Runs a command and prints its peak RSS in MB. A child's ru_maxrss also
# counts the pages of the process it was forked from (up to its exec), so
# the runner is started from this small Python, not from pytest.
PEAK_RSS = ("import resource, subprocess, sys\n"
            "status = subprocess.call(sys.argv[1:])\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)\n"
            "sys.exit(status)\n")


def run_measured(argv: list) -> tuple[int, str, int]:
    """Run the CLI; its exit status, output and peak RSS in MB."""
    proc = subprocess.run([sys.executable, "-c", PEAK_RSS, sys.executable, "-m", "shell_kernel",
                           "run", *map(str, argv)], capture_output=True, text=True, timeout=300)
    out, _, peak = proc.stdout.rstrip("\n").rpartition("\n")
    return proc.returncode, out + proc.stderr, int(peak)


def test_memory_does_not_grow_with_output(fleet, tmp_path):
    """Two hosts print 40 MB each in one cell: each host's notebook keeps the
    first megabyte (the runner's window) and a notice, as a kernel's notebook
    keeps the first --output-limit-mb; the rest is in DIR/<host>.output/, and
    the runner's peak RSS stays near its size with no output at all (it held
    every host's output until the notebook was written: 300+ MB here)."""
    lines = CHATTY_BYTES // len(LINE) // 1000 * 1000
    notebook = write_notebook(
        tmp_path / "nb.ipynb",
        f"for i in $(seq {lines // 1000}); do printf '{LINE.strip()}\\n%.0s' $(seq 1000); done",
        "echo next")
    out_dir = tmp_path / "out"
    status, out, peak_mb = run_measured([notebook, "--hosts", "web1,web2", "--ssh-config",
                                         fleet.config, "--output-dir", out_dir])
    assert status == EXIT_OK, out
    for host in ("web1", "web2"):
        cells = nbformat.read(out_dir / f"{host}.ipynb", as_version=4).cells
        head, notice = cells[0].outputs
        assert (head.name, notice.name) == ("stdout", "stderr")
        assert head.text == (LINE * (1_000_000 // len(LINE) + 1))[:1_000_000]
        spilled = Path(cells[0].metadata.shell_kernel["output_file"])
        assert spilled.parent == (out_dir / f"{host}.output").absolute()
        assert f"This cell printed more than 1 MB; output stops here and the rest of it is " \
               f"saved in {spilled}." in notice.text
        with open(spilled) as rest:
            assert head.text + rest.read() == LINE * lines
        assert cells[1].outputs[0].text == "next\n"
    assert peak_mb < 150, f"the runner's peak RSS was {peak_mb} MB"


def test_displays_count_against_the_output_limit(fleet, tmp_path, capsys):
    """Five 3 MB displays made a 20 MB host notebook past the 1 MB limit."""
    notebook = write_notebook(
        tmp_path / "nb.ipynb",
        "for i in 1 2 3 4 5; do head -c 3000000 /dev/zero | tr '\\0' \"$i\" | display; done",
        "echo small | display; echo next")
    out_dir = tmp_path / "out"
    status, out, err = run_cli([notebook, "--hosts", "web1", "--ssh-config", fleet.config,
                                "--output-dir", out_dir], capsys)
    assert status == EXIT_OK, out + err
    assert (out_dir / "web1.ipynb").stat().st_size < 100_000
    cells = nbformat.read(out_dir / "web1.ipynb", as_version=4).cells
    assert [o.output_type for o in cells[0].outputs] == ["stream"]
    saved = re.findall(r"saved in (\S+)\.\n", cells[0].outputs[0].text)
    assert len(saved) == 5
    for number, path in zip("12345", saved):
        assert Path(path).parent == (out_dir / "web1.output").absolute()
        assert Path(path).read_text() == number * 3_000_000
    # The next cell has a limit of its own.
    assert [o.output_type for o in cells[1].outputs] == ["display_data", "stream"]


def test_every_host_gets_files_of_its_own():
    assert file_names(["fh1:2222", "fh1_2222"]) == {"fh1_2222": "fh1_2222", "fh1:2222": "fh1_2222-2"}
    assert file_names(["a:b", "a_b-2", "a_b", "A_B"]) == {
        "a_b-2": "a_b-2", "a_b": "a_b", "A_B": "A_B-3", "a:b": "a_b-4"}  # as on a case-blind disk
    assert file_names(["alice@db1:22", ".hidden", ""]) == {
        "alice@db1:22": "alice@db1_22", ".hidden": "hidden", "": "host"}


def test_hosts_whose_names_make_one_file_name_get_one_each(fleet, tmp_path, capsys):
    """web1:PORT and the alias web1_PORT once wrote one web1_PORT.ipynb (and
    .output/) for both, and both report links pointed to it."""
    port = fleet.server.port
    config = fleet.server.write_ssh_config(tmp_path / "ssh_config", alias=f"web1 web1_{port}")
    notebook = write_notebook(tmp_path / "nb.ipynb", 'echo "on $SHELL_KERNEL_HOST"; seq 2000')
    out_dir = tmp_path / "out"
    status, out, err = run_cli([notebook, "--hosts", f"web1:{port},web1_{port}", "--ssh-config",
                                config, "--output-dir", out_dir, "--output-limit-mb", "0.001"],
                               capsys)
    assert status == EXIT_OK, out + err
    files = {f"web1_{port}": f"web1_{port}", f"web1:{port}": f"web1_{port}-2"}
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        [f"{name}.ipynb" for name in files.values()] + [f"{name}.output" for name in files.values()]
        + ["summary.html", "summary.json"])
    hosts = summary(out_dir)["hosts"]
    links = dict(re.findall(r'<a href="([^"]+)">([^<]+)</a>', (out_dir / "summary.html").read_text()))
    for host, name in files.items():
        assert hosts[host]["notebook"] == f"{name}.ipynb"
        assert links[f"{name}.ipynb"] == host
        cell = nbformat.read(out_dir / f"{name}.ipynb", as_version=4).cells[0]
        assert cell.outputs[0].text.startswith(f"on {host}\n1\n2\n")
        spilled = Path(cell.metadata.shell_kernel["output_file"])
        assert [p.name for p in (out_dir / f"{name}.output").iterdir()] == [spilled.name]


# ------------------------------------------------------ where output goes
NOBODY = 65534  # another user: the tests run as root, who may give files away


def test_an_output_dir_others_control_is_refused(fleet, tmp_path, capsys):
    """A directory of another user's (or one anyone may write to) once took
    summary.json, summary.html and the host notebooks through symlinks
    placed there, overwriting the files they named."""
    notebook = write_notebook(tmp_path / "nb.ipynb", "echo hi")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    theirs, shared = tmp_path / "theirs", tmp_path / "shared"
    for directory in (theirs, shared):
        directory.mkdir()
        for name in ("summary.json", "summary.html", "web1.ipynb"):
            (directory / name).symlink_to(victim)
    os.chown(theirs, NOBODY, NOBODY)
    shared.chmod(0o777)
    logins = fleet.logins()
    for out_dir, why in ((theirs, f"is owned by another user (uid {NOBODY})"),
                         (shared, "is writable by other users")):
        status, out, err = run_cli([notebook, "--hosts", "web1", "--ssh-config", fleet.config,
                                    "--output-dir", out_dir], capsys)
        assert status == EXIT_USAGE, out + err
        assert f"error: --output-dir {out_dir}: {out_dir} {why}" in err
        assert err.count("\n") == 1, err
        assert victim.read_text() == "precious\n"
    assert fleet.logins() == logins  # refused before any host was reached


def test_output_replaces_symlinks_and_never_follows_them(fleet, tmp_path, capsys):
    """In a directory of the user's own, a symlink left where an output
    goes is replaced, and what it named is left alone; a spill directory
    that is another user's symlink is not used."""
    notebook = write_notebook(tmp_path / "nb.ipynb", "seq 2000", "echo done")
    victim, elsewhere = tmp_path / "victim", tmp_path / "elsewhere"
    victim.write_text("precious\n")
    elsewhere.mkdir()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for name in ("summary.json", "summary.html", "web1.ipynb"):
        (out_dir / name).symlink_to(victim)
    (out_dir / "web1.output").symlink_to(elsewhere)
    os.chown(out_dir / "web1.output", NOBODY, NOBODY, follow_symlinks=False)
    status, out, err = run_cli([notebook, "--hosts", "web1", "--ssh-config", fleet.config,
                                "--output-dir", out_dir, "--output-limit-mb", "0.001"], capsys)
    assert status == EXIT_OK, out + err
    assert victim.read_text() == "precious\n"
    assert list(elsewhere.iterdir()) == []
    for name in ("summary.json", "summary.html", "web1.ipynb"):
        assert not (out_dir / name).is_symlink() and (out_dir / name).stat().st_size > 100
    cell = nbformat.read(out_dir / "web1.ipynb", as_version=4).cells[0]
    assert "the rest is discarded (could not create a file in" in cell.outputs[-1].text
    assert f"web1.output is a symlink made by another user (uid {NOBODY})" in cell.outputs[-1].text
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "summary.html", "summary.json", "web1.ipynb", "web1.output"]  # no temporary left


# ------------------------------------------------------ targets and errors# ------------------------------------------------------ targets and errors
def test_targets_from_list_file_and_pattern(fleet, tmp_path):
    hosts = hosts_from_list("web*", str(fleet.config))
    assert [h.name for h in hosts] == GOOD and [h.target for h in hosts] == GOOD
    assert [h.name for h in hosts_from_list("web[24],down,web2", str(fleet.config))] == \
        ["web2", "web4", "down"]
    listing = tmp_path / "hosts.txt"
    listing.write_text("# the canaries\nweb1\n\n  alice@db1.example.com:2222  # a comment\n"
                       "w?b3\n")
    hosts = hosts_from_list(f"@{listing},rekeyed", str(fleet.config))
    assert [(h.name, h.target) for h in hosts] == [
        ("web1", "web1"), ("alice@db1.example.com:2222", "alice@db1.example.com:2222"),
        ("web3", "web3"), ("rekeyed", "rekeyed")]
    assert file_name("alice@db1.example.com:2222") == "alice@db1.example.com_2222"
    with pytest.raises(HostsError, match="matches no Host name"):
        hosts_from_list("db*", str(fleet.config))
    with pytest.raises(HostsError, match="is not an SSH target"):
        hosts_from_list("web1,bad host", str(fleet.config))
    with pytest.raises(HostsError, match="cannot read the host file"):
        hosts_from_list(f"@{tmp_path / 'missing.txt'}", str(fleet.config))


def test_bad_input_fails_before_anything_runs(fleet, tmp_path, capsys):
    good = write_notebook(tmp_path / "good.ipynb", "echo hi")
    python = write_notebook(tmp_path / "python.ipynb", "print(1)", language="python")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    empty_list = tmp_path / "empty.txt"
    empty_list.write_text("# nobody yet\n")
    logins = fleet.logins()
    common = ["--ssh-config", fleet.config]
    cases = [
        ([python, "--hosts", "web1", *common], "is a python notebook"),
        ([good, "--hosts", " , ", *common], "the host list is empty"),
        ([good, "--hosts", f"@{empty_list}", *common], "the host list is empty"),
        ([good, "--hosts", "web1", "--output-dir", a_file, *common], "a file is there"),
        ([good, "--hosts", "web1", "-o", tmp_path / "x.ipynb", *common], "-o is for one kernel"),
        ([good, "--hosts", "web1", "--batch", "0", *common], "is not a batch size"),
        ([good, "--hosts", "web1", "--max-fail", "1", *common], "give --batch too"),
        ([good, "--hosts", "web1", "--jobs", "0", *common], "--jobs 0"),
        ([good, "--hosts", "web1", "-p", "1x", "y", *common], "bash variable name"),
        ([tmp_path / "nope.ipynb", "--hosts", "web1", *common], "no such notebook"),
        ([good, "--batch", "2"], "--batch: only with --hosts or --inventory"),
        ([good, "--limit", "web"], "only with --hosts or --inventory"),
        ([good, "--output-limit-mb", "2"], "only with --hosts or --inventory"),
    ]
    for argv, message in cases:
        status, out, err = run_cli(argv, capsys)
        assert status == EXIT_USAGE, (argv, out, err)
        assert message in err, (argv, err)
    assert not (tmp_path / "good.fleet").exists()
    assert fleet.logins() == logins


def test_shell_metacharacters_in_a_user_are_refused(fleet, tmp_path, capsys):
    """CVE-2023-51385: a user from --hosts, a host file or an inventory went
    unquoted into the ProxyCommand (which runs through the shell): refused, as
    OpenSSH refuses it, naming the target, before anything runs."""
    mark = tmp_path / "mark"
    config = tmp_path / "ssh_config"
    config.write_text("Host jumped\n    ProxyCommand true %h %p %r\n")
    notebook = write_notebook(tmp_path / "nb.ipynb", "true")
    listing = tmp_path / "hosts.txt"
    listing.write_text(f"web1\nx`id>{mark}`@jumped\n")
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(f"all:\n  hosts:\n    jumped:\n      ansible_user: 'x;id>{mark};'\n")
    cases = [(["--hosts", f"x$(id>{mark})@jumped"], f"--hosts: 'x$(id>{mark})@jumped'"),
             (["--hosts", f"web1,@{listing}"], f"@{listing}: 'x`id>{mark}`@jumped'")]
    if ansible_available():
        cases.append((["--inventory", inventory],
                      f"--inventory {inventory}: host jumped: 'x;id>{mark};@jumped'"))
    for flags, message in cases:
        status, out, err = run_cli([notebook, *flags, "--ssh-config", config,
                                    "--output-dir", tmp_path / "out"], capsys)
        assert status == EXIT_USAGE, (flags, out, err)
        assert message in err and "shell metacharacter" in err, err
        assert not mark.exists()
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------- ansible
needs_ansible = pytest.mark.skipif(not ansible_available(),
                                   reason="ansible-core is not installed")


@needs_ansible
def test_ansible_inventory(fleet, tmp_path, capsys):
    # The inventory names the hosts by address; the ssh config gives the key.
    fleet.server.write_ssh_config(fleet.config, alias="127.0.0.1")
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        "[web]\n"
        f"app[1:2] ansible_host=127.0.0.1 ansible_port={fleet.server.port}\n"
        "[db]\n"
        f"db1 ansible_host=127.0.0.1 ansible_port={fleet.server.port} ansible_user=nobody\n"
        "[prod:children]\nweb\ndb\n"
        "[prod:vars]\nansible_user=" + fleet.server.user + "\n")
    hosts = hosts_from_inventory(str(inventory), "prod:!db")
    assert [(h.name, h.target) for h in hosts] == [
        (f"app{i}", f"{fleet.server.user}@127.0.0.1:{fleet.server.port}") for i in (1, 2)]
    assert [h.target.split("@")[0] for h in hosts_from_inventory(str(inventory), "db")] == ["nobody"]

    notebook = write_notebook(tmp_path / "nb.ipynb", 'echo "on $SHELL_KERNEL_HOST"')
    out_dir = tmp_path / "out"
    status, out, err = run_cli([notebook, "--inventory", inventory, "--limit", "web",
                                "--ssh-config", fleet.config, "--output-dir", out_dir], capsys)
    assert status == EXIT_OK, out + err
    assert list(summary(out_dir)["hosts"]) == ["app1", "app2"]
    nb = nbformat.read(out_dir / "app2.ipynb", as_version=4)
    assert nb.cells[0].outputs[0].text == "on app2\n"


@needs_ansible
def test_malformed_inventory(tmp_path, capsys):
    notebook = write_notebook(tmp_path / "nb.ipynb", "true")
    inventory = tmp_path / "broken.yml"
    inventory.write_text("all:\n  hosts: [unclosed\n")
    status, out, err = run_cli([notebook, "--inventory", inventory], capsys)
    assert status == EXIT_USAGE
    assert f"--inventory {inventory}: ansible cannot use it" in err
    status, out, err = run_cli([notebook, "--inventory", inventory.with_name("none.ini")], capsys)
    assert status == EXIT_USAGE and "no such file" in err


# ------------------------------------------- a host that wraps every command
def test_shell_under_a_wrapper_is_ended_by_the_reaper(tmp_path, capsys):
    """An sshd that runs every command in a child of a wrapper (ForceCommand,
    as session recorders and audit wrappers do): the shell does not lead its
    process group, so it declines to end itself and its jobs, and the reaper
    ends them through a side channel instead."""
    home, host_tmp = tmp_path / "home", tmp_path / "host-tmp"
    home.mkdir()
    host_tmp.mkdir()
    for rc in (".bashrc", ".profile"):
        (home / rc).write_text("")
    wrapper = "ForceCommand /bin/sh -c '( eval \"$SSH_ORIGINAL_COMMAND\" ); exit $?'\n"
    server = SSHServer(tmp_path / "sshd", name="wrapped-sshd", extra_config=(
        setenv_config({"HOME": str(home), "TMPDIR": str(host_tmp)}) + "\n" + wrapper)).start()
    try:
        config = tmp_path / "ssh_config"
        server.write_ssh_config(config, alias="wrapped")
        notebook = write_notebook(
            tmp_path / "nb.ipynb",
            "sleep 1000.613 & (sleep 1000.614 &); echo \"shell $$, group $(ps -o pgid= -p $$)\"")
        out_dir = tmp_path / "out"
        status, out, err = run_cli([notebook, "--hosts", "wrapped", "--ssh-config", config,
                                    "--output-dir", out_dir], capsys)
        assert status == EXIT_OK, out + err
        outputs = nbformat.read(out_dir / "wrapped.ipynb", as_version=4).cells[0].outputs
        words = "".join(o.text for o in outputs if o.name == "stdout").split()
        assert len(words) == 4, outputs
        assert words[1].rstrip(",") != words[3]  # the shell is not its group's leader
        deadline = time.monotonic() + 10
        while True:
            left = [f"pid {pid}: {cmdline(pid)}" for pid in descendants([server.pid])
                    if pid != server.pid] + [f"file {path}" for path in host_tmp.iterdir()]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert left == []
    finally:
        server.stop()
