"""End to end in a real JupyterLab: a notebook on the "shell" kernel, driven
by headless Chromium (Debian's package) through Playwright.

The server is a subprocess on 127.0.0.1 with a token and a temporary root;
the kernelspec is installed from this checkout into a private prefix that
comes first on JUPYTER_PATH. Nothing here is skipped: a missing browser or
driver is a failure with a message saying what to install.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from harness import descendants, pids_matching

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SLEEP_MARK = "1000.9"  # argument of the sleep that gets interrupted; unique in /proc

FAILED = "exit status 2 from 'ls /nonexistent-path-xyz' (line 1)"
CELLS = [
    "echo hello-from-lab; pwd",
    "ls /nonexistent-path-xyz",
    f"sleep {SLEEP_MARK}",
    "echo after-interrupt-$((6 * 7))",
    "read -p 'Your name: ' name; echo \"hi $name\"",
    "read -s -p 'Secret: ' secret; echo \"secret length ${#secret}\"",
    "read -t 3 -p 'unanswered: ' v; echo \"read status $?\"",
]
LAB_SECRET = "lab-Secret-123"

# Generous: a cold JupyterLab on a 2-core machine can take a while to load.
LOAD_TIMEOUT_MS = 60_000
CELL_TIMEOUT_MS = 30_000


# ------------------------------------------------------------------ helpers
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_chromium() -> str:
    for candidate in CHROMIUM_CANDIDATES:
        path = shutil.which(candidate)
        if path:
            return path
    pytest.fail("Chromium not found: install Debian's browser with "
                "`apt-get install -y chromium` (.ci/run does this)", pytrace=False)


def read_when_saved(path: Path, done) -> nbformat.NotebookNode:
    """The notebook at path, read once it is whole and done(nb) holds."""
    def saved():
        try:
            nb = nbformat.read(str(path), as_version=4)
        except (OSError, ValueError):  # caught mid-write
            return None
        return nb if done(nb) else None

    return wait_for(saved, 20, f"{path.name} to be saved")


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    """predicate's first truthy value, or an AssertionError naming what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def start_time(pid: int) -> int | None:
    """The start time of a live (non-zombie) process, which tells it from a later one
    that reuses its pid; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


# ----------------------------------------------------------------- fixtures
class ServerExited(AssertionError):
    pass


class LabServer:
    def __init__(self, root: Path, workdir: Path, notebook: str, app: str = "jupyterlab"):
        self.app = app  # the server's module: jupyterlab, or notebook (Jupyter Notebook 7)
        self.root = root
        self.notebook = notebook
        self.workdir = workdir
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "jupyterlab.log"
        self.proc: subprocess.Popen | None = None
        self.known_processes: dict[int, int] = {}  # pid -> start time

    def env(self) -> dict:
        prefix = self.workdir / "prefix"
        # This checkout's kernelspec as "shell", ahead of whatever else is installed.
        subprocess.run([sys.executable, "-m", "shell_kernel", "install", "--prefix", str(prefix)],
                       check=True, capture_output=True, text=True)
        spec = prefix / "share" / "jupyter" / "kernels" / "shell" / "kernel.json"
        assert spec.is_file(), f"`shell_kernel install --prefix` wrote no {spec}"
        settings = self.workdir / "lab-settings"
        # No news/update toasts over the notebook.
        notif = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
        notif.parent.mkdir(parents=True)
        notif.write_text(json.dumps({"checkForUpdates": False, "fetchNews": "false"}))
        # Every cell in the DOM, whatever scrolls out of view.
        tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
        tracker.parent.mkdir(parents=True)
        tracker.write_text(json.dumps({"windowingMode": "none"}))
        env = dict(os.environ)
        old = env.get("JUPYTER_PATH")
        env.update({
            "JUPYTER_PATH": str(prefix / "share" / "jupyter") + (os.pathsep + old if old else ""),
            "JUPYTER_CONFIG_DIR": str(self.workdir / "config"),
            "JUPYTER_DATA_DIR": str(self.workdir / "data"),
            "JUPYTER_RUNTIME_DIR": str(self.workdir / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(self.workdir / "workspaces"),
        })
        return env

    def start(self) -> None:
        env = self.env()
        for attempt in range(3):
            if attempt:  # the free port was taken before the server bound it
                self.port = free_port()
                self.base = f"http://127.0.0.1:{self.port}"
            cmd = [
                sys.executable, "-m", self.app,
                "--no-browser",
                "--allow-root",  # CI runs as root
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.root}",
                "--ServerApp.terminals_enabled=False",
                "--ServerApp.open_browser=False",
                "--LabApp.news_url=None",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.extension_manager=readonly",
            ]
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(cmd, env=env, cwd=str(self.root), stdout=log,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             start_new_session=True)
            try:
                wait_for(self._ready, 60,
                         f"JupyterLab to answer on {self.base} (log: {self.log_path})",
                         interval=0.25)
                return
            except ServerExited:
                if f"port {self.port} is not available" not in self.log() or attempt == 2:
                    raise

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise ServerExited(f"JupyterLab exited with {self.proc.returncode}:\n{self.log()}")
        try:
            with urllib.request.urlopen(self.api_request("/api/status"), timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def api_request(self, path: str, method: str = "GET") -> urllib.request.Request:
        return urllib.request.Request(self.base + path, method=method,
                                      headers={"Authorization": f"token {self.token}"})

    def api(self, path: str, method: str = "GET"):
        with urllib.request.urlopen(self.api_request(path, method), timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def remember_processes(self) -> None:
        """Note the server's descendants (kernels, their shells): killed at the end if left."""
        if self.proc and self.proc.poll() is None:
            for pid in descendants(self.proc.pid):
                started = start_time(pid)
                if started is not None:
                    self.known_processes.setdefault(pid, started)

    def leftovers(self) -> list[int]:
        return [pid for pid, started in self.known_processes.items()
                if start_time(pid) == started]

    def stop(self) -> None:
        if self.proc is None:
            return
        self.remember_processes()
        if self.proc.poll() is None:
            try:
                for kernel in self.api("/api/kernels"):
                    self.api(f"/api/kernels/{kernel['id']}", method="DELETE")
            except OSError:
                pass
            try:
                self.api("/api/shutdown", method="POST")
            except OSError:
                pass
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
        # Kernels run in sessions of their own: whatever of ours is left is killed.
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_for(lambda: not self.leftovers(), 10, "the server's processes to end")


@pytest.fixture
def lab(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "shell", "display_name": "Bash (shell_kernel)",
                                 "language": "bash"}
    nb.cells = [nbformat.v4.new_code_cell(code) for code in CELLS]
    nbformat.write(nb, str(root / "shell.ipynb"))
    server = LabServer(root, tmp_path, "shell.ipynb")
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def browser_page(tmp_path):
    chromium = find_chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the Python package `playwright` is missing: "
                    "pip install -e '.[test]' (its wheel bundles the driver; "
                    "the browser is Debian's chromium)", pytrace=False)
    profile = tmp_path / "chromium-profile"  # a fresh --user-data-dir
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=chromium, headless=True,
            args=[flag for flag in CHROMIUM_FLAGS if flag != "--headless"],
            viewport={"width": 1280, "height": 900})
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(CELL_TIMEOUT_MS)
            yield page
        finally:
            context.close()


# --------------------------------------------------------------------- test
def test_notebook_in_jupyterlab(lab, browser_page, tmp_path):
    from playwright.sync_api import expect

    page = browser_page
    t0 = time.monotonic()
    page.goto(f"{lab.base}/lab/tree/{lab.notebook}?token={lab.token}",
              timeout=LOAD_TIMEOUT_MS)

    panel = page.locator(".jp-NotebookPanel").filter(has=page.locator(".jp-Notebook"))
    panel.first.wait_for(state="visible", timeout=LOAD_TIMEOUT_MS)
    notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").first
    cells = notebook.locator(".jp-Cell")
    cells.nth(len(CELLS) - 1).wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    assert cells.count() == len(CELLS)

    # The kernel is ours and idle.
    page.locator(".jp-KernelName", has_text="Bash (shell_kernel)").first.wait_for(
        timeout=LOAD_TIMEOUT_MS)
    idle = page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first
    idle.wait_for(timeout=LOAD_TIMEOUT_MS)
    lab.remember_processes()
    assert len(lab.api("/api/kernels")) == 1

    def run_cell(i: int) -> None:
        cell = cells.nth(i)
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+Enter")  # run, stay on this cell

    def wait_done(i: int) -> None:
        # "[*]:" while queued or running, "[n]:" when done.
        expect(cells.nth(i).locator(".jp-InputArea-prompt")).to_have_text(
            re.compile(r"^\s*\[\d+\]:\s*$"), timeout=CELL_TIMEOUT_MS)

    def outputs(i: int):
        return cells.nth(i).locator(".jp-OutputArea-output")

    # 1. Output of a plain cell, with the notebook's directory as cwd.
    run_cell(0)
    wait_done(0)
    out0 = outputs(0)
    out0.filter(has_text="hello-from-lab").first.wait_for()
    text0 = out0.all_inner_texts()
    assert "hello-from-lab" in "".join(text0)
    assert str(lab.root.resolve()) in "".join(text0), text0

    # 2. A failing command: its stderr, then an error output naming the exit status,
    # the command and its line.
    run_cell(1)
    wait_done(1)
    err1 = outputs(1).filter(has_text="exit status 2 from 'ls /nonexistent-path-xyz' (line 1)")
    err1.first.wait_for()
    assert err1.first.get_attribute("data-mime-type") == "application/vnd.jupyter.stderr"
    assert "No such file or directory" in "".join(outputs(1).all_inner_texts())

    # 3. Interrupt a running sleep from the toolbar.
    def our_sleeps() -> list[int]:
        # Only this server's: another run of this test may be sleeping too.
        mine = descendants(lab.proc.pid)
        return [pid for pid in pids_matching(SLEEP_MARK) if pid in mine]

    run_cell(2)
    wait_for(our_sleeps, 20, f"`sleep {SLEEP_MARK}` to start")
    lab.remember_processes()
    busy = page.locator('.jp-Notebook-ExecutionIndicator[data-status="busy"]').first
    busy.wait_for()
    interrupted_at = time.monotonic()
    page.locator('.jp-NotebookPanel-toolbar [data-command="notebook:interrupt-kernel"]').first.click()
    wait_done(2)
    interrupt_s = time.monotonic() - interrupted_at
    # JupyterLab renders an error output as its traceback alone, so the page says
    # "Interrupted (exit status 130)"; the ename KeyboardInterrupt is checked in
    # the saved notebook below.
    err2 = outputs(2).filter(has_text="Interrupted (exit status 130)")
    err2.first.wait_for()
    assert err2.first.get_attribute("data-mime-type") == "application/vnd.jupyter.stderr"
    wait_for(lambda: not our_sleeps(), 10, f"`sleep {SLEEP_MARK}` to end")
    idle.wait_for()

    # 4. The same kernel goes on working.
    run_cell(3)
    wait_done(3)
    outputs(3).filter(has_text="after-interrupt-42").first.wait_for()
    assert len(lab.api("/api/kernels")) == 1

    # 5. A prompt is answered in JupyterLab's input box, with the prompt's text.
    def answer(i: int, text: str) -> None:
        box = cells.nth(i).locator(".jp-Stdin-input")
        box.wait_for()
        box.fill(text)
        box.press("Enter")

    run_cell(4)
    expect(cells.nth(4).locator(".jp-Stdin-prompt")).to_have_text(re.compile(r"^Your name:\s*$"))
    answer(4, "Lab User")
    wait_done(4)
    outputs(4).filter(has_text="hi Lab User").first.wait_for()
    # A hidden read gets a password box; the secret shows nowhere.
    run_cell(5)
    expect(cells.nth(5).locator(".jp-Stdin-input")).to_have_attribute("type", "password")
    answer(5, LAB_SECRET)
    wait_done(5)
    outputs(5).filter(has_text=f"secret length {len(LAB_SECRET)}").first.wait_for()
    assert LAB_SECRET not in page.content()
    # A question the kernel gives up on (the read timed out) leaves no input box.
    run_cell(6)
    cells.nth(6).locator(".jp-Stdin-input").wait_for()
    wait_done(6)
    outputs(6).filter(has_text="read status 142").first.wait_for()
    expect(cells.nth(6).locator(".jp-Stdin")).to_have_count(0)

    # The saved notebook has the error outputs as the kernel sent them.
    page.locator('.jp-NotebookPanel-toolbar [data-command="docmanager:save"]').first.click()
    saved_path = lab.root / lab.notebook

    def saved_outputs():
        try:
            nb = nbformat.read(str(saved_path), as_version=4)
        except (OSError, ValueError):  # caught mid-write
            return None
        outs = [cell.get("outputs", []) for cell in nb.cells]
        return outs if all(outs) else None

    saved = wait_for(saved_outputs, 20, "the notebook to be saved with its outputs")
    errors = {i: [o for o in outs if o["output_type"] == "error"] for i, outs in enumerate(saved)}
    assert errors[0] == [] and errors[3] == [] and errors[4] == [] and errors[5] == []
    assert errors[6] == []
    # The prompt's text is in the answered input (JupyterLab keeps it as a "stdin"
    # stream), not in the cell's output too; the secret is nowhere in the file.
    texts4 = [(o["name"], o["text"]) for o in saved[4] if o["output_type"] == "stream"]
    assert [name for name, text in texts4 if "Your name:" in text] == ["stdin"], texts4
    assert LAB_SECRET not in saved_path.read_text()
    assert [(e["ename"], e["evalue"], e["traceback"]) for e in errors[1]] == \
        [("ExitCode", FAILED, [f"ExitCode: {FAILED}"])]
    assert [(e["ename"], e["evalue"], e["traceback"]) for e in errors[2]] == \
        [("KeyboardInterrupt", "130", ["KeyboardInterrupt: Interrupted (exit status 130)"])]

    shot = tmp_path / "jupyterlab.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    print(f"\nscreenshot: {shot}\nbrowser part: {time.monotonic() - t0:.1f} s, "
          f"interrupt took {interrupt_s:.2f} s")


def test_colours_under_tty_in_jupyterlab(lab, browser_page):
    """--tty: `ls --color=auto` colours, and JupyterLab renders the colours."""
    from playwright.sync_api import expect

    subprocess.run([sys.executable, "-m", "shell_kernel", "install", "--prefix",
                    str(lab.workdir / "prefix"), "--name", "shell-tty", "--tty",
                    "--display-name", "Bash (shell_kernel, tty)"],
                   check=True, capture_output=True, text=True)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "shell-tty", "display_name": "Bash (shell_kernel, tty)",
                                 "language": "bash"}
    nb.cells = [nbformat.v4.new_code_cell("mkdir -p coloured-dir && ls --color=auto -d coloured-dir"),
                nbformat.v4.new_code_cell("ls /nonexistent-tty-path")]
    nbformat.write(nb, str(lab.root / "tty.ipynb"))
    page = browser_page
    page.goto(f"{lab.base}/lab/tree/tty.ipynb?token={lab.token}", timeout=LOAD_TIMEOUT_MS)
    notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").first
    cells = notebook.locator(".jp-Cell")
    cells.nth(1).wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    # The tty kernel, installed after the server started, is this notebook's
    # and idle (not another panel's indicator, nor a kernel still starting).
    page.locator(".jp-KernelName", has_text="Bash (shell_kernel, tty)").first.wait_for(
        timeout=LOAD_TIMEOUT_MS)
    page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) '
                 '.jp-Notebook-ExecutionIndicator[data-status="idle"]').first.wait_for(
        timeout=LOAD_TIMEOUT_MS)
    for i in range(2):
        cells.nth(i).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+Enter")
        expect(cells.nth(i).locator(".jp-InputArea-prompt")).to_have_text(
            re.compile(r"^\s*\[\d+\]:\s*$"), timeout=CELL_TIMEOUT_MS)
    output = cells.nth(0).locator(".jp-OutputArea-output")
    output.filter(has_text="coloured-dir").first.wait_for()
    # JupyterLab turns the ANSI colour codes into classed spans.
    coloured = output.locator("span[class*='ansi-']", has_text="coloured-dir")
    expect(coloured).to_have_count(1)
    failed = cells.nth(1).locator(".jp-OutputArea-output").filter(
        has_text="exit status 2 from 'ls /nonexistent-tty-path' (line 1)")
    failed.first.wait_for()
    lab.remember_processes()


# ------------------------------------------- prompts given up on, Run All, Clear
FLOW_CELLS = [
    "read -t 2 -p 'quick? ' q; echo \"status=$?\"",
    "timeout 2 head -n1; echo \"head=$?\"",
    "echo after-$((2 + 3))",
    "false",
    "echo never-reached",
    "echo legacy",  # saved by an earlier version with a record of a run that never was
    "read -p 'Name: ' n; echo \"hi $n\"",
]
LEGACY = 5
LEGACY_RECORD = {"exit_code": None}


def write_flow_notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "shell", "display_name": "Bash (shell_kernel)",
                                 "language": "bash"}
    nb.cells = [nbformat.v4.new_code_cell(code) for code in FLOW_CELLS]
    nb.cells[LEGACY].metadata["shell_kernel"] = dict(LEGACY_RECORD)
    nbformat.write(nb, str(path))


class Page:
    """One notebook in the page of a JupyterLab or Jupyter Notebook 7 server."""

    def __init__(self, page, server: LabServer, url_path: str, name: str):
        self.page, self.server, self.name = page, server, name
        page.goto(f"{server.base}/{url_path}/{name}?token={server.token}", timeout=LOAD_TIMEOUT_MS)
        self.panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").first
        self.cells = self.panel.locator(".jp-Notebook .jp-Cell")
        self.cells.nth(len(FLOW_CELLS) - 1).wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
        page.locator(".jp-KernelName", has_text="Bash (shell_kernel)").first.wait_for(
            timeout=LOAD_TIMEOUT_MS)
        self.wait_idle(LOAD_TIMEOUT_MS)
        server.remember_processes()

    def wait_idle(self, timeout_ms: float = CELL_TIMEOUT_MS) -> None:
        # The kernel's status, in JupyterLab's status bar or Notebook 7's toolbar.
        wait_for(lambda: self.page.locator(
            '.jp-Notebook-ExecutionIndicator[data-status="idle"]').count() > 0,
            timeout_ms / 1000, "the kernel to be idle")

    def run(self, i: int) -> None:
        self.cells.nth(i).locator(".jp-InputArea-editor").click()
        self.page.keyboard.press("Control+Enter")

    def prompt(self, i: int):
        return self.cells.nth(i).locator(".jp-InputArea-prompt")

    def wait_done(self, i: int) -> None:
        from playwright.sync_api import expect
        expect(self.prompt(i)).to_have_text(re.compile(r"^\s*\[\d+\]:\s*$"),
                                            timeout=CELL_TIMEOUT_MS)

    def output_text(self, i: int) -> str:
        return "".join(self.cells.nth(i).locator(".jp-OutputArea-output").all_inner_texts())

    def wait_output(self, i: int, text: str) -> None:
        wait_for(lambda: text in self.output_text(i), CELL_TIMEOUT_MS / 1000,
                 f"{text!r} in cell {i}'s output (it shows {self.output_text(i)!r}; "
                 f"dialogs: {self.dialogs()})")

    def dialogs(self) -> list[str]:
        return self.page.locator(".jp-Dialog").all_inner_texts()

    def status(self, i: int):
        return self.cells.nth(i).locator(".jp-ShellKernelStatus")

    def menu(self, menu: str, command: str) -> None:
        self.page.keyboard.press("Escape")
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).first.click()
        self.page.locator(f'.lm-Menu-item[data-command="{command}"]').first.click()

    def save(self, done) -> nbformat.NotebookNode:
        self.page.keyboard.press("Escape")
        self.page.keyboard.press("Control+s")
        return read_when_saved(self.server.root / self.name, done)


def records(nb) -> list:
    return [cell.metadata.get("shell_kernel") for cell in nb.cells]


def check_given_up_prompts(nb: Page) -> None:
    """A read that timed out leaves neither an input box nor JupyterLab's
    pending-input guard: the next cell runs, with no dialog."""
    nb.run(0)
    nb.cells.nth(0).locator(".jp-Stdin-input").wait_for()
    nb.wait_done(0)
    nb.wait_output(0, "status=142")
    assert nb.cells.nth(0).locator(".jp-Stdin").count() == 0
    assert "quick? " in nb.output_text(0)  # the question's text stays, as in a terminal
    nb.run(2)
    nb.wait_output(2, "after-5")
    nb.wait_done(2)
    assert nb.dialogs() == []


def test_prompts_given_up_on_run_all_and_clear(lab, browser_page):
    from playwright.sync_api import expect

    write_flow_notebook(lab.root / "flow.ipynb")
    nb = Page(browser_page, lab, "lab/tree", "flow.ipynb")
    check_given_up_prompts(nb)

    # Clear Outputs of All Cells: no status is left, on the page or in the
    # file, also for a cell with no execution count (the legacy record).
    assert nb.status(LEGACY).count() == 1
    nb.menu("Edit", "editmenu:clear-all")
    wait_for(lambda: nb.panel.locator(".jp-ShellKernelStatus").count() == 0, 10,
             "every cell's status to go")
    saved = nb.save(lambda n: not any(records(n)))
    assert records(saved) == [None] * len(FLOW_CELLS)

    # Run All, with two prompts the kernel gives up on and a failure: every
    # cell up to the failure runs, those after it never do, and show nothing.
    nb.menu("Run", "runmenu:run-all")
    nb.wait_output(1, "head=124")
    nb.wait_output(3, "exit status 1 from 'false' (line 1)")
    nb.wait_idle()
    for never_ran in (4, 5, 6):
        expect(nb.prompt(never_ran)).to_have_text(re.compile(r"^\s*\[\s*\]:\s*$"))
        assert nb.status(never_ran).count() == 0 and nb.output_text(never_ran) == ""
    assert nb.dialogs() == []
    assert "status=142" in nb.output_text(0) and "after-5" in nb.output_text(2)
    assert nb.status(3).get_attribute("data-kind") == "failed"
    saved = nb.save(lambda n: all(records(n)[:4]))
    rec = records(saved)
    assert [r["exit_code"] for r in rec[:4]] == [0, 0, 0, 1], rec
    assert rec[4:] == [None, None, None], rec
    lab.remember_processes()


def test_jupyter_notebook_7(tmp_path, browser_page):
    """Jupyter Notebook 7 is built from JupyterLab's components: the same
    extension shows statuses there, prompts are answered, and a question the
    kernel gave up on does not block the next cell."""
    root = tmp_path / "root"
    root.mkdir()
    write_flow_notebook(root / "flow.ipynb")
    server = LabServer(root, tmp_path, "flow.ipynb", app="notebook")
    try:
        server.start()
        nb = Page(browser_page, server, "notebooks", "flow.ipynb")
        check_given_up_prompts(nb)
        assert nb.status(0).get_attribute("data-kind") == "ok"
        assert nb.status(2).get_attribute("data-kind") == "ok"
        nb.run(6)
        box = nb.cells.nth(6).locator(".jp-Stdin-input")
        box.fill("Notebook Seven")
        box.press("Enter")
        nb.wait_output(6, "hi Notebook Seven")
        nb.wait_done(6)
        wait_for(lambda: nb.status(6).count() == 1, 10, "cell 6's status")
        saved = nb.save(lambda n: all(records(n)[i] for i in (0, 2, 6)))
        assert [records(saved)[i]["exit_code"] for i in (0, 2, 6)] == [0, 0, 0]
        server.remember_processes()
    finally:
        server.stop()
