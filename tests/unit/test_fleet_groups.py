"""Drift across hosts (fleet_drift.py) and shards (fleet_shards.py): their
pure logic. No kernel, shell or host."""

from __future__ import annotations

import io

import pytest
from nbformat import NotebookNode

from shell_kernel.fleet_drift import (PLACEHOLDER, SAMPLE_CHARS, cell_groups, fingerprint,
                                      normalizer, own_names)
from shell_kernel.fleet_report import GROUPS_SHOWN, print_recap
from shell_kernel.fleet_shards import parse_shard, shard_names
from shell_kernel.notebook_job import RunError


def stream(name: str, text: str) -> NotebookNode:
    return NotebookNode(output_type="stream", name=name, text=text)


# ------------------------------------------------------------ fingerprints
def test_the_hosts_own_names_are_one_placeholder():
    web1 = fingerprint([stream("stdout", "I am web1 on web1.example.com (web1)\n")],
                       own_names("web1", "web1.example.com"))
    web2 = fingerprint([stream("stdout", "I am web2 on node7.example.com (node7)\n")],
                       own_names("web2", "node7.example.com\n"))
    assert web1 == web2
    assert web1.sample == f"I am {PLACEHOLDER} on {PLACEHOLDER} ({PLACEHOLDER})\n"


def test_a_name_inside_another_word_is_not_the_hosts_name():
    normal = normalizer(own_names("web1"))
    assert normal("web1 web17 my-web1 web1_x web1.log /srv/web1/") == \
        f"{PLACEHOLDER} web17 my-web1 web1_x {PLACEHOLDER}.log /srv/{PLACEHOLDER}/"
    assert [normal(text) for text in ("web1", "web1\n", "xweb1", "web1x", "-web1")] == \
        [PLACEHOLDER, f"{PLACEHOLDER}\n", "xweb1", "web1x", "-web1"]
    # another host's name stays: web1 printing web2 differs from web2 printing web1
    assert fingerprint([stream("stdout", "web2")], own_names("web1")) != \
        fingerprint([stream("stdout", "web1")], own_names("web2"))
    # names are text, not patterns
    assert normalizer(own_names("a.b"))("a.b axb") == f"{PLACEHOLDER} axb"
    assert normalizer([])("anything") == "anything"


def test_how_output_was_cut_into_messages_does_not_matter_but_its_stream_does():
    whole = fingerprint([stream("stdout", "a\nb\n"), stream("stderr", "oops\n")], [])
    cut = fingerprint([stream("stdout", "a\n"), stream("stderr", "oops\n"),
                       stream("stdout", "b\n")], [])
    assert whole == cut
    assert fingerprint([stream("stderr", "a\nb\noops\n")], []).digest != whole.digest
    assert fingerprint([], []).digest != fingerprint([stream("stdout", "\n")], []).digest


def test_displays_and_errors_count():
    shown = NotebookNode(output_type="display_data", metadata={},
                         data={"text/plain": "<text/html, 8 bytes>", "text/html": "<b>x</b>"})
    other = NotebookNode(output_type="display_data", metadata={},
                         data={"text/plain": "<text/html, 8 bytes>", "text/html": "<b>y</b>"})
    error = NotebookNode(output_type="error", ename="ExitCode", traceback=[],
                         evalue="exit status 3 from 'exit 3' (line 1)")
    plain = fingerprint([stream("stdout", "x\n")], [])
    with_display = fingerprint([stream("stdout", "x\n"), shown], [])
    assert with_display.digest not in (plain.digest, fingerprint([stream("stdout", "x\n"), other], []).digest)
    failed = fingerprint([stream("stdout", "x\n"), error], [])
    assert failed.sample == "x\nExitCode: exit status 3 from 'exit 3' (line 1)\n"
    assert with_display.sample == "x\n<text/html, 8 bytes>\n"


def test_the_sample_is_short_and_invalid_text_is_digested():
    long = fingerprint([stream("stdout", "x" * 10_000)], [])
    assert long.sample == "x" * SAMPLE_CHARS
    assert len(long.digest) == 16
    assert fingerprint([stream("stdout", "\udcff\x00")], []).digest  # surrogates from bytes


# ------------------------------------------------------------------ groups
def host(*cells):
    return {"cells": [{"index": index, "exit_code": code, "digest": digest}
                      for index, code, digest in cells]}


def test_hosts_are_grouped_by_output_and_status_largest_group_first():
    hosts = {"db2": host((0, 0, "b")), "web1": host((0, 0, "a")), "web2": host((0, 0, "a")),
             "web3": host((0, 1, "a")), "web4": host((0, 0, "a")), "down": host()}
    [cell] = cell_groups([0], hosts, {"a": "same", "b": "other"})
    assert (cell["index"], cell["ok"], cell["failed"], cell["not_run"]) == (0, 4, 1, 1)
    assert cell["groups"] == [
        {"hosts": ["web1", "web2", "web4"], "exit_code": 0, "digest": "a", "sample": "same"},
        {"hosts": ["db2"], "exit_code": 0, "digest": "b", "sample": "other"},
        {"hosts": ["web3"], "exit_code": 1, "digest": "a", "sample": "same"}]


def test_groups_per_cell_in_the_order_asked_and_hosts_that_stopped_early():
    hosts = {"a": host((0, 0, "x"), (2, 0, "y")), "b": host((0, 5, "z"))}
    cells = cell_groups([0, 2, 4], hosts, {})
    assert [(c["index"], c["ok"], c["failed"], c["not_run"]) for c in cells] == \
        [(0, 1, 1, 0), (2, 1, 0, 1), (4, 0, 0, 2)]
    assert cells[2]["groups"] == []
    assert [g["hosts"] for g in cells[0]["groups"]] == [["a"], ["b"]]  # a tie: host order
    assert cells[0]["groups"][0]["sample"] == ""


# ------------------------------------------------------------------ shards
def test_shard_specs():
    assert parse_shard("1/4") == (1, 4) and parse_shard(" 4 / 4 ") == (4, 4)
    for bad, message in (("3/2", "I must be 1 to N"), ("0/4", "I must be 1 to N"),
                         ("1/0", "I must be 1 to N"), ("1", "give I/N"), ("a/b", "give I/N"),
                         ("-1/4", "give I/N")):
        with pytest.raises(RunError, match=message):
            parse_shard(bad)


def test_shards_cover_the_hosts_once_whatever_their_order():
    names = [f"web{i}" for i in range(1, 101)] + ["db1", "db2", "lb"]
    for count in (1, 2, 3, 7, 103, 110):
        slices = [shard_names(names, index, count) for index in range(1, count + 1)]
        assert sorted(name for part in slices for name in part) == sorted(names)
        sizes = [len(part) for part in slices]
        assert max(sizes) - min(sizes) <= 1
        # another machine, the same list in another order: the same slices
        assert slices == [shard_names(names[::-1], index, count) for index in range(1, count + 1)]
    assert shard_names(["c", "a", "b", "d"], 1, 2) == {"a", "b"}
    assert shard_names(["a"], 1, 2) == set() and shard_names(["a"], 2, 2) == {"a"}


# ------------------------------------------------------- the stdout recap
def test_the_recap_shows_a_few_groups_and_the_smaller_groups_hosts():
    hosts = {f"h{n:02}": host((0, 0, "same" if n <= 30 else f"d{n}")) for n in range(1, 46)}
    hosts["h01"] = host((0, 2, "bad"))
    samples = {"same": "größe: 12 MB\n", "bad": "\x1b[31mno\n"}
    cells = [{"title": "Sizes", **cell} for cell in cell_groups([0], hosts, samples)]
    out = io.StringIO()
    print_recap(out, cells)
    lines = out.getvalue().splitlines()
    assert lines[:6] == [
        "", "cells:", "  cell 0  Sizes: 44 ok, 1 failed; 17 different outputs:",
        '      29 hosts: same "größe: 12 MB"',  # as printed, not escaped
        '      1 host: bad exit 2 "\\u001b[31mno" (h01)',  # control characters escaped
        '      1 host: d31 "" (h31)']
    assert lines[GROUPS_SHOWN + 3] == \
        "      ... and 7 more groups of 7 hosts: see summary.json or summary.html"
    assert len(lines) == GROUPS_SHOWN + 4
    # failed hosts past the groups shown are named
    many = {f"h{n:02}": host((0, 0, f"d{n}")) for n in range(1, 20)}
    many["h02"] = host((0, 2, "bad"))
    many["h19"] = host((0, 3, "worse"))
    out = io.StringIO()
    print_recap(out, [{"title": "t", **cell} for cell in cell_groups([0], many, samples)])
    lines = out.getvalue().splitlines()
    assert lines[-1] == ("      ... and 9 more groups of 9 hosts (1 failed: h19): "
                         "see summary.json or summary.html")
    # a smaller group of many hosts: the first ten named
    split = {f"h{n:02}": host((0, 0, "a" if n <= 15 else "b")) for n in range(1, 28)}
    out = io.StringIO()
    print_recap(out, [{"title": "t", **cell} for cell in cell_groups([0], split, {})])
    assert out.getvalue().splitlines()[-1] == \
        '      12 hosts: b "" (h16, h17, h18, h19, h20, h21, h22, h23, h24, h25, ... and 2 more)'
