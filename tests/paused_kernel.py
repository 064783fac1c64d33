"""The real shell_kernel kernel, with ipykernel's pauses recorded (tests only).

Run as `python tests/paused_kernel.py kernel ...` in place of `python -m
shell_kernel kernel ...`. ipykernel's execute_request sleeps before each
execute_reply (Kernel._execute_sleep) so that a cell's output reaches the
frontend first; each such sleep is appended, in seconds, as a line of the
file named by $SHELL_KERNEL_PAUSES, before it is slept.
"""

from __future__ import annotations

import os
import time

from ipykernel import kernelbase

from shell_kernel.cli import main

PAUSES = os.environ["SHELL_KERNEL_PAUSES"]


class RecordedTime:
    """kernelbase's view of the time module: sleep() is recorded."""

    def __getattr__(self, name):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        with open(PAUSES, "a") as record:
            record.write(f"{seconds}\n")
        time.sleep(seconds)


kernelbase.time = RecordedTime()

raise SystemExit(main())
