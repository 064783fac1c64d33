"""Runbooks end to end: `run` on text notebooks (jupytext's percent .sh and
Markdown), --no-timing, provenance, --compare and --parameters-yaml, on a
real kernel (local and SSH) and with --hosts on the test sshd.

The pure parts (reading, quoting, comparing, stripping) are in
tests/unit/test_runbooks_unit.py.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from shell_kernel import __version__
from shell_kernel.runner import EXIT_FAILED, EXIT_OK, EXIT_USAGE

pytest.importorskip("jupytext")

EXIT_CHANGED = 3

DEPLOY_SH = """\
# %% [markdown]
# # Deploy

# %% tags=["parameters"]
release=v1

# %%
echo "deploying $release"
cd /tmp

# %% tags=["raises-exception"]
grep -q nomatch /dev/null

# %%
printf '%s|' "${#hosts[@]}" "${hosts[@]}"
"""

DEPLOY_MD = """\
---
jupyter:
  kernelspec:
    display_name: test
    language: bash
    name: shell-test
---

# Deploy

```bash
echo "md cell one"
```

An example, not a cell:

```text
not run
```

```sh
echo "md cell two: $BASH_VERSION" | cut -c1-18
```
"""


def cli(argv: list, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(cwd)}
    return subprocess.run([sys.executable, "-m", "shell_kernel", "run", *map(str, argv)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def code_cells(path: Path) -> list:
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def stdout_of(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")


def every_key(value) -> set[str]:
    """Every dict key anywhere in a JSON value."""
    if isinstance(value, dict):
        return set(value) | set().union(*(every_key(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(set(), *(every_key(v) for v in value))
    return set()


# ------------------------------------------------------------ one kernel
@pytest.mark.timeout(240)
def test_a_percent_script_runs_with_provenance(jupyter_prefix, tmp_path):
    (tmp_path / "deploy.sh").write_text(DEPLOY_SH)
    (tmp_path / "params.yaml").write_text("hosts: [web1, 'web 2', \"it's $x\"]\nrelease: v2\n")
    result = cli(["deploy.sh", "--kernel", "shell-test", "--parameters-yaml", "params.yaml",
                  "-p", "release", "v3"], tmp_path)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    out = tmp_path / "deploy.out.ipynb"
    nb = nbformat.read(out, as_version=4)
    nbformat.validate(nb)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    # parameters cell, injected cell (the YAML's list an array; -p wins for release), three cells
    assert cells[1].source == ("# Parameters\nhosts=(web1 'web 2' 'it'\"'\"'s $x')\nrelease=v3\n")
    assert stdout_of(cells[2]) == "deploying v3\n"
    assert cells[3].metadata.shell_kernel["exit_code"] == 1
    assert stdout_of(cells[4]) == "3|web1|web 2|it's $x|"
    meta = nb.metadata.shell_kernel
    assert meta["host"] == "local" and meta["kernelspec"] == "shell-test"
    assert meta["shell_kernel"] == __version__
    assert meta["os"] == " ".join(platform.uname()[i] for i in (0, 2, 4))
    assert meta["bash_version"].split(".")[0] in ("3", "4", "5")
    assert meta["user"] and meta["hostname"] == platform.node()
    assert meta["started"].endswith("+00:00") and isinstance(meta["duration_s"], float)
    assert meta["parameters"] == {"hosts": ["web1", "web 2", "it's $x"], "release": "v3"}
    # The probe is no cell of the notebook and left no count behind.
    assert [c.execution_count for c in cells] == [1, 2, 3, 4, 5]


@pytest.mark.timeout(240)
def test_markdown_header_names_the_kernel_and_fences_are_cells(jupyter_prefix, tmp_path):
    (tmp_path / "deploy.md").write_text(DEPLOY_MD)
    result = cli(["deploy.md", "-o", "reports/md.ipynb"], tmp_path)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    cells = code_cells(tmp_path / "reports" / "md.ipynb")
    # ```text is no cell; ```sh is one, run by bash (not a %%sh magic).
    assert len(cells) == 2 and stdout_of(cells[0]) == "md cell one\n"
    assert stdout_of(cells[1]).startswith("md cell two: ") and cells[1].source.startswith("echo")
    assert "on kernel 'shell-test'" in result.stdout


@pytest.mark.timeout(300)
def test_no_timing_saves_the_same_bytes_twice(jupyter_prefix, tmp_path):
    (tmp_path / "deploy.sh").write_text(DEPLOY_SH)
    outs = []
    for n in (1, 2):
        out = tmp_path / f"run{n}.ipynb"
        result = cli(["deploy.sh", "--kernel", "shell-test", "--no-timing", "-o", out,
                      "-p", "release", "v9"], tmp_path)
        assert result.returncode == EXIT_OK, result.stdout + result.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    data = json.loads(outs[0])
    keys = every_key(data)
    assert not keys & {"duration_s", "started", "execution", "iopub.status.busy"}
    failing = [c for c in data["cells"] if "grep" in "".join(c["source"])][0]
    assert failing["metadata"]["shell_kernel"] == {
        "exit_code": 1, "cwd": "/tmp", "command": "grep -q nomatch /dev/null", "line": 1,
        "host": "local"}
    assert {"host", "user", "os", "bash_version", "kernelspec"} <= set(
        data["metadata"]["shell_kernel"])


@pytest.mark.timeout(300)
def test_compare_with_an_earlier_run(jupyter_prefix, tmp_path):
    book = tmp_path / "check.sh"
    book.write_text("# %%\necho same\n\n# %%\necho before\n\n# %%\ntrue\n\n# %%\necho gone\n")
    first = cli([book, "--kernel", "shell-test", "-o", "first.ipynb"], tmp_path)
    assert first.returncode == EXIT_OK, first.stderr
    book.write_text("# %%\necho same\n\n# %%\necho before\n\n# %%\ntrue\n\n# %%\necho new\n")
    # The same cells (their ids come from their source), one output and one status changed.
    nb = nbformat.read(tmp_path / "first.ipynb", as_version=4)
    nb.cells[1].outputs[0].text = "something else\n"
    nb.cells[2].metadata.shell_kernel["exit_code"] = 4
    nbformat.write(nb, tmp_path / "first.ipynb")

    result = cli([book, "--kernel", "shell-test", "--compare", "first.ipynb", "-o",
                  "second.ipynb"], tmp_path)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    table = result.stdout[result.stdout.index("against first.ipynb"):]
    rows = [line.split("  ")[0].strip() + " : " + line.split("  ")[-1].strip()
            for line in table.splitlines()[1:] if line.strip() and "  " in line]
    assert rows == ["echo same : same", "echo before : output changed", "true : status 4 -> 0",
                    "echo new : new", "echo gone : removed"]
    assert "CHANGED: 4 of 5 code cells changed since first.ipynb" in result.stdout
    saved = nbformat.read(tmp_path / "second.ipynb", as_version=4).metadata.shell_kernel.compare
    assert saved["previous"] == "first.ipynb" and saved["changed"] == 4
    assert [c["result"] for c in saved["cells"]] == ["same", "output changed", "status 4 -> 0",
                                                    "new", "removed"]

    changed = cli([book, "--kernel", "shell-test", "--compare", "first.ipynb",
                   "--fail-on-change", "-o", "third.ipynb"], tmp_path)
    assert changed.returncode == EXIT_CHANGED, changed.stdout + changed.stderr
    # Compared with the file it then replaces (read before the run).
    unchanged = cli([book, "--kernel", "shell-test", "--compare", "second.ipynb",
                     "--fail-on-change", "-o", "second.ipynb"], tmp_path)
    assert unchanged.returncode == EXIT_OK, unchanged.stdout + unchanged.stderr
    assert "SAME: 0 of 4 code cells changed" in unchanged.stdout
    again = nbformat.read(tmp_path / "second.ipynb", as_version=4).metadata.shell_kernel.compare
    assert again["previous"] == "second.ipynb" and again["changed"] == 0
    # A failed cell still exits 1, changed or not.
    book.write_text("# %%\necho same\n\n# %%\nexit 5\n")
    failed = cli([book, "--kernel", "shell-test", "--compare", "second.ipynb",
                  "--fail-on-change", "-o", "fifth.ipynb"], tmp_path)
    assert failed.returncode == EXIT_FAILED, failed.stdout + failed.stderr


@pytest.mark.timeout(240)
def test_a_local_run_skips_bash_completion_with_the_options_it_would_have_set(jupyter_prefix,
                                                                                tmp_path):
    """A run's local kernel too starts bash --no-completion (progcomp off: the
    login hook skips bash-completion), and its cells get the options a login
    shell here has."""
    probe = "shopt -p progcomp extglob hostcomplete || true"
    login = subprocess.run(["bash", "-l", "-i"], input=probe + "\n", capture_output=True,
                           text=True, cwd=tmp_path)
    (tmp_path / "job.sh").write_text(f"# %%\nps -o args= -p $$\n\n# %%\n{probe}\n")
    result = cli(["job.sh", "--kernel", "shell-test", "--no-timing"], tmp_path)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    nb = nbformat.read(tmp_path / "job.out.ipynb", as_version=4)
    assert nb.cells[0].outputs[0].text.split()[1:] == ["+O", "progcomp", "-l", "-i", "+o",
                                                       "history"]
    assert nb.cells[1].outputs[0].text == login.stdout


@pytest.mark.timeout(240)
def test_provenance_over_ssh(jupyter_prefix, tmp_path):
    # A run's kernel is started --no-completion: its bash starts with progcomp off.
    (tmp_path / "deploy.sh").write_text("# %%\nps -o args= -p $$\n")
    result = cli(["deploy.sh", "--kernel", "shell-ssh-test", "--no-timing"], tmp_path)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    nb = nbformat.read(tmp_path / "deploy.out.ipynb", as_version=4)
    assert nb.cells[0].outputs[0].text.split()[1:] == ["+O", "progcomp", "-l", "-i", "+o",
                                                       "history"]
    meta = nb.metadata.shell_kernel
    assert meta["host"] == "testhost" and meta["kernelspec"] == "shell-ssh-test"
    assert meta["os"] and meta["bash_version"] and meta["user"]
    assert "started" not in meta and "duration_s" not in meta


# ------------------------------------------------------------ bad input
@pytest.mark.parametrize("name,text,args,expected", [
    ("prose.md", "# Only prose\n", [], "prose.md has no code cell"),
    ("deploy.txt", "echo hi\n", [], "unknown notebook format '.txt'"),
    ("deploy.sh", "# %%\necho hi\n", ["--compare", "deploy.sh"],
     {"one": "--compare deploy.sh: not a notebook",
      "hosts": "--compare deploy.sh: with --hosts give an earlier fleet run's --output-dir"}),
    ("deploy.sh", "# %%\necho hi\n", ["--fail-on-change"], "--fail-on-change needs --compare"),
    ("deploy.sh", "# %%\necho hi\n", ["--parameters-yaml", "deploy.sh"],
     "--parameters-yaml deploy.sh: give a mapping"),
])
@pytest.mark.parametrize("where", [[], ["--hosts", "nowhere.invalid"]], ids=["one", "hosts"])
def test_bad_input_is_one_line_and_writes_nothing(jupyter_prefix, tmp_path, name, text, args,
                                                   expected, where):
    (tmp_path / name).write_text(text)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = cli([name, "--kernel", "shell-test", *args] if not where else [name, *args, *where],
                 tmp_path)
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    if isinstance(expected, dict):
        expected = expected["hosts" if where else "one"]
    assert result.stderr.startswith("error: ") and expected in result.stderr
    assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_without_jupytext_the_error_names_the_extra(tmp_path):
    (tmp_path / "deploy.sh").write_text("# %%\necho hi\n")
    code = ("import sys; sys.modules['jupytext'] = None; from shell_kernel.cli import main; "
            "sys.exit(main(['run', 'deploy.sh']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60)
    assert result.returncode == EXIT_USAGE
    assert result.stderr == ("error: deploy.sh: reading a text notebook (not .ipynb) needs "
                             "jupytext: pip install 'shell_kernel[runbooks]'\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deploy.sh"]


# ------------------------------------------------------------ many hosts
@pytest.fixture(scope="module")
def hosts_config(sshd, tmp_path_factory) -> Path:
    """Two hosts of the test sshd, as ssh config aliases."""
    return sshd.write_ssh_config(tmp_path_factory.mktemp("runbook-hosts") / "ssh_config",
                                 alias="rb1 rb2")


@pytest.mark.timeout(300)
def test_hosts_run_a_runbook_with_provenance_and_no_timing(hosts_config, tmp_path):
    (tmp_path / "deploy.sh").write_text(DEPLOY_SH)
    saved = []
    for n in (1, 2):
        result = cli(["deploy.sh", "--hosts", "rb1,rb2", "--ssh-config", hosts_config,
                      "--no-timing", "--output-dir", f"out{n}", "-p", "release", "v4"], tmp_path)
        assert result.returncode == EXIT_OK, result.stdout + result.stderr
        saved.append({host: (tmp_path / f"out{n}" / f"{host}.ipynb").read_bytes()
                      for host in ("rb1", "rb2")})
    assert saved[0] == saved[1]  # byte for byte, host by host
    nb = nbformat.reads(saved[0]["rb2"].decode(), as_version=4)
    meta = nb.metadata.shell_kernel
    assert meta["host"] == "rb2" and meta["kernelspec"] == "shell"
    assert meta["os"] == " ".join(platform.uname()[i] for i in (0, 2, 4))
    assert meta["user"] and meta["bash_version"] and meta["hostname"] == platform.node()
    assert not every_key(json.loads(saved[0]["rb2"])) & {"duration_s", "started", "execution"}
    cells = [c for c in nb.cells if c.cell_type == "code"]
    assert stdout_of(cells[2]) == "deploying v4\n"
    assert cells[3].metadata.shell_kernel == {"exit_code": 1, "cwd": "/tmp", "host": "rb2",
                                              "command": "grep -q nomatch /dev/null", "line": 1}
    # With timing, each host's notebook says when it started.
    result = cli(["deploy.sh", "--hosts", "rb1", "--ssh-config", hosts_config,
                  "--output-dir", "timed"], tmp_path)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    meta = nbformat.read(tmp_path / "timed" / "rb1.ipynb", as_version=4).metadata.shell_kernel
    assert meta["started"].endswith("+00:00") and isinstance(meta["duration_s"], float)


@pytest.mark.timeout(300)
def test_hosts_compare_host_by_host(hosts_config, tmp_path):
    book = tmp_path / "check.sh"
    mark = tmp_path / "mark"  # mark.HOST makes that host's second cell print otherwise
    book.write_text(f'# %%\necho same\n\n# %%\ncat {mark}."$SHELL_KERNEL_HOST" 2>/dev/null '
                    '|| echo plain\n')
    first = cli([book, "--hosts", "rb1,rb2", "--ssh-config", hosts_config, "--output-dir",
                 "before"], tmp_path)
    assert first.returncode == EXIT_OK, first.stdout + first.stderr
    same = cli([book, "--hosts", "rb1,rb2", "--ssh-config", hosts_config, "--output-dir",
                "again", "--compare", "before", "--fail-on-change"], tmp_path)
    assert same.returncode == EXIT_OK, same.stdout + same.stderr
    lines = same.stdout[same.stdout.index("against before"):].splitlines()
    assert [line.split() for line in lines[1:3]] == [["rb1", "same", "(2", "cells)"],
                                                     ["rb2", "same", "(2", "cells)"]]
    (tmp_path / "mark.rb2").write_text("drifted\n")
    changed = cli([book, "--hosts", "rb1,rb2", "--ssh-config", hosts_config, "--output-dir",
                   "after", "--compare", "before", "--fail-on-change"], tmp_path)
    assert changed.returncode == EXIT_CHANGED, changed.stdout + changed.stderr
    lines = changed.stdout[changed.stdout.index("against before"):].splitlines()
    assert lines[1].split() == ["rb1", "same", "(2", "cells)"]
    assert lines[2].startswith("rb2   1 of 2 changed: 'cat ")
    assert lines[2].endswith("...': output changed")
    assert "CHANGED: compared with before" in changed.stdout
    saved = nbformat.read(tmp_path / "after" / "rb2.ipynb", as_version=4)
    assert saved.metadata.shell_kernel.compare["changed"] == 1
    assert saved.metadata.shell_kernel.compare["previous"] == str(Path("before") / "rb2.ipynb")
