"""Runbooks' pure logic: reading jupytext files (runbook_files.py), YAML
parameters as bash values (parameter_files.py), what --no-timing leaves out
(provenance.py) and the comparison of two runs (run_compare.py). No kernel,
shell or host."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import nbformat
import pytest

from shell_kernel.notebook_job import (RunError, bash_parameters, bash_value, inject_parameters,
                                       output_stem)
from shell_kernel.parameter_files import read_parameters_yaml
from shell_kernel.provenance import PROBE, parse_probe, strip_timing
from shell_kernel.run_compare import compare, read_previous
from shell_kernel.runbook_files import DEFAULT_KERNELSPEC, read_runbook

jupytext = pytest.importorskip("jupytext")

PERCENT = """\
# %% [markdown]
# # Deploy

# %%
echo hello
x=1

# %%
echo "$x"
"""

MARKDOWN = """\
# Deploy

```bash
echo one
```

Some text, then an example that is not a cell:

```text
example output
```

```sh
echo two
```
"""


# ------------------------------------------------------------ runbook files
def test_percent_script_cells_and_the_default_kernel(tmp_path):
    path = tmp_path / "deploy.sh"
    path.write_text(PERCENT)
    nb = read_runbook(path)
    assert [(c.cell_type, c.source) for c in nb.cells] == [
        ("markdown", "# Deploy"), ("code", "echo hello\nx=1"), ("code", 'echo "$x"')]
    assert nb.metadata.kernelspec == DEFAULT_KERNELSPEC
    nbformat.validate(nb)


def test_markdown_fences_are_bash_cells_without_a_header(tmp_path):
    path = tmp_path / "deploy.md"
    path.write_text(MARKDOWN)
    nb = read_runbook(path)
    # ```sh is a cell as ```bash is, without the %%sh magic jupytext marks it with.
    assert [c.source for c in nb.cells if c.cell_type == "code"] == ["echo one", "echo two"]
    assert nb.metadata.kernelspec == DEFAULT_KERNELSPEC


def test_a_header_names_the_kernel(tmp_path):
    path = tmp_path / "db.md"
    path.write_text("---\ntitle: db\njupyter:\n  kernelspec:\n    display_name: Bash on db1\n"
                    "    language: bash\n    name: shell-ssh-db1\n---\n\n```bash\necho hi\n```\n")
    nb = read_runbook(path)
    assert nb.metadata.kernelspec["name"] == "shell-ssh-db1"
    assert [c.source for c in nb.cells if c.cell_type == "code"] == ["echo hi"]
    # A header without a kernelspec gets the default one, and keeps the rest.
    path.write_text("---\ntitle: db\n---\n\n```bash\necho hi\n```\n")
    nb = read_runbook(path)
    assert nb.metadata.kernelspec == DEFAULT_KERNELSPEC
    assert [c.source for c in nb.cells if c.cell_type == "code"] == ["echo hi"]


def test_cell_ids_are_the_same_on_every_read(tmp_path):
    path = tmp_path / "deploy.sh"
    path.write_text(PERCENT + "\n# %%\necho hello\nx=1\n")  # a repeated cell
    ids = [c.id for c in read_runbook(path).cells]
    assert ids == [c.id for c in read_runbook(path).cells]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("name,text,expected", [
    ("empty.md", "# Only prose\n\nno fences here\n", "has no code cell"),
    ("blank.sh", "# %%\n\n# %%\n", "has no code cell"),
    ("deploy.txt", "echo hi\n", "unknown notebook format '.txt'"),
    ("deploy", "echo hi\n", "unknown notebook format"),
])
def test_bad_runbooks(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RunError) as err:
        read_runbook(path)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_output_stem_of_text_notebooks():
    assert output_stem(Path("ops/deploy.sh")) == "deploy"
    assert output_stem(Path("ops/deploy.md")) == "deploy"
    assert output_stem(Path("ops/deploy.ipynb")) == "deploy"


# -------------------------------------------------------------- parameters
def test_yaml_parameters_become_strings_and_arrays(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("hosts: [web1, 'web 2', \"it's\"]\ncount: 3\nratio: 0.5\ndry_run: true\n"
                    "note: null\nname: Ada\nempty: []\n")
    values = read_parameters_yaml(path)
    assert values == {"hosts": ["web1", "web 2", "it's"], "count": "3", "ratio": "0.5",
                      "dry_run": "true", "note": "", "name": "Ada", "empty": []}
    assert bash_value(values["hosts"]) == "(web1 'web 2' 'it'\"'\"'s')"
    assert bash_value(values["empty"]) == "()"
    assert bash_value("(a b)") == "'(a b)'"  # a string stays a string


def test_yaml_arrays_reach_bash_verbatim(tmp_path):
    nasty = ["", "two words", "$(echo injected)", "line\nbreak", "*", "'", "-n"]
    script = bash_parameters({"items": nasty, "s": "(a b)"}) + \
        'printf "%s\\0" "${#items[@]}" "${items[@]}" "$s"\n'
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True, cwd=tmp_path)
    assert out.stdout.decode().split("\0")[:-1] == [str(len(nasty)), *nasty, "(a b)"]


def test_yaml_arrays_match_papermill():
    from papermill.translators import BashTranslator
    parameters = {"hosts": ["a", "b c", "it's"], "n": "3"}
    assert bash_parameters(parameters) == BashTranslator.codify(parameters)


@pytest.mark.parametrize("text,expected", [
    ("- a\n- b\n", "a mapping of names to values"),
    ("x: {a: 1}\n", "'x': bash has no nested values"),
    ("x: [[1, 2]]\n", "'x': bash arrays hold strings"),
    ("1x: a\n", "'1x': a parameter name must be a bash variable name"),
    ("x: [\n", "not valid YAML"),
])
def test_bad_yaml_parameters(tmp_path, text, expected):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(RunError) as err:
        read_parameters_yaml(path)
    assert expected in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(RunError, match="no such file"):
        read_parameters_yaml(tmp_path / "missing.yaml")


def test_the_injected_cell_has_a_stable_id():
    first, second = (nbformat.v4.new_notebook() for _ in range(2))
    for nb in (first, second):
        nb.cells = [nbformat.v4.new_code_cell("x=1")]
        nb.cells[0].metadata["tags"] = ["parameters"]
        inject_parameters(nb, {"x": "2"})
    assert first.cells[1].id == second.cells[1].id == "injected-parameters"


# ------------------------------------------------------------ provenance
def test_the_probe_runs_in_bash_and_parses():
    out = subprocess.run(["bash", "-c", PROBE], capture_output=True, text=True, check=True)
    found = parse_probe("noise before\n" + out.stdout)
    assert set(found) == {"user", "hostname", "os", "bash_version"}
    assert found["os"] == subprocess.run(["uname", "-srm"], capture_output=True,
                                         text=True).stdout.strip()
    assert all(found.values())
    assert parse_probe("") == {}


@pytest.mark.parametrize("no_proc", [False, True], ids=["proc", "no-proc"])
def test_the_probe_asks_uname_only_without_proc(tmp_path, no_proc):
    """Where /proc/sys/kernel tells the os, the probe reads it there (no
    fork); without /proc (SHELL_KERNEL_NO_PROC), uname says it. A uname
    first on PATH that says something else tells which one answered; the
    variables the probe used are gone after it."""
    (tmp_path / "uname").write_text("#!/bin/sh\necho 'Stub 1.0 stub64'\n")
    (tmp_path / "uname").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    env.pop("SHELL_KERNEL_NO_PROC", None)
    if no_proc:
        env["SHELL_KERNEL_NO_PROC"] = "1"
    out = subprocess.run(["bash", "-c", PROBE + "\ndeclare -p | grep -c '^declare -- __shell_kernel'"],
                         capture_output=True, text=True, env=env)
    found = parse_probe(out.stdout)
    real = " ".join(platform.uname()[i] for i in (0, 2, 4))
    assert found["os"] == ("Stub 1.0 stub64" if no_proc else real)
    assert out.stdout.splitlines()[-1] == "0"


def test_strip_timing_keeps_what_is_not_time():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("false"), nbformat.v4.new_markdown_cell("x")]
    nb.cells[0].metadata["execution"] = {"iopub.status.busy": "2026-12-03T10:00:00Z"}
    nb.cells[0].metadata["shell_kernel"] = {"exit_code": 1, "duration_s": 0.1, "cwd": "/tmp",
                                            "host": "local", "command": "false", "line": 1}
    nb.metadata["shell_kernel"] = {"host": "local", "duration_s": 3.2, "started": "x",
                                   "user": "ada"}
    strip_timing(nb)
    assert nb.cells[0].metadata == {"shell_kernel": {"exit_code": 1, "cwd": "/tmp", "host": "local",
                                                     "command": "false", "line": 1}}
    assert nb.metadata["shell_kernel"] == {"host": "local", "user": "ada"}


# ------------------------------------------------------------ comparison
def _run(*cells):
    """A saved run: cells of (id, source, exit_code or None, stdout)."""
    nb = nbformat.v4.new_notebook()
    for cell_id, source, code, text in cells:
        cell = nbformat.v4.new_code_cell(source)
        cell.id = cell_id
        if code is not None:
            cell.metadata["shell_kernel"] = {"exit_code": code, "duration_s": 0.5}
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        nb.cells.append(cell)
    nb.cells.append(nbformat.v4.new_markdown_cell("prose is not compared"))
    return nb


def test_compare_names_every_kind_of_change():
    before = _run(("a", "echo a", 0, "a\n"), ("b", "date", 0, "Mon\n"), ("c", "check", 0, ""),
                  ("gone", "echo old", 0, "old\n"), ("x", "echo moved", 0, "m\n"),
                  ("late", "echo late", None, ""))
    after = _run(("a", "echo a", 0, "a\n"), ("b", "date", 0, "Tue\n"), ("c", "check", 2, ""),
                 ("new", "echo new", 0, "new\n"), ("y", "echo moved", 0, "m\n"),
                 ("late", "echo late", 0, "l\n"))
    rows = compare(before, after)
    assert [(row.label, row.result) for row in rows] == [
        ("echo a", "same"), ("date", "output changed"), ("check", "status 0 -> 2"),
        ("echo new", "new"), ("echo moved", "same"),  # matched by source
        ("echo late", "status not run -> 0"), ("echo old", "removed")]
    assert [row.changed for row in rows] == [False, True, True, True, False, True, True]


def test_compare_ignores_counts_and_durations():
    before = _run(("a", "echo a", 0, "a\n"))
    after = _run(("a", "echo a", 0, "a\n"))
    after.cells[0].execution_count = 7
    after.cells[0].metadata["shell_kernel"]["duration_s"] = 9.0
    assert [row.result for row in compare(before, after)] == ["same"]


def test_read_previous_refuses_what_is_not_a_notebook(tmp_path):
    path = tmp_path / "old.ipynb"
    path.write_text("{not json")
    for bad in (path, tmp_path / "missing.ipynb", tmp_path):
        with pytest.raises(RunError) as err:
            read_previous(bad)
        assert str(err.value).startswith(f"--compare {bad}: ") and "\n" not in str(err.value)
