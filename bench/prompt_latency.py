"""Figure 10: prompts (issue "Answer prompts from the notebook").

A cell prints a timestamp of the host's clock ($EPOCHREALTIME; the SSH host
is this machine, over loopback, so the clocks are one), then `read -p`s, then
prints a second timestamp. The client answers each input_request at once.
Measured per prompt: host clock before the prompt → input_request at the
client (detection: the watcher's poll, the settle time for the prompt's
text, the trip to the client), and answer sent → the command's next output
at the client.
"""

from __future__ import annotations

import queue
import statistics
import time

from client import KernelSession

CELL = ("for i in 1 2 3 4 5; do printf 'before %s\\n' \"$EPOCHREALTIME\"; read -p 'go: ' v; "
        "printf 'after %s\\n' \"$EPOCHREALTIME\"; done")


def _one_cell(session: KernelSession, timeout: float) -> tuple[list[float], list[float]]:
    kc = session.kc
    msg_id = kc.execute(CELL, allow_stdin=True, store_history=False)
    before: list[float] = []
    asked_at: list[float] = []
    answered_at: list[float] = []
    after_at: list[float] = []
    deadline = time.monotonic() + timeout
    idle = False
    while not idle:
        if time.monotonic() > deadline:
            raise RuntimeError("the prompt cell did not finish")
        try:
            kc.get_stdin_msg(timeout=0.002)
            asked_at.append(time.time())
            kc.input("x")
            answered_at.append(time.time())
        except queue.Empty:
            pass
        try:
            msg = kc.get_iopub_msg(timeout=0.002)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status":
            idle = msg["content"]["execution_state"] == "idle"
        elif msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            for line in msg["content"]["text"].splitlines():
                word, _, stamp = line.partition(" ")
                if word == "before":
                    before.append(float(stamp))
                elif word == "after":
                    after_at.append(time.time())
    if not (len(before) == len(asked_at) == len(after_at) == 5):
        raise RuntimeError(f"expected 5 prompts, got {len(asked_at)} (and {len(before)} "
                           f"stamps before, {len(after_at)} outputs after)")
    detect = [(asked - printed) * 1000 for asked, printed in zip(asked_at, before)]
    resume = [(out - answered) * 1000 for out, answered in zip(after_at, answered_at)]
    return detect, resume


def prompt_latency(session: KernelSession, profile, settings) -> dict:
    detect: list[float] = []
    resume: list[float] = []
    for _ in range(4):
        d, r = _one_cell(session, settings.cell_timeout)
        detect += d
        resume += r
    return {"prompts": len(detect),
            "median_detect_ms": statistics.median(detect), "max_detect_ms": max(detect),
            "median_resume_ms": statistics.median(resume), "max_resume_ms": max(resume)}
