"""`python -m shell_kernel run NOTEBOOK --hosts ...`: one notebook on many hosts.

No Jupyter kernel runs here: each host gets a ShellSession with the SSH
backend, built from a KernelConfig exactly as the kernel builds it (so the
target resolves as the kernel resolves it), all in this one process. A
worker thread per job runs one host's notebook top to bottom through its
session, records each cell's output and metadata into that host's copy of
the notebook, and closes the session. Hosts go in batches (`--batch`); a
batch starts only while no more than `--max-fail` hosts have failed.

SIGINT interrupts the running cell of every host, closes every session,
writes what was recorded and makes the command exit with 130.
"""

from __future__ import annotations

import copy
import datetime
import logging
import queue
import re
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

from .config import KernelConfig
from .failure import cell_error
from .fleet_targets import FleetHost
from .options import FLEET_OUTPUT_LIMIT_MB
from .runner import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, METADATA_KEY, RAISES_TAG,
                     SKIP_TAG, CellRecorder, RunError, _label, clear_records, inject_parameters,
                     read_notebook)
from .results import UnknownDisplay, display_bundle, error_content, reply_metadata
from .session import SessionError, ShellSession

# Host statuses, as summary.json spells them.
OK, FAILED, UNREACHABLE, INTERRUPTED, SKIPPED = "ok", "failed", "unreachable", "interrupted", "skipped"
HOST_VARIABLE = "SHELL_KERNEL_HOST"
BASH_LANGUAGES = ("bash", "sh", "shell")
DEFAULT_JOBS = 10


@dataclass
class FleetOptions:
    notebook: Path
    hosts: list[FleetHost]
    output_dir: Path
    parameters: dict[str, str] = field(default_factory=dict)
    jobs: int = DEFAULT_JOBS
    batch: str | None = None
    max_fail: int = 0
    timeout: float | None = None
    allow_errors: bool = False
    #: The SSH options every host's session is built with (ssh is set per host).
    config: KernelConfig = field(
        default_factory=lambda: KernelConfig(output_limit_mb=FLEET_OUTPUT_LIMIT_MB))


@dataclass
class CellRun:
    index: int  # in the notebook's cells
    exit_code: int | None
    duration_s: float


@dataclass
class HostRun:
    """What happened on one host; its fields are its worker's until it finishes."""
    host: FleetHost
    status: str = SKIPPED
    error: str | None = None
    cells: list[CellRun] = field(default_factory=list)
    duration_s: float | None = None
    #: The cell that failed (its index), and the end of its stderr.
    failed_cell: int | None = None
    stderr_tail: str = ""
    notebook_path: Path | None = None

    @property
    def failed(self) -> bool:
        return self.status in (FAILED, UNREACHABLE)


# ---------------------------------------------------------------- batches
def batch_sizes(spec: str | None, total: int) -> list[int]:
    """`--batch` as sizes that add up to total: "1,10%,100%" or "5"; the last
    size repeats until every host has a batch, as Ansible's `serial` does."""
    if total == 0:
        return []
    if not spec:
        return [total]
    sizes = []
    for word in spec.split(","):
        word = word.strip()
        match = re.fullmatch(r"(\d+)(%?)", word)
        if not match or int(match.group(1)) == 0 or (match.group(2) and int(match.group(1)) > 100):
            raise RunError(f"--batch {spec}: {word!r} is not a batch size; give whole numbers "
                           "of hosts or percentages (1-100%), e.g. 1,10%,100%")
        number = int(match.group(1))
        sizes.append(max(1, total * number // 100) if match.group(2) else number)
    batches, left = [], total
    while left > 0:
        size = min(sizes[min(len(batches), len(sizes) - 1)], left)
        batches.append(size)
        left -= size
    return batches


# ---------------------------------------------------------------- notebook
def load_fleet_notebook(path: Path, parameters: dict[str, str]) -> tuple[object, list[str]]:
    """The notebook, checked to be a bash notebook, with parameters injected
    and earlier results cleared; and warnings for the user."""
    nb = read_notebook(path)
    spec = nb.metadata.get("kernelspec") or {}
    language = (spec.get("language") or nb.metadata.get("language_info", {}).get("name") or "")
    if language.lower() not in BASH_LANGUAGES:
        what = f"a {language} notebook" if language else "a notebook that names no language"
        raise RunError(f"{path} is {what} (kernel {spec.get('name', 'unknown')!r}); --hosts "
                       "runs bash notebooks, whose kernelspec language is bash")
    warnings: list[str] = []
    if parameters:
        _, warnings = inject_parameters(nb, parameters)
    clear_records(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb, warnings


def runnable_cells(nb) -> list[int]:
    """Indexes of the code cells a run executes (nbclient skips the same ones)."""
    return [index for index, cell in enumerate(nb.cells)
            if cell.cell_type == "code" and cell.source.strip()
            and SKIP_TAG not in cell.metadata.get("tags", [])]


def file_name(host_name: str) -> str:
    """DIR/<host>.ipynb: the host's name with anything unusual for a file name replaced."""
    return re.sub(r"[^A-Za-z0-9._@-]", "_", host_name).lstrip(".") or "host"


def file_names(host_names: list[str]) -> dict[str, str]:
    """Each host's file name (DIR/<name>.ipynb, DIR/<name>.output/), one per
    host even where file_name makes two names one (fh1:2222 and fh1_2222) or
    only case tells them apart (a case-insensitive disk): a host whose name is
    a file name as it is keeps it, the others get -2, -3, ... in host order."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for host in sorted(host_names, key=lambda host: file_name(host) != host):  # stable
        stem = candidate = file_name(host)
        number = 1
        while candidate.casefold() in taken:
            number += 1
            candidate = f"{stem}-{number}"
        taken.add(candidate.casefold())
        names[host] = candidate
    return names


class CellOutputs:
    """Output of one cell as nbformat outputs: streams merged as nbclient
    merges them, displays with an id updated in place."""

    def __init__(self):
        self.outputs: list = []
        self._displays: dict[str, dict] = {}
        self._lock = threading.Lock()  # the session's pump writes, the worker reads

    def stream(self, name: str, text: str) -> None:
        with self._lock:
            last = self.outputs[-1] if self.outputs else None
            if last is not None and last.get("output_type") == "stream" and last.name == name:
                last.text += text
            else:
                self.outputs.append(_output("stream", name=name, text=text))

    def display(self, mime: str, data: bytes, display_id: str) -> None:
        try:
            bundle = display_bundle(mime, data)
        except UnknownDisplay as err:
            self.stream("stderr", str(err))
            return
        with self._lock:
            if display_id in self._displays:
                self._displays[display_id]["data"] = bundle
                return
            output = _output("display_data", data=bundle, metadata={})
            self.outputs.append(output)
            if display_id:
                self._displays[display_id] = output

    def stderr_tail(self, lines: int = 20) -> str:
        with self._lock:
            text = "".join(o.text for o in self.outputs
                           if o.get("output_type") == "stream" and o.name == "stderr")
        return "\n".join(text.rstrip("\n").splitlines()[-lines:])


# ------------------------------------------------------------------- fleet
class Fleet:
    """One run of a notebook on many hosts."""

    def __init__(self, options: FleetOptions, nb, events):
        """events: a fleet_report.Progress (or anything with its methods)."""
        self.options = options
        self.nb = nb
        self.cells = runnable_cells(nb)
        self.runs = {host.name: HostRun(host) for host in options.hosts}
        self.file_names = file_names([host.name for host in options.hosts])
        self.events = events
        self.interrupted = threading.Event()
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.stop_reason: str | None = None  # why later batches were skipped
        self._sessions: dict[str, ShellSession] = {}
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- run
    def run(self) -> None:
        """Every batch in turn; returns when all are done or the run is interrupted."""
        hosts = self.options.hosts
        done = 0
        sizes = batch_sizes(self.options.batch, len(hosts))
        for number, size in enumerate(sizes, 1):
            batch = hosts[done:done + size]
            done += size
            if self.interrupted.is_set():
                break
            failed = sum(run.failed for run in self.runs.values())
            if failed > self.options.max_fail:
                self.stop_reason = (f"not started: {failed} host{'s' if failed != 1 else ''} "
                                    f"failed in earlier batches, more than --max-fail "
                                    f"{self.options.max_fail}")
                break
            if len(sizes) > 1:
                self.events.batch(number, len(sizes), [host.name for host in batch])
            self._run_batch(batch)
        for run in self.runs.values():
            if run.status == SKIPPED and run.error is None:
                run.error = ("not started: the run was interrupted" if self.interrupted.is_set()
                             else self.stop_reason)

    def _run_batch(self, batch: list[FleetHost]) -> None:
        waiting: queue.SimpleQueue = queue.SimpleQueue()
        for host in batch:
            waiting.put(host)
        workers = [threading.Thread(target=self._worker, args=(waiting,), daemon=True,
                                    name=f"shell-kernel-fleet-{n}")
                   for n in range(min(self.options.jobs, len(batch)))]
        for worker in workers:
            worker.start()
        for worker in workers:
            while worker.is_alive():
                worker.join(0.2)
                if self.interrupted.is_set():
                    # Again and again: a host may have started a cell just after the last call.
                    self.interrupt_all()

    def _worker(self, waiting: queue.SimpleQueue) -> None:
        while not self.interrupted.is_set():
            try:
                host = waiting.get_nowait()
            except queue.Empty:
                return
            self._run_host(self.runs[host.name])

    def interrupt(self) -> None:
        """Ctrl-C: stop every host's running cell; no new host or cell starts."""
        self.interrupted.set()
        self.interrupt_all()

    def interrupt_all(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.interrupt()

    # ------------------------------------------------------------- one host
    def _config(self, host: FleetHost) -> KernelConfig:
        spill = self.options.output_dir / f"{self.file_names[host.name]}.output"
        return replace(self.options.config, ssh=host.target, spill_dir=str(spill))

    def _run_host(self, run: HostRun) -> None:
        host = run.host
        started = time.monotonic()
        nb = copy.deepcopy(self.nb)
        outputs = [CellOutputs()]  # the running cell's; replaced for each cell
        config = self._config(host)
        # No prompt terminal (nobody answers; a read gets end-of-file from
        # /dev/null) and no side channel until an interrupt needs one: a
        # channel, a pty and a dozen programs less per host.
        session = ShellSession(config.backend_factory(side_channel_early=False),
                               lambda name, text: outputs[0].stream(name, text),
                               replace(config.session_options(), prompts=False),
                               lambda mime, data, display_id: outputs[0].display(mime, data, display_id))
        self.events.host_started(host.name)
        with self._lock:
            self._sessions[host.name] = session
        try:
            self._start(run, session)
            if run.status not in (UNREACHABLE, INTERRUPTED):
                self._run_cells(run, session, nb, outputs)
        except Exception as err:  # noqa: BLE001 - one host's bug must not stop the others
            run.status, run.error = FAILED, f"shell_kernel failed on this host: {err!r}"
        finally:
            with self._lock:
                self._sessions.pop(host.name, None)
            session.close()
            run.duration_s = round(time.monotonic() - started, 3)
            if run.status != UNREACHABLE:
                self._save(run, nb)
            self.events.host_done(run)

    def _start(self, run: HostRun, session: ShellSession) -> None:
        try:
            session.start()
            # The cell nobody sees: the host's name for the notebook's cells.
            result = session.run(f"export {HOST_VARIABLE}={shlex.quote(run.host.name)}")
        except SessionError as err:
            run.status, run.error = UNREACHABLE, str(err)
            return
        if self.interrupted.is_set():
            run.status, run.error = INTERRUPTED, "interrupted before the first cell started"
        elif result.exit_code != 0 or result.shell_lost:
            run.status = UNREACHABLE
            run.error = result.shell_lost or f"setting {HOST_VARIABLE} failed (exit {result.exit_code})"

    def _run_cells(self, run: HostRun, session: ShellSession, nb, outputs: list) -> None:
        recorder = CellRecorder(run.host.name)
        run.status = OK
        for count, index in enumerate(self.cells, 1):
            if self.interrupted.is_set():
                run.status, run.error = INTERRUPTED, f"interrupted before cell {index} started"
                return
            cell = nb.cells[index]
            outputs[0] = CellOutputs()
            self.events.cell_started(run.host.name, count, index, _label(cell))
            timer, fired = None, threading.Event()
            if self.options.timeout:
                timer = threading.Timer(self.options.timeout,
                                        lambda: (fired.set(), session.interrupt()))
                timer.daemon = True
                timer.start()
            try:
                result = session.run(cell.source)
            except SessionError as err:
                run.status, run.error, run.failed_cell = FAILED, str(err), index
                return
            finally:
                if timer is not None:
                    timer.cancel()
            timed_out = fired.is_set() and result.interrupted and not self.interrupted.is_set()
            cell.execution_count = count
            cell.outputs = outputs[0].outputs
            error = cell_error(result)
            if error is not None:
                cell.outputs.append(_error_output(*error))
            recorder.on_cell_executed(cell, index, {"metadata": {METADATA_KEY: reply_metadata(result)}})
            run.cells.append(CellRun(index, result.exit_code, round(result.duration_s, 6)))
            self.events.cell_done(run.host.name, count, index, result)
            if error is None:
                continue
            if result.interrupted and self.interrupted.is_set():
                run.status, run.error = INTERRUPTED, f"interrupted in cell {index}"
                run.failed_cell, run.stderr_tail = index, outputs[0].stderr_tail()
                return
            if timed_out:
                message = (f"cell {index} ran longer than --timeout {self.options.timeout:g} s "
                           f"and was interrupted (exit status {result.exit_code})")
            elif result.shell_lost:
                message = f"cell {index}: {result.shell_lost}"
            else:
                ename, _, summary = error  # as the kernel's traceback line says it
                message = f"cell {index} failed: {ename}: {summary}"
            expected = RAISES_TAG in cell.metadata.get("tags", []) and not timed_out
            if expected:
                continue
            if run.status == OK:
                run.status, run.error = FAILED, message
                run.failed_cell, run.stderr_tail = index, outputs[0].stderr_tail()
            if not self.options.allow_errors or result.shell_lost:
                return

    def _save(self, run: HostRun, nb) -> None:
        from nbformat.v4 import writes_json
        nb.metadata[METADATA_KEY] = {"host": run.host.name, "target": run.host.target,
                                     "parameters": dict(self.options.parameters),
                                     "duration_s": run.duration_s}
        path = self.options.output_dir / f"{self.file_names[run.host.name]}.ipynb"
        # The notebook was validated when read, and its outputs are made here
        # in the schema's shape: nbformat.write would validate it again, per host.
        path.write_text(writes_json(nb) + "\n", encoding="utf-8")
        run.notebook_path = path


def _output(output_type: str, **fields):
    """An nbformat output (what nbformat.v4.new_output makes, without its
    schema validation of every output: a hundred hosts make thousands)."""
    from nbformat import NotebookNode
    return NotebookNode(output_type=output_type, **fields)


def _error_output(ename: str, evalue: str, summary: str):
    return _output("error", **error_content(ename, evalue, summary))


# ---------------------------------------------------------------- command
def check_output_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise RunError(f"--output-dir {path}: a file is there, not a directory; "
                       "give another directory (it is created if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunError(f"--output-dir {path}: cannot create it ({err.strerror})") from None


def run_fleet(options: FleetOptions, progress: TextIO | None = None,
              report: TextIO | None = None) -> int:
    """Check, run, write the reports; returns the exit status of the command.
    RunError (usage) is raised before anything runs on any host."""
    from .cli import log_to_file
    from .fleet_report import Progress, print_table, write_html, write_json

    progress = sys.stderr if progress is None else progress
    report = sys.stdout if report is None else report
    if not options.hosts:
        raise RunError("the host list is empty: give --hosts TARGETS or --inventory FILE")
    if options.jobs < 1:
        raise RunError(f"--jobs {options.jobs}: give at least 1")
    if options.max_fail < 0:
        raise RunError(f"--max-fail {options.max_fail}: give 0 or more")
    batch_sizes(options.batch, len(options.hosts))  # a bad --batch fails here
    nb, warnings = load_fleet_notebook(options.notebook, options.parameters)
    check_output_dir(options.output_dir)
    for warning in warnings:
        print(f"warning: {warning}", file=progress)

    if not log_to_file():
        # A host's trouble is in its report; tracebacks of a hundred hosts on
        # the terminal would bury the progress display.
        logging.getLogger("shell_kernel").addHandler(logging.NullHandler())
    events = Progress(progress, len(options.hosts), len(runnable_cells(nb)))
    fleet = Fleet(options, nb, events)
    events.begin(options.notebook, options.jobs)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda *_: _on_sigint(fleet, events))
    try:
        fleet.run()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        events.end()
    finished = datetime.datetime.now(datetime.timezone.utc)
    status = EXIT_INTERRUPTED if fleet.interrupted.is_set() else \
        EXIT_FAILED if any(run.status != OK for run in fleet.runs.values()) else EXIT_OK
    summary = write_json(fleet, finished, status)
    html = write_html(fleet, finished)
    print_table(report, fleet, summary, html, finished)
    return status


def _on_sigint(fleet: Fleet, events) -> None:
    if fleet.interrupted.is_set():
        events.note("still stopping: interrupting the running cells and closing the sessions")
    else:
        events.note("interrupted: stopping every running cell and closing every session")
    fleet.interrupt()


def main_fleet(args, parameters: dict[str, str]) -> int:
    """`run NOTEBOOK --hosts ...` from cli.py's parsed arguments (RunError: usage)."""
    from .fleet_targets import HostsError, hosts_from_inventory, hosts_from_list

    # nbformat validates with jsonschema, which imports rfc3987_syntax where it
    # is installed (jupyter-events requires it): 1.5-2.5 s of CPU building a
    # grammar, most of the runner's start-up, for IRI formats that no notebook
    # check uses. An entry of None makes that optional import fail at once.
    sys.modules.setdefault("rfc3987_syntax", None)

    for flag, value in (("-o", args.output), ("--kernel", args.kernel), ("--cwd", args.cwd)):
        if value is not None:
            raise RunError(f"{flag} is for one kernel; with --hosts each host's notebook goes "
                           "to --output-dir DIR/<host>.ipynb and runs in the host's home")
    if args.hosts is not None and args.inventory is not None:
        raise RunError("give either --hosts or --inventory, not both")
    if args.limit is not None and args.inventory is None:
        raise RunError("--limit selects hosts of an --inventory; give one")
    if args.max_fail and not args.batch:
        raise RunError("--max-fail decides whether the next --batch starts; give --batch too")
    try:
        if args.inventory is not None:
            hosts = hosts_from_inventory(args.inventory, args.limit)
        else:
            hosts = hosts_from_list(args.hosts, args.ssh_config)
    except HostsError as err:
        raise RunError(str(err)) from None
    notebook = Path(args.notebook)
    stem = notebook.name[:-len(".ipynb")] if notebook.name.endswith(".ipynb") else notebook.name
    config = KernelConfig(ssh_config=args.ssh_config, accept_new_host_key=args.accept_new_host_key,
                          ephemeral=not args.durable, clean=args.clean,
                          output_limit_mb=args.output_limit_mb or FLEET_OUTPUT_LIMIT_MB)
    return run_fleet(FleetOptions(
        notebook=notebook, hosts=hosts, parameters=parameters, jobs=args.jobs,
        output_dir=Path(args.output_dir) if args.output_dir else notebook.with_name(stem + ".fleet"),
        batch=args.batch, max_fail=args.max_fail, timeout=args.timeout,
        allow_errors=args.allow_errors, config=config))


def fleet_only_flags(args) -> list[str]:
    """The flags given that mean something only with --hosts or --inventory."""
    given = [("--limit", args.limit), ("--output-dir", args.output_dir), ("--batch", args.batch),
             ("--max-fail", args.max_fail), ("--jobs", args.jobs != DEFAULT_JOBS),
             ("--ssh-config", args.ssh_config), ("--accept-new-host-key", args.accept_new_host_key),
             ("--durable", args.durable), ("--clean", args.clean),
             ("--output-limit-mb", args.output_limit_mb is not None)]
    return [flag for flag, value in given if value]
