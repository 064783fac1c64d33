"""`run NB --compare PREVIOUS.ipynb`: this run's code cells beside an
earlier run's.

Cells are matched by id, else by source (the first unmatched earlier cell
with the same source). Each gets one result: ``same``; ``status A -> B``
(the exit status changed; "not run" for a cell that has none); ``output
changed`` (what it printed or displayed, errors included; not execution
counts, metadata or times); ``new`` (no earlier cell matches); ``removed``
(an earlier cell that matches none of this run's), listed last.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .notebook_job import METADATA_KEY, RunError, cell_label, print_columns

SAME, OUTPUT_CHANGED, NEW, REMOVED = "same", "output changed", "new", "removed"


@dataclass
class Row:
    label: str
    result: str
    cell_id: str | None
    before: int | None = None  # exit codes
    after: int | None = None

    @property
    def changed(self) -> bool:
        return self.result != SAME

    def as_json(self) -> dict:
        return {"id": self.cell_id, "label": self.label, "result": self.result,
                "exit_code_before": self.before, "exit_code_after": self.after}


def read_previous(path: Path):
    """The earlier run's notebook; RunError (before anything runs) if it is not one."""
    import nbformat

    path = Path(path)
    if not path.is_file():
        raise RunError(f"--compare {path}: {'not a file' if path.exists() else 'no such file'}; "
                       "give the .ipynb an earlier run saved")
    try:
        return nbformat.read(path, as_version=4)
    except Exception as err:  # noqa: BLE001 - JSON or schema errors, said plainly
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RunError(f"--compare {path}: not a notebook ({first})") from None


def compare(before, after) -> list[Row]:
    """A row for every code cell of either run."""
    old = [cell for cell in before.cells if cell.cell_type == "code"]
    by_id = {cell.get("id"): cell for cell in old if cell.get("id")}
    matched: set[int] = set()
    rows = []
    for cell in (cell for cell in after.cells if cell.cell_type == "code"):
        twin = by_id.get(cell.get("id")) if cell.get("id") else None
        if twin is None or id(twin) in matched:
            twin = next((c for c in old if id(c) not in matched and c.source == cell.source), None)
        if twin is None:
            rows.append(Row(cell_label(cell), NEW, cell.get("id"), after=_exit(cell)))
            continue
        matched.add(id(twin))
        a, b = _exit(twin), _exit(cell)
        if a != b:
            result = f"status {_shown(a)} -> {_shown(b)}"
        elif _outputs(twin) != _outputs(cell):
            result = OUTPUT_CHANGED
        else:
            result = SAME
        rows.append(Row(cell_label(cell), result, cell.get("id"), a, b))
    rows += [Row(cell_label(cell), REMOVED, cell.get("id"), before=_exit(cell))
             for cell in old if id(cell) not in matched]
    return rows


def _exit(cell) -> int | None:
    return (cell.get("metadata", {}).get(METADATA_KEY) or {}).get("exit_code")


def _shown(code: int | None) -> str:
    return "not run" if code is None else str(code)


def _outputs(cell) -> str:
    """What a cell showed, without what changes on every run of the same thing."""
    kept = []
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "stream":  # one stream's chunks, however the output was cut into messages
            if kept and kept[-1][:2] == (kind, output.get("name")):
                kept[-1] = (kind, output.get("name"), kept[-1][2] + output.get("text", ""))
            else:
                kept.append((kind, output.get("name"), output.get("text", "")))
        elif kind == "error":
            kept.append((kind, output.get("ename"), output.get("evalue")))
        else:
            kept.append((kind, output.get("data")))
    return json.dumps(kept, sort_keys=True, default=str)


def saved(previous: Path, rows: list[Row]) -> dict:
    """The comparison as the output notebook's metadata.shell_kernel.compare keeps it."""
    return {"previous": str(previous), "changed": sum(row.changed for row in rows),
            "cells": [row.as_json() for row in rows]}


def print_comparison(out: TextIO, previous: Path, rows: list[Row]) -> None:
    table = [("cell", "against " + str(previous))] + [(row.label, row.result) for row in rows]
    print_columns(out, table, "l")
    changed = sum(row.changed for row in rows)
    print(f"\n{'CHANGED' if changed else 'SAME'}: {changed} of {len(rows)} code cells changed "
          f"since {previous}", file=out, flush=True)


class FleetComparison:
    """`run --hosts ... --compare DIR`: each host's notebook against the one an
    earlier fleet run wrote for the same host (its DIR/summary.json names it).
    The workers call host() as they save; report() prints a line per host."""

    def __init__(self, previous_dir: Path):
        previous_dir = Path(previous_dir)
        summary = previous_dir / "summary.json"
        if not previous_dir.is_dir() or not summary.is_file():
            raise RunError(f"--compare {previous_dir}: with --hosts give an earlier fleet run's "
                           "--output-dir (a directory with summary.json)")
        try:
            hosts = json.loads(summary.read_text(encoding="utf-8"))["hosts"]
            self._files = {name: host.get("notebook") for name, host in hosts.items()}
        except (ValueError, KeyError, TypeError, AttributeError, OSError) as err:
            raise RunError(f"--compare {previous_dir}: its summary.json is not a fleet run's "
                           f"({type(err).__name__})") from None
        self.previous_dir = previous_dir
        self.rows: dict[str, list[Row] | str] = {}  # by host: rows, or why there are none

    def host(self, name: str, nb) -> None:
        """Compare a host's notebook, and keep the result in its metadata."""
        file = self._files.get(name)
        if not file:
            self.rows[name] = "no notebook in the earlier run"
            return
        try:
            before = read_previous(self.previous_dir / file)
        except RunError as err:
            self.rows[name] = str(err)
            return
        rows = self.rows[name] = compare(before, nb)
        nb.metadata.setdefault(METADATA_KEY, {})["compare"] = saved(self.previous_dir / file, rows)

    @property
    def changed(self) -> bool:
        return any(isinstance(rows, str) or any(row.changed for row in rows)
                   for rows in self.rows.values())

    def report(self, out: TextIO, hosts: list[str]) -> None:
        table = [("host", f"against {self.previous_dir}")]
        for name in hosts:
            rows = self.rows.get(name, "not compared: no notebook in this run")
            if isinstance(rows, str):
                table.append((name, rows))
                continue
            changes = [f"{row.label!r}: {row.result}" for row in rows if row.changed]
            table.append((name, f"{len(changes)} of {len(rows)} changed: " + "; ".join(changes)
                          if changes else f"same ({len(rows)} cells)"))
        print_columns(out, table, "l")
        print(f"\n{'CHANGED' if self.changed else 'SAME'}: compared with {self.previous_dir}",
              file=out, flush=True)
