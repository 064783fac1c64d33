"""Drift across hosts and shards, end to end: `run --hosts` groups each cell's
hosts by output and exit status (stdout, summary.json, summary.html), and
`run --shard I/N` + `merge` give the summary one run gives.

The fleet is one real sshd on 127.0.0.1 under five ssh config aliases, each
running its own shell (as in tests/test_fleet.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from notebook_files import write_notebook
from shell_kernel.cli import main
from shell_kernel.fleet_drift import PLACEHOLDER
from shell_kernel.runner import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from shell_kernel.testing.sshd import SSHServer, setenv_config, ssh_available

pytestmark = pytest.mark.skipif(not ssh_available(), reason="OpenSSH is not installed")

HOSTS = ["app1", "app2", "app3", "app4", "app5"]
DRIFTED = ["app4", "app5"]  # their first cell prints something else
FAILING = "app3"  # its third cell fails


class Hosts:
    def __init__(self, root: Path):
        home = root / "home"
        home.mkdir()
        for rc in (".bashrc", ".profile", ".bash_profile"):
            (home / rc).write_text("")
        self.server = SSHServer(root / "sshd", name="drift-sshd",
                                extra_config=setenv_config({"HOME": str(home)})).start()
        self.config = self.server.write_ssh_config(root / "ssh_config", alias=" ".join(HOSTS))

    def logins(self) -> int:
        return self.server.log_text().count("Accepted publickey")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    env = Hosts(tmp_path_factory.mktemp("drift"))
    yield env
    env.server.stop()


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    return write_notebook(
        tmp_path_factory.mktemp("drift-nb") / "drift.ipynb",
        "# Which config\n"
        f'case "$SHELL_KERNEL_HOST" in {"|".join(DRIFTED)}) echo drifted;; *) echo baseline;; esac',
        '# Who am I\necho "$SHELL_KERNEL_HOST on $(hostname), HOSTNAME=$HOSTNAME"',
        f'# Fails on {FAILING}\n[ "$SHELL_KERNEL_HOST" != {FAILING} ] || exit 4\necho fine',
        "echo after")


def run(notebook: Path, hosts: Hosts, out_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shell_kernel", "run", notebook, "--hosts", ",".join(HOSTS),
         "--ssh-config", hosts.config, "--output-dir", out_dir, *flags],
        capture_output=True, text=True, timeout=180)


def merge(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shell_kernel", "merge", *map(str, argv)],
                          capture_output=True, text=True, timeout=60)


def summary(out_dir: Path) -> dict:
    return json.loads((out_dir / "summary.json").read_text())


def without_timings(data: dict) -> dict:
    """summary.json without what differs from run to run: times."""
    data = {key: value for key, value in data.items() if key not in ("started", "finished")}
    for host in data["hosts"].values():
        host.pop("duration_s")
        for cell in host["cells"]:
            cell.pop("duration_s")
    return data


@pytest.fixture(scope="module")
def whole(hosts, notebook, tmp_path_factory):
    """One unsharded run on the five hosts."""
    out_dir = tmp_path_factory.mktemp("whole") / "out"
    proc = run(notebook, hosts, out_dir, "--jobs", "5")
    proc.out_dir = out_dir
    return proc


# ------------------------------------------------------------------- drift
def test_groups_in_summary_json(whole):
    assert whole.returncode == EXIT_FAILED, whole.stderr
    assert [h["status"] for h in summary(whole.out_dir)["hosts"].values()] == \
        ["ok", "ok", "failed", "ok", "ok"], whole.stdout
    cells = summary(whole.out_dir)["cells"]
    assert [(c["index"], c["title"], c["ok"], c["failed"], c["not_run"]) for c in cells] == [
        (0, "Which config", 5, 0, 0), (1, "Who am I", 5, 0, 0),
        (2, f"Fails on {FAILING}", 4, 1, 0), (3, "echo after", 4, 0, 1)]
    config, whoami, failing, after = (c["groups"] for c in cells)
    assert [(g["hosts"], g["exit_code"], g["sample"]) for g in config] == [
        (["app1", "app2", "app3"], 0, "baseline\n"), (DRIFTED, 0, "drifted\n")]
    assert config[0]["digest"] != config[1]["digest"] and len(config[0]["digest"]) == 16
    # The host's own names (its alias, what hostname prints) are one placeholder.
    assert [(g["hosts"], g["sample"]) for g in whoami] == [
        (HOSTS, f"{PLACEHOLDER} on {PLACEHOLDER}, HOSTNAME={PLACEHOLDER}\n")]
    assert [(g["hosts"], g["exit_code"], g["sample"]) for g in failing] == [
        (["app1", "app2", "app4", "app5"], 0, "fine\n"),
        ([FAILING], 4, "ExitCode: exit status 4 from 'exit 4' (line 2)\n")]
    assert [g["hosts"] for g in after] == [["app1", "app2", "app4", "app5"]]
    # each host's cells name their digest, which the groups are made of
    hosts = summary(whole.out_dir)["hosts"]
    assert hosts["app4"]["cells"][0]["digest"] == config[1]["digest"]
    assert hosts["app1"]["cells"][1]["digest"] == hosts["app5"]["cells"][1]["digest"]


def test_groups_on_stdout(whole):
    out = whole.stdout
    cells = summary(whole.out_dir)["cells"]
    digest = [[g["digest"][:8] for g in cell["groups"]] for cell in cells]
    assert "  cell 0  Which config: 5 ok; 2 different outputs:\n" \
           f'      3 hosts: {digest[0][0]} "baseline"\n' \
           f'      2 hosts: {digest[0][1]} "drifted" (app4, app5)\n' in out
    assert "  cell 1  Who am I: 5 ok\n" in out  # the same everywhere: no groups
    assert "  cell 2  Fails on app3: 4 ok, 1 failed; 2 different outputs:\n" \
           f'      4 hosts: {digest[2][0]} "fine"\n' \
           f'      1 host: {digest[2][1]} exit 4 "ExitCode: exit status 4 from \'exit 4\' ' \
           "(line 2)\" (app3)\n" in out
    assert "  cell 3  echo after: 4 ok, 1 not run\n" in out


def test_groups_in_summary_html(whole):
    page = (whole.out_dir / "summary.html").read_text()
    sections = dict(re.findall(r'<section class="cell-groups" data-index="(\d+)">(.*?)</section>',
                               page, re.S))
    assert sorted(sections) == ["0", "1", "2", "3"]
    assert "<h3>cell 0: Which config</h3>" in sections["0"]
    assert re.findall(r'data-size="(\d+)" data-exit="(\d+)"', sections["0"]) == [("3", "0"), ("2", "0")]
    # the smaller groups' hosts shown, the largest group's on a click
    assert "<details><summary>3 hosts</summary>app1, app2, app3</details>" in sections["0"]
    assert "<details open><summary>2 hosts</summary>app4, app5</details>" in sections["0"]
    assert "<pre>drifted\n</pre>" in sections["0"]
    assert "5 ok: the same output on every host that ran it" in sections["1"]
    assert re.findall(r'data-size="(\d+)" data-exit="(\d+)"', sections["2"]) == [("4", "0"), ("1", "4")]
    assert "4 ok, 1 not run" in sections["3"]


# ------------------------------------------------------------------ shards
def test_two_shards_merged_are_the_run(whole, hosts, notebook, tmp_path):
    shards = [tmp_path / "shard1", tmp_path / "shard2"]
    for number, out_dir in enumerate(shards, 1):
        proc = run(notebook, hosts, out_dir, "--shard", f"{number}/2")
        assert proc.returncode in (EXIT_OK, EXIT_FAILED), proc.stderr
        assert f"shard {number}/2: {2 if number == 1 else 3} of 5 hosts" in proc.stderr
    # the slices of the sorted names: app1 app2 | app3 app4 app5
    assert list(summary(shards[0])["hosts"]) == ["app1", "app2"]
    assert summary(shards[0])["exit_status"] == EXIT_OK, summary(shards[0])["hosts"]
    assert list(summary(shards[1])["hosts"]) == ["app3", "app4", "app5"]
    merged_dir = tmp_path / "merged"
    proc = merge(shards[1], shards[0], "-o", merged_dir)  # in any order
    assert proc.returncode == EXIT_FAILED, proc.stderr  # app3 failed
    assert without_timings(summary(merged_dir)) == without_timings(summary(whole.out_dir))
    assert sorted(p.name for p in merged_dir.iterdir()) == sorted(
        [f"{name}.ipynb" for name in HOSTS] + ["summary.html", "summary.json"])
    nb = nbformat.read(merged_dir / "app4.ipynb", as_version=4)
    assert nb.cells[0].outputs[0].text == "drifted\n"
    # the stdout recap is the run's
    recap = whole.stdout[whole.stdout.index("\ncells:"):whole.stdout.index("\nFAILED")]
    assert recap in proc.stdout

    # One shard alone: the other's hosts are skipped, saying so.
    alone = tmp_path / "alone"
    proc = merge(shards[0], "-o", alone)
    assert proc.returncode == EXIT_FAILED, proc.stderr
    data = summary(alone)
    assert list(data["hosts"]) == HOSTS
    assert data["hosts"]["app5"]["status"] == "skipped"
    assert data["hosts"]["app5"]["error"] == "not merged: the output of shard 2/2 was not given"
    assert data["cells"][0]["groups"][0]["hosts"] == ["app1", "app2"]
    assert data["cells"][0]["not_run"] == 3


def files_of(directory: Path) -> dict[str, bytes]:
    """Every file under directory, by its path there."""
    return {str(path.relative_to(directory)): path.read_bytes()
            for path in sorted(directory.rglob("*")) if path.is_file()}


def test_no_timing_runs_and_merges_save_the_same_bytes(hosts, notebook, tmp_path):
    runs = [tmp_path / "first", tmp_path / "second"]
    for out_dir in runs:
        proc = run(notebook, hosts, out_dir, "--jobs", "5", "--no-timing")
        assert proc.returncode == EXIT_FAILED, proc.stderr  # app3 fails, as it should
    first = files_of(runs[0])
    assert sorted(first) == sorted([f"{name}.ipynb" for name in HOSTS]
                                   + ["summary.html", "summary.json"])
    assert first == files_of(runs[1])  # every file, byte for byte
    data = json.loads(first["summary.json"])
    assert "started" not in data and "finished" not in data
    assert all("duration_s" not in host and all("duration_s" not in c for c in host["cells"])
               for host in data["hosts"].values())
    assert not re.search(r"\d\d:\d\d|\d s<", first["summary.html"].decode())
    # Shards run with --no-timing merge into the same --no-timing summary.
    shards = [tmp_path / "shard1", tmp_path / "shard2"]
    for number, out_dir in enumerate(shards, 1):
        proc = run(notebook, hosts, out_dir, "--shard", f"{number}/2", "--no-timing")
        assert proc.returncode in (EXIT_OK, EXIT_FAILED), proc.stderr
    proc = merge(*shards, "-o", tmp_path / "merged")
    assert proc.returncode == EXIT_FAILED, proc.stdout + proc.stderr
    assert files_of(tmp_path / "merged") == first
    assert "FAILED: 5 hosts: 1 failed, 4 ok\n" in proc.stdout  # no time to tell


def test_an_empty_slice_runs_nothing_and_merges(hosts, notebook, tmp_path):
    out_dir = tmp_path / "empty"
    proc = subprocess.run(
        [sys.executable, "-m", "shell_kernel", "run", notebook, "--hosts", "app2",
         "--ssh-config", hosts.config, "--output-dir", out_dir, "--shard", "1/2"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert summary(out_dir)["hosts"] == {} and summary(out_dir)["shard"]["hosts"] == ["app2"]


def one_line_error(proc: subprocess.CompletedProcess, message: str) -> None:
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert message in proc.stderr, proc.stderr


def test_bad_shards_and_merges(hosts, notebook, tmp_path, capsys):
    logins = hosts.logins()
    for spec, message in (("3/2", "--shard 3/2: I must be 1 to N"),
                          ("0/4", "--shard 0/4: I must be 1 to N"),
                          ("2", "--shard 2: give I/N")):
        status = main(["run", str(notebook), "--hosts", "app1", "--ssh-config", str(hosts.config),
                       "--output-dir", str(tmp_path / "out"), "--shard", spec])
        err = capsys.readouterr().err
        assert status == EXIT_USAGE and err.count("\n") == 1 and message in err, err
    status = main(["run", str(notebook), "--shard", "1/2"])
    assert status == EXIT_USAGE and "--shard: only with --hosts" in capsys.readouterr().err
    assert hosts.logins() == logins and not (tmp_path / "out").exists()

    # Shards to merge wrongly: of another notebook, the same slice twice, not a shard.
    first = tmp_path / "first"
    assert run(notebook, hosts, first, "--shard", "1/3").returncode == EXIT_OK
    other_nb = write_notebook(tmp_path / "other.ipynb", "echo other")
    other = tmp_path / "other"
    assert run(other_nb, hosts, other, "--shard", "2/3").returncode == EXIT_OK
    again = tmp_path / "again"
    shutil.copytree(first, again)
    unsharded = tmp_path / "unsharded"
    proc = subprocess.run(
        [sys.executable, "-m", "shell_kernel", "run", other_nb, "--hosts", "app1",
         "--ssh-config", hosts.config, "--output-dir", unsharded], capture_output=True, timeout=60)
    assert proc.returncode == EXIT_OK
    out = tmp_path / "merged"
    one_line_error(merge(first, other, "-o", out), f"{other} ran another notebook than {first}")
    one_line_error(merge(first, again, "-o", out),
                   f"{first} and {again} both hold host app1 (shards 1/3 and 1/3)")
    one_line_error(merge(first, first, "-o", out), f"{first} is given twice")
    one_line_error(merge(first, unsharded, "-o", out), "is not from a --shard run")
    one_line_error(merge(first, tmp_path / "nowhere", "-o", out), "no summary.json here")
    one_line_error(merge(first, "-o", first), "that is one of the shards' directories")
    assert not out.exists()
