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

import contextlib
import copy
import datetime
import gc
import queue
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

from . import notebook_json, provenance
from .config import KernelConfig
from .failure import cell_error
from .fleet_drift import fingerprint, own_names
from .fleet_report import Progress, print_table, summary, write_reports
from .fleet_shards import Shard, shard_summary
from .jobs import (FAILED, FAILED_AS_EXPECTED, INTERRUPTED, OK, SKIPPED, TIMED_OUT, UNREACHABLE,
                   CellRun, FleetEvents, FleetHost, FleetRun, HostRun)
from .notebook_job import (BASH_LANGUAGES, EXIT_CHANGED, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK,
                           METADATA_KEY, RAISES_TAG, CellRecorder, RunError, job_cells, prepare,
                           read_notebook, runnable_cells)
from .options import FLEET_JOBS, FLEET_OUTPUT_LIMIT_MB
from .output_files import UnsafeOutput, check_dir, write_file
from .results import UnknownDisplay, display_bundle, error_content, reply_metadata
from .run_compare import FleetComparison
from .session import CellRecord, SessionError, ShellSession

HOST_VARIABLE = "SHELL_KERNEL_HOST"
#: The interpreter's thread switch interval during a fleet run (Python's own: 5 ms).
FLEET_SWITCH_INTERVAL_S = 0.2


@dataclass
class FleetOptions:
    notebook: Path
    hosts: list[FleetHost]
    output_dir: Path
    parameters: dict[str, str] = field(default_factory=dict)
    jobs: int = FLEET_JOBS
    batch: str | None = None
    max_fail: int = 0
    timeout: float | None = None
    allow_errors: bool = False
    #: With --shard: which slice of the host list `hosts` is.
    shard: Shard | None = None
    timing: bool = True  # False: --no-timing (provenance.strip_timing)
    compare: Path | None = None  # --compare DIR: an earlier fleet run's output directory
    fail_on_change: bool = False
    #: The SSH options every host's session is built with (ssh is set per host).
    config: KernelConfig = field(
        default_factory=lambda: KernelConfig(output_limit_mb=FLEET_OUTPUT_LIMIT_MB))


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
    nb, warnings = read_notebook(path)
    spec = nb.metadata.get("kernelspec") or {}
    language = (spec.get("language") or nb.metadata.get("language_info", {}).get("name") or "")
    if language.lower() not in BASH_LANGUAGES:
        what = f"a {language} notebook" if language else "a notebook that names no language"
        raise RunError(f"{path} is {what} (kernel {spec.get('name', 'unknown')!r}); --hosts "
                       "runs bash notebooks, whose kernelspec language is bash")
    return nb, warnings + prepare(nb, parameters)


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
    """One run of a notebook on many hosts. The caller's thread runs the
    batches (and Ctrl-C's interrupt); a worker thread per job runs one host
    at a time, its session's pump writing the running cell's outputs."""

    def __init__(self, options: FleetOptions, nb, events: FleetEvents):
        self.options = options
        #: What the reports tell; each host's HostRun is its worker's until it ends.
        self.record = FleetRun(options.notebook, options.output_dir, options.parameters, nb,
                               runnable_cells(nb), {host.name: HostRun(host)
                                                    for host in options.hosts})
        # A shard names its files as the whole run would: merge copies them as they are.
        self.file_names = file_names(list(options.shard.all_hosts) if options.shard
                                     else [host.name for host in options.hosts])
        self.events = events
        #: Each cell's output digest by (host, cell index), and a sample of each
        #: digest's output: what the report groups hosts by (fleet_drift.py).
        self.digests: dict[tuple[str, int], str] = {}
        self.samples: dict[str, str] = {}
        self._sessions: dict[str, ShellSession] = {}
        self._lock = threading.Lock()
        self.comparison: FleetComparison | None = None  # --compare

    # ---------------------------------------------------------------- run
    def run(self) -> None:
        """Every batch in turn; returns when all are done or the run is interrupted."""
        hosts, record = self.options.hosts, self.record
        done = 0
        sizes = batch_sizes(self.options.batch, len(hosts))
        for number, size in enumerate(sizes, 1):
            batch = hosts[done:done + size]
            done += size
            if record.interrupted.is_set():
                break
            failed = sum(run.failed for run in record.runs.values())
            if failed > self.options.max_fail:
                record.stop_reason = (f"not started: {failed} host{'s' if failed != 1 else ''} "
                                      f"failed in earlier batches, more than --max-fail "
                                      f"{self.options.max_fail}")
                break
            if len(sizes) > 1:
                self.events.batch_started(number, len(sizes), [host.name for host in batch])
            self._run_batch(batch)
        for run in record.runs.values():
            if run.status == SKIPPED and run.error is None:
                run.error = ("not started: the run was interrupted"
                             if record.interrupted.is_set() else record.stop_reason)

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
                if self.record.interrupted.is_set():
                    # Again and again: a host may have started a cell just after the last call.
                    self.interrupt_all()

    def _worker(self, waiting: queue.SimpleQueue) -> None:
        while not self.record.interrupted.is_set():
            try:
                host = waiting.get_nowait()
            except queue.Empty:
                return
            self._run_host(self.record.runs[host.name])

    def interrupt(self) -> None:
        """Ctrl-C: stop every host's running cell; no new host or cell starts."""
        self.record.interrupted.set()
        self.interrupt_all()

    def interrupt_all(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.interrupt()

    # ------------------------------------------------------------- one host
    def _config(self, host: FleetHost) -> KernelConfig:
        spill = self.options.output_dir / f"{self.file_names[host.name]}.output"
        # Nobody asks a job's shell to complete (see --no-completion).
        return replace(self.options.config, ssh=host.target, spill_dir=str(spill),
                       no_completion=True)

    def _run_host(self, run: HostRun) -> None:
        host = run.host
        started, run.started_at = time.monotonic(), provenance.now()
        nb = copy.deepcopy(self.record.nb)
        outputs = [CellOutputs()]  # the running cell's; replaced for each cell
        config = self._config(host)
        # No prompt terminal (nobody answers; a read gets end-of-file from
        # /dev/null) and no side channel until an interrupt needs one: a
        # channel, a pty and a dozen programs less per host. No copy of the
        # exported variables after each cell either: a host whose shell is
        # lost is failed, never given a new shell to restore them in. Nobody
        # asks its shell a question (completion...): it is not given the code.
        # The shell exports the host's name for the notebook's cells and says
        # where it runs (the record's, and the report's grouping's) as it gets
        # ready, rather than in a first cell: a round trip less a host.
        session = ShellSession(config.backend_factory(side_channel_early=False),
                               lambda name, text: outputs[0].stream(name, text),
                               replace(config.session_options(), prompts=False,
                                       snapshot_exports=False, queries=False,
                                       exports=((HOST_VARIABLE, host.name),),
                                       announce_where=True),
                               lambda mime, data, display_id: outputs[0].display(mime, data, display_id))
        self.events.host_started(host.name)
        with self._lock:
            self._sessions[host.name] = session
        try:
            hostname = self._start(run, session)
            if run.status not in (UNREACHABLE, INTERRUPTED):
                self._run_cells(run, session, nb, outputs, own_names(host.name, hostname))
        except Exception as err:  # noqa: BLE001 - one host's bug must not stop the others
            run.status, run.error = FAILED, f"shell_kernel failed on this host: {err!r}"
        finally:
            with self._lock:
                self._sessions.pop(host.name, None)
            session.close()
            run.duration_s = round(time.monotonic() - started, 3)
            if run.status != UNREACHABLE:
                self._save(run, nb)
            self.events.host_ended(run)

    def _start(self, run: HostRun, session: ShellSession) -> str:
        """Start the host's shell; what `hostname` prints there (bash's HOSTNAME)."""
        try:
            info = session.start()
        except SessionError as err:
            run.status, run.error = UNREACHABLE, str(err)
            return ""
        if self.record.interrupted.is_set():
            run.status, run.error = INTERRUPTED, "interrupted before the first cell started"
        run.probed = {**dict(zip(provenance.WHERE, info.where)), "bash_version": info.bash_version}
        return run.probed.get("hostname", "")

    def _run_cells(self, run: HostRun, session: ShellSession, nb, outputs: list,
                   names: list[str]) -> None:
        recorder = CellRecorder(run.host.name)
        interrupted = self.record.interrupted
        run.status = OK
        for done in job_cells(nb, self.record.cells):
            index = done.index
            if interrupted.is_set():
                run.status, run.error = INTERRUPTED, f"interrupted before cell {index} started"
                return
            cell = nb.cells[index]
            outputs[0] = CellOutputs()
            self.events.cell_started(run.host.name, done)
            timer, fired = None, threading.Event()
            if self.options.timeout:
                timer = threading.Timer(self.options.timeout,
                                        lambda: (fired.set(), session.interrupt()))
                timer.name, timer.daemon = "shell-kernel-fleet-timeout", True
                timer.start()
            try:
                result = session.run(cell.source)
            except SessionError as err:
                run.status, run.error, run.failed_cell = FAILED, str(err), index
                return
            finally:
                if timer is not None:
                    timer.cancel()
            cell.execution_count = done.number
            cell.outputs = outputs[0].outputs
            error = cell_error(result)
            if error is not None:
                cell.outputs.append(_error_output(*error))
            recorder.on_cell_executed(cell, index, {"metadata": {METADATA_KEY: reply_metadata(result)}})
            output = fingerprint(cell.outputs, names)
            self.digests[run.host.name, index] = output.digest
            self.samples.setdefault(output.digest, output.sample)
            done.record(cell.metadata[METADATA_KEY])
            done.state = _state(done, result, error is None, timed_out=fired.is_set(),
                                interrupted=interrupted.is_set())
            run.cells.append(done)
            self.events.cell_ended(run.host.name, done)
            if done.state in (OK, FAILED_AS_EXPECTED):
                continue
            if done.state == INTERRUPTED:
                run.status, run.error = INTERRUPTED, f"interrupted in cell {index}"
                run.failed_cell, run.stderr_tail = index, outputs[0].stderr_tail()
                return
            if done.state == TIMED_OUT:
                message = (f"cell {index} ran longer than --timeout {self.options.timeout:g} s "
                           f"and was interrupted (exit status {result.exit_code})")
            elif result.shell_lost:
                message = f"cell {index}: {result.shell_lost}"
            else:
                ename, _, summary = error  # as the kernel's traceback line says it
                message = f"cell {index} failed: {ename}: {summary}"
            if run.status == OK:
                run.status, run.error = FAILED, message
                run.failed_cell, run.stderr_tail = index, outputs[0].stderr_tail()
            if not self.options.allow_errors or result.shell_lost:
                return

    def _save(self, run: HostRun, nb) -> None:
        """Write the host's notebook (nb, the host's own copy: changed on the way)."""
        kernelspec = (nb.metadata.get("kernelspec") or {}).get("name")
        nb.metadata[METADATA_KEY] = {
            **provenance.record(run.host.name, kernelspec, run.probed, run.started_at),
            "target": run.host.target, "parameters": dict(self.options.parameters),
            "duration_s": run.duration_s}
        if not self.options.timing:
            provenance.strip_timing(nb)
        if self.comparison is not None:
            self.comparison.host(run.host.name, nb)
        path = self.options.output_dir / f"{self.file_names[run.host.name]}.ipynb"
        # The notebook was validated when read, and its outputs are made here
        # in the schema's shape: nbformat.write would validate it again, per host.
        try:
            run.notebook_path = write_file(path, notebook_json.writes(nb) + "\n")
        except OSError as err:
            run.status, run.error = FAILED, f"its notebook could not be saved: {err}"


def _state(cell: CellRun, result: CellRecord, succeeded: bool, timed_out: bool,
           interrupted: bool) -> str:
    """What became of a cell that ended: the user's Ctrl-C (interrupted),
    --timeout's interrupt (timed out), an error its raises-exception tag
    allows, or else failed."""
    if succeeded:
        return OK
    if result.interrupted and interrupted:
        return INTERRUPTED
    if timed_out and result.interrupted:
        return TIMED_OUT
    return FAILED_AS_EXPECTED if RAISES_TAG in cell.tags else FAILED


def _output(output_type: str, **fields):
    """An nbformat output (what nbformat.v4.new_output makes, without its
    schema validation of every output: a hundred hosts make thousands)."""
    from nbformat import NotebookNode
    return NotebookNode(output_type=output_type, **fields)


def _error_output(ename: str, evalue: str, summary: str):
    return _output("error", **error_content(ename, evalue, summary))


# ---------------------------------------------------------------- command
def check_output_dir(path: Path) -> None:
    try:
        check_dir(path)
    except UnsafeOutput as err:
        raise RunError(f"--output-dir {path}: {err}") from None


def run_fleet(options: FleetOptions, progress: TextIO | None = None,
              report: TextIO | None = None) -> int:
    """Check, run, write the reports; returns the exit status of the command.
    RunError (usage) is raised before anything runs on any host."""
    progress = sys.stderr if progress is None else progress
    report = sys.stdout if report is None else report
    if not options.hosts and options.shard is None:  # a shard's slice may be empty
        raise RunError("the host list is empty: give --hosts TARGETS or --inventory FILE")
    if options.jobs < 1:
        raise RunError(f"--jobs {options.jobs}: give at least 1")
    if options.max_fail < 0:
        raise RunError(f"--max-fail {options.max_fail}: give 0 or more")
    batch_sizes(options.batch, len(options.hosts))  # a bad --batch fails here
    nb, warnings = load_fleet_notebook(options.notebook, options.parameters)
    comparison = FleetComparison(options.compare) if options.compare is not None else None
    check_output_dir(options.output_dir)
    for warning in warnings:
        print(f"warning: {warning}", file=progress)

    events = Progress(progress, len(options.hosts), len(runnable_cells(nb)))
    fleet = Fleet(options, nb, events)
    fleet.comparison = comparison
    events.begin(options.notebook, options.jobs)
    if options.shard is not None:
        events.note(f"shard {options.shard.label}: {len(options.hosts)} of "
                    f"{len(options.shard.all_hosts)} hosts")
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda *_: _on_sigint(fleet, events))
    try:
        with threads_mostly_waiting():
            fleet.run()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        events.end()
    record = fleet.record
    finished = datetime.datetime.now(datetime.timezone.utc)
    status = EXIT_INTERRUPTED if record.interrupted.is_set() else \
        EXIT_FAILED if any(run.status != OK for run in record.runs.values()) else EXIT_OK
    data = summary(record, finished, status, fleet.digests, fleet.samples,
                   shard_summary(options.shard, nb) if options.shard else None, options.timing)
    json_path, html_path = write_reports(data, options.output_dir)
    print_table(report, data, json_path, html_path, (finished - record.started).total_seconds())
    if comparison is not None:
        comparison.report(report, list(record.runs))
        if status == EXIT_OK and options.fail_on_change and comparison.changed:
            status = EXIT_CHANGED
    return status


@contextlib.contextmanager
def threads_mostly_waiting():
    """The interpreter set for a run's hundreds of threads, which mostly wait
    on the network. A thread kept waiting for the GIL longer than the switch
    interval makes the holder hand it over: at Python's 5 ms, a hundred hosts'
    run spent a third of its CPU samples in the kernel switching threads.
    The threads give the GIL up as they wait anyway. And the objects of what
    was imported are kept out of the cyclic collector's passes, which would
    visit every one of them (80-190 ms a 100-host run). Both are put back
    after (a caller may run on in-process)."""
    interval = sys.getswitchinterval()
    gc.freeze()
    sys.setswitchinterval(FLEET_SWITCH_INTERVAL_S)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        gc.unfreeze()


def _on_sigint(fleet: Fleet, events: FleetEvents) -> None:
    if fleet.record.interrupted.is_set():
        events.note("still stopping: interrupting the running cells and closing the sessions")
    else:
        events.note("interrupted: stopping every running cell and closing every session")
    fleet.interrupt()
