"""The JupyterLab extension (shell_kernel/lab) in a real JupyterLab and
headless Chromium: each cell's exit status in its footer, and in
cell.metadata.shell_kernel of the saved notebook, with the schema that
`python -m shell_kernel run` writes; nothing new for an ipykernel notebook.

The server, browser and helpers are test_jupyterlab.py's. The extension is
the one installed with the package (shared data of the wheel, also for an
editable install), as a user gets it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import nbformat
import pytest

from conftest import install_spec
from harness import descendants, pids_matching
from test_jupyterlab import (CELL_TIMEOUT_MS, LOAD_TIMEOUT_MS, LabServer, browser_page,  # noqa: F401
                             read_when_saved, wait_for)

SLEEP_MARK = "1001.7"  # argument of the sleep that gets interrupted; unique in /proc
SHELL_CELLS = [
    "cd /tmp && echo ok",
    "true\nls /nonexistent-lab-xyz",
    f"sleep {SLEEP_MARK}",
    "echo never-run",
]
SSH_SPEC = "shell-ssh-lab"
STATUS = ".jp-ShellKernelStatus"
RUN_KEYS = {"exit_code", "duration_s", "cwd", "host"}  # what `run` always writes
OPTIONAL_KEYS = {"interrupted", "shell_restarted", "output_file", "command", "line"}
DURATION = r"(\d+\.\d\d? s|\d+ s|\d+ min \d\d s|\d+ h \d\d min)"  # as the status shows it


def write_notebook(path, kernel: str, display: str, language: str, cells: list[str]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": display, "language": language}
    nb.cells = [nbformat.v4.new_code_cell(code) for code in cells]
    nbformat.write(nb, str(path))


@pytest.fixture
def lab(tmp_path, sshd):
    root = tmp_path / "root"
    root.mkdir()
    write_notebook(root / "shell.ipynb", "shell", "Bash (shell_kernel)", "bash", SHELL_CELLS)
    write_notebook(root / "ssh.ipynb", SSH_SPEC, "Bash on testhost", "bash", ["hostname"])
    write_notebook(root / "python.ipynb", "python3", "Python 3", "python",
                   ["print('from python')", "1/0"])
    server = LabServer(root, tmp_path, "shell.ipynb")
    install_spec(tmp_path / "prefix", SSH_SPEC,
                 ["--ssh", "testhost", "--ssh-config", str(sshd.ssh_config),
                  "--display-name", "Bash on testhost"])
    try:
        server.start()
        yield server
    finally:
        server.stop()


class Notebook:
    """The notebook shown in the page, driven as a person would."""

    def __init__(self, page, lab: LabServer, name: str, kernel_label: str):
        self.page, self.lab, self.name = page, lab, name
        # ?reset: a fresh workspace, so that only this notebook is open.
        page.goto(f"{lab.base}/lab/tree/{name}?reset&token={lab.token}", timeout=LOAD_TIMEOUT_MS)
        self.panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").first
        self.cells = self.panel.locator(".jp-Notebook .jp-Cell")
        self.cells.first.wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
        page.locator(".jp-KernelName", has_text=kernel_label).first.wait_for(
            timeout=LOAD_TIMEOUT_MS)
        # The status bar's indicator: the kernel is up and idle.
        page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first.wait_for(
            timeout=LOAD_TIMEOUT_MS)
        lab.remember_processes()

    def run(self, i: int) -> None:
        self.cells.nth(i).locator(".jp-InputArea-editor").click()
        self.page.keyboard.press("Control+Enter")

    def wait_done(self, i: int) -> None:
        from playwright.sync_api import expect
        expect(self.cells.nth(i).locator(".jp-InputArea-prompt")).to_have_text(
            re.compile(r"^\s*\[\d+\]:\s*$"), timeout=CELL_TIMEOUT_MS)

    def status(self, i: int):
        return self.cells.nth(i).locator(STATUS)

    def wait_status(self, i: int, kind: str, text: str) -> dict:
        """The status line of cell i once it has this kind and its text matches."""
        node = self.status(i)

        def shown():
            if node.count() != 1 or node.get_attribute("data-kind") != kind:
                return None
            seen = node.inner_text()
            return seen if re.fullmatch(text, seen) else None

        shown_text = wait_for(shown, CELL_TIMEOUT_MS / 1000,
                              f"cell {i} to show a {kind!r} status matching {text!r} "
                              f"(shows {node.all_inner_texts()})")
        return {"text": shown_text, "title": node.get_attribute("title")}

    def save(self, done) -> nbformat.NotebookNode:
        """Save with Ctrl+S; the notebook read from disk once done(nb) holds."""
        self.page.keyboard.press("Escape")
        self.page.keyboard.press("Control+s")
        nb = read_when_saved(self.lab.root / self.name, done)
        # The file is written before the page hears that the save is done.
        wait_for(lambda: not self.dirty(), 10, f"{self.name}'s tab to show it saved")
        return nb

    def dirty(self) -> bool:
        return self.page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count() > 0


def check_record(record: dict, **expected) -> None:
    """A saved cell.metadata.shell_kernel, field by field."""
    assert RUN_KEYS <= set(record) <= RUN_KEYS | OPTIONAL_KEYS, record
    assert isinstance(record["duration_s"], float) and record["duration_s"] >= 0, record
    for key, value in expected.items():
        assert record.get(key) == value, (key, record)


def records(nb) -> list:
    return [cell.metadata.get("shell_kernel") for cell in nb.cells]


def test_reply_metadata_names_the_host(start_kernel, ssh_kernel, sshd):
    """What the extension stores as host comes with every execute_reply."""
    local = start_kernel()
    assert local.run("true").meta["host"] == "local"
    failed = local.run("exit 3")
    assert failed.exit_code == 3 and failed.meta["host"] == "local"
    remote = ssh_kernel(sshd.ssh_config)
    assert remote.run("false").meta["host"] == "testhost"


@pytest.mark.timeout(300)  # four page loads of a cold JupyterLab on a busy 2-core machine
def test_status_shown_and_saved(lab, browser_page, tmp_path):
    page = browser_page
    t0 = time.monotonic()
    shell = Notebook(page, lab, "shell.ipynb", "Bash (shell_kernel)")
    # (Not yet clean: JupyterLab adds the kernel's language_info to a new notebook.)
    assert shell.status(0).count() == 0

    # 1. Success: quiet, with the duration.
    shell.run(0)
    shell.wait_done(0)
    ok = shell.wait_status(0, "ok", r"0 · " + DURATION)
    assert "cwd: /tmp" in ok["title"] and "host: local" in ok["title"], ok

    # 2. Failure: marked, exit status and (when the kernel names it) the command on hover.
    shell.run(1)
    shell.wait_done(1)
    failed = shell.wait_status(1, "failed", r"exit 2 · " + DURATION)
    assert "Exit status 2" in failed["title"], failed

    # 3. A running cell counts its time, then is interrupted.
    def our_sleeps() -> list[int]:
        mine = descendants(lab.proc.pid)
        return [pid for pid in pids_matching(SLEEP_MARK) if pid in mine]

    shell.run(2)
    wait_for(our_sleeps, 20, f"`sleep {SLEEP_MARK}` to start")
    lab.remember_processes()
    first = shell.wait_status(2, "running", r"running · \d.*")["text"]
    shell.wait_status(2, "running", r"running · (?!" + re.escape(first[len("running · "):]) + r"$).*")
    shell.panel.locator('[data-command="notebook:interrupt-kernel"]').first.click()
    shell.wait_done(2)
    shell.wait_status(2, "interrupted", r"interrupted \(exit 130\) · " + DURATION)
    wait_for(lambda: not our_sleeps(), 10, f"`sleep {SLEEP_MARK}` to end")
    assert shell.status(3).count() == 0  # never run: nothing shown

    # 4. Saved: every run cell has its record, the other none.
    nb = shell.save(lambda nb: all(records(nb)[:3]))
    rec = records(nb)
    check_record(rec[0], exit_code=0, cwd="/tmp", host="local")
    check_record(rec[1], exit_code=2, cwd="/tmp", host="local")
    check_record(rec[2], exit_code=130, cwd="/tmp", host="local", interrupted=True)
    assert "interrupted" not in rec[0] and "interrupted" not in rec[1]
    assert rec[3] is None
    # The kernel names the command that set the status: shown on hover.
    check_record(rec[1], command="ls /nonexistent-lab-xyz", line=2)
    assert "set by: ls /nonexistent-lab-xyz (line 2)" in failed["title"], failed

    # 5. Clearing a cell's outputs clears its status, in the page and the file.
    shell.cells.nth(0).locator(".jp-InputArea-prompt").click(button="right")
    page.locator('.lm-Menu-item[data-command="notebook:clear-cell-output"]').first.click()
    wait_for(lambda: shell.status(0).count() == 0, 10, "cell 0's status to go")
    assert shell.dirty()
    nb = shell.save(lambda nb: records(nb)[0] is None)
    assert records(nb)[1] == rec[1] and records(nb)[2] == rec[2]

    # 6. Reopened: the statuses come from the saved metadata, and showing
    # them changes nothing.
    shell = Notebook(page, lab, "shell.ipynb", "Bash (shell_kernel)")
    shell.wait_status(1, "failed", r"exit 2 · .*")
    shell.wait_status(2, "interrupted", r"interrupted \(exit 130\) · .*")
    assert shell.status(0).count() == 0
    assert not shell.dirty()
    shot = tmp_path / "lab-extension.png"
    page.screenshot(path=str(shot))

    # 7. An SSH kernel: the host is shown and saved.
    ssh = Notebook(page, lab, "ssh.ipynb", "Bash on testhost")
    ssh.run(0)
    ssh.wait_done(0)
    ssh.wait_status(0, "ok", r"0 · " + DURATION + " · testhost")
    nb = ssh.save(lambda nb: records(nb)[0] is not None)
    check_record(records(nb)[0], exit_code=0, host="testhost")

    # 8. A Python notebook in the same session: nothing new, nothing saved.
    py = Notebook(page, lab, "python.ipynb", "Python 3")
    for i in (0, 1):
        py.run(i)
        py.wait_done(i)
    py.cells.nth(1).locator(".jp-OutputArea-output", has_text="ZeroDivisionError").first.wait_for()
    assert page.locator(STATUS).count() == 0
    nb = py.save(lambda nb: all(cell.outputs for cell in nb.cells))
    assert records(nb) == [None, None]
    assert all(set(cell.metadata) <= {"execution", "trusted", "collapsed", "scrolled"}
               for cell in nb.cells), [cell.metadata for cell in nb.cells]

    print(f"\nscreenshot: {shot}\nbrowser part: {time.monotonic() - t0:.1f} s")

    # 9. `run` writes the same fields for the same cells.
    write_notebook(tmp_path / "again.ipynb", "shell", "Bash (shell_kernel)", "bash",
                   SHELL_CELLS[:2])
    env = dict(os.environ, JUPYTER_PATH=str(tmp_path / "prefix" / "share" / "jupyter"))
    result = subprocess.run([sys.executable, "-m", "shell_kernel", "run", "--allow-errors",
                             str(tmp_path / "again.ipynb"), "-o", str(tmp_path / "again.out.ipynb")],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 1), result.stderr
    by_run = records(nbformat.read(str(tmp_path / "again.out.ipynb"), as_version=4))
    assert [set(r) for r in by_run] == [set(r) for r in rec[:2]], (by_run, rec[:2])
