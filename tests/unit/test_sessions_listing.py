"""`python -m shell_kernel sessions`: the listing of what launch.sh finds in
this user's sessions directory, whatever the files there hold. No kernel
runs: the directories are made by hand, as a crash or another tool might
leave them, and listed by the real launch.sh on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shell_kernel.sessions_command import SessionListing, format_listing


def sessions(tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shell_kernel", "sessions"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TMPDIR": str(tmp_path)})


def session_dir(tmp_path: Path, name: str, **files: str) -> Path:
    top = tmp_path / f"shell_kernel-{os.getuid()}"
    top.mkdir(mode=0o700, exist_ok=True)
    path = top / name
    path.mkdir(mode=0o700)
    for file, text in files.items():
        (path / file).write_text(text)
    return path


def test_a_time_out_of_range_is_listed_as_unknown(tmp_path):
    """A created file holding 99999999999999999 made `sessions` crash with a
    traceback (time.gmtime overflowed)."""
    session_dir(tmp_path, "future", created="99999999999999999\n",
                attached="99999999999999999999999\n", started="1 -5\n")
    session_dir(tmp_path, "fine", created="1700000000\n")
    done = sessions(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    assert "unknown time" in lines["future"] and "ended" in lines["future"]
    assert "2023-11-14 22:13:20 UTC" in lines["fine"]


def test_names_are_printed_escaped(tmp_path):
    """A directory whose name held an escape sequence reached the terminal raw."""
    session_dir(tmp_path, "evil\x1b]0;owned\x07\x1b[2J")
    done = sessions(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "evil\\x1b]0;owned\\x07\\x1b[2J" in done.stdout


def test_listing_escapes_every_unprintable_character():
    listing = format_listing([SessionListing("a\tb\udcff\u202ec", "ended", None, None,
                                             None, None, 0)], "here")
    assert "a\\tb\\xffc" not in listing  # the bidi override is not printable either
    assert "a\\tb\\xff\\u202ec" in listing
