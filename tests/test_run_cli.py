"""`python -m shell_kernel run`: parameter injection and quoting (checked
against papermill's BashTranslator and a real bash), usage errors, failures
that stop the run (or not), the saved notebook and the summary.

The parameterised notebook's runs with parameters (locally, over SSH and
through papermill) are in test_notebooks.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from notebook_files import write_notebook
from shell_kernel.cli import main
from shell_kernel.runner import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, bash_parameters,
                                 default_output, inject_parameters)

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
PARAMETERS_NB = NOTEBOOK_DIR / "parameters.ipynb"
NASTY = [
    "",
    "plain",
    "two words",
    "it's",
    "''",
    "\"double\" and 'single'",
    "$HOME ${HOME} $(echo injected) `echo injected`",
    "* ? [a-z] {a,b} ~ ~root",
    "back\\slash \\' \\\" \\n",
    "line one\nline two\n",
    "tab\there; echo injected; #",
    "-n",
    "100% & | > < ! \x1b[31m",
    "unicode: é ✓ 日本",
]


def notebook(*cells, kernel="shell-test", path: Path | None = None) -> Path:
    return write_notebook(path, *cells, kernel=kernel)


def cli(argv: list, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "shell_kernel", "run", *argv],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)


# ------------------------------------------------------ quoting, no kernel
def test_parameters_are_quoted_as_papermill_quotes_them():
    from papermill.translators import BashTranslator
    parameters = {f"v{i}": value for i, value in enumerate(NASTY)}
    assert bash_parameters(parameters) == BashTranslator.codify(parameters)


def test_every_value_reaches_bash_verbatim(tmp_path):
    parameters = {f"v{i}": value for i, value in enumerate(NASTY)}
    script = bash_parameters(parameters) + "".join(
        f'printf "%s\\0" "$v{i}"\n' for i in range(len(NASTY)))
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True, cwd=tmp_path)
    assert out.stdout.decode().split("\0")[:-1] == NASTY
    assert out.stderr == b""


def test_injected_cell_goes_after_the_parameters_cell_and_replaces_an_old_one():
    nb = nbformat.read(PARAMETERS_NB, as_version=4)
    declared = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    at, warnings = inject_parameters(nb, {"name": "first"})
    assert at == declared + 1 and warnings == []
    count = len(nb.cells)
    at2, _ = inject_parameters(nb, {"name": "second", "undeclared": "x"})
    assert at2 == at and len(nb.cells) == count
    assert nb.cells[at].source == "# Parameters\nname=second\nundeclared=x\n"
    assert nb.cells[at].metadata.tags == ["injected-parameters"]
    # A name the parameters cell does not set is injected, with a warning.
    nb2 = nbformat.read(PARAMETERS_NB, as_version=4)
    _, warnings = inject_parameters(nb2, {"undeclared": "x"})
    assert len(warnings) == 1 and "'undeclared' is not set" in warnings[0]


def test_default_output_path():
    assert default_output(Path("a/report.ipynb")) == Path("a/report.out.ipynb")
    assert default_output(Path("notes")) == Path("notes.out.ipynb")


# ------------------------------------------------ usage errors, no kernel
def test_help_says_what_it_does(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for expected in ("NOTEBOOK", "-o OUT", "-p NAME VALUE", "--kernel NAME", "--timeout S",
                     "--allow-errors", "injected-parameters", "raises-exception",
                     "report.ipynb -> report.out.ipynb", "metadata.shell_kernel", "exit status",
                     "deploy.sh -> deploy.out.ipynb", "--parameters-yaml FILE", "--no-timing",
                     "--compare PREVIOUS", "--fail-on-change", "3 with --fail-on-change"):
        assert expected in text, expected


def test_missing_notebook(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.ipynb")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path / 'nope.ipynb'}: no such notebook\n"
    assert not (tmp_path / "nope.out.ipynb").exists()


def test_not_a_notebook(tmp_path, capsys):
    (tmp_path / "broken.ipynb").write_text("{not json")
    assert main(["run", str(tmp_path / "broken.ipynb")]) == EXIT_USAGE
    assert "is not a readable notebook" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_a_notebook_the_schema_rejects_runs_with_a_warning(jupyter_prefix, tmp_path):
    """nbformat only logs it (to nobody); a cell whose type is not "code" is
    not run, so the run says why it ran less than the file holds."""
    path = notebook("echo one", "echo two", path=tmp_path / "nb.ipynb")
    data = json.loads(path.read_text())
    data["cells"][1]["cell_type"] = "kode"
    path.write_text(json.dumps(data))
    result = cli([str(path), "-o", str(tmp_path / "out.ipynb")], tmp_path)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "does not follow the notebook format at cells/1" in warning[0] \
        and "a cell of an unknown type does not run" in warning[0], result.stderr
    assert "OK: 1 code cell" in result.stdout, result.stdout


def test_unknown_kernel_lists_the_installed_ones(jupyter_prefix, tmp_path, capsys):
    path = notebook("echo hi", kernel="no-such-kernel", path=tmp_path / "nb.ipynb")
    assert main(["run", str(path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: no kernel named 'no-such-kernel' (installed: ")
    assert "shell-test" in err and "--kernel NAME" in err
    assert main(["run", str(path), "--kernel", "also-missing"]) == EXIT_USAGE
    assert "no kernel named 'also-missing'" in capsys.readouterr().err


def test_notebook_without_a_kernel_needs_kernel_option(tmp_path, capsys):
    path = notebook("echo hi", kernel=None, path=tmp_path / "nb.ipynb")
    assert main(["run", str(path)]) == EXIT_USAGE
    assert "names no kernel in its metadata; give one with --kernel NAME" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["1abc", "a-b", "has space", "", "x=y", "$x", "id\n"])
def test_bad_parameter_names(name, tmp_path, capsys):
    path = notebook("echo hi", path=tmp_path / "nb.ipynb")
    assert main(["run", str(path), "-p", name, "value"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"-p {name!r}: a parameter name must be a bash variable name" in err


@pytest.mark.parametrize("name, why", [
    ("__shell_kernel_token", "the kernel's own"), ("__shell_kernel_dir", "the kernel's own"),
    ("__shell_kernel", "the kernel's own"), ("UID", "read-only in bash"),
    ("SHELLOPTS", "read-only in bash")])
def test_reserved_parameter_names(name, why, tmp_path, capsys):
    """`-p __shell_kernel_token x` replaced the token of the end frames: the
    parameter cell never ended."""
    path = notebook("echo hi", path=tmp_path / "nb.ipynb")
    for where in ([], ["--hosts", "nowhere.invalid"]):
        assert main(["run", str(path), "-p", name, "value", *where]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert f"-p {name!r}: a parameter cannot set this variable ({why})" in err
        assert err.count("\n") == 1


@pytest.mark.timeout(120)
def test_a_name_with_a_newline_runs_nothing(jupyter_prefix, tmp_path):
    """`-p $'NAME\\n' v` once made the line `NAME\n='v'`: bash ran NAME."""
    path = notebook("ran() { touch ran; }", ("x=0", ["parameters"]), "echo hi",
                    path=tmp_path / "nb.ipynb")
    for where in ([], ["--hosts", "nowhere.invalid"]):
        result = cli([str(path), "-p", "ran\n", "v", *where], tmp_path)
        assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
        assert "-p 'ran\\n': a parameter name must be a bash variable name" in result.stderr
        assert not (tmp_path / "ran").exists()
        assert not (tmp_path / "nb.out.ipynb").exists() and not (tmp_path / "nb.fleet").exists()


def test_parameter_without_value(tmp_path, capsys):
    path = notebook("echo hi", path=tmp_path / "nb.ipynb")
    with pytest.raises(SystemExit) as exit_info:
        main(["run", str(path), "-p", "name"])
    assert exit_info.value.code == EXIT_USAGE
    assert "-p/--parameter: expected 2 arguments" in capsys.readouterr().err


def test_parameters_only_for_bash_kernels(tmp_path, capsys):
    path = notebook("print(1)", kernel="python3", path=tmp_path / "nb.ipynb")
    assert main(["run", str(path), "-p", "x", "1"]) == EXIT_USAGE
    assert "-p sets bash variables, but kernel 'python3' runs 'python'" in capsys.readouterr().err


def test_output_must_not_overwrite_the_notebook(tmp_path, capsys):
    path = notebook("echo hi", path=tmp_path / "nb.ipynb")
    assert main(["run", str(path), "-o", str(path)]) == EXIT_USAGE
    assert "would overwrite the notebook itself" in capsys.readouterr().err


def test_bad_timeout(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "nb.ipynb", "--timeout", "0"])
    assert exit_info.value.code == EXIT_USAGE
    assert "'0' must be greater than 0" in capsys.readouterr().err


# ------------------------------------------------------ runs on a kernel
NOBODY = 65534  # another user: the tests run as root, who may give files away


def test_an_output_in_a_directory_others_control_is_refused(tmp_path, capsys):
    path = notebook("touch ran", path=tmp_path / "nb.ipynb")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "out.ipynb").symlink_to(victim)
    os.chown(theirs, NOBODY, NOBODY)
    assert main(["run", str(path), "-o", str(theirs / "out.ipynb")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"error: -o {theirs / 'out.ipynb'}: {theirs} is owned by another user (uid {NOBODY})" \
        in err and err.count("\n") == 1
    assert victim.read_text() == "precious\n" and not (tmp_path / "ran").exists()


@pytest.mark.timeout(120)
def test_the_output_replaces_a_symlink_and_never_follows_it(jupyter_prefix, tmp_path):
    path = notebook("echo hi", path=tmp_path / "nb.ipynb")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "reports" / "nb.ipynb"
    out.parent.mkdir()
    out.symlink_to(victim)
    result = cli([str(path), "-o", str(out)], tmp_path)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink()
    assert nbformat.read(out, as_version=4).cells[0].outputs[0].text == "hi\n"
    assert [p.name for p in out.parent.iterdir()] == ["nb.ipynb"]


@pytest.mark.timeout(120)
def test_a_failing_cell_stops_the_run(jupyter_prefix, tmp_path):
    out = tmp_path / "failed.ipynb"
    result = cli([str(PARAMETERS_NB), "-o", str(out), "--kernel", "shell-test",
                  "-p", "count", "many"], tmp_path)
    assert result.returncode == EXIT_FAILED, result.stdout + result.stderr
    nb = nbformat.read(out, as_version=4)  # saved all the same
    cells = {c.get("id"): c for c in nb.cells}
    assert "shell_kernel" in cells["repeat"].metadata, result.stdout + result.stderr
    assert cells["repeat"].metadata.shell_kernel["exit_code"] == 1
    assert cells["repeat"].metadata.shell_kernel["host"] == "local"
    assert [o.ename for o in cells["repeat"].outputs if o.output_type == "error"] == ["ExitCode"]
    # Nothing after it ran, and it carries no record.
    assert cells["card"].outputs == [] and "shell_kernel" not in cells["card"].metadata
    assert "4  case $count in" in result.stdout and "failed" in result.stdout
    assert "5  html_escape()" in result.stdout and "not run" in result.stdout
    assert "FAILED: 5 code cells: 3 ok, 1 failed, 1 not run;" in result.stdout
    assert "error: cell 4 (case $count in) failed: ExitCode: exit status 1 from 'false' (line 4)" in result.stderr
    assert "stderr | count must be a whole number, not 'many'" in result.stderr


@pytest.mark.timeout(120)
def test_allow_errors_runs_on_but_still_fails(jupyter_prefix, tmp_path):
    path = notebook("echo one", "exit 7", "echo three", path=tmp_path / "nb.ipynb")
    result = cli([str(path), "--allow-errors"], tmp_path)
    assert result.returncode == EXIT_FAILED, result.stdout + result.stderr
    nb = nbformat.read(tmp_path / "nb.out.ipynb", as_version=4)  # the default output
    assert [c.metadata.shell_kernel["exit_code"] for c in nb.cells] == [0, 7, 0]
    assert nb.cells[2].outputs[0].text == "three\n"
    assert "FAILED: 3 code cells: 2 ok, 1 failed;" in result.stdout


@pytest.mark.timeout(120)
def test_cells_tagged_raises_exception_may_fail(jupyter_prefix, tmp_path):
    path = notebook("echo one", ("false", ["raises-exception"]), "echo three",
                    ("echo skipped", ["skip-execution"]), path=tmp_path / "nb.ipynb")
    out = tmp_path / "sub" / "out.ipynb"
    result = cli([str(path), "-o", str(out), "-p", "x", "1"], tmp_path)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    # No parameters cell: the injected one comes first, with a warning.
    assert "no cell tagged 'parameters'" in result.stderr
    nb = nbformat.read(out, as_version=4)
    assert nb.cells[0].metadata.tags == ["injected-parameters"]
    assert [c.metadata.get("shell_kernel", {}).get("exit_code") for c in nb.cells] == \
        [0, 0, 1, 0, None]
    assert "failed as expected [raises-exception]" in result.stdout
    assert "skipped" in result.stdout
    assert "OK: 5 code cells: 3 ok, 1 failed as expected, 1 skipped;" in result.stdout
    # Progress, cell by cell, on stderr.
    assert "[3/5] false ..." in result.stderr and "[3/5] failed as expected (exit 1" in result.stderr


@pytest.mark.timeout(120)
def test_timeout_stops_a_cell(jupyter_prefix, tmp_path):
    path = notebook("echo before", "sleep 30", "echo after", path=tmp_path / "nb.ipynb")
    # (The first cell's time includes the shell's start, which runs while the
    # kernel already answers: a second may not be enough on a loaded machine.)
    result = cli([str(path), "--timeout", "8"], tmp_path)
    assert result.returncode == EXIT_FAILED, result.stdout + result.stderr
    assert "error: the run stopped: a cell ran longer than --timeout 8 s" in result.stderr
    nb = nbformat.read(tmp_path / "nb.out.ipynb", as_version=4)
    assert nb.cells[0].metadata.shell_kernel["exit_code"] == 0
    assert "shell_kernel" not in nb.cells[1].metadata
    assert "FAILED: 3 code cells: 1 ok, 1 timed out, 1 not run;" in result.stdout
