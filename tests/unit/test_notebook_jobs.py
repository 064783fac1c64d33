"""The notebook-job layer that `run` and `run --hosts` share (jobs.py,
notebook_job.py): its pure logic (the import graph and module sizes of the
whole package: tests/unit/test_structure.py). No kernel, shell or host."""

from __future__ import annotations

import io
import json
from pathlib import Path

import nbformat

from shell_kernel.jobs import FAILED, NOT_RUN, OK, CellRun
from shell_kernel.notebook_job import (INJECTED_TAG, SKIP_TAG, cell_label, job_cells,
                                       output_stem, prepare, print_columns, read_notebook,
                                       runnable_cells, tally)

# ---------------------------------------------------------- notebook steps
def _notebook(*sources, tags=None):
    """Code cells of these sources, with a markdown cell second; tags by final index."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("# notes"))
    for index, cell_tags in (tags or {}).items():
        nb.cells[index].metadata["tags"] = cell_tags
    return nb


def test_runnable_cells_leave_out_empty_and_skipped_cells():
    nb = _notebook("echo a", "  \n", "echo b", "echo c", tags={4: [SKIP_TAG]})
    assert runnable_cells(nb) == [0, 3]


def test_job_cells_are_numbered_among_the_cells_given():
    nb = _notebook("echo a", "echo b", "echo c", tags={3: ["x"]})
    cells = job_cells(nb, [0, 3])
    assert [(c.index, c.number, c.label, c.tags, c.state) for c in cells] == \
        [(0, 1, "echo a", [], NOT_RUN), (3, 2, "echo c", ["x"], NOT_RUN)]


def test_cell_label_is_the_first_line_shortened():
    nb = _notebook("\n\n  first line  \nsecond", "x" * 60)
    assert cell_label(nb.cells[0]) == "first line"
    assert cell_label(nb.cells[2]) == "x" * 41 + "..."
    nb.cells[0].metadata["tags"] = [INJECTED_TAG]
    assert cell_label(nb.cells[0]) == "(injected parameters)"


def test_prepare_injects_and_clears_earlier_results():
    nb = _notebook("x=1", "echo $x", tags={0: ["parameters"]})
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nb.cells[2].execution_count = 4
    nb.cells[2].metadata["shell_kernel"] = {"exit_code": 0}
    warnings = prepare(nb, {"x": "it's"})
    assert warnings == []
    assert nb.cells[1].source == "# Parameters\nx='it'\"'\"'s'\n"
    assert nb.cells[1].metadata["tags"] == [INJECTED_TAG]
    assert (nb.cells[3].outputs, nb.cells[3].execution_count) == ([], None)
    assert "shell_kernel" not in nb.cells[3].metadata
    assert prepare(_notebook("echo"), {"y": "1"})[0].startswith("the notebook has no cell tagged")


def test_output_stem():
    assert output_stem(Path("dir/report.ipynb")) == "report"
    assert output_stem(Path("report.json")) == "report.json"


def test_print_columns_pads_every_column_but_the_last():
    out = io.StringIO()
    print_columns(out, [("#", "cell", "result"), ("10", "echo", "ok"), ("2", "ls -l", "")], "rl")
    assert out.getvalue() == "\n" " #  cell   result\n" "10  echo   ok\n" " 2  ls -l\n"


def test_tally_counts_in_the_order_given():
    assert tally([OK, FAILED, OK, "other"], [FAILED, OK]) == "1 failed, 2 ok"
    assert tally([], [OK]) == ""


def test_a_cell_run_takes_its_exit_code_and_duration_from_its_record():
    cell = CellRun(index=3, number=2, label="false")
    assert (cell.exit_code, cell.duration_s) == (None, None)
    cell.record({"exit_code": 1, "duration_s": 0.25, "cwd": "/tmp", "host": "web1"})
    assert (cell.exit_code, cell.duration_s) == (1, 0.25)
    assert [CellRun(0, 1, "", state=state).counts_as_failure for state in
            ("ok", "failed", "failed as expected", "skipped", "not run", "timed out",
             "kernel died", "interrupted", "stopped")] == \
        [False, True, False, False, False, True, True, True, True]




def test_a_fleet_run_sets_the_interpreter_for_many_threads_and_puts_it_back():
    import gc
    import sys

    from shell_kernel.fleet import FLEET_SWITCH_INTERVAL_S, threads_mostly_waiting
    before = sys.getswitchinterval()
    assert abs(before - FLEET_SWITCH_INTERVAL_S) > 1e-3
    try:
        with threads_mostly_waiting():
            assert abs(sys.getswitchinterval() - FLEET_SWITCH_INTERVAL_S) < 1e-6
            assert gc.get_freeze_count() > 0
            raise RuntimeError("a run that fails")
    except RuntimeError:
        pass
    assert sys.getswitchinterval() == before
    assert gc.get_freeze_count() == 0


# ------------------------------------------------------------ reading
def test_reading_a_notebook_the_schema_rejects_warns(tmp_path):
    path = tmp_path / "nb.ipynb"
    nbformat.write(_notebook("echo a"), path)
    assert read_notebook(path)[1] == []
    data = json.loads(path.read_text())
    data["cells"][0]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": 5}]
    path.write_text(json.dumps(data))
    nb, warnings = read_notebook(path)
    assert nb.cells[0].source == "echo a"
    assert warnings == [f"{path} does not follow the notebook format at cells/0/outputs/0/text: "
                        "5 is not valid under any of the given schemas; it runs as read (a cell "
                        "of an unknown type does not run)"]
    data["cells"][0] = {"cell_type": "kode", "id": "k", "metadata": {}, "source": "x" * 300}
    path.write_text(json.dumps(data))
    (warning,) = read_notebook(path)[1]
    assert "at cells/0: {" in warning and "...; it runs as read" in warning and len(warning) < 400
