"""`python -m shell_kernel run NOTEBOOK`: one notebook on one Jupyter kernel.

The notebook runs through nbclient on a Jupyter kernel (by default the one
its metadata names), on the caller's thread; the steps it shares with
`run --hosts` (parameters, which cells run, the cell metadata, the table)
are notebook_job.py's. Each executed code cell's ``metadata.shell_kernel``
gets ``host``: the kernel's target ("local", or the SSH host named in the
kernelspec's ``metadata.shell_kernel.host``); the notebook's own gets where
it ran (provenance.py), and with --compare how its cells differ from an
earlier run's (run_compare.py).
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from . import provenance
from .jobs import (CELL_STATES, FAILED, FAILED_AS_EXPECTED, INTERRUPTED, KERNEL_DIED, NOT_RUN, OK,
                   SKIPPED, STOPPED, TIMED_OUT, CellRun)
from .notebook_job import (BASH_LANGUAGES, EXIT_CHANGED, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK,
                           METADATA_KEY, RAISES_TAG, CellRecorder, RunError, check_parameter_name,
                           job_cells, output_stem, prepare, print_columns, read_notebook,
                           runnable_cells, tally)
from .output_files import UnsafeOutput, check_dir, write_file
from .run_compare import compare, print_comparison, read_previous, saved
# What shell_kernel.runner offered before notebook_job.py took it over, for
# the scripts and tests that import it from here.
from .notebook_job import (EXIT_USAGE, INJECTED_TAG, PARAMETERS_TAG, SKIP_TAG, bash_parameters,
                           clear_records, inject_parameters)

__all__ = ["RunOptions", "default_output", "host_of", "load", "run", "BASH_LANGUAGES",
           "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "INJECTED_TAG",
           "METADATA_KEY", "PARAMETERS_TAG", "RAISES_TAG", "SKIP_TAG", "CellRecorder", "RunError",
           "bash_parameters", "check_parameter_name", "clear_records", "inject_parameters",
           "read_notebook"]

STARTUP_TIMEOUT = 60  # seconds for the kernel to answer kernel_info


def host_of(spec) -> str:
    """Where a kernelspec's kernel runs its shell: "local" or the SSH host."""
    meta = (getattr(spec, "metadata", None) or {}).get(METADATA_KEY) or {}
    return meta.get("host") or "local"


@dataclass
class RunOptions:
    notebook: Path
    output: Path
    parameters: dict[str, str]
    kernel_name: str | None = None
    timeout: float | None = None
    allow_errors: bool = False
    cwd: Path | None = None
    timing: bool = True  # False: --no-timing (provenance.strip_timing)
    compare: Path | None = None  # --compare PREVIOUS
    fail_on_change: bool = False


def default_output(notebook: Path) -> Path:
    return notebook.with_name(output_stem(notebook) + ".out.ipynb")


def _kernel_spec(name: str):
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    manager = KernelSpecManager()
    try:
        return manager.get_kernel_spec(name)
    except NoSuchKernel:
        installed = ", ".join(sorted(manager.find_kernel_specs())) or "none"
        raise RunError(f"no kernel named {name!r} (installed: {installed}); "
                       "give another with --kernel NAME") from None


def load(options: RunOptions):
    """Read the notebook and check the request; RunError if it cannot run.
    Returns the notebook, the kernel's name and spec, and warnings."""
    path = options.notebook
    nb, warnings = read_notebook(path)
    try:
        check_dir(options.output.parent)
    except UnsafeOutput as err:
        raise RunError(f"-o {options.output}: {err}") from None
    name = options.kernel_name or nb.metadata.get("kernelspec", {}).get("name")
    if not name:
        raise RunError(f"{path} names no kernel in its metadata; give one with --kernel NAME")
    spec = _kernel_spec(name)
    if options.parameters and spec.language.lower() not in BASH_LANGUAGES:
        raise RunError(f"-p sets bash variables, but kernel {name!r} runs {spec.language!r}")
    for pname in options.parameters:
        check_parameter_name(pname)
    if options.cwd is not None and not options.cwd.is_dir():
        raise RunError(f"--cwd {options.cwd}: no such directory")
    return nb, name, spec, warnings


def _kernel_arguments(spec) -> list[str]:
    """What a shell_kernel kernel is started with for a run: nobody asks it
    to complete (--no-completion). Another kernel gets nothing it does not know."""
    return ["--no-completion"] if METADATA_KEY in (getattr(spec, "metadata", None) or {}) else []


async def _probe(client, spec) -> dict[str, str]:
    """The host's part of the provenance: PROBE, as a silent request to the
    kernel that runs the notebook, before its first cell (a bash kernel's only)."""
    if spec.language.lower() not in BASH_LANGUAGES:
        return {}
    texts: list[str] = []

    def collect(msg) -> None:
        if msg["header"]["msg_type"] == "stream":
            texts.append(msg["content"].get("text", ""))

    try:
        await client.kc.execute_interactive(provenance.PROBE, silent=True, store_history=False,
                                            allow_stdin=False, output_hook=collect,
                                            timeout=STARTUP_TIMEOUT)
    except Exception:  # noqa: BLE001 - provenance is a record, never a reason to fail a run
        return {}
    return provenance.parse_probe("".join(texts))


class RunProgress:
    """The run's progress on stderr: "[N/total] label ..." as a cell starts,
    its verdict as it ends (on the same line on a terminal)."""

    def __init__(self, out: TextIO, total: int):
        self.out, self.total = out, total
        self.tty = getattr(out, "isatty", lambda: False)()

    def cell_started(self, host: str, cell: CellRun) -> None:
        line = f"[{cell.number}/{self.total}] {cell.label} ..."
        print(line, end=" " if self.tty else "\n", file=self.out, flush=True)

    def cell_ended(self, host: str, cell: CellRun) -> None:
        took = f" in {cell.duration_s:.2f} s" if cell.duration_s is not None else ""
        code = "" if cell.exit_code is None else f"exit {cell.exit_code}"
        verdict = f"{cell.state} ({code}{took})" if code or took else cell.state
        prefix = "" if self.tty else f"[{cell.number}/{self.total}] "
        print(prefix + verdict, file=self.out, flush=True)


def run(options: RunOptions, progress: TextIO | None = None, report: TextIO | None = None) -> int:
    """Execute, save, report (progress: stderr, summary: stdout). Returns the
    exit status for the command."""
    progress = sys.stderr if progress is None else progress
    report = sys.stdout if report is None else report
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb, kernel_name, spec, warnings = load(options)
    previous = read_previous(options.compare) if options.compare is not None else None
    for warning in warnings + prepare(nb, options.parameters):
        print(f"warning: {warning}", file=progress)
    nb.metadata["kernelspec"] = {"name": kernel_name, "display_name": spec.display_name,
                                 "language": spec.language}
    host = host_of(spec)

    cells = {cell.index: cell for cell in job_cells(
        nb, [index for index, cell in enumerate(nb.cells) if cell.cell_type == "code"])}
    running: list[int] = []  # the cell being executed, if any
    events = RunProgress(progress, len(cells))

    def on_cell_execute(cell, cell_index, **_):
        recorder.on_cell_execute(cell, cell_index)
        running[:] = [cell_index]
        events.cell_started(host, cells[cell_index])

    def on_cell_executed(cell, cell_index, execute_reply, **_):
        running.clear()
        done = cells[cell_index]
        content = (execute_reply or {}).get("content", {})
        done.record(cell.metadata.get(METADATA_KEY, {}))
        if content.get("status") == "ok":
            done.state = OK
        else:
            done.state = FAILED_AS_EXPECTED if RAISES_TAG in done.tags else FAILED
            done.error = f"{content.get('ename', 'error')}: {content.get('evalue', '')}"
        events.cell_ended(host, done)

    probed: dict[str, str] = {}

    async def on_notebook_start(**_):
        probed.update(await _probe(client, spec))

    recorder = CellRecorder(host, then=on_cell_executed)
    client = NotebookClient(
        nb, kernel_name=kernel_name, extra_arguments=_kernel_arguments(spec),
        timeout=options.timeout, startup_timeout=STARTUP_TIMEOUT,
        allow_errors=options.allow_errors, record_timing=options.timing,
        resources={"metadata": {"path": str(options.cwd or options.notebook.parent.absolute())}},
        on_notebook_start=on_notebook_start, on_cell_execute=on_cell_execute,
        on_cell_executed=recorder.on_cell_executed,
    )

    total = len(cells)
    print(f"Running {options.notebook} on kernel {kernel_name!r} ({host}), "
          f"{total} code cell{'s' if total != 1 else ''}", file=progress, flush=True)
    broke = None  # why the run broke off, if it did
    stopped = STOPPED  # what happened to the cell that was running then
    status = EXIT_OK
    started, started_at = time.monotonic(), provenance.now()
    # The kernel's own stderr (start-up warnings, a traceback if it dies) is
    # kept aside and shown only when the run breaks down.
    with tempfile.TemporaryFile(mode="w+") as kernel_log:
        try:
            client.execute(stderr=kernel_log)
        except CellExecutionError:
            pass  # the failing cell is in cells
        except CellTimeoutError as err:
            broke = f"a cell ran longer than --timeout {options.timeout or 0:g} s ({_first_line(err)})"
            stopped = TIMED_OUT
        except DeadKernelError as err:
            broke = f"the kernel died: {_first_line(err)}"
            stopped = KERNEL_DIED
        except KeyboardInterrupt:
            broke = stopped = INTERRUPTED
            status = EXIT_INTERRUPTED
        except Exception as err:  # noqa: BLE001 - start-up failures and the like, said plainly
            broke = f"{type(err).__name__}: {_first_line(err)}"
        elapsed = time.monotonic() - started
        kernel_log.seek(0)
        log_text = kernel_log.read().strip()

    if broke and running:
        cells[running[0]].state = stopped
        cells[running[0]].error = broke
    runnable = set(runnable_cells(nb))
    for cell in cells.values():
        if cell.state == NOT_RUN and cell.index not in runnable:
            cell.state = SKIPPED
    if broke and events.tty:
        print(file=progress)

    nb.metadata[METADATA_KEY] = {**provenance.record(host, kernel_name, probed, started_at),
                                 "kernel": kernel_name, "parameters": dict(options.parameters),
                                 "duration_s": round(elapsed, 3)}
    if not options.timing:
        provenance.strip_timing(nb)
    rows = None
    if previous is not None:
        rows = compare(previous, nb)
        nb.metadata[METADATA_KEY]["compare"] = saved(options.compare, rows)
    try:
        write_file(options.output, nbformat.writes(nb) + "\n")
    except UnsafeOutput as err:
        raise RunError(f"-o {options.output}: {err}") from None

    failed = [cell for cell in cells.values() if cell.state == FAILED]
    _summary(report, list(cells.values()), kernel_name, host, elapsed, options.output, broke)
    for cell in failed:
        _explain(progress, nb.cells[cell.index], cell)
    if broke:
        print(f"error: the run stopped: {broke}", file=progress)
        if log_text and status != EXIT_INTERRUPTED:
            print("kernel log:\n" + _indent(log_text, "  | "), file=progress)
    if rows is not None:
        print_comparison(report, options.compare, rows)
    if status == EXIT_OK and (failed or broke):
        status = EXIT_FAILED
    if status == EXIT_OK and options.fail_on_change and any(row.changed for row in rows or ()):
        status = EXIT_CHANGED
    return status


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _indent(text: str, prefix: str, limit: int = 12) -> str:
    lines = text.splitlines()
    shown = [prefix + line for line in lines[-limit:]]
    if len(lines) > limit:
        shown.insert(0, f"{prefix}... ({len(lines) - limit} lines before)")
    return "\n".join(shown)


def _summary(out: TextIO, cells: list[CellRun], kernel_name, host, elapsed, output, broke) -> None:
    rows = [("#", "cell", "exit", "time", "result")]
    for c in cells:
        rows.append((str(c.number), c.label, "-" if c.exit_code is None else str(c.exit_code),
                     "-" if c.duration_s is None else f"{c.duration_s:.2f} s",
                     c.state + (f" [{RAISES_TAG}]" if RAISES_TAG in c.tags else "")))
    print_columns(out, rows, "rlrr")
    verdict = "FAILED" if any(c.counts_as_failure for c in cells) or broke else "OK"
    print(f"\n{verdict}: {len(cells)} code cells: "
          f"{tally((c.state for c in cells), CELL_STATES) or 'none'}; "
          f"{elapsed:.1f} s on kernel {kernel_name!r} ({host}); wrote {output}", file=out,
          flush=True)


def _explain(out: TextIO, cell, run: CellRun) -> None:
    print(f"error: cell {run.number} ({run.label}) failed: {run.error}", file=out)
    stderr = "".join(o.get("text", "") for o in cell.get("outputs", [])
                     if o.get("output_type") == "stream" and o.get("name") == "stderr")
    if stderr.strip():
        print(_indent(stderr.rstrip("\n"), "  stderr | "), file=out)
