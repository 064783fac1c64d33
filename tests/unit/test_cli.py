"""What `run` does before it reads a notebook (cli.light_notebook_validation):
the notebook check without jsonschema's optional format checkers. A fresh
interpreter for each check (the process's imports are what is tested); no
kernel is started and no host is reached."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from shell_kernel.cli import UNUSED_FORMAT_CHECKERS
from shell_kernel.notebook_job import EXIT_USAGE


def _formats(schema, where: str = "") -> list[str]:
    """Where a schema (any JSON Schema draft) uses the "format" keyword. A
    property named "format" (a key of "properties") is not the keyword."""
    found = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "format" and isinstance(value, str):
                found.append(f"{where}: format {value}")
            elif key == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    found += _formats(sub, f"{where}/properties/{name}")
            else:
                found += _formats(value, f"{where}/{key}")
    elif isinstance(schema, list):
        for index, item in enumerate(schema):
            found += _formats(item, f"{where}/{index}")
    return found


def test_no_notebook_schema_uses_a_format():
    """What makes leaving the format checkers out harmless: nbformat's schemas
    (every version it validates against) never ask for one."""
    schemas = sorted(Path(nbformat.__file__).parent.glob("v*/*.schema.json"))
    assert len(schemas) >= 5, schemas
    for path in schemas:
        assert _formats(json.loads(path.read_text())) == [], path
    assert _formats({"properties": {"format": {"type": "string"}}}) == []
    assert _formats({"items": [{"format": "uri"}]}) == ["/items/0: format uri"]


def _notebook(path: Path, source: str, language: str = "bash") -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nb.metadata["kernelspec"] = {"name": "shell", "display_name": "shell", "language": language}
    nbformat.write(nb, path)
    return path


def _run_cli(argv: list[str]) -> dict:
    """main(argv) in a fresh interpreter: its status and what it imported."""
    code = ("import json, os, sys\nfrom shell_kernel.cli import main\n"
            f"status = main({argv!r})\n"
            "print(json.dumps({'status': status, 'nbformat': 'nbformat' in sys.modules,"
            " 'checkers': [name for name in sys.argv[1:] if sys.modules.get(name, 0) is not None],"
            " 'arrow': 'arrow' in sys.modules,"
            " 'validator': os.environ.get('NBFORMAT_VALIDATOR')}))")
    proc = subprocess.run([sys.executable, "-c", code, *UNUSED_FORMAT_CHECKERS],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("hosts", [False, True], ids=["run", "run --hosts"])
def test_run_reads_the_notebook_without_the_format_checkers(tmp_path, monkeypatch, hosts):
    """rfc3987_syntax alone (installed with JupyterLab) costs a second of CPU
    building a grammar at every start; the run goes without all of them."""
    monkeypatch.delenv("NBFORMAT_VALIDATOR", raising=False)
    notebook = _notebook(tmp_path / "nb.ipynb", "echo hi")
    if hosts:
        # A Python notebook is turned away once read, before any host.
        notebook = _notebook(tmp_path / "python.ipynb", "print(1)", language="python")
        argv = ["run", str(notebook), "--hosts", "web1"]
    else:
        argv = ["run", str(notebook), "--kernel", "no-such-kernel", "-o", str(tmp_path / "o.ipynb")]
    seen = _run_cli(argv)
    assert seen == {"status": EXIT_USAGE, "nbformat": True, "checkers": [], "arrow": False,
                    # A kernel that `run` starts inherits the environment.
                    "validator": "jsonschema" if hosts else None}, seen


def test_the_schema_check_still_works_without_them(tmp_path):
    """The check nbformat makes when it reads a notebook, in a process that
    left the format checkers out: it still finds what is wrong."""
    notebook = _notebook(tmp_path / "nb.ipynb", "echo hi")
    data = json.loads(notebook.read_text())
    data["cells"][0]["cell_type"] = "kode"
    notebook.write_text(json.dumps(data))
    code = ("import sys\nfrom shell_kernel.cli import light_notebook_validation\n"
            "light_notebook_validation(hosts=True)\nimport nbformat\n"
            "nb = nbformat.reads(open(sys.argv[1]).read(), as_version=4)\n"
            "try:\n    nbformat.validate(nb)\nexcept nbformat.ValidationError as err:\n"
            "    print('invalid:', err.message)\n"
            "nbformat.validate(nbformat.reads(open(sys.argv[2]).read(), as_version=4))\n"
            "print('valid')")
    valid = _notebook(tmp_path / "valid.ipynb", "echo hi")
    proc = subprocess.run([sys.executable, "-c", code, str(notebook), str(valid)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "valid" and lines[0].startswith("invalid:") and "kode" in lines[0], lines
