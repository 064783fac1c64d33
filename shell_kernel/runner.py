"""`python -m shell_kernel run`: execute a notebook from the command line.

The notebook runs through nbclient on a Jupyter kernel (by default the one
its metadata names). Parameters given with ``-p NAME VALUE`` are injected the
way papermill does it: a new code cell tagged ``injected-parameters`` right
after the cell tagged ``parameters`` (or replacing an earlier injected cell),
holding one bash assignment per parameter, quoted as papermill's
BashTranslator quotes strings (``shlex.quote``: single quotes, a ``'`` inside
written as ``'"'"'``), so a value reaches the shell verbatim whatever it
contains.

Each executed code cell gets ``metadata.shell_kernel`` in the saved notebook:
the ``shell_kernel`` metadata of its execute_reply (exit_code, duration_s,
cwd, ...) plus ``host``, the kernel's target ("local", or the SSH host named
in the kernelspec's ``metadata.shell_kernel.host``). The papermill engine in
papermill_engine.py records the same through the same CellRecorder.
"""

from __future__ import annotations

import re
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

PARAMETERS_TAG = "parameters"
INJECTED_TAG = "injected-parameters"
RAISES_TAG = "raises-exception"
SKIP_TAG = "skip-execution"  # nbclient's default skip_cells_with_tag
METADATA_KEY = "shell_kernel"
STARTUP_TIMEOUT = 60  # seconds for the kernel to answer kernel_info

# EXIT_* are the exit statuses of `python -m shell_kernel run`.
EXIT_OK = 0
EXIT_FAILED = 1  # a cell failed, or the kernel died or timed out
EXIT_USAGE = 2  # bad arguments: no such notebook or kernel, bad -p (argparse uses 2 too)
EXIT_INTERRUPTED = 130

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # full-matched: `$` would let "id\n" through


class RunError(Exception):
    """A problem with the request itself (exit status 2); the message says what."""


# ------------------------------------------------------------------ parameters
def check_parameter_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise RunError(f"-p {name!r}: a parameter name must be a bash variable name "
                       "(letters, digits and _, not starting with a digit)")
    return name


def bash_parameters(parameters: dict[str, str], comment: str = "Parameters") -> str:
    """The source of an injected-parameters cell, as papermill writes it for bash."""
    lines = [f"# {comment}"]
    lines += [f"{check_parameter_name(name)}={shlex.quote(str(value))}"
              for name, value in parameters.items()]
    return "\n".join(lines) + "\n"


def _tagged(nb, tag: str) -> int:
    for index, cell in enumerate(nb.cells):
        if tag in cell.get("metadata", {}).get("tags", []):
            return index
    return -1


def inject_parameters(nb, parameters: dict[str, str]) -> tuple[int, list[str]]:
    """Insert (or replace) the injected-parameters cell, as papermill does.

    Returns the new cell's index and warnings worth showing the user.
    """
    import nbformat

    warnings = []
    cell = nbformat.v4.new_code_cell(source=bash_parameters(parameters))
    cell.metadata["tags"] = [INJECTED_TAG]
    injected, declared = _tagged(nb, INJECTED_TAG), _tagged(nb, PARAMETERS_TAG)
    if injected >= 0:
        nb.cells[injected] = cell
        at = injected
    elif declared >= 0:
        at = declared + 1
        nb.cells.insert(at, cell)
    else:
        warnings.append(f"the notebook has no cell tagged {PARAMETERS_TAG!r}: "
                        "the parameters are set in a new first cell")
        at = 0
        nb.cells.insert(0, cell)
    if declared >= 0:
        source = nb.cells[declared].source
        for name in parameters:
            if not re.search(rf"(^|[\s;]){re.escape(name)}=", source, re.MULTILINE):
                warnings.append(f"parameter {name!r} is not set in the notebook's "
                                f"{PARAMETERS_TAG!r} cell (it is injected all the same)")
    return at, warnings


# ------------------------------------------------------------ cell metadata
def host_of(spec) -> str:
    """Where a kernelspec's kernel runs its shell: "local" or the SSH host."""
    meta = (getattr(spec, "metadata", None) or {}).get(METADATA_KEY) or {}
    return meta.get("host") or "local"


def clear_records(nb) -> None:
    """Drop metadata.shell_kernel left from an earlier run of the notebook."""
    for cell in nb.cells:
        cell.get("metadata", {}).pop(METADATA_KEY, None)


class CellRecorder:
    """nbclient hooks that copy each execute_reply's shell_kernel metadata,
    plus the host, into ``cell.metadata.shell_kernel``.

    ``host`` is a string or a callable returning one (called once, after the
    kernel has started). Kernels other than shell_kernel send no such
    metadata: their cells get exit_code None and a duration measured here.
    """

    def __init__(self, host: str | Callable[[], str], then: Callable | None = None):
        self._host = host
        self._then = then  # a hook of the caller's own, called after recording
        self._started: dict[int, float] = {}

    @property
    def host(self) -> str:
        if callable(self._host):
            self._host = self._host()
        return self._host

    def on_cell_execute(self, cell, cell_index, **_) -> None:
        self._started[cell_index] = time.monotonic()

    def on_cell_executed(self, cell, cell_index, execute_reply, **_):
        reply_meta = ((execute_reply or {}).get("metadata") or {}).get(METADATA_KEY)
        record = dict(reply_meta) if isinstance(reply_meta, dict) else {}
        record.setdefault("exit_code", None)
        if "duration_s" not in record and cell_index in self._started:
            record["duration_s"] = round(time.monotonic() - self._started[cell_index], 6)
        record["host"] = self.host
        cell.metadata[METADATA_KEY] = record
        if self._then is not None:
            return self._then(cell=cell, cell_index=cell_index, execute_reply=execute_reply)
        return None


# -------------------------------------------------------------------- runner
@dataclass
class CellOutcome:
    index: int  # in nb.cells
    number: int  # 1-based among the code cells
    label: str
    tags: list = field(default_factory=list)
    #: ok | failed | failed as expected | skipped | not run, or for the cell
    #: that was running when the run broke off: timed out | kernel died |
    #: interrupted | stopped
    state: str = "not run"
    exit_code: int | None = None
    duration_s: float | None = None
    error: str = ""

    @property
    def counts_as_failure(self) -> bool:
        return self.state not in ("ok", "failed as expected", "skipped", "not run")


def _label(cell, width: int = 44) -> str:
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
    if INJECTED_TAG in cell.metadata.get("tags", []):
        first = "(injected parameters)"
    return first if len(first) <= width else first[:width - 3] + "..."


@dataclass
class RunOptions:
    notebook: Path
    output: Path
    parameters: dict[str, str]
    kernel_name: str | None = None
    timeout: float | None = None
    allow_errors: bool = False
    cwd: Path | None = None


def default_output(notebook: Path) -> Path:
    name = notebook.name
    stem = name[:-len(".ipynb")] if name.endswith(".ipynb") else name
    return notebook.with_name(stem + ".out.ipynb")


def _kernel_spec(name: str):
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    manager = KernelSpecManager()
    try:
        return manager.get_kernel_spec(name)
    except NoSuchKernel:
        installed = ", ".join(sorted(manager.find_kernel_specs())) or "none"
        raise RunError(f"no kernel named {name!r} (installed: {installed}); "
                       "give another with --kernel NAME") from None


def read_notebook(path: Path):
    """The notebook at path; RunError if there is none or it cannot be read."""
    import nbformat

    if not path.exists():
        raise RunError(f"{path}: no such notebook")
    if not path.is_file():
        raise RunError(f"{path}: not a file")
    try:
        return nbformat.read(path, as_version=4)
    except Exception as err:  # noqa: BLE001 - JSON or schema errors, said plainly
        raise RunError(f"{path} is not a readable notebook: {err}") from None


def load(options: RunOptions):
    """Read the notebook and check the request; RunError if it cannot run."""
    path = options.notebook
    nb = read_notebook(path)
    name = options.kernel_name or nb.metadata.get("kernelspec", {}).get("name")
    if not name:
        raise RunError(f"{path} names no kernel in its metadata; give one with --kernel NAME")
    spec = _kernel_spec(name)
    if options.parameters and spec.language.lower() not in ("bash", "sh", "shell"):
        raise RunError(f"-p sets bash variables, but kernel {name!r} runs {spec.language!r}")
    for pname in options.parameters:
        check_parameter_name(pname)
    if options.cwd is not None and not options.cwd.is_dir():
        raise RunError(f"--cwd {options.cwd}: no such directory")
    return nb, name, spec


def run(options: RunOptions, progress: TextIO | None = None, report: TextIO | None = None) -> int:
    """Execute, save, report (progress: stderr, summary: stdout). Returns the
    exit status for the command."""
    progress = sys.stderr if progress is None else progress
    report = sys.stdout if report is None else report
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb, kernel_name, spec = load(options)
    warnings: list[str] = []
    if options.parameters:
        _, warnings = inject_parameters(nb, options.parameters)
    for warning in warnings:
        print(f"warning: {warning}", file=progress)
    clear_records(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata["kernelspec"] = {"name": kernel_name, "display_name": spec.display_name,
                                 "language": spec.language}
    host = host_of(spec)

    outcomes: dict[int, CellOutcome] = {}
    running: list[int] = []  # the cell being executed, if any
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            outcomes[index] = CellOutcome(index, len(outcomes) + 1, _label(cell),
                                          list(cell.metadata.get("tags", [])))
    total = len(outcomes)
    tty = getattr(progress, "isatty", lambda: False)()

    def on_cell_execute(cell, cell_index, **_):
        recorder.on_cell_execute(cell, cell_index)
        running[:] = [cell_index]
        outcome = outcomes[cell_index]
        line = f"[{outcome.number}/{total}] {outcome.label} ..."
        print(line, end=" " if tty else "\n", file=progress, flush=True)

    def on_cell_executed(cell, cell_index, execute_reply, **_):
        running.clear()
        outcome = outcomes[cell_index]
        meta = cell.metadata.get(METADATA_KEY, {})
        content = (execute_reply or {}).get("content", {})
        outcome.exit_code, outcome.duration_s = meta.get("exit_code"), meta.get("duration_s")
        if content.get("status") == "ok":
            outcome.state = "ok"
        else:
            outcome.state = "failed as expected" if RAISES_TAG in outcome.tags else "failed"
            outcome.error = f"{content.get('ename', 'error')}: {content.get('evalue', '')}"
        took = f" in {outcome.duration_s:.2f} s" if outcome.duration_s is not None else ""
        code = "" if outcome.exit_code is None else f"exit {outcome.exit_code}"
        verdict = f"{outcome.state} ({code}{took})" if code or took else outcome.state
        prefix = "" if tty else f"[{outcome.number}/{total}] "
        print(prefix + verdict, file=progress, flush=True)

    recorder = CellRecorder(host, then=on_cell_executed)
    client = NotebookClient(
        nb, kernel_name=kernel_name, timeout=options.timeout, startup_timeout=STARTUP_TIMEOUT,
        allow_errors=options.allow_errors,
        resources={"metadata": {"path": str(options.cwd or options.notebook.parent.absolute())}},
        on_cell_execute=on_cell_execute, on_cell_executed=recorder.on_cell_executed,
    )

    print(f"Running {options.notebook} on kernel {kernel_name!r} ({host}), "
          f"{total} code cell{'s' if total != 1 else ''}", file=progress, flush=True)
    broke = None  # why the run broke off, if it did
    stopped = "stopped"  # what happened to the cell that was running then
    status = EXIT_OK
    started = time.monotonic()
    # The kernel's own stderr (start-up warnings, a traceback if it dies) is
    # kept aside and shown only when the run breaks down.
    with tempfile.TemporaryFile(mode="w+") as kernel_log:
        try:
            client.execute(stderr=kernel_log)
        except CellExecutionError:
            pass  # the failing cell is in outcomes
        except CellTimeoutError as err:
            broke = f"a cell ran longer than --timeout {options.timeout or 0:g} s ({_first_line(err)})"
            stopped = "timed out"
        except DeadKernelError as err:
            broke = f"the kernel died: {_first_line(err)}"
            stopped = "kernel died"
        except KeyboardInterrupt:
            broke = stopped = "interrupted"
            status = EXIT_INTERRUPTED
        except Exception as err:  # noqa: BLE001 - start-up failures and the like, said plainly
            broke = f"{type(err).__name__}: {_first_line(err)}"
        elapsed = time.monotonic() - started
        kernel_log.seek(0)
        log_text = kernel_log.read().strip()

    if broke and running:
        outcomes[running[0]].state = stopped
        outcomes[running[0]].error = broke
    for index, outcome in outcomes.items():
        cell = nb.cells[index]
        if outcome.state == "not run" and (SKIP_TAG in outcome.tags or not cell.source.strip()):
            outcome.state = "skipped"
    if broke and tty:
        print(file=progress)

    nb.metadata[METADATA_KEY] = {"kernel": kernel_name, "host": host,
                                 "parameters": dict(options.parameters),
                                 "duration_s": round(elapsed, 3)}
    options.output.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, options.output)

    failed = [o for o in outcomes.values() if o.state == "failed"]
    _summary(report, outcomes, kernel_name, host, elapsed, options.output, broke)
    for outcome in failed:
        _explain(progress, nb.cells[outcome.index], outcome)
    if broke:
        print(f"error: the run stopped: {broke}", file=progress)
        if log_text and status != EXIT_INTERRUPTED:
            print("kernel log:\n" + _indent(log_text, "  | "), file=progress)
    if status == EXIT_OK and (failed or broke):
        status = EXIT_FAILED
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


def _summary(out: TextIO, outcomes, kernel_name, host, elapsed, output, broke) -> None:
    rows = [("#", "cell", "exit", "time", "result")]
    for o in outcomes.values():
        rows.append((str(o.number), o.label, "-" if o.exit_code is None else str(o.exit_code),
                     "-" if o.duration_s is None else f"{o.duration_s:.2f} s",
                     o.state + (f" [{RAISES_TAG}]" if RAISES_TAG in o.tags else "")))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    print(file=out)
    for row in rows:
        print("  ".join([row[0].rjust(widths[0]), row[1].ljust(widths[1]),
                         row[2].rjust(widths[2]), row[3].rjust(widths[3]), row[4]]).rstrip(),
              file=out)
    counts: dict[str, int] = {}
    for o in outcomes.values():
        counts[o.state] = counts.get(o.state, 0) + 1
    order = ["ok", "failed", "timed out", "kernel died", "interrupted", "stopped",
             "failed as expected", "skipped", "not run"]
    parts = [f"{counts[state]} {state}" for state in order if counts.get(state)]
    verdict = "FAILED" if any(o.counts_as_failure for o in outcomes.values()) or broke else "OK"
    print(f"\n{verdict}: {len(outcomes)} code cells: {', '.join(parts) or 'none'}; "
          f"{elapsed:.1f} s on kernel {kernel_name!r} ({host}); wrote {output}", file=out,
          flush=True)


def _explain(out: TextIO, cell, outcome: CellOutcome) -> None:
    print(f"error: cell {outcome.number} ({outcome.label}) failed: {outcome.error}", file=out)
    stderr = "".join(o.get("text", "") for o in cell.get("outputs", [])
                     if o.get("output_type") == "stream" and o.get("name") == "stderr")
    if stderr.strip():
        print(_indent(stderr.rstrip("\n"), "  stderr | "), file=out)


def main_run(args) -> int:
    """The `run` subcommand, from cli.py's parsed arguments."""
    parameters: dict[str, str] = {}
    try:
        for name, value in args.parameters or []:
            parameters[check_parameter_name(name)] = value
        if args.hosts is not None or args.inventory is not None:
            from .fleet import main_fleet
            return main_fleet(args, parameters)
        from .fleet import fleet_only_flags
        if fleet_only_flags(args):
            raise RunError(f"{', '.join(fleet_only_flags(args))}: only with --hosts or --inventory")
        notebook = Path(args.notebook)
        options = RunOptions(
            notebook=notebook,
            output=Path(args.output) if args.output else default_output(notebook),
            parameters=parameters, kernel_name=args.kernel, timeout=args.timeout,
            allow_errors=args.allow_errors, cwd=Path(args.cwd) if args.cwd else None)
        if options.output.absolute() == notebook.absolute():
            raise RunError(f"-o {args.output}: the output would overwrite the notebook itself")
        return run(options)
    except RunError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
