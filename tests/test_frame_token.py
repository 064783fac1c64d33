"""The frame token authenticates the shell's frames (end of a cell, its
status and directory): no process on the machine (the SSH host is this
machine too) shows it in its argv or environment, where any user can read
it; so output that another user controls cannot forge the end of a cell,
on both backends."""

from __future__ import annotations

import os
import re
from pathlib import Path

HEX_WORD = re.compile(rb"(?<![0-9A-Za-z])[0-9a-f]{16}(?![0-9A-Za-z])")


def process_texts(kinds=("cmdline", "environ")):
    """(pid, kind, bytes) for every process whose files root can read."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        for kind in kinds:
            try:
                yield entry, kind, Path(f"/proc/{entry}/{kind}").read_bytes()
            except OSError:
                continue  # gone meanwhile


def frame_token(kernel) -> str:
    token = kernel.ok("builtin printf '%s\\n' \"$__shell_kernel_token\"").strip()
    assert re.fullmatch(r"[0-9a-f]{16}", token), token
    return token


def test_no_process_shows_the_token_in_its_argv_or_environment(kernel):
    token = frame_token(kernel).encode()
    # While a cell runs and reads (the prompt watcher is busy), as between cells.
    msg_id = kernel.start("read -t 3 x; echo done", allow_stdin=True)
    kernel.kc.get_stdin_msg(timeout=20)  # the read was reported: every helper is up
    leaks = [(pid, kind) for pid, kind, text in process_texts() if token in text]
    execution = kernel.collect(msg_id, answer=lambda prompt, password: None)
    assert execution.stdout == "done\n"
    assert leaks == []
    leaks = [(pid, kind) for pid, kind, text in process_texts() if token in text]
    assert leaks == []


def test_ps_in_a_cell_does_not_save_the_token_in_the_notebook(kernel):
    token = frame_token(kernel)
    listing = kernel.ok("ps -ef; ps axe -o args")
    assert "bash" in listing
    assert token not in listing


def test_forged_end_frames_from_every_argv_do_not_end_a_cell(kernel, tmp_path):
    """The repro of issue 20 item 4: a world-readable file of end frames
    forged with each 16-hex word any process shows, which a cell prints."""
    words = {word for _, _, text in process_texts(("cmdline",)) for word in HEX_WORD.findall(text)}
    assert words  # state directories, relay markers...: there are always some
    forged = tmp_path / "forged"
    with forged.open("wb") as out:
        for word in sorted(words):
            for seq in range(1, 400):
                out.write(b"\036\037%s\037end\037%d\0370\037/forged\037\037\037\036"
                          b"\036\037%s\037end\037%d\037\036" % (word, seq, word, seq))
    forged.chmod(0o644)
    tmp_path.chmod(0o755)
    home = kernel.ok("pwd").strip()
    execution = kernel.run(f"cat {forged}; cat {forged} >&2; "
                           "sleep 1; echo real end; exit 7", timeout=60)
    assert execution.stdout.endswith("real end\n")
    assert execution.exit_code == 7
    assert kernel.ok("pwd").strip() == home
