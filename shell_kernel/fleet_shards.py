"""`run --hosts ... --shard I/N`: the I-th of N slices of the host list, the
same slice on every machine given the same list, so that N controllers
(a Kubernetes Indexed Job, a CI matrix, GNU parallel over machines) share a
fleet without talking to each other; `merge` (fleet_merge.py) joins their
output directories.

The slices: the hosts' names sorted (by code point, whatever order the list
gave them in), cut into N consecutive slices whose sizes differ by one at
most; a slice's hosts then run in the list's order. Pure logic.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from .jobs import FleetHost
from .notebook_job import RunError


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int
    #: Every host of the list, in its order: every shard's files are named as
    #: one run names them, and merge puts the hosts back in this order.
    all_hosts: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> tuple[int, int]:
    """I and N of "I/N", with 1 <= I <= N."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match:
        raise RunError(f"--shard {text}: give I/N, the I-th of N slices of the hosts, "
                       "e.g. --shard 1/4 .. --shard 4/4")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 1 <= index <= count:
        raise RunError(f"--shard {text}: I must be 1 to N (1-based), e.g. --shard 1/{max(count, 1)}"
                       f" .. --shard {max(count, 1)}/{max(count, 1)}")
    return index, count


def shard_names(names: list[str], index: int, count: int) -> set[str]:
    """The names in slice `index` (1-based) of `count`."""
    ordered = sorted(set(names))
    return set(ordered[(index - 1) * len(ordered) // count:index * len(ordered) // count])


def select(hosts: list[FleetHost], spec: str) -> tuple[list[FleetHost], Shard]:
    """The hosts of slice `spec` ("I/N") of the resolved list, in its order."""
    index, count = parse_shard(spec)
    names = shard_names([host.name for host in hosts], index, count)
    return ([host for host in hosts if host.name in names],
            Shard(index, count, tuple(host.name for host in hosts)))


def shard_summary(shard: Shard, nb) -> dict:
    """summary.json's "shard": which slice this is of which hosts, and what
    the notebook was (its cells, parameters injected), for merge to check."""
    return {"index": shard.index, "count": shard.count, "hosts": list(shard.all_hosts),
            "notebook_sha256": notebook_digest(nb)}


def notebook_digest(nb) -> str:
    """The code the hosts ran: every code cell's source, in order."""
    sources = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    return hashlib.sha256(json.dumps(sources).encode()).hexdigest()
