"""Every notebook in notebooks/ runs top to bottom, through nbclient, on the
real kernel its metadata names (for the quickstart: "shell", which .ci/run
installs into the virtualenv).

Cells tagged "raises-exception" must fail with a non-zero exit status; all
other cells must succeed. The quickstart's outputs must show what its cells
are there to show.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(path for path in NOTEBOOK_DIR.glob("*.ipynb")
                   if not path.name.endswith(".out.ipynb"))
RAISES = "raises-exception"
CELL_TIMEOUT = 120  # seconds; the quickstart needs about two in all


@dataclass
class ExecutedNotebook:
    path: Path
    nb: nbformat.NotebookNode
    spec_dir: str
    #: cell index -> metadata["shell_kernel"] of the cell's execute_reply
    replies: dict

    def code_cells(self):
        return [(i, cell) for i, cell in enumerate(self.nb.cells) if cell.cell_type == "code"]

    def cell(self, cell_id: str) -> tuple[int, nbformat.NotebookNode]:
        for index, cell in enumerate(self.nb.cells):
            if cell.get("id") == cell_id:
                return index, cell
        raise AssertionError(f"{self.path.name} has no cell with id {cell_id!r}")

    def meta(self, cell_id: str) -> dict:
        return self.replies[self.cell(cell_id)[0]]

    def stream(self, cell_id: str, name: str) -> str:
        return "".join(out.text for out in self.cell(cell_id)[1].outputs
                       if out.output_type == "stream" and out.name == name)

    def errors(self, cell_id: str) -> list:
        return [out for out in self.cell(cell_id)[1].outputs if out.output_type == "error"]


def kernelspec_dir(path: Path, nb) -> str:
    name = nb.metadata.get("kernelspec", {}).get("name")
    if not name:
        pytest.fail(f"{path.name} names no kernelspec in its metadata (metadata.kernelspec.name)")
    manager = KernelSpecManager()
    try:
        return manager.get_kernel_spec(name).resource_dir
    except NoSuchKernel:
        pass
    installed = ", ".join(sorted(manager.find_kernel_specs())) or "none"
    pytest.fail(f"{path.name} needs the kernelspec {name!r}, which is not installed "
                f"(installed: {installed}). Install it with "
                "`.venv/bin/python -m shell_kernel install --sys-prefix` (.ci/run does).")


def execute(path: Path, tmpdir: Path) -> ExecutedNotebook:
    nb = nbformat.read(path, as_version=4)
    spec_dir = kernelspec_dir(path, nb)
    replies: dict = {}

    def on_cell_executed(cell, cell_index, execute_reply):
        replies[cell_index] = (execute_reply or {}).get("metadata", {}).get("shell_kernel")

    client = NotebookClient(nb, kernel_name=nb.metadata.kernelspec.name, timeout=CELL_TIMEOUT,
                            startup_timeout=60,
                            resources={"metadata": {"path": str(path.parent)}},
                            on_cell_executed=on_cell_executed)
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    try:
        client.execute(env=env)
    except CellExecutionError as err:
        pytest.fail(f"{path.name}: a cell not tagged {RAISES!r} failed "
                    f"(kernelspec in {spec_dir}):\n{err}")
    except Exception as err:  # noqa: BLE001 - a dead kernel or a timeout, said plainly
        pytest.fail(f"{path.name} could not be run to the end on the kernelspec in {spec_dir}: "
                    f"{type(err).__name__}: {err}")
    return ExecutedNotebook(path, nb, spec_dir, replies)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Runs each notebook once per module, on first use."""
    done: dict[Path, ExecutedNotebook] = {}

    def run(path: Path) -> ExecutedNotebook:
        if path not in done:
            tmpdir = tmp_path_factory.mktemp(f"nb-{path.stem}")
            tmpdir.chmod(0o755)
            done[path] = execute(path, tmpdir)
        return done[path]

    return run


def test_the_quickstart_is_among_the_notebooks():
    assert NOTEBOOK_DIR / "quickstart.ipynb" in NOTEBOOKS, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
             and (cell.outputs or cell.execution_count is not None)]
    assert not dirty, f"{path.name}: clear the outputs of cells {dirty} before saving"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, executed):
    run = executed(path)
    for index, cell in run.code_cells():
        where = f"{path.name} cell {index} ({cell.source.splitlines()[:1]})"
        assert index in run.replies, f"{where}: on_cell_executed never saw a reply"
        meta = run.replies[index]
        assert isinstance(meta, dict), f"{where}: reply metadata has no 'shell_kernel': {meta!r}"
        code = meta.get("exit_code")
        assert isinstance(code, int) and not isinstance(code, bool), \
            f"{where}: exit_code is not an integer: {meta!r}"
        assert isinstance(meta.get("duration_s"), (int, float)), f"{where}: {meta!r}"
        errors = [out for out in cell.outputs if out.output_type == "error"]
        if RAISES in cell.metadata.get("tags", []):
            assert code != 0, f"{where} is tagged {RAISES!r} but succeeded: {meta!r}"
            assert [e.ename for e in errors] == ["ExitCode"], f"{where}: {errors!r}"
            assert errors[0].evalue == str(code), f"{where}: {errors!r} vs {meta!r}"
        else:
            assert code == 0, f"{where}: exit status {code}: {cell.outputs!r}"
            assert not errors, f"{where}: {errors!r}"


@pytest.mark.timeout(600)
def test_quickstart_shows_what_it_says(executed):
    run = executed(NOTEBOOK_DIR / "quickstart.ipynb")
    start = str(NOTEBOOK_DIR)

    # State persists: same scratch directory, variable, function and file in a later cell.
    scratch = run.meta("state-setup")["cwd"]
    assert scratch != start and run.meta("state-use")["cwd"] == scratch
    assert run.stream("state-use", "stdout") == (
        "still in the scratch directory\nhello, world\napple\nbanana\ncherry\n")

    # Live output: five lines, sent as the loop runs (not in one piece at the end).
    live = [out for out in run.cell("live-output")[1].outputs if out.output_type == "stream"]
    assert "".join(out.text for out in live) == "".join(f"step {i} of 5\n" for i in range(1, 6))
    assert len(live) >= 2, live
    assert run.meta("live-output")["duration_s"] >= 0.9

    # stdout and stderr are kept apart; stderr alone does not fail a cell.
    assert run.stream("streams", "stdout") == "this line goes to stdout\n"
    assert run.stream("streams", "stderr") == (
        "this line goes to stderr\npython writes to stderr too\n")
    assert run.meta("streams")["exit_code"] == 0

    # Exit statuses.
    assert run.stream("exit-status", "stdout") == (
        "grep banana: exit status 0\ngrep mango:  exit status 1\n")
    assert run.stream("pipeline", "stdout") == (
        "false | true -> status 0, PIPESTATUS: 1 0\nwith pipefail -> status 1\n")

    # Here-documents, expanded and literal.
    assert run.stream("heredoc", "stdout") == (
        "Hello, world!\nToday's fruits: apple banana cherry\n"
        "$name stays literal in a quoted here-doc - 7 words\n")

    # Cleanup went back to the start and removed the scratch directory.
    assert run.meta("cleanup")["cwd"] == start
    assert not Path(scratch).exists()

    # The last cell fails on purpose, with the status of its last command.
    index, failing = run.cell("failing")
    assert index == run.code_cells()[-1][0]
    assert RAISES in failing.metadata.tags
    assert "looking for a file that does not exist...\n" == run.stream("failing", "stdout")
    assert "/no/such/file" in run.stream("failing", "stderr")
    code = run.meta("failing")["exit_code"]
    assert code != 0
    assert [(e.ename, e.evalue) for e in run.errors("failing")] == [("ExitCode", str(code))]
