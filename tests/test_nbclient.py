"""nbclient and papermill as libraries, on both backends: each execute_reply's
``shell_kernel`` metadata reaches nbclient's on_cell_executed hook, and the
papermill engine ("shell_kernel") turns it into cell.metadata.shell_kernel,
failing cells included."""

from __future__ import annotations

import os

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

SPECS = {"local": ("shell-test", "local"), "ssh": ("shell-ssh-test", "testhost")}


def make_notebook(kernel_name: str):
    nb = new_notebook(metadata={"kernelspec": {"name": kernel_name, "display_name": kernel_name,
                                               "language": "bash"}})
    nb.cells = [
        new_code_cell("cd /tmp && answer=42"),
        new_markdown_cell("not executed"),
        new_code_cell('echo "answer: $answer"; (exit 3)', metadata={"tags": ["raises-exception"]}),
        new_code_cell('echo "status before: $?"; sleep 0.3'),
    ]
    for index, cell in enumerate(nb.cells):
        cell.id = f"c{index}"
    return nb


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", list(SPECS))
def test_reply_metadata_reaches_on_cell_executed(backend, jupyter_prefix, tmp_path):
    kernel_name, _ = SPECS[backend]
    nb = make_notebook(kernel_name)
    seen: dict = {}
    started: list = []

    def on_cell_execute(cell, cell_index):
        started.append(cell_index)

    def on_cell_executed(cell, cell_index, execute_reply):
        assert execute_reply["msg_type"] == "execute_reply"
        seen[cell_index] = (execute_reply["content"]["status"],
                            execute_reply["metadata"]["shell_kernel"])

    client = NotebookClient(nb, kernel_name=kernel_name, timeout=60, startup_timeout=60,
                            resources={"metadata": {"path": str(tmp_path)}},
                            on_cell_execute=on_cell_execute, on_cell_executed=on_cell_executed)
    client.execute(env={**os.environ, "TMPDIR": str(tmp_path)})

    assert started == [0, 2, 3] and sorted(seen) == [0, 2, 3]
    statuses = [seen[i][0] for i in (0, 2, 3)]
    metas = [seen[i][1] for i in (0, 2, 3)]
    assert statuses == ["ok", "error", "ok"]
    assert [m["exit_code"] for m in metas] == [0, 3, 0]
    assert all(m["cwd"] == "/tmp" for m in metas), metas
    assert all(isinstance(m["duration_s"], float) for m in metas), metas
    assert metas[2]["duration_s"] >= 0.3
    # The hook saw the same cell outputs nbclient saves.
    assert [(o.ename, o.evalue) for o in nb.cells[2].outputs if o.output_type == "error"] == \
        [("ExitCode", "exit status 3 from 'echo \"answer: $answer\"; (exit 3)' (line 1)")]
    assert nb.cells[3].outputs[0].text == "status before: 3\n"


@pytest.mark.timeout(120)
def test_papermill_engine_records_cells_and_failures(jupyter_prefix, tmp_path):
    import papermill
    from papermill.exceptions import PapermillExecutionError

    src, out = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nb = make_notebook("shell-test")
    nb.cells[2].metadata.tags = []  # now an unexpected failure: papermill stops there
    nb.cells[3].metadata["shell_kernel"] = {"exit_code": 0, "stale": True}  # from an old run
    nbformat.write(nb, src)
    seen = []
    with pytest.raises(PapermillExecutionError) as failure:
        papermill.execute_notebook(
            str(src), str(out), engine_name="shell_kernel", progress_bar=False, cwd=str(tmp_path),
            # a hook of the caller's own still runs
            on_cell_executed=lambda cell, cell_index, execute_reply: seen.append(cell_index))
    assert failure.value.evalue == "exit status 3 from 'echo \"answer: $answer\"; (exit 3)' (line 1)"
    assert seen == [0, 2]
    result = nbformat.read(out, as_version=4)
    # papermill adds cells about the error: look ours up by id.
    cells = {c.id: c for c in result.cells}
    records = [cells[f"c{i}"].metadata.get("shell_kernel") for i in range(4)]
    assert records[1] is None and records[3] is None  # markdown; not run (stale record gone)
    assert [records[0]["exit_code"], records[2]["exit_code"]] == [0, 3]
    assert records[0]["host"] == records[2]["host"] == "local"
    assert records[0]["cwd"] == "/tmp"
    assert cells["c2"].metadata.papermill.status == "failed"
