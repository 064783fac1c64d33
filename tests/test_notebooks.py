"""Every notebook in notebooks/ runs top to bottom, through nbclient, on the
real kernel its metadata names (for the quickstart: "shell", which .ci/run
installs into the virtualenv). A notebook written for a kernelspec that a
user installs for a host of their own (the remote runbook's
"shell-ssh-runbook") runs on the test sshd's kernelspec instead: TEST_KERNELS.

Cells tagged "raises-exception" must fail with a non-zero exit status; all
other cells must succeed. Each notebook's outputs must show what its cells
are there to show. The parameterised notebook also runs with parameters
through `python -m shell_kernel run` and through papermill (`-k`, and
`--engine shell_kernel`, which records each cell's result in its metadata).
"""

from __future__ import annotations

import os
import subprocess
import sys
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
#: kernelspec a notebook names -> the test kernelspec it runs on here
#: (installed by conftest's jupyter_prefix fixture, with the test sshd).
TEST_KERNELS = {"shell-ssh-runbook": "shell-ssh-test"}
#: A value that breaks any quoting short of the real thing: quotes of both
#: kinds, $, backticks, command substitution, a glob, braces, a backslash.
TRICKY = """it's "quoted" $HOME `echo injected` $(echo injected) * {a,b} 100% \\"""


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


def kernel_name_for(path: Path, nb) -> str:
    name = nb.metadata.get("kernelspec", {}).get("name")
    if not name:
        pytest.fail(f"{path.name} names no kernelspec in its metadata (metadata.kernelspec.name)")
    return TEST_KERNELS.get(name, name)


def kernelspec_dir(path: Path, name: str) -> str:
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
    kernel_name = kernel_name_for(path, nb)
    spec_dir = kernelspec_dir(path, kernel_name)
    replies: dict = {}

    def on_cell_executed(cell, cell_index, execute_reply):
        replies[cell_index] = (execute_reply or {}).get("metadata", {}).get("shell_kernel")

    client = NotebookClient(nb, kernel_name=kernel_name, timeout=CELL_TIMEOUT,
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
def executed(tmp_path_factory, jupyter_prefix):
    """Runs each notebook once per module, on first use. jupyter_prefix: the
    test kernelspecs (and sshd) that TEST_KERNELS names."""
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
            assert errors[0].evalue.startswith(f"exit status {code}"), \
                f"{where}: {errors!r} vs {meta!r}"
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
    assert [(e.ename, e.evalue.split(" from ")[0]) for e in run.errors("failing")] == [
        ("ExitCode", f"exit status {code}")]


# ------------------------------------------------------- parameters.ipynb
PARAMETERS_NB = NOTEBOOK_DIR / "parameters.ipynb"
PARAMETERS = {"greeting": TRICKY, "name": "Ada Lovelace", "count": "2"}


def expected_injection(parameters: dict) -> str:
    """What papermill itself writes for bash (its BashTranslator)."""
    from papermill.translators import BashTranslator
    return BashTranslator.codify(parameters)


def parameters_output(nb) -> str:
    cell = next(c for c in nb.cells if c.get("id") == "use-parameters")
    return "".join(out.text for out in cell.outputs if out.output_type == "stream")


def check_injected(nb, parameters: dict) -> None:
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    at = tags.index(["parameters"])
    injected = nb.cells[at + 1]
    assert injected.metadata.tags == ["injected-parameters"], tags
    assert injected.source.rstrip("\n") == expected_injection(parameters).rstrip("\n")
    assert sum("injected-parameters" in t for t in tags) == 1, tags
    # The values reach bash verbatim: nothing expanded, split, globbed or run.
    assert parameters_output(nb) == "".join(
        f"{name}: [{parameters[name]}]\n" for name in ("greeting", "name", "count"))
    repeat = next(c for c in nb.cells if c.get("id") == "repeat")
    assert "".join(o.text for o in repeat.outputs if o.output_type == "stream") == "".join(
        f"{i}. {parameters['greeting']}, {parameters['name']}!\n"
        for i in range(1, int(parameters["count"]) + 1))


def check_cell_records(nb, host: str) -> None:
    """metadata.shell_kernel of every code cell in a saved notebook."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("shell_kernel")
        assert isinstance(meta, dict), f"cell {index} has no metadata.shell_kernel: {cell.metadata}"
        assert meta["exit_code"] == 0, (index, meta)
        assert isinstance(meta["duration_s"], float) and 0 <= meta["duration_s"] < 60, meta
        assert meta["host"] == host, meta
        assert isinstance(meta.get("cwd"), str), meta


def run_tool(argv: list, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                          timeout=180, cwd=tmp_path, env=env)


def parameter_args(parameters: dict) -> list:
    return [arg for name, value in parameters.items() for arg in ("-p", name, value)]


@pytest.mark.timeout(300)
def test_parameters_notebook_defaults(executed):
    run = executed(PARAMETERS_NB)
    assert run.stream("use-parameters", "stdout") == (
        "greeting: [Hello]\nname: [world]\ncount: [3]\n")
    assert run.stream("repeat", "stdout") == "".join(
        f"{i}. Hello, world!\n" for i in (1, 2, 3))
    index, card = run.cell("card")
    html = [out.data["text/html"] for out in card.outputs if out.output_type == "display_data"]
    assert html == ['<div style="border:1px solid #888;padding:8px;display:inline-block">'
                    "<b>Hello</b>, world!</div>"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kernel,host", [(None, "local"), ("shell-ssh-test", "testhost")],
                         ids=["local", "ssh"])
def test_parameters_through_the_run_command(kernel, host, jupyter_prefix, tmp_path):
    out = tmp_path / "greeting.ipynb"
    argv = ["shell_kernel", "run", str(PARAMETERS_NB), "-o", str(out),
            *parameter_args(PARAMETERS)] + (["--kernel", kernel] if kernel else [])
    result = run_tool(argv, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    nb = nbformat.read(out, as_version=4)
    check_injected(nb, PARAMETERS)
    check_cell_records(nb, host)
    # The card escapes the values for HTML.
    card = next(c for c in nb.cells if c.get("id") == "card")
    assert "&quot;quoted&quot;" in card.outputs[0].data["text/html"]
    assert nb.metadata.shell_kernel["parameters"] == PARAMETERS
    assert nb.metadata.kernelspec.name == (kernel or "shell")
    assert "OK: 5 code cells: 5 ok" in result.stdout, result.stdout
    assert f"({host})" in result.stdout
    # The stored notebook itself is left as it was.
    assert not any("injected-parameters" in c.metadata.get("tags", [])
                   for c in nbformat.read(PARAMETERS_NB, as_version=4).cells)


@pytest.mark.timeout(300)
def test_parameters_through_papermill_with_the_kernel(jupyter_prefix, tmp_path):
    """Plain papermill, -k shell: papermill's own engine and BashTranslator."""
    out = tmp_path / "papermill.ipynb"
    result = run_tool(["papermill", str(PARAMETERS_NB), str(out), "-k", "shell",
                       "--no-progress-bar", *parameter_args(PARAMETERS)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    nb = nbformat.read(out, as_version=4)
    # papermill reads "2" as the number 2; bash gets count=2 all the same.
    check_injected(nb, {**PARAMETERS, "count": 2})
    assert nb.metadata.papermill.parameters["greeting"] == TRICKY
    assert all(c.metadata.papermill.status == "completed" for c in nb.cells)


@pytest.mark.timeout(300)
def test_parameters_through_papermill_engine(jupyter_prefix, tmp_path):
    """papermill --engine shell_kernel records each cell's result, here over SSH."""
    out = tmp_path / "engine.ipynb"
    result = run_tool(["papermill", str(PARAMETERS_NB), str(out), "--engine", "shell_kernel",
                       "-k", "shell-ssh-test", "--no-progress-bar",
                       *parameter_args(PARAMETERS)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    nb = nbformat.read(out, as_version=4)
    check_injected(nb, {**PARAMETERS, "count": 2})
    check_cell_records(nb, "testhost")
    assert all(c.metadata.papermill.status == "completed" for c in nb.cells)


# --------------------------------------------------- remote_runbook.ipynb
@pytest.mark.timeout(300)
def test_remote_runbook_runs_on_the_remote_host(executed):
    run = executed(NOTEBOOK_DIR / "remote_runbook.ipynb")
    assert nbformat.read(run.path, as_version=4).metadata.kernelspec.name == "shell-ssh-runbook"
    where = run.stream("where", "stdout")
    assert "session: SSH from 127.0.0.1\n" in where, where
    host = where.split("host:", 1)[1].split("\n", 1)[0].strip()
    assert host

    uptime = run.stream("uptime", "stdout")
    assert uptime.startswith("up:      ") and "load:    " in uptime and "checked: " in uptime

    disk = run.stream("disk", "stdout").splitlines()
    assert disk[0].split() == ["MOUNT", "USED", "STATUS"]
    assert len(disk) >= 2 and all(line.split()[-1] in ("ok", "WARN") for line in disk[1:])

    config = run.stream("config", "stdout")
    assert config.startswith("# written by the host health runbook\n")
    assert f"host = {host}\n" in config and "warn_percent = 90\n" in config

    _, report = run.cell("report")
    svgs = [out.data["image/svg+xml"] for out in report.outputs
            if out.output_type == "display_data"]
    assert len(svgs) == 1 and svgs[0].startswith("<svg ") and svgs[0].rstrip().endswith("</svg>")
    assert f"Disk use on {host}" in svgs[0] and svgs[0].count("<rect ") == 2 * (len(disk) - 1)

    workdir = run.stream("cleanup", "stdout").removeprefix("removed ").strip()
    assert workdir and run.meta("cleanup")["exit_code"] == 0
