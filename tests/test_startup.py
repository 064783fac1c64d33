"""What the kernel process imports on its way to the first replies."""

from __future__ import annotations

import os
import textwrap
import time

from harness import pids_matching, wait_until

#: Written as sitecustomize.py on the kernel's PYTHONPATH: Python runs it at
#: startup, and its audit hook writes down every module as it is imported
#: (line-buffered, so the record is complete as soon as a reply has arrived).
IMPORT_RECORDER = textwrap.dedent("""\
    import os
    import sys

    _record = open(os.environ["SHELL_KERNEL_IMPORT_RECORD"], "a", buffering=1)

    def _write_down(event, args):
        if event == "import":
            _record.write(args[0] + "\\n")

    sys.addaudithook(_write_down)
""")

#: Imported only for a debugger, which a shell kernel does not offer; debugpy
#: alone costs tens of milliseconds and prints a warning in jupyter console.
DEBUGGER_MODULES = {"debugpy", "ipykernel.debugger"}


def test_kernel_info_and_a_cell_import_no_debugger(start_kernel, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(IMPORT_RECORDER)
    record = tmp_path / "imports"
    python_path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    kernel = start_kernel(PYTHONPATH=python_path, SHELL_KERNEL_IMPORT_RECORD=str(record))

    reply = kernel.request("kernel_info")["content"]  # the harness asked once already
    assert reply["status"] == "ok"
    kernel.ok("true")

    imported = set(record.read_text().split())
    assert {"shell_kernel.kernel", "ipykernel.kernelapp"} <= imported  # the record works
    assert sorted(DEBUGGER_MODULES & imported) == []


def test_a_shutdown_during_a_slow_start_leaves_no_shell(jupyter_prefix, start_kernel, tmp_path):
    """The kernel is shut down while the shell's startup files still run: the
    launch thread's start is stopped before the session closes, and nothing
    of the shell stays (the kernel exits by itself, not killed)."""
    mark = "1000.981"  # unique in /proc
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bash_profile").write_text(f"sleep {mark}\n")
    kernel = start_kernel(wait_shell=False, HOME=str(home))
    assert wait_until(lambda: pids_matching(mark), timeout=30), "the startup files never ran"
    kernel.kc.stop_channels()
    started = time.monotonic()
    kernel.km.shutdown_kernel(now=False)
    assert time.monotonic() - started < 5, "jupyter_client had to kill the kernel"
    assert wait_until(lambda: not pids_matching(mark), timeout=10), pids_matching(mark)
