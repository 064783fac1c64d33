"""The markers tests look for among a pass's processes (pids_matching,
kill_markers: `sleep 1000.917` and the like) are each one file's own. Two
files' tests run side by side (pytest -n), so a marker in both would make
one test take the other's process for its own: it then waits for a process
it never started, or that a test beside it keeps alive."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LOOKED_FOR = re.compile(r"""\b(?:pids_matching|kill_markers)\(\s*["']([\d.]+)["']""")


def markers_in_several_files(texts: dict[str, str]) -> dict[str, list[str]]:
    """Each marker some file looks for, with the files it appears in (as
    pids_matching matches it: not part of a longer number), when more than one."""
    looked_for = {marker for text in texts.values() for marker in LOOKED_FOR.findall(text)}
    files = defaultdict(list)
    for marker in looked_for:
        appears = re.compile(r"(?<![\d.])" + re.escape(marker) + r"(?!\d)")
        files[marker] = sorted(name for name, text in texts.items() if appears.search(text))
    return {marker: names for marker, names in files.items() if len(names) > 1}


def test_the_check_finds_a_marker_two_files_use():
    texts = {"a.py": 'kernel.ok("sleep 1000.91 &")\nassert pids_matching("1000.91")',
             "b.py": 'kernel.ok("sleep 1000.91 & sleep 1000.911")',
             "c.py": 'kernel.ok("sleep 1000.9111")'}
    assert markers_in_several_files(texts) == {"1000.91": ["a.py", "b.py"]}


def test_every_marker_is_one_test_files_own():
    texts = {str(path.relative_to(TESTS)): path.read_text()
             for path in TESTS.rglob("*.py") if path.name != Path(__file__).name}
    assert markers_in_several_files(texts) == {}
