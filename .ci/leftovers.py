"""What a test run left on this machine: .ci/run's last check.

    python .ci/leftovers.py snapshot FILE   before the run: what is already there
    python .ci/leftovers.py check FILE      after it: fail on anything the run left

A run marks everything it starts: .ci/run exports SHELL_KERNEL_TEST_RUN (a
random value), every process inherits it, and the test sshd hands it to every
session it starts (shell_kernel/testing/sshd.py), so a shell that detached itself into
a session of its own still carries it. Left over are:
- processes whose environment holds the mark (after a grace for the last
  shutdowns), other than this checker and its ancestors;
- state directories (``$TMPDIR/shell_kernel.*``, named sessions under
  ``$TMPDIR/shell_kernel-UID/``) and the test kernels' IPC directories
  (``$TMPDIR/sk-ipc-*``, tests/harness.py) that were not there before the run;
- pyenv's rehash lock (~/.pyenv/shims/.pyenv-shim), which makes every later
  login shell, and so every new kernel, wait 60 s.
What is found is listed, then removed or killed, so that a failed run does not
leave it either; the exit status is 1 if anything was found.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

MARK = "SHELL_KERNEL_TEST_RUN"
GRACE_SECONDS = 10.0  # kernels and sessions that are still shutting down


def named_dir() -> Path:
    return Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / f"shell_kernel-{os.getuid()}"


# launch.sh's record of when it last swept this user's old state directories
# (at most once an hour): kept on a user's host by design, not a session's state.
SWEEP_STAMP = ".swept"


def state_dirs() -> set[str]:
    tmp = named_dir().parent
    found = {str(p) for p in tmp.glob("shell_kernel.*")} | {str(p) for p in tmp.glob("sk-ipc-*")}
    if named_dir().is_dir():
        found |= {str(p) for p in named_dir().iterdir() if p.name != SWEEP_STAMP}
    return found


def describe(directory: Path) -> str:
    """What a left state directory holds (its files, and its shell's record),
    to tell which kind of session left it."""
    try:
        names = sorted(p.name for p in directory.iterdir())
        record = (directory / "shell.start").read_text().strip() if "shell.start" in names else "-"
    except OSError as err:
        return f"unreadable: {err}"
    return f"shell.start {record!r}; files: {' '.join(names)[:200]}"


def pyenv_lock() -> Path:
    return Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "shims" / ".pyenv-shim"


def ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rfind(")") + 2:].split()[1])
    return pids


def marked_processes(mark: str) -> dict[int, str]:
    """pid -> command line of every process whose environment holds the mark
    (or a pass's mark made from it: MARK.NAME, see .ci/run's variants)."""
    needle = f"{MARK}={mark}".encode()
    spared = ancestors()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spared:
            continue
        try:
            if not any(value == needle or value.startswith(needle + b".")
                       for value in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")):
                continue
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        found[int(entry)] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    return found


def snapshot(path: Path) -> int:
    path.write_text(json.dumps({"state_dirs": sorted(state_dirs()),
                                "named_dir": named_dir().exists(),
                                "sweep_stamp": (named_dir() / SWEEP_STAMP).exists(),
                                "pyenv_lock": pyenv_lock().exists()}))
    return 0


def check(path: Path) -> int:
    before = json.loads(path.read_text())
    mark = os.environ.get(MARK, "")
    problems = []

    deadline = time.monotonic() + GRACE_SECONDS
    processes = marked_processes(mark) if mark else {}
    while processes and time.monotonic() < deadline:
        time.sleep(0.5)
        processes = marked_processes(mark)
    if processes:
        problems.append(f"{len(processes)} processes the tests started are still running:")
        problems += [f"  {pid} {cmd[:150]}" for pid, cmd in sorted(processes.items())]
        for pid in processes:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    new_dirs = sorted(state_dirs() - set(before["state_dirs"]))
    if new_dirs:
        problems.append(f"{len(new_dirs)} state directories the tests made are still there:")
        problems += [f"  {d} ({describe(Path(d))})" for d in new_dirs]
        for d in new_dirs:
            shutil.rmtree(d, ignore_errors=True)

    # The sweep's stamp, made by the run's sessions as by any user's: removed
    # (with its directory, if the run made that) to leave the machine as found.
    if not before.get("sweep_stamp"):
        (named_dir() / SWEEP_STAMP).unlink(missing_ok=True)
        if not before.get("named_dir"):
            try:
                named_dir().rmdir()
            except OSError:
                pass

    lock = pyenv_lock()
    if lock.exists() and not before["pyenv_lock"]:
        problems.append(f"pyenv's rehash lock {lock} is left: every later login shell would wait for it")
        lock.unlink(missing_ok=True)

    if problems:
        print("leftovers: the test run did not leave the machine as it found it "
              "(all removed now):", file=sys.stderr)
        print("\n".join(problems), file=sys.stderr)
        return 1
    print("leftovers: none (no processes, state directories or locks left by the tests)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("snapshot", "check"):
        sys.exit(__doc__)
    sys.exit((snapshot if sys.argv[1] == "snapshot" else check)(Path(sys.argv[2])))
