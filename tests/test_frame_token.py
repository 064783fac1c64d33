"""The frame token authenticates the shell's frames (end of a cell, its
status and directory): no process on the machine (the SSH host is this
machine too) shows it in its argv or environment, where any user can read
it; so output that another user controls cannot forge the end of a cell,
on both backends."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

import pytest

from test_durable_hosts import Host
from named_support import stop_sessions

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


def assert_token_hidden_while_reading(kernel, token: bytes) -> None:
    msg_id = kernel.start("read -t 3 x; echo done", allow_stdin=True)
    kernel.kc.get_stdin_msg(timeout=20)  # the read was reported: every helper is up
    leaks = [(pid, kind) for pid, kind, text in process_texts() if token in text]
    execution = kernel.collect(msg_id, answer=lambda prompt, password: None)
    assert execution.stdout == "done\n"
    assert leaks == []


def test_no_process_shows_the_token_in_its_argv_or_environment(kernel):
    token = frame_token(kernel).encode()
    # While a cell runs and reads (the prompt watcher is busy), as between cells.
    assert_token_hidden_while_reading(kernel, token)
    assert [(pid, kind) for pid, kind, text in process_texts() if token in text] == []


def test_a_named_session_and_a_kernel_attaching_to_it_hide_the_token(jupyter_prefix, tmp_path):
    """A named session's shell outlives the kernel; the next kernel gets the
    token from the session's private state directory and starts its own
    watcher: neither shows it."""
    remote_tmp = tmp_path / "remote-tmp"
    remote_tmp.mkdir()
    host = Host(tmp_path / "host", jupyter_prefix, {}, {"TMPDIR": str(remote_tmp)})
    name = f"token-{secrets.token_hex(3)}"
    try:
        first = host.kernel("--session", name)
        token = frame_token(first)
        assert_token_hidden_while_reading(first, token.encode())
        first.shutdown()  # the session stays
        second = host.kernel("--session", name)
        assert frame_token(second) == token  # the same shell
        assert_token_hidden_while_reading(second, token.encode())
    finally:
        host.close()
        stop_sessions(remote_tmp / f"shell_kernel-{os.getuid()}")


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



def bash_bytes(data: bytes) -> str:
    """A bash word for any bytes, in a cell's text (which is UTF-8)."""
    return "$'" + "".join(f"\\x{byte:02x}" for byte in data) + "'"


# Directory names with the bytes that frame a frame, a newline, a forged
# frame end (before the fix: the cwd came out as ".../x" and junk showed as
# output, or the end frame split and the cell never ended), the escape
# character itself, and bytes that are not UTF-8.
AWKWARD_NAMES = [b"a\x1fb", b"a\nb\r", b"x\x1f\x1ey\x1e\x1f", b"p%1F%", b"bad\xff\xfeutf8\xe2\x82"]


def test_no_byte_in_a_directory_name_splits_or_forges_the_end_frame(kernel):
    """The end frame carries $PWD: each cell cds into an awkward name, ends,
    and reports that directory (invalid UTF-8 replaced, as for output)."""
    home = kernel.ok("pwd").strip()
    try:
        for name in AWKWARD_NAMES:
            path = str(kernel.tmpdir).encode() + b"/" + name
            execution = kernel.run(f"mkdir -p -- {bash_bytes(path)} && cd -- {bash_bytes(path)}",
                                   timeout=20)
            assert execution.status == "ok", (name, execution.errors)
            assert execution.stdout == execution.stderr == "", name
            assert execution.meta["cwd"] == path.decode("utf-8", "replace"), name
            assert kernel.ok("pwd | od -An -c").split() == \
                kernel.ok(f"printf '%s\\n' {bash_bytes(path)} | od -An -c").split(), name
            if b"\n" in name:
                continue
            # A failing command whose text holds the frame's bytes is named as written.
            command = f"false '{name.decode(errors='replace')}'"
            execution = kernel.run(f"echo x\n{command}", timeout=20)
            assert execution.meta["command"] == command and execution.meta["line"] == 2, name
    finally:
        kernel.ok(f"cd {home}")



def test_an_end_frame_too_long_to_read_ends_its_cell_and_says_so(kernel):
    """A working directory longer than a frame may be (300 levels of 250
    bytes): the cell ends with the status the frame begins with, without a
    cwd, and a notice; the next cell runs in that directory."""
    home = kernel.ok("pwd").strip()
    deep = "0" * 250
    try:
        execution = kernel.run(f"cd {kernel.tmpdir} && for i in $(seq 300); do "
                               f"mkdir {deep} && cd {deep} || break; done", timeout=60)
        assert execution.exit_code == 0 and "cwd" not in execution.meta
        assert execution.stderr.startswith("[shell_kernel] The shell's report of this cell's "
                                           "end could not be read (longer than"), execution.stderr
        assert kernel.ok('echo "${#PWD}"') == f"{len(str(kernel.tmpdir)) + 300 * 251}\n"
    finally:
        kernel.ok(f"cd {home} && rm -rf {kernel.tmpdir}/{deep}")

# A login shell reads the profile, an interactive one the rc file.
ALLEXPORT_FILES = {".bashrc": "set -a\n", ".bash_profile": ". ~/.bashrc\n"}


@pytest.fixture
def allexport_kernel(backend, start_kernel, jupyter_prefix, tmp_path):
    """A kernel whose shell's startup file turns allexport on (`set -a`):
    each variable set after it goes into the environment of every command."""
    if backend == "local":
        home = tmp_path / "home"
        home.mkdir()
        for name, text in ALLEXPORT_FILES.items():
            (home / name).write_text(text)
        yield start_kernel(HOME=str(home))
        return
    host = Host(tmp_path / "host", jupyter_prefix, ALLEXPORT_FILES, {})
    try:
        yield host.kernel()
    finally:
        host.close()


def test_a_startup_file_with_allexport_does_not_export_the_token(allexport_kernel):
    token = frame_token(allexport_kernel)
    assert "a" in allexport_kernel.ok("echo $-")  # the user's setting stays
    listing = allexport_kernel.ok("env; ps axe -o args; sleep 1 & cat /proc/$!/environ; wait")
    assert "PATH=" in listing
    assert token not in listing
    assert [(pid, kind) for pid, kind, text in process_texts() if token.encode() in text] == []
