"""Interrupt to reply, two versions of shell_kernel side by side in one run.

    .venv/bin/python bench/interrupt_ab.py OLD_TREE [NEW_TREE] [--times 10] [--rounds 2]

OLD_TREE and NEW_TREE are checkouts of the package (e.g. `git archive REV |
tar -x -C /tmp/old`; NEW_TREE defaults to this one), put first on the
kernels' PYTHONPATH. For each backend (local, the default durable SSH
session, --ephemeral; SSH against bench/sshenv.py's throw-away sshd) and
each version in turn, a kernel (jupyter_client) runs `sleep` cells, is
interrupted 0.2 s after each printed its first line, and the time from
KernelManager.interrupt_kernel() to the execute_reply is taken. Rounds
alternate the versions, so that the machine's load falls on both alike.
Prints the medians as a markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from jupyter_client.manager import KernelManager

sys.path.insert(0, str(Path(__file__).parent))
import sshenv  # noqa: E402

BACKENDS = (("local", "shell"), ("durable SSH", "shell-ssh-bench"),
            ("ephemeral SSH", "shell-ssh-ephemeral-bench"))


def interrupt_times(spec: str, tree: str, times: int) -> list[float]:
    """Milliseconds from interrupt_kernel() to the reply, `times` cells."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = tree
    manager = KernelManager(kernel_name=spec)
    try:
        manager.start_kernel()
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old
    client = manager.client()
    client.start_channels()
    found = []
    try:
        client.wait_for_ready(timeout=120)
        for n in range(times):
            msg_id = client.execute(f"echo started; sleep 1000.{n}")
            while True:
                msg = client.get_iopub_msg(timeout=60)
                if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream"
                        and "started" in msg["content"]["text"]):
                    break
            time.sleep(0.2)
            start = time.monotonic()
            manager.interrupt_kernel()
            while (reply := client.get_shell_msg(timeout=60))["parent_header"].get("msg_id") != msg_id:
                pass
            found.append((time.monotonic() - start) * 1000)
            if reply["content"]["status"] != "error":
                raise RuntimeError(f"the interrupted cell was not an error: {reply['content']}")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", help="the first version's package tree")
    parser.add_argument("new", nargs="?", default=str(Path(__file__).resolve().parents[1]),
                        help="the second version's package tree (default: this one)")
    parser.add_argument("--times", type=int, default=10, help="interrupts per kernel (default 10)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both versions (default 2)")
    args = parser.parse_args()
    found: dict[tuple[str, str], list[float]] = {}
    with sshenv.SSHEnvironment(want_sshkernel=False):
        for _ in range(args.rounds):
            for label, spec in BACKENDS:
                for tree in (args.old, args.new):
                    found.setdefault((label, tree), []).extend(
                        interrupt_times(spec, tree, args.times))
    print(f"Interrupt to reply, {time.strftime('%Y-%m-%d %H:%M')}, load average "
          f"{os.getloadavg()[0]:.2f}; medians of {args.times * args.rounds} interrupts "
          "(min-max):\n")
    print(f"| backend | {args.old} | {args.new} |")
    print("|---|---|---|")
    for label, _ in BACKENDS:
        cells = [found[(label, tree)] for tree in (args.old, args.new)]
        print(f"| {label} | " + " | ".join(
            f"{statistics.median(c):.1f} ms ({min(c):.1f}-{max(c):.1f})" for c in cells) + " |")


if __name__ == "__main__":
    main()
