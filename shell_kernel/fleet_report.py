"""What a fleet run tells: live progress on stderr (fleet.py's FleetEvents);
summary.json, made from its FleetRun (jobs.py) and the cells' output digests
(fleet_drift.py); and summary.html and the table on stdout, made from
summary.json's data alone, as `merge` (fleet_merge.py) makes them for shards."""

from __future__ import annotations

import datetime
import html
import json
import os
import threading
import time
from pathlib import Path
from typing import TextIO

from .fleet_drift import cell_groups
from .jobs import (FAILED, HOST_STATUSES, INTERRUPTED, OK, UNREACHABLE, CellRun, FleetRun,
                   HostRun)
from .notebook_job import EXIT_INTERRUPTED, INJECTED_TAG, cell_label, print_columns, tally
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


def _ordered(hosts: dict[str, dict]) -> list[tuple[str, dict]]:
    """summary.json's hosts, failures first."""
    return sorted(hosts.items(), key=lambda item: STATUS_ORDER.get(item[1]["status"], 0))


def cell_title(cell) -> str:
    """A cell as the report titles it: its first comment line (shebang aside),
    or else its first line."""
    if INJECTED_TAG in cell.metadata.get("tags", []):
        return cell_label(cell)
    for line in cell.source.splitlines():
        line = line.strip()
        if line.startswith("#") and not line.startswith("#!") and line.strip("# "):
            return _one_line(line.lstrip("#").strip(), 80)
    return cell_label(cell, 80)


# ------------------------------------------------------------- summary.json
def summary(fleet: FleetRun, finished, exit_status: int, digests: dict[tuple[str, int], str],
            samples: dict[str, str], shard: dict | None = None, timing: bool = True) -> dict:
    """What the run did, as summary.json holds it; the page and the table
    are made from this alone (as merge makes them from the shards').
    Without timing (--no-timing), no time or duration (strip_timing)."""
    hosts = {name: {"status": run.status, "error": run.error,
                    "cells": [{"index": cell.index, "exit_code": cell.exit_code,
                               "duration_s": cell.duration_s,
                               "digest": digests.get((name, cell.index))}
                              for cell in run.cells],
                    "notebook": run.notebook_path.name if run.notebook_path else None,
                    "duration_s": run.duration_s, "failed_cell": run.failed_cell,
                    "stderr_tail": run.stderr_tail}
             for name, run in fleet.runs.items()}
    data = {
        "notebook": str(fleet.notebook),
        "started": fleet.started.isoformat(timespec="seconds"),
        "finished": finished.isoformat(timespec="seconds"),
        "parameters": dict(fleet.parameters),
        "exit_status": exit_status,
        "stop_reason": fleet.stop_reason,
        "hosts": hosts,
        "cells": cells_summary([(index, cell_title(fleet.nb.cells[index])) for index in fleet.cells],
                               hosts, samples),
    }
    if shard is not None:
        data["shard"] = shard
    if not timing:
        strip_timing(data)
    return data


def strip_timing(data: dict) -> None:
    """summary.json's data without a timestamp or duration, so that two runs
    of a deterministic notebook write the same summary; the page and the
    table then show none either."""
    for key in ("started", "finished"):
        data.pop(key, None)
    for host in data["hosts"].values():
        host.pop("duration_s", None)
        for cell in host["cells"]:
            cell.pop("duration_s", None)


def timed(data: dict) -> bool:
    """Whether summary.json's data holds the run's times (not --no-timing)."""
    return "started" in data


def cells_summary(cells: list[tuple[int, str]], hosts: dict[str, dict],
                  samples: dict[str, str]) -> list[dict]:
    """summary.json's "cells": each cell's title, counts and groups (fleet_drift.py)."""
    titles = dict(cells)
    return [{"index": cell["index"], "title": titles[cell["index"]], **cell}
            for cell in cell_groups([index for index, _ in cells], hosts, samples)]


def write_reports(data: dict, output_dir: Path) -> tuple[Path, Path]:
    """summary.json and summary.html of data into output_dir."""
    json_path, html_path = output_dir / "summary.json", output_dir / "summary.html"
    write_file(json_path, json.dumps(data, indent=1) + "\n")
    write_file(html_path, render_html(data))
    return json_path, html_path


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
table.groups td.hosts, table.groups td.sample { text-align: left; max-width: 40em; }
table.groups pre { margin: 0; white-space: pre-wrap; }
"""


def render_html(data: dict) -> str:
    esc = html.escape
    hosts, cells = data["hosts"], data["cells"]
    head = [f'<th class="cell" title="{esc(cell["title"])}">cell {cell["index"]}</th>'
            for cell in cells]
    rows = []
    for name, host in _ordered(hosts):
        done = {cell["index"]: cell for cell in host["cells"]}
        squares = []
        for index in (cell["index"] for cell in cells):
            cell = done.get(index)
            if cell is None:
                squares.append('<td class="cell not-run">&ndash;</td>')
                continue
            kind = "exit-ok" if cell["exit_code"] == 0 else \
                "exit-interrupted" if host["status"] == INTERRUPTED \
                and index == host["failed_cell"] else "exit-fail"
            took = "" if cell.get("duration_s") is None else \
                f'<small>{cell["duration_s"]:.2f} s</small>'
            squares.append(f'<td class="cell {kind}" data-index="{index}" '
                           f'data-exit="{cell["exit_code"]}">{cell["exit_code"]}{took}</td>')
        link = (f'<a href="{esc(host["notebook"])}">{esc(name)}</a>' if host["notebook"]
                else esc(name))
        took = "" if host.get("duration_s") is None else f'{host["duration_s"]:.2f} s'
        rows.append(f'<tr data-host="{esc(name)}" data-status="{host["status"]}">'
                    f'<td class="host">{link}</td>'
                    f'<td class="status status-{host["status"]}">{host["status"]}</td>'
                    + (f'<td>{took}</td>' if timed(data) else "") + f'{"".join(squares)}</tr>')
    details = []
    for name, host in _ordered(hosts):
        if host["status"] == OK:
            continue
        parts = [f'<h3 id="host-{esc(name)}">{esc(name)}: {host["status"]}</h3>',
                 f'<p class="error">{esc(host["error"] or "")}</p>']
        if host["stderr_tail"]:
            parts.append(f'<p>stderr of cell {host["failed_cell"]} (the end):</p>'
                         f'<pre class="stderr">{esc(host["stderr_tail"])}</pre>')
        details.append(f'<section class="host-detail" data-host="{esc(name)}">'
                       + "".join(parts) + "</section>")
    statuses = tally((host["status"] for host in hosts.values()), HOST_STATUSES)
    title = f"{Path(data['notebook']).name} on {len(hosts)} hosts"
    when = (f'started {_time(data["started"]):%Y-%m-%d %H:%M:%S} UTC, '
            f'finished {_time(data["finished"]):%H:%M:%S} UTC. ' if timed(data) else "")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>{STYLE}</style></head>
<body>
<h1>{esc(title)}</h1>
<p class="meta">{esc(data["notebook"])}: {when}<span class="tally">{esc(statuses)}</span>.
{esc(data["stop_reason"] or "")}</p>
<table class="hosts">
<thead><tr><th class="host">host</th><th>status</th>{"<th>time</th>" if timed(data) else ""}{"".join(head)}</tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
{chr(10).join(details)}
<h2>Cells: which hosts differ</h2>
{chr(10).join(_html_cell(cell) for cell in cells)}
</body></html>
"""


def _html_cell(cell: dict) -> str:
    """One cell's counts and groups: hosts with the same output and exit status."""
    esc = html.escape
    groups = cell["groups"]
    verdict = ("the same output on every host that ran it" if len(groups) == 1
               else f"{len(groups)} different outputs" if groups else "run on no host")
    # The hosts of the smaller groups shown, the largest group's on a click.
    rows = [f'<tr class="group" data-size="{len(group["hosts"])}" '
            f'data-exit="{group["exit_code"]}" data-digest="{esc(group["digest"] or "")}">'
            f'<td class="hosts"><details{" open" if number else ""}>'
            f'<summary>{_hosts(len(group["hosts"]))}</summary>'
            f'{esc(", ".join(group["hosts"]))}</details></td>'
            f'<td class="{"exit-ok" if group["exit_code"] == 0 else "exit-fail"}">'
            f'{group["exit_code"]}</td><td><code>{esc((group["digest"] or "")[:8])}</code></td>'
            f'<td class="sample"><pre>{esc(group["sample"])}</pre></td></tr>'
            for number, group in enumerate(groups)]
    table = ('<table class="groups"><thead><tr><th>hosts</th><th>exit</th><th>digest</th>'
             f'<th>output (the start)</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
             if groups else "")
    return (f'<section class="cell-groups" data-index="{cell["index"]}">'
            f'<h3>cell {cell["index"]}: {esc(cell["title"])}</h3>'
            f'<p class="counts">{esc(_counts(cell))}: {verdict}</p>{table}</section>')


def _time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


# -------------------------------------------------------------- stdout table
NAMES_SHOWN = 10  # host names listed for a group on stdout
GROUPS_SHOWN = 10  # groups of a cell on stdout (summary.json and the page hold them all)
SAMPLE_SHOWN = 60  # characters of a group's sample on stdout


def print_table(out: TextIO, data: dict, json_path, html_path, took: float | None) -> None:
    """The hosts (failures first), each cell's recap, the verdict and the files
    (and the run's wall time, unless took is None: merged untimed shards)."""
    hosts, cells = data["hosts"], data["cells"]
    times = timed(data)  # a column of times, unless --no-timing
    rows = [("host", "status", "cells") + (("time",) if times else ()) + ("error",)]
    for name, host in _ordered(hosts):
        duration = "-" if host.get("duration_s") is None else f"{host['duration_s']:.2f} s"
        rows.append((name, host["status"], f"{len(host['cells'])}/{len(cells)}")
                    + ((duration,) if times else ()) + (_one_line(host["error"], 100),))
    print_columns(out, rows, "llrr" if times else "llr")
    print_recap(out, cells)
    statuses = [host["status"] for host in hosts.values()]
    verdict = "OK" if statuses.count(OK) == len(hosts) else \
        "INTERRUPTED" if data["exit_status"] == EXIT_INTERRUPTED else "FAILED"
    print(f"\n{verdict}: {len(hosts)} hosts: {tally(statuses, HOST_STATUSES)}"
          + ("" if took is None else f"; {took:.1f} s"), file=out)
    print(f"wrote {json_path.parent}/<host>.ipynb, {json_path} and {html_path}",
          file=out, flush=True)


def print_recap(out: TextIO, cells: list[dict]) -> None:
    """Per cell: ok, failed and not run; and where the hosts' outputs differ,
    the first groups: size, digest, the start of the output, and the hosts of
    all but the largest; then how many more, and which of their hosts failed."""
    print("\ncells:", file=out)
    width = max((len(str(cell["index"])) for cell in cells), default=1)
    for cell in cells:
        groups = cell["groups"]
        differs = f"; {len(groups)} different outputs:" if len(groups) > 1 else ""
        print(f"  cell {cell['index']:<{width}}  {_one_line(cell['title'], 50)}: "
              f"{_counts(cell)}{differs}", file=out)
        if len(groups) < 2:
            continue
        for number, group in enumerate(groups[:GROUPS_SHOWN]):
            names = group["hosts"]
            shown = "" if number == 0 else f" ({_names(names)})"
            status = "" if group["exit_code"] == 0 else f" exit {group['exit_code']}"
            sample = json.dumps(_one_line(group["sample"], SAMPLE_SHOWN), ensure_ascii=False)
            print(f"      {_hosts(len(names))}: {(group['digest'] or '')[:8]}{status} {sample}{shown}",
                  file=out)
        rest = groups[GROUPS_SHOWN:]
        if rest:
            failed = [name for group in rest if group["exit_code"] != 0 for name in group["hosts"]]
            print(f"      ... and {len(rest)} more groups of "
                  f"{_hosts(sum(len(group['hosts']) for group in rest))}"
                  + (f" ({len(failed)} failed: {_names(failed)})" if failed else "")
                  + ": see summary.json or summary.html", file=out)


def _names(names: list[str]) -> str:
    more = len(names) - NAMES_SHOWN
    return ", ".join(names[:NAMES_SHOWN]) + (f", ... and {more} more" if more > 0 else "")


def _counts(cell: dict) -> str:
    counts = [(cell["ok"], "ok"), (cell["failed"], "failed"), (cell["not_run"], "not run")]
    return ", ".join(f"{number} {word}" for number, word in counts if number) or "no hosts"


def _hosts(count: int) -> str:
    return f"{count} host{'s' if count != 1 else ''}"
