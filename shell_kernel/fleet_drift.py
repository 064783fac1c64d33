"""Which hosts differ: for every cell of a fleet run, its hosts grouped by
identical output and exit status.

Each host's cell output is reduced, when the cell ends, to a Fingerprint: a
digest of the output (stdout, stderr, displays and the error, as the host's
notebook holds them) and a short sample, after the host's own names (its
fleet name and what `hostname` prints) are replaced by PLACEHOLDER, so that
`echo $SHELL_KERNEL_HOST` or `hostname` print the same on every host. The
groups are then made from the digests alone, from summary.json's data, so
that `merge` regroups shards exactly as one run groups its hosts.

Pure logic: no I/O, no threads.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass

PLACEHOLDER = "<host>"
SAMPLE_CHARS = 200
DIGEST_CHARS = 16  # hex digits kept: 64 bits, no collision among a run's outputs
#: What a name must not be part of to be the host's name (web1 is not in web17 or my-web1).
_WORD = r"[\w-]"


@dataclass(frozen=True)
class Fingerprint:
    digest: str
    sample: str


def own_names(fleet_name: str, hostname: str = "") -> list[str]:
    """The names a host's output may hold for itself: its fleet name, what
    `hostname` prints, and the short form of that; longest first, so that
    web1.example.com is replaced whole before web1."""
    names = {fleet_name, hostname.strip(), hostname.strip().split(".")[0]}
    return sorted((name for name in names if name), key=lambda name: (-len(name), name))


def normalizer(names: list[str]):
    """A function that replaces each of names, where it stands as a word of
    its own, by PLACEHOLDER."""
    if not names:
        return lambda text: text
    # No regex at all for text that holds none of the names (most cells'); a
    # host's regex made once, at its first cell that needs it.
    key = tuple(names)
    return lambda text: (_names_pattern(key).sub(PLACEHOLDER, text)
                         if any(name in text for name in key) else text)


@functools.lru_cache(maxsize=1024)
def _names_pattern(names: tuple[str, ...]) -> re.Pattern:
    # Each name's own look-behind after it, so that the pattern starts with the
    # names and the regex engine skips ahead to them (3x faster than a leading
    # look-behind).
    return re.compile("(?:" + "|".join(f"{re.escape(name)}(?<!{_WORD}{re.escape(name)})"
                                       for name in names) + f")(?!{_WORD})")


def fingerprint(outputs: list, names: list[str]) -> Fingerprint:
    """The digest and sample of a cell's nbformat outputs, the host's names replaced.

    stdout and stderr are compared each as a whole, so that how a host's
    output happened to be cut into messages does not matter; displays and
    the error output count, in order."""
    normal = normalizer(names)
    streams = {"stdout": [], "stderr": []}
    others: list[str] = []  # displays and errors, readable
    data: list[str] = []  # displays and errors, whole
    for output in outputs:
        kind = output.get("output_type")
        if kind == "stream":
            streams.setdefault(output.get("name", "stdout"), []).append(output.get("text", ""))
        elif kind in ("display_data", "execute_result"):
            bundle = output.get("data", {})
            others.append(normal(str(bundle.get("text/plain", ""))))
            data.append(normal(json.dumps(bundle, sort_keys=True)))
        elif kind == "error":
            others.append(normal(f"{output.get('ename', '')}: {output.get('evalue', '')}"))
            data.append(others[-1])
    stdout, stderr = (normal("".join(streams[name])) for name in ("stdout", "stderr"))
    whole = json.dumps([stdout, stderr, data], ensure_ascii=False)
    digest = hashlib.sha256(whole.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]
    readable = stdout + stderr + "".join(f"{text}\n" for text in others)
    return Fingerprint(digest, readable[:SAMPLE_CHARS])


def cell_groups(cells: list[int], hosts: dict[str, dict], samples: dict[str, str]) -> list[dict]:
    """For each cell index of `cells`, in that order: how many hosts ran it
    and exited 0 (ok), ran it and did not (failed), or never ran it (not_run),
    and its groups.

    hosts is summary.json's "hosts" (name -> {"cells": [{index, exit_code,
    digest}, ...]}), in the run's host order; samples maps digests to samples.
    A group is the hosts whose cell had one exit code and one digest:
    {hosts, exit_code, digest, sample}; the largest group first, then by the
    position of its first host."""
    ran: dict[int, dict[tuple, list[str]]] = {index: {} for index in cells}
    for name, host in hosts.items():
        for cell in host.get("cells", []):
            if cell["index"] in ran:
                key = (cell.get("exit_code"), cell.get("digest"))
                ran[cell["index"]].setdefault(key, []).append(name)
    result = []
    for index in cells:
        keyed = ran[index]  # dicts keep insertion order: by first host
        groups = [{"hosts": names, "exit_code": exit_code, "digest": digest,
                   "sample": samples.get(digest, "")}
                  for (exit_code, digest), names in keyed.items()]
        groups.sort(key=lambda group: -len(group["hosts"]))  # stable: ties by first host
        ok = sum(len(group["hosts"]) for group in groups if group["exit_code"] == 0)
        done = sum(len(group["hosts"]) for group in groups)
        result.append({"index": index, "ok": ok, "failed": done - ok,
                       "not_run": len(hosts) - done, "groups": groups})
    return result
