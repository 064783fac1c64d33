"""`merge` (fleet_merge.py) on shard directories made here by hand: what it
checks, what it writes. No kernel, shell or host: the end-to-end merge of
real shards is in tests/test_fleet_drift.py."""

from __future__ import annotations

import copy
import io
import json
import re
from pathlib import Path

import pytest

from shell_kernel.fleet_merge import merge, merged
from shell_kernel.notebook_job import RunError

ALL = ["web1", "web2", "web3"]


def host(status="ok", *digests, notebook=None):
    return {"status": status, "error": None if status == "ok" else "cell 0 failed",
            "cells": [{"index": index, "exit_code": 0 if status == "ok" else 1,
                       "duration_s": 0.1, "digest": digest}
                      for index, digest in enumerate(digests)],
            "notebook": notebook, "duration_s": 0.5, "failed_cell": None, "stderr_tail": ""}


def shard(index, hosts, count=2, exit_status=0, started="2026-12-03T10:00:00+00:00",
          sha="n1", samples=None):
    groups = [{"hosts": [name], "exit_code": 0, "digest": digest, "sample": sample}
              for name, (digest, sample) in (samples or {}).items()]
    return {"notebook": "/x/check.ipynb", "started": started,
            "finished": "2026-12-03T10:01:00+00:00", "parameters": {"a": "1"},
            "exit_status": exit_status, "stop_reason": None, "hosts": hosts,
            "cells": [{"index": 0, "title": "Check", "ok": 0, "failed": 0, "not_run": 0,
                       "groups": groups}],
            "shard": {"index": index, "count": count, "hosts": ALL, "notebook_sha256": sha}}


def write(directory: Path, data: dict) -> Path:
    directory.mkdir()
    (directory / "summary.json").write_text(json.dumps(data))
    for host in data["hosts"].values():
        if host["notebook"]:
            (directory / host["notebook"]).write_text('{"cells": []}')
    return directory


def test_merged_is_one_run():
    one = shard(1, {"web1": host("ok", "d1")}, samples={"web1": ("d1", "same\n")})
    two = shard(2, {"web3": host("ok", "d1"), "web2": host("failed", "d2")}, exit_status=1,
                started="2026-12-03T09:59:00+00:00", samples={"web2": ("d2", "other\n")})
    data = merged({Path("b"): two, Path("a"): one})
    assert list(data["hosts"]) == ALL  # the list's order, not the shards'
    assert data["started"] == "2026-12-03T09:59:00+00:00" and data["exit_status"] == 1
    assert "shard" not in data
    [cell] = data["cells"]
    assert (cell["title"], cell["ok"], cell["failed"], cell["not_run"]) == ("Check", 2, 1, 0)
    assert [(g["hosts"], g["exit_code"], g["sample"]) for g in cell["groups"]] == [
        (["web1", "web3"], 0, "same\n"), (["web2"], 1, "other\n")]


def test_a_shard_not_given_leaves_its_hosts_skipped():
    data = merged({Path("a"): shard(1, {"web1": host("ok", "d1")}, count=3)})
    assert data["hosts"]["web2"]["status"] == "skipped"
    assert data["hosts"]["web3"]["error"] == \
        "not merged: the output of shard 2/3, 3/3 was not given"
    assert data["exit_status"] == 1 and data["cells"][0]["not_run"] == 2


def test_an_interrupted_shard_makes_the_run_interrupted():
    data = merged({Path("a"): shard(1, {"web1": host("ok")}, exit_status=130),
                   Path("b"): shard(2, {"web2": host("ok"), "web3": host("ok")})})
    assert data["exit_status"] == 130


def test_merge_writes_the_directory(tmp_path):
    one = write(tmp_path / "one", shard(1, {"web1": host("ok", "d1", notebook="web1.ipynb")}))
    two = write(tmp_path / "two", shard(2, {"web2": host("ok", "d1", notebook="web2.ipynb"),
                                            "web3": host("ok", "d1", notebook="web3.ipynb")}))
    (two / "web2.output").mkdir()
    (two / "web2.output" / "cell-0.txt").write_text("the rest\n")
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (out / "web1.ipynb").symlink_to(victim)  # replaced, never followed
    report = io.StringIO()
    assert merge([one, two], out, report) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "summary.html", "summary.json", "web1.ipynb", "web2.ipynb", "web2.output", "web3.ipynb"]
    assert victim.read_text() == "precious\n" and not (out / "web1.ipynb").is_symlink()
    assert (out / "web2.output" / "cell-0.txt").read_text() == "the rest\n"
    assert list(json.loads((out / "summary.json").read_text())["hosts"]) == ALL
    assert "OK: 3 hosts: 3 ok" in report.getvalue()


def test_what_merge_refuses(tmp_path):
    base = shard(1, {"web1": host("ok", notebook="web1.ipynb")})
    one = write(tmp_path / "one", base)
    other_nb = copy.deepcopy(base)
    other_nb["shard"].update(index=2, notebook_sha256="n2")
    other_nb["hosts"] = {"web2": host("ok")}
    other_list = copy.deepcopy(other_nb)
    other_list["shard"].update(notebook_sha256="n1", hosts=["web1", "web2"])
    same_host = copy.deepcopy(base)  # shard 1/2 again
    partial = copy.deepcopy(other_nb)
    partial["shard"]["notebook_sha256"] = "n1"  # shard 2/2 without web3
    old = {key: value for key, value in base.items() if key != "cells"}
    missing = copy.deepcopy(base)
    missing["hosts"] = {"web1": host("ok", notebook="gone.ipynb")}
    cases = [(other_nb, "ran another notebook than"), (other_list, "of another host list than"),
             (same_host, "both hold host web1 (shards 1/2 and 1/2)"),
             (partial, "summary.json does not hold the hosts of shard 2/2 (1 there, 2 in the slice)"),
             (old, "has no cells: written by another version"),
             ({"hosts": {}}, "is not from a --shard run"),
             (missing, "gone.ipynb (host web1's notebook) is missing")]
    for number, (data, message) in enumerate(cases):
        directory = tmp_path / f"case{number}"
        directory.mkdir()
        (directory / "summary.json").write_text(json.dumps(data))
        dirs = [directory] if data is missing else [one, directory]
        with pytest.raises(RunError, match=re.escape(message)):
            merge(dirs, tmp_path / "out")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "summary.json").write_text("{")
    with pytest.raises(RunError, match="cannot read it"):
        merge([tmp_path / "broken"], tmp_path / "out")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    with pytest.raises(RunError, match="a file is there"):
        merge([one], a_file)
    assert not (tmp_path / "out").exists()
