"""What a fleet run tells: live progress on stderr (fleet.py's FleetEvents),
summary.json, summary.html and the per-host table on stdout, all from its
FleetRun (jobs.py)."""

from __future__ import annotations

import html
import json
import os
import threading
import time
from typing import TextIO

from .jobs import (FAILED, HOST_STATUSES, INTERRUPTED, OK, UNREACHABLE, CellRun, FleetRun,
                   HostRun)
from .notebook_job import print_columns, tally
from .output_files import write_file

#: Failures first in the table and the page.
STATUS_ORDER = {status: order for order, status in enumerate(HOST_STATUSES)}
REDRAW_INTERVAL = 0.25  # seconds between redraws of the live display
RUNNING_SHOWN = 8  # running hosts listed in the live display


class Progress:
    """Live progress: a redrawn block on a terminal, one line per event otherwise.

    Called from every host's worker thread."""

    def __init__(self, out: TextIO, hosts: int, cells: int):
        self.out = out
        self.hosts, self.cells = hosts, cells
        self.tty = getattr(out, "isatty", lambda: False)()
        self._lock = threading.Lock()
        self._counts = {OK: 0, FAILED: 0, UNREACHABLE: 0, INTERRUPTED: 0}
        self._running: dict[str, str] = {}  # host -> its current cell
        self._drawn = 0  # lines of the live block on screen
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._started = time.monotonic()

    # ------------------------------------------------------------ events
    def begin(self, notebook, jobs: int) -> None:
        self._line(f"Running {notebook} on {self.hosts} host{'s' if self.hosts != 1 else ''}, "
                   f"{jobs} at a time, {self.cells} code cell{'s' if self.cells != 1 else ''}")
        if self.tty:
            self._ticker = threading.Thread(target=self._tick, daemon=True,
                                            name="shell-kernel-fleet-progress")
            self._ticker.start()

    def batch_started(self, number: int, total: int, names: list[str]) -> None:
        self._line(f"batch {number}/{total}: {len(names)} host{'s' if len(names) != 1 else ''}")

    def host_started(self, name: str) -> None:
        with self._lock:
            self._running[name] = "connecting"
        if not self.tty:
            self._line(f"{name}: connecting")

    def cell_started(self, name: str, cell: CellRun) -> None:
        with self._lock:
            self._running[name] = f"[{cell.number}/{self.cells}] {cell.label}"

    def cell_ended(self, name: str, cell: CellRun) -> None:
        if not self.tty:
            self._line(f"{name}: [{cell.number}/{self.cells}] cell {cell.index}: "
                       f"exit {cell.exit_code} in {cell.duration_s:.2f} s")

    def host_ended(self, run: HostRun) -> None:
        with self._lock:
            self._running.pop(run.host.name, None)
            if run.status in self._counts:
                self._counts[run.status] += 1
        if run.status != OK or not self.tty:
            self._line(f"{run.host.name}: {run.status}" + (f": {_one_line(run.error)}"
                                                          if run.error else ""))

    def note(self, text: str) -> None:
        self._line(text)

    def end(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(2)
        with self._lock:
            self._clear()

    # ----------------------------------------------------------- drawing
    def _line(self, text: str) -> None:
        """A line that stays (above the live block, on a terminal)."""
        with self._lock:
            self._clear()
            stamp = "" if self.tty else time.strftime("%H:%M:%S ")
            print(stamp + text, file=self.out, flush=True)

    def _clear(self) -> None:
        if self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def _tick(self) -> None:
        while not self._stop.wait(REDRAW_INTERVAL):
            with self._lock:
                self._clear()
                lines = [self.status_line()]
                running = sorted(self._running.items())
                lines += [f"  {name}: {cell}" for name, cell in running[:RUNNING_SHOWN]]
                if len(running) > RUNNING_SHOWN:
                    lines.append(f"  ... and {len(running) - RUNNING_SHOWN} more")
                self.out.write("".join(line[:_width()] + "\n" for line in lines))
                self.out.flush()
                self._drawn = len(lines)

    def status_line(self) -> str:
        done = sum(self._counts.values())
        return (f"{done}/{self.hosts} done, {len(self._running)} running, "
                f"{self._counts[FAILED]} failed, {self._counts[UNREACHABLE]} unreachable "
                f"({time.monotonic() - self._started:.0f} s)")


def _width() -> int:
    try:
        return os.get_terminal_size().columns - 1
    except OSError:
        return 100


def _one_line(text: str | None, limit: int = 200) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _ordered(fleet: FleetRun) -> list[HostRun]:
    runs = list(fleet.runs.values())
    return sorted(runs, key=lambda run: STATUS_ORDER.get(run.status, 0))


# ------------------------------------------------------------- summary.json
def summary(fleet: FleetRun, finished, exit_status: int) -> dict:
    return {
        "notebook": str(fleet.notebook),
        "started": fleet.started.isoformat(timespec="seconds"),
        "finished": finished.isoformat(timespec="seconds"),
        "parameters": dict(fleet.parameters),
        "exit_status": exit_status,
        "hosts": {name: {"status": run.status, "error": run.error,
                         "cells": [{"index": cell.index, "exit_code": cell.exit_code,
                                    "duration_s": cell.duration_s} for cell in run.cells],
                         "notebook": run.notebook_path.name if run.notebook_path else None}
                  for name, run in fleet.runs.items()},
    }


def write_json(fleet: FleetRun, finished, exit_status: int):
    path = fleet.output_dir / "summary.json"
    write_file(path, json.dumps(summary(fleet, finished, exit_status), indent=1) + "\n")
    return path


# ------------------------------------------------------------- summary.html
STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: center; font-size: 13px; }
th.host, td.host { text-align: left; }
td.cell { min-width: 3em; }
td.cell small { display: block; color: #333; }
.exit-ok { background: #9fd89f; }
.exit-fail { background: #f2a0a0; }
.exit-interrupted { background: #f6d08a; }
.not-run { background: #eee; color: #888; }
.status-ok { color: #176117; }
.status-failed, .status-unreachable { color: #a11; font-weight: bold; }
.status-interrupted { color: #a60; font-weight: bold; }
.status-skipped { color: #777; }
pre { background: #f6f6f6; border: 1px solid #ddd; padding: 6px; overflow-x: auto; }
"""


def render_html(fleet: FleetRun, finished) -> str:
    esc = html.escape
    nb = fleet.nb
    head = [f'<th class="cell" title="{esc(nb.cells[i].source[:200])}">cell {i}</th>'
            for i in fleet.cells]
    rows = []
    for run in _ordered(fleet):
        done = {cell.index: cell for cell in run.cells}
        squares = []
        for index in fleet.cells:
            cell = done.get(index)
            if cell is None:
                squares.append('<td class="cell not-run">&ndash;</td>')
                continue
            kind = "exit-ok" if cell.exit_code == 0 else \
                "exit-interrupted" if run.status == INTERRUPTED and index == run.failed_cell \
                else "exit-fail"
            squares.append(f'<td class="cell {kind}" data-index="{index}" '
                           f'data-exit="{cell.exit_code}">{cell.exit_code}'
                           f'<small>{cell.duration_s:.2f} s</small></td>')
        link = (f'<a href="{esc(run.notebook_path.name)}">{esc(run.host.name)}</a>'
                if run.notebook_path else esc(run.host.name))
        took = "" if run.duration_s is None else f"{run.duration_s:.2f} s"
        rows.append(f'<tr data-host="{esc(run.host.name)}" data-status="{run.status}">'
                    f'<td class="host">{link}</td>'
                    f'<td class="status status-{run.status}">{run.status}</td>'
                    f'<td>{took}</td>{"".join(squares)}</tr>')
    details = []
    for run in _ordered(fleet):
        if run.status == OK:
            continue
        parts = [f'<h3 id="host-{esc(run.host.name)}">{esc(run.host.name)}: {run.status}</h3>',
                 f'<p class="error">{esc(run.error or "")}</p>']
        if run.stderr_tail:
            parts.append(f'<p>stderr of cell {run.failed_cell} (the end):</p>'
                         f'<pre class="stderr">{esc(run.stderr_tail)}</pre>')
        details.append(f'<section class="host-detail" data-host="{esc(run.host.name)}">'
                       + "".join(parts) + "</section>")
    statuses = tally((run.status for run in fleet.runs.values()), HOST_STATUSES)
    title = f"{fleet.notebook.name} on {len(fleet.runs)} hosts"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>{STYLE}</style></head>
<body>
<h1>{esc(title)}</h1>
<p class="meta">{esc(str(fleet.notebook))}: started {fleet.started:%Y-%m-%d %H:%M:%S} UTC,
finished {finished:%H:%M:%S} UTC. <span class="tally">{esc(statuses)}</span>.
{esc(fleet.stop_reason or "")}</p>
<table class="hosts">
<thead><tr><th class="host">host</th><th>status</th><th>time</th>{"".join(head)}</tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
{chr(10).join(details)}
</body></html>
"""


def write_html(fleet: FleetRun, finished):
    path = fleet.output_dir / "summary.html"
    write_file(path, render_html(fleet, finished))
    return path


# -------------------------------------------------------------- stdout table
def print_table(out: TextIO, fleet: FleetRun, json_path, html_path, finished) -> None:
    rows = [("host", "status", "cells", "time", "error")]
    for run in _ordered(fleet):
        rows.append((run.host.name, run.status, f"{len(run.cells)}/{len(fleet.cells)}",
                     "-" if run.duration_s is None else f"{run.duration_s:.2f} s",
                     _one_line(run.error, 100)))
    print_columns(out, rows, "llrr")
    statuses = [run.status for run in fleet.runs.values()]
    took = (finished - fleet.started).total_seconds()
    verdict = "OK" if statuses.count(OK) == len(fleet.runs) else \
        "INTERRUPTED" if fleet.interrupted.is_set() else "FAILED"
    print(f"\n{verdict}: {len(fleet.runs)} hosts: {tally(statuses, HOST_STATUSES)}; "
          f"{took:.1f} s", file=out)
    print(f"wrote {fleet.output_dir}/<host>.ipynb, {json_path} and {html_path}",
          file=out, flush=True)
