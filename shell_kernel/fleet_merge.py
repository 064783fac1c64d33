"""`python -m shell_kernel merge DIR... -o OUT`: the output directories of
`run --hosts ... --shard I/N` joined into one, as if one run had done it:
summary.json and summary.html with the hosts in the list's order, the same
counts and groups (made again from every host's digests, fleet_drift.py),
and the hosts' notebooks (and spilled output) copied into OUT.

Everything is checked before anything is written: directories of different
notebooks (or parameters) or host lists, not holding their slice's hosts, or
holding the same hosts, are refused. Shards not given leave their hosts
`skipped`, saying so. Shards run with --no-timing (no times in summary.json)
merge into a summary without times, as a --no-timing run writes it.
"""

from __future__ import annotations

import datetime
import json
import shutil
import sys
from pathlib import Path
from typing import TextIO

from .fleet_report import cells_summary, print_table, strip_timing, timed, write_reports
from .fleet_shards import shard_names
from .jobs import OK, SKIPPED
from .notebook_job import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, RunError
from .output_files import check_dir, new_file, write_file


KEYS = ("notebook", "parameters", "exit_status", "stop_reason", "hosts", "cells")
TIMES = ("started", "finished")  # not there after --no-timing
SHARD_KEYS = ("index", "count", "hosts", "notebook_sha256")


def read_shard(directory: Path) -> dict:
    """DIR/summary.json of a --shard run."""
    path = directory / "summary.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise RunError(f"{directory}: no summary.json here; give the --output-dir of "
                       "`run --hosts ... --shard I/N`") from None
    except (OSError, ValueError) as err:
        raise RunError(f"{path}: cannot read it ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("shard"), dict):
        raise RunError(f"{path} is not from a --shard run; merge joins the output directories "
                       "of `run --hosts ... --shard I/N`")
    lacking = [key for key in KEYS if key not in data] + \
        [key for key in TIMES if (key in data) != (TIMES[0] in data)] + \
        [f"shard.{key}" for key in SHARD_KEYS if key not in data["shard"]]
    if lacking:
        raise RunError(f"{path} has no {', '.join(lacking)}: written by another version of "
                       "shell_kernel? Run the shards again with this one")
    return data


def check(shards: dict[Path, dict]) -> None:
    """One notebook, one host list, each shard whole, each host in one directory only."""
    first_dir, first = next(iter(shards.items()))
    owner: dict[str, Path] = {}
    for directory, data in shards.items():
        if data["shard"]["notebook_sha256"] != first["shard"]["notebook_sha256"]:
            raise RunError(f"{directory} ran another notebook than {first_dir} "
                           f"({data['notebook']}, not {first['notebook']}, or other parameters "
                           "or cells); merge joins the shards of one run")
        if (data["shard"]["hosts"], data["shard"]["count"]) != \
                (first["shard"]["hosts"], first["shard"]["count"]):
            raise RunError(f"{directory} is shard {_label(data)} of another host list than "
                           f"{first_dir} (shard {_label(first)}); merge joins the shards of one run")
        slice_names = shard_names(first["shard"]["hosts"], data["shard"]["index"], first["shard"]["count"])
        if set(data["hosts"]) != slice_names:
            raise RunError(f"{directory}/summary.json does not hold the hosts of shard "
                           f"{_label(data)} ({len(data['hosts'])} there, {len(slice_names)} in the "
                           "slice); give the shard's directory as its run left it")
        for name in data["hosts"]:
            if name in owner:
                raise RunError(f"{owner[name]} and {directory} both hold host {name} (shards "
                               f"{_label(shards[owner[name]])} and {_label(data)}); give each "
                               "shard's directory once")
            owner[name] = directory


def _label(data: dict) -> str:
    return f"{data['shard']['index']}/{data['shard']['count']}"


def merged(shards: dict[Path, dict]) -> dict:
    """The summary one run on every host of the list would have written."""
    runs = list(shards.values())
    first = runs[0]["shard"]
    given = {name: host for data in runs for name, host in data["hosts"].items()}
    missing = sorted(set(range(1, first["count"] + 1)) - {data["shard"]["index"] for data in runs})
    absent = {"status": SKIPPED, "cells": [], "notebook": None, "duration_s": None,
              "failed_cell": None, "stderr_tail": "",
              "error": "not merged: the output of shard "
                       + ", ".join(f"{index}/{first['count']}" for index in missing)
                       + " was not given"}
    hosts = {name: given.get(name, absent) for name in first["hosts"]}
    samples = {group["digest"]: group["sample"]
               for data in runs for cell in data["cells"] for group in cell["groups"]}
    reasons = list(dict.fromkeys(data["stop_reason"] for data in runs if data["stop_reason"]))
    status = EXIT_INTERRUPTED if any(data["exit_status"] == EXIT_INTERRUPTED for data in runs) \
        else EXIT_FAILED if any(host["status"] != OK for host in hosts.values()) else EXIT_OK
    data = {
        "notebook": runs[0]["notebook"],
        "started": min(data.get("started", "") for data in runs),
        "finished": max(data.get("finished", "") for data in runs),
        "parameters": runs[0]["parameters"],
        "exit_status": status,
        "stop_reason": "; ".join(reasons) or None,
        "hosts": hosts,
        "cells": cells_summary([(cell["index"], cell["title"]) for cell in runs[0]["cells"]],
                               hosts, samples),
    }
    if not all(timed(shard) for shard in runs):  # one --no-timing shard: no times at all
        strip_timing(data)
    return data


def copy_host_files(directory: Path, notebook: str, out: Path) -> None:
    """A host's notebook, and the output it spilled (DIR/<host>.output/), into out."""
    write_file(out / notebook, (directory / notebook).read_bytes())
    spilled = directory / (Path(notebook).stem + ".output")
    if not spilled.is_dir():
        return
    for source in spilled.iterdir():
        target = out / spilled.name / source.name
        if target.is_symlink() or target.exists():
            target.unlink()  # a link goes, not what it names
        with open(source, "rb") as reading, new_file(target.parent, target.name) as writing:
            shutil.copyfileobj(reading, writing)


def merge(directories: list[Path], out: Path, report: TextIO | None = None) -> int:
    """Check, merge, write OUT; 0 if every host of the merged run is ok, else 1."""
    report = sys.stdout if report is None else report
    shards: dict[Path, dict] = {}
    for directory in directories:
        if directory.resolve() in (known.resolve() for known in shards):
            raise RunError(f"{directory} is given twice; give each shard's directory once")
        shards[directory] = read_shard(directory)
    check(shards)
    if out.resolve() in (directory.resolve() for directory in shards):
        raise RunError(f"-o {out}: that is one of the shards' directories; give a new one")
    for directory, shard in shards.items():
        for name, host in shard["hosts"].items():
            if host["notebook"] and not (directory / host["notebook"]).is_file():
                raise RunError(f"{directory}/{host['notebook']} (host {name}'s notebook) is "
                               "missing; give the shard's directory as its run left it")
    data = merged(shards)
    try:
        check_dir(out)
        for directory, shard in shards.items():
            for host in shard["hosts"].values():
                if host["notebook"]:
                    copy_host_files(directory, host["notebook"], out)
        json_path, html_path = write_reports(data, out)
    except OSError as err:  # UnsafeOutput too: OUT is another user's, or a file
        raise RunError(f"-o {out}: {err}") from None
    took = (datetime.datetime.fromisoformat(data["finished"])
            - datetime.datetime.fromisoformat(data["started"])).total_seconds() \
        if timed(data) else None
    print_table(report, data, json_path, html_path, took)
    return EXIT_OK if data["exit_status"] == EXIT_OK else EXIT_FAILED
