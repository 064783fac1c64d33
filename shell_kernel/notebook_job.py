"""The notebook steps `run` (runner.py) and `run --hosts` (fleet.py) share:
reading and preparing the notebook, which cells run and what they are
called, recording each cell's metadata, the output's name, the summary
table, and the command's exit statuses. Runs on the caller's thread; the
fleet's workers each call CellRecorder on their own host's notebook.

Parameters given with ``-p NAME VALUE`` are injected the way papermill does
it: a new code cell tagged ``injected-parameters`` right after the cell
tagged ``parameters`` (or replacing an earlier injected cell), holding one
bash assignment per parameter, quoted as papermill's BashTranslator quotes
strings (``shlex.quote``: single quotes, a ``'`` inside written as
``'"'"'``), so a value reaches the shell verbatim whatever it contains.

Each executed code cell gets ``metadata.shell_kernel`` in the saved notebook:
the ``shell_kernel`` metadata of its execute_reply (exit_code, duration_s,
cwd, ...) plus ``host``. The papermill engine in papermill_engine.py records
the same through the same CellRecorder.
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path
from typing import Callable, Iterable, TextIO

from .jobs import CellRun, RunError

PARAMETERS_TAG = "parameters"
INJECTED_TAG = "injected-parameters"
RAISES_TAG = "raises-exception"
SKIP_TAG = "skip-execution"  # nbclient's default skip_cells_with_tag
METADATA_KEY = "shell_kernel"
#: The kernelspec languages of a notebook whose cells are bash.
BASH_LANGUAGES = ("bash", "sh", "shell")

# EXIT_* are the exit statuses of `python -m shell_kernel run`, with or without --hosts.
EXIT_OK = 0
EXIT_FAILED = 1  # a cell or host failed, or the kernel died or timed out
EXIT_USAGE = 2  # bad arguments: no such notebook or kernel, bad -p (argparse uses 2 too)
EXIT_CHANGED = 3  # --fail-on-change: a cell changed since --compare's run (and none failed)
EXIT_INTERRUPTED = 130

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # full-matched: `$` would let "id\n" through


# ------------------------------------------------------------------ parameters
#: The shell_kernel functions and variables in the user's shell: setting
#: one (the end frames' token) can leave a cell that never ends.
_KERNEL_PREFIX = "__shell_kernel"
#: Variables bash never lets a script set.
_BASH_READ_ONLY = frozenset({"BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID"})


def check_parameter_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise RunError(f"-p {name!r}: a parameter name must be a bash variable name "
                       "(letters, digits and _, not starting with a digit)")
    why = ("the kernel's own" if name.startswith(_KERNEL_PREFIX)
           else "read-only in bash" if name in _BASH_READ_ONLY else None)
    if why:
        raise RunError(f"-p {name!r}: a parameter cannot set this variable ({why}); "
                       "give the parameter another name")
    return name


def bash_value(value: str | list[str]) -> str:
    """A parameter's value as bash source: a string quoted (shlex.quote, as
    papermill's BashTranslator quotes it), a list as an array of such
    strings, ``(a 'b c')`` (--parameters-yaml's lists; papermill's -y too)."""
    if isinstance(value, list):
        return "(" + " ".join(shlex.quote(str(item)) for item in value) + ")"
    return shlex.quote(str(value))


def bash_parameters(parameters: dict[str, str | list[str]], comment: str = "Parameters") -> str:
    """The source of an injected-parameters cell, as papermill writes it for bash."""
    lines = [f"# {comment}"]
    lines += [f"{check_parameter_name(name)}={bash_value(value)}"
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
    # Not a random id: two runs with the same parameters save the same cell.
    if not any(other.get("id") == INJECTED_TAG for other in nb.cells
               if INJECTED_TAG not in other.get("metadata", {}).get("tags", [])):
        cell.id = INJECTED_TAG
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


# -------------------------------------------------------------------- notebook
def read_notebook(path: Path) -> tuple[object, list[str]]:
    """The notebook at path, .ipynb or a text notebook (runbook_files.py), and
    warnings for the user; RunError if there is none or it cannot be read."""
    import nbformat

    if not path.exists():
        raise RunError(f"{path}: no such notebook")
    if not path.is_file():
        raise RunError(f"{path}: not a file")
    if path.suffix != ".ipynb":
        from .runbook_files import read_runbook
        return read_runbook(path), []
    problem: dict = {}
    try:
        nb = nbformat.read(path, as_version=4, capture_validation_error=problem)
    except Exception as err:  # noqa: BLE001 - JSON or version errors, said plainly
        raise RunError(f"{path} is not a readable notebook: {err}") from None
    # A notebook that breaks the schema still runs, as Jupyter's own tools run
    # it; nbformat only logs the error, where nobody reads it, and a cell whose
    # type is not "code" would then be left out without a word.
    error = problem.get("ValidationError")
    if error is None:
        return nb, []
    where = "/".join(str(step) for step in error.absolute_path) or "the top level"
    message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
    return nb, [f"{path} does not follow the notebook format at {where}: {message}; it runs "
                "as read (a cell of an unknown type does not run)"]


def prepare(nb, parameters: dict[str, str]) -> list[str]:
    """Inject the parameters and clear what an earlier run left (outputs,
    execution counts, records); returns warnings for the user."""
    warnings: list[str] = []
    if parameters:
        _, warnings = inject_parameters(nb, parameters)
    clear_records(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return warnings


def runnable_cells(nb) -> list[int]:
    """Indexes of the code cells a run executes (nbclient skips the same ones)."""
    return [index for index, cell in enumerate(nb.cells)
            if cell.cell_type == "code" and cell.source.strip()
            and SKIP_TAG not in cell.metadata.get("tags", [])]


def job_cells(nb, indexes: Iterable[int]) -> list[CellRun]:
    """A CellRun, not run yet, for each of these cells, numbered in this order."""
    return [CellRun(index, number, cell_label(nb.cells[index]),
                    list(nb.cells[index].metadata.get("tags", [])))
            for number, index in enumerate(indexes, 1)]


def cell_label(cell, width: int = 44) -> str:
    """A cell as the progress and the tables name it: its first line."""
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
    if INJECTED_TAG in cell.metadata.get("tags", []):
        first = "(injected parameters)"
    return first if len(first) <= width else first[:width - 3] + "..."


def output_stem(notebook: Path) -> str:
    """The notebook's file name without .ipynb (deploy.ipynb), or a text
    notebook's suffix (deploy.sh, deploy.md): what its outputs are named after."""
    from .runbook_files import text_suffixes
    if notebook.suffix == ".ipynb" or notebook.suffix in text_suffixes():
        return notebook.stem
    return notebook.name


# ------------------------------------------------------------- cell metadata
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


# -------------------------------------------------------------------- reports
def print_columns(out: TextIO, rows: list[tuple[str, ...]], align: str) -> None:
    """A blank line, then rows (the header first) in columns two spaces apart;
    align has "l" or "r" for each column but the last, which is not padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(align))]
    print(file=out)
    for row in rows:
        padded = [text.rjust(width) if side == "r" else text.ljust(width)
                  for text, width, side in zip(row, widths, align)]
        print("  ".join(padded + list(row[len(align):])).rstrip(), file=out)


def tally(values: Iterable[str], order: Iterable[str]) -> str:
    """"3 ok, 1 failed": how many of values are each of order, in that order."""
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return ", ".join(f"{counts[value]} {value}" for value in order if counts.get(value))
