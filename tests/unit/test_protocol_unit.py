"""Pure logic of the protocol and output layers (no kernel)."""

import os
import subprocess
from pathlib import Path

import pytest

from shell_kernel import frames, protocol, shell
from shell_kernel.output import Coalescer, OutputLimit, StreamDecoder

# The bash that the suite names (see tests/conftest.py), else bash on PATH.
TEST_BASH = os.environ.get("SHELL_KERNEL_TEST_BASH") or "bash"
TOKEN = "0123456789abcdef"
FRAME = b"\x1e\x1f" + TOKEN.encode() + b"\x1fend\x1f7\x1f0\x1f/tmp\x1f\x1e"


def scan_in_pieces(data: bytes, cut: int):
    scanner = frames.FrameScanner(TOKEN)
    events = scanner.feed(data[:cut]) + scanner.feed(data[cut:])
    merged, text = [], b""
    for event in events:
        if isinstance(event, bytes):
            text += event
        else:
            merged.append(("data", text))
            merged.append(("frame", event))
            text = b""
    merged.append(("data", text + scanner.flush()))
    return merged


@pytest.mark.parametrize("cut", range(0, len(FRAME) + 12))
def test_frame_scanner_finds_frames_split_anywhere(cut):
    data = b"before" + FRAME + b"after\x1e"
    assert scan_in_pieces(data, cut) == [
        ("data", b"before"), ("frame", frames.EndFrame("stdout", 7, 0, "/tmp")),
        ("data", b"after\x1e")]


def test_frame_scanner_ignores_other_tokens():
    scanner = frames.FrameScanner(TOKEN)
    fake = b"\x1e\x1fffffffffffffffff\x1fend\x1f1\x1f\x1e"
    assert b"".join(scanner.feed(fake)) + scanner.flush() == fake


def frames_and_data(scanner, *pieces):
    events = [event for piece in pieces for event in scanner.feed(piece)]
    data = b"".join(event for event in events if isinstance(event, bytes)) + scanner.flush()
    return [event for event in events if not isinstance(event, bytes)], data


HEAD = b"\x1e\x1f" + TOKEN.encode() + b"\x1f"


@pytest.mark.parametrize("pieces", [1, 3, 1000])
def test_an_overlong_frame_ends_its_cell_unread_and_shows_nothing(pieces):
    """A working directory longer than a frame may be: the end frame is
    reported unread with the status it carries (the cell ends), its bytes
    (and the token in them) are never shown, and what follows is found."""
    frame = HEAD + b"end\x1f7\x1f3\x1f/" + b"d" * (frames.MAX_FRAME + 10) + b"\x1f\x1e"
    data = b"before" + frame + b"after" + HEAD + b"end\x1f8\x1f\x1e"
    size = -(-len(data) // pieces)
    found, shown = frames_and_data(frames.FrameScanner(TOKEN),
                                    *(data[i:i + size] for i in range(0, len(data), size)))
    assert found == [frames.EndFrame("stdout", 7, 3, unread=f"longer than {frames.MAX_FRAME} bytes"),
                      frames.EndFrame("stdout", 8)]
    assert shown == b"beforeafter"


def test_a_frame_cut_short_by_the_next_is_unread_and_the_next_is_read():
    found, shown = frames_and_data(frames.FrameScanner(TOKEN),
                                    b"a" + HEAD + b"end\x1f7\x1f0\x1f/x", b"b" + HEAD,
                                    b"end\x1f7\x1f\x1e" + b"c")
    assert found == [frames.EndFrame("stdout", 7, 0, unread="cut short"),
                      frames.EndFrame("stdout", 7)]
    assert shown == b"ac"


def test_a_frame_the_stream_ends_in_is_never_shown():
    found, shown = frames_and_data(frames.FrameScanner(TOKEN), b"a" + HEAD + b"end\x1f7")
    assert found == [] and shown == b"a"


def test_frame_fields_are_unescaped_and_a_bad_escape_leaves_the_frame_unread():
    scanner = frames.FrameScanner(TOKEN)
    [good, bad, short] = scanner.feed(
        HEAD + b"end\x1f4\x1f0\x1f/a%1Fb%1E%0A%0D%25%FF\xff\x1f\x1f\x1f\x1e"
        + HEAD + b"end\x1f5\x1f1\x1f/100%\x1f\x1f\x1f\x1e"
        + HEAD + b"end\x1f6\x1f2\x1f\x1e")
    assert good == frames.EndFrame("stdout", 4, 0, "/a\x1fb\x1e\n\r%\udcff\udcff")
    assert bad == frames.EndFrame("stdout", 5, 1, unread="a bad escape")
    # An end frame with a field too few ends its cell all the same.
    assert short.seq == 6 and short.status == 2 and short.cwd is None and short.unread
    assert "is 2" in frames.unread_end_notice(short)
    assert "not known" in frames.unread_end_notice(frames.EndFrame("stdout", 6, None, unread="x"))


@pytest.mark.parametrize("text", [
    "plain", "it's \"quoted\" \\ $HOME `cmd` $(cmd)", "multi\nline\n", "tab\there",
    "ctrl \x01\x03\x04\x1a\x1b\x7f", "utf-8: é ✓ 𝄞", "\r\n\r", "!event ${x} *?[a]",
])
def test_ansi_c_quote_round_trips_through_real_bash(text):
    word = protocol.ansi_c_quote(text.encode())
    assert b"\n" not in word
    done = subprocess.run(["bash", "-c", b"printf %s " + word], capture_output=True)
    assert done.stdout == text.encode()


def test_prepare_cell_normalises_crlf_and_removes_nul():
    prepared = protocol.prepare_cell("a\r\nb\x00c\r")
    assert prepared.source == b"a\nbc\r" and prepared.removed_nul


def test_tty_noise_filter_drops_only_bash_tcsetattr_lines():
    noise = frames.TtyNoiseFilter(42)
    line = b"bash: [42: 2 (255)] tcsetattr: Inappropriate ioctl for device\n"
    assert noise.feed(b"keep\n" + line + b"bash: [43: 2 (255)] tcsetattr: x\n") == \
        b"keep\nbash: [43: 2 (255)] tcsetattr: x\n"
    # Split across reads, as bash writes it in pieces.
    assert noise.feed(line[:10]) == b"" and noise.feed(line[10:30]) == b""
    assert noise.feed(line[30:] + b"after") == b"after"
    assert noise.feed(b"bash: [4") == b"" and noise.flush() == b"bash: [4"
    # Bash 3.2's form has no descriptor.
    assert noise.feed(b"a\nbash: [42: 1] tcsetattr: Inappropriate ioctl for device\nb\n") == b"a\nb\n"


def test_decoder_joins_split_characters_and_replaces_bad_bytes():
    decoder = StreamDecoder()
    euro = "€".encode()
    assert decoder.decode(euro[:1]) == ""
    assert decoder.decode(euro[1:] + b"\xff\x00") == "€\ufffd\u2400"
    assert decoder.decode(b"\xe2", final=True) == "\ufffd"


def test_coalescer_groups_by_time_and_size_and_keeps_stream_order():
    now = [0.0]
    sent = []
    coalescer = Coalescer(lambda s, t: sent.append((s, t)), interval=0.05, max_bytes=10,
                          clock=lambda: now[0])
    coalescer.add("stdout", "a")
    coalescer.add("stdout", "b")
    coalescer.add("stderr", "c")
    coalescer.add("stdout", "d")
    coalescer.flush_if_due()
    assert sent == []
    now[0] = 0.06
    coalescer.flush_if_due()
    assert sent == [("stdout", "ab"), ("stderr", "c"), ("stdout", "d")]
    coalescer.add("stdout", "0123456789")  # reaches max_bytes: goes at once
    assert sent[-1] == ("stdout", "0123456789")


def test_output_limit_spills_the_rest_to_a_private_file(tmp_path):
    limit = OutputLimit(10, tmp_path / "spill")
    assert limit.admit(b"12345") == (b"12345", None)
    shown, notice = limit.admit(b"67890abc")
    assert shown == b"67890" and "saved in" in notice
    assert limit.admit(b"def") == (b"", None)
    limit.close()
    assert limit.spill_path.read_bytes() == b"abcdef"
    assert limit.spill_path.stat().st_mode & 0o777 == 0o600


def test_end_frame_carries_the_failed_command_and_its_line():
    head = b"\x1e\x1f" + TOKEN.encode() + b"\x1fend\x1f"
    scanner = frames.FrameScanner(TOKEN)
    failed, succeeded = scanner.feed(head + b"8\x1f1\x1f/tmp\x1f3\x1fgrep nomatch\x1f\x1e"
                                     + head + b"9\x1f0\x1f/tmp\x1f\x1f\x1f\x1e")
    assert failed == frames.EndFrame("stdout", 8, 1, "/tmp", 3, "grep nomatch")
    assert succeeded == frames.EndFrame("stdout", 9, 0, "/tmp", None, None)
    # The sixth field: the cell's line was abandoned (SIGINT, exit, an error).
    [abandoned] = scanner.feed(head + b"10\x1f1\x1f/tmp\x1f\x1f\x1f1\x1f\x1e")
    assert abandoned == frames.EndFrame("stdout", 10, 1, "/tmp", None, None, True)


def frame_bytes(*fields: str) -> bytes:
    return b"\x1e\x1f" + b"\x1f".join(f.encode() for f in fields) + b"\x1f\x1e"


def test_frame_helper_writes_each_frame_whole_whatever_the_shell_state():
    """shell/frame.bash, as session.bash and prompts.bash write every frame:
    under set -euxf, failglob, IFS=, and a user's printf function."""
    script = shell.script("frame.bash") + r"""
set -euxf -o pipefail
shopt -s failglob nullglob
IFS=,
printf() { builtin echo hijacked; }
__shell_kernel_frame "$1" end 7 0 '/a, b*' '' 'x%s\n%y'
__shell_kernel_frame "$1" ready
__shell_kernel_frame -l "$1" done 12 3
"""
    done = subprocess.run([TEST_BASH, "-c", script, "bash", TOKEN], capture_output=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (frame_bytes(TOKEN, "end", "7", "0", "/a, b*", "", "x%25s\\n%25y")
                           + frame_bytes(TOKEN, "ready") + frame_bytes(TOKEN, "done", "12", "3")
                           + b"\n")


# Every byte but NUL, the frame's own bytes next to each other and to the
# escape character, a forged frame, bytes that are not UTF-8.
AWKWARD_FIELDS = [bytes(range(1, 256)), b"\x1f\x1e\x1e\x1f", b"%%1F%", b"\n\r\n",
                  b"\x1e\x1f" + TOKEN.encode() + b"\x1fend\x1f9\x1f0\x1f/forged\x1f\x1e",
                  b"\xff\xfe\xe2\x82", b"", b"%"]


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_any_bytes_in_a_field_come_back_as_they_were(locale):
    """frame.bash escapes, the scanner unescapes: in the bash the suite names
    (SHELL_KERNEL_TEST_BASH: 3.2, 4.2), in a byte and a UTF-8 locale."""
    script = shell.script("frame.bash") + 'IFS= read -r -d "" data; __shell_kernel_frame "$1" end 7 0 "$data" 3 "$data"'
    for field in AWKWARD_FIELDS:
        done = subprocess.run([TEST_BASH, "-c", script, "bash", TOKEN], input=field + b"\0",
                              capture_output=True, env={**os.environ, "LC_ALL": locale})
        assert done.returncode == 0, done.stderr
        assert b"\n" not in done.stdout and done.stdout.count(frames.FRAME_END) == 1
        [frame] = frames.FrameScanner(TOKEN).feed(done.stdout)
        text = field.decode("utf-8", "surrogateescape")
        assert frame == frames.EndFrame("stdout", 7, 0, text, 3, text or None), field


def test_display_and_reply_frames_name_their_payload():
    scanner = frames.FrameScanner(TOKEN)
    display, reply, sized = scanner.feed(
        frame_bytes(TOKEN, "display", "image/png", "plot", "payload.42.1")
        + frame_bytes(TOKEN, "reply", "5", "payload.42.2")
        + frame_bytes(TOKEN, "reply", "5", "10", "payload.42.3"))
    assert display == frames.DisplayFrame("image/png", "plot", "payload.42.1")
    assert reply == frames.ReplyFrame(5, "payload.42.2")
    assert isinstance(sized, frames.UnknownFrame)


def test_history_entry_is_the_cell_without_blank_lines_around_it():
    assert protocol.history_entry(b"\n\necho a\n\necho b\n  \n") == b"echo a\n\necho b"
    assert protocol.history_entry(b" \n\t\n") is None
    # A re-run is recorded by fc itself as the command it re-ran.
    for rerun in (b"fc -s", b"fc -s echo", b"  fc -e - 3", b"r", b"r old=new"):
        assert protocol.history_entry(rerun) is None, rerun
    assert protocol.history_entry(b"fc -l") == b"fc -l"
    assert protocol.history_entry(b"rm -f x") == b"rm -f x"
    assert protocol.history_entry(b"x" * (protocol.MAX_HISTORY_ENTRY + 1)) is None


def test_a_cell_that_runs_fc_is_named_to_the_shell_with_its_text():
    for cell in (b"fc -l", b"\nfc -s echo\n", b"echo a; fc -l -2", b"r", b"builtin fc -l",
                 b"x=$(fc -ln -1)"):
        assert protocol.runs_fc(protocol._history_text(cell)), cell
    for cell in (b"fc-cache -f", b"ls /usr/lib/fc", b"echo libfc.so", b"gcc -fc x.c", b"echo afc"):
        assert not protocol.runs_fc(cell), cell
    line = protocol.eval_lines(b"\nfc -s echo\n", 7)
    assert line.startswith(b"__shell_kernel_resume 7 fc $'fc -s echo' ''; builtin eval -- ")
    assert line.endswith(b"__shell_kernel_post 7\n")  # a re-run: no entry of its own
    assert protocol.eval_lines(b"echo a", 8).startswith(b"__shell_kernel_resume 8 ''; builtin eval")
    # Over the entry's limit: neither recorded nor named.
    big = b"fc -l; " + b"x" * protocol.MAX_HISTORY_ENTRY
    assert protocol.eval_lines(big, 9).startswith(b"__shell_kernel_resume 9 ''; ")


def test_failed_command_names_what_the_user_wrote():
    from shell_kernel.failure import failed_command
    cell = "echo a\necho hello | grep nomatch\ncheck_all"
    assert failed_command(cell, 2, "grep nomatch") == ("grep nomatch", 2)
    # A function's last command is not on the line: the call there is named.
    assert failed_command(cell, 3, "return 4") == ("check_all", 3)
    # No command from the shell (pipefail): the line names it.
    assert failed_command(cell, 2, None) == ("echo hello | grep nomatch", 2)
    # A line outside the cell (a sourced file's): the command alone.
    assert failed_command(cell, 9, "false") == ("false", None)
    assert failed_command(cell, None, None) == (None, None)


def test_failed_command_inside_a_compound_command_is_found_on_its_line():
    """Bash 3.2 notes a failure in a compound command on its first or last
    line: the one line inside that holds the command is named."""
    from shell_kernel.failure import failed_command
    loop = "for f in a b; do\n  echo $f\n  false\ndone"
    assert failed_command(loop, 1, "false") == ("false", 3)
    assert failed_command("if true; then\n  test -e /x\nfi", 3, "test -e /x") == ("test -e /x", 2)
    assert failed_command("while :; do\n  grep -q x /y\n  break\ndone < f", 4,
                          "grep -q x /y") == ("grep -q x /y", 2)
    # Two lines that hold it: which one failed is not known, the line is named.
    assert failed_command("for f in a; do\n  false\n  false\ndone", 1, "false") \
        == ("for f in a; do", 1)
    # A function defined before its call: the call is what the user ran.
    check = "check() {\n  grep -q x /y\n}\ncheck"
    assert failed_command(check, 4, "grep -q x /y") == ("check", 4)
    # Bash 4.2 notes the line in the body: the call is named all the same.
    assert failed_command(check, 2, "grep -q x /y") == ("check", 4)
    assert failed_command("f() { false; }\nf", 1, "false") == ("f", 2)


@pytest.mark.parametrize("cut", range(1, 12))
def test_screen_clears_are_found_even_split_across_reads(cut):
    from shell_kernel.output import ScreenClears
    data = "old\x1b[H\x1b[2J\x1b[3Jnew \x1b[31mred\x1b[0m"
    clears = ScreenClears()
    first, second = clears.feed(data[:cut + 2]), clears.feed(data[cut + 2:])
    assert first[0] or second[0]
    shown = (first[1] if not second[0] else "") + second[1] + clears.flush()
    assert shown == "new \x1b[31mred\x1b[0m"
    assert ScreenClears().feed("no clear \x1b[1mbold") == (False, "no clear \x1b[1mbold")


@pytest.mark.parametrize("data, mime", [
    (b"\x89PNG\r\n\x1a\n\0\0", "image/png"), (b"\xff\xd8\xff\xe0\0", "image/jpeg"),
    (b"GIF89a\0", "image/gif"), (b"<svg xmlns='x'></svg>", "image/svg+xml"),
    (b"<?xml version='1.0'?>\n<svg></svg>", "image/svg+xml"),
    (b"<!DOCTYPE html><p>x", "text/html"), (b"  <b>bold</b>\n", "text/plain"),
    (b"plain words\n", "text/plain"), (b"\x00\x01\xfe", None), (b"", None),
])
def test_display_type_is_sniffed_from_the_first_bytes(data, mime):
    from shell_kernel.output import sniff_mime
    assert sniff_mime(data) == mime


def test_cell_error_says_what_is_known():
    from shell_kernel.failure import cell_error
    from shell_kernel.session import CellRecord
    assert cell_error(CellRecord(0, 0.1)) is None
    assert cell_error(CellRecord(1, 0.1, command="grep  nomatch\n x", line=3)) == (
        "ExitCode", "exit status 1 from 'grep nomatch x' (line 3)",
        "exit status 1 from 'grep nomatch x' (line 3)")
    assert cell_error(CellRecord(2, 0.1))[1] == "exit status 2"
    assert cell_error(CellRecord(130, 0.1, interrupted=True))[1:] == (
        "130", "Interrupted (exit status 130)")
    assert cell_error(CellRecord(1, 0.1, shell_lost="The shell ended."))[1] == "The shell ended."


def test_the_post_line_names_the_cells_command_words_for_the_alias_lookup():
    cell = b"ll /x\nif true; then ll /y; fi\n  grep -q x | sk_ll; echo $(foo a)\n\"q\" 'r' $v"
    assert protocol.command_words(cell) == b"ll grep sk_ll echo foo"
    assert b" __shell_kernel_words=$'ll grep sk_ll echo foo'; " in protocol.eval_lines(cell, 4)
    many = b"; ".join(b"c%d" % n for n in range(200))
    assert len(protocol.command_words(many).split()) == protocol.MAX_COMMAND_WORDS
    # An interrupt's repeat of the post line leaves the words as they were.
    assert b"words" not in protocol.post_line(4)


def test_a_failure_inside_a_function_names_the_lines_last_command():
    """`cmd1; cmd2; display x.png` fails inside display (a function): the
    shell notes `builtin return 1`, which is not on the line; the status is
    then the last command's of the line that ran, not the whole line's."""
    from shell_kernel.failure import failed_command
    assert failed_command("echo a; echo b; display /x.png", 1, "builtin return 1") == \
        ("display /x.png", 1)
    assert failed_command("cd /tmp && check_all --fast", 1, "return 4") == ("check_all --fast", 1)
    assert failed_command("true\necho x | f arg", 2, "return 4") == ("f arg", 2)
    # A compound command on the line: which part failed is not known.
    assert failed_command("if true; then f; fi", 1, "return 4") == ("if true; then f; fi", 1)
    assert failed_command("echo a; (f)", 1, "return 4") == ("echo a; (f)", 1)
    # Bash 4.2 notes the line in a function defined elsewhere (session.bash's
    # display): a one-line cell's line is the one that called it.
    assert failed_command("\necho a; display /x.png\n", 312, "builtin return 1") == \
        ("display /x.png", 2)
    assert failed_command("source x.sh", 30, "false") == ("source x.sh", 1)
    assert failed_command("false", 30, "false") == ("false", None)


def test_a_status_the_err_trap_cannot_see_names_the_command_that_stopped_the_chain():
    from shell_kernel.failure import failed_command
    assert failed_command("[[ -d /nope ]] && echo yes", None, None) == ("[[ -d /nope ]]", 1)
    assert failed_command("cd /x\ntest -e y && rm y\n", None, None) == ("test -e y", 2)
    assert failed_command("echo a; grep -q x f && echo found", None, None) == ("grep -q x f", 1)
    for cell in ("! true", "a && b && c", "a || b", "if a; then b; fi", "echo 'a && b'"):
        assert failed_command(cell, None, None) == (None, None), cell


@pytest.mark.parametrize("name", ["session.bash", "tty.bash"])
def test_the_session_code_sent_without_comments_is_the_same_code(name):
    """The session's bash code goes without its comment lines (bash_code): as
    bash parses it, the same code. Inside a function, `declare -f` prints
    bash's own parse, without comments: a line that is not a comment (inside
    a quoted string spanning lines) would change it."""
    def parsed(code: str) -> str:
        return subprocess.run([TEST_BASH, "--norc", "--noprofile", "-c",
                               f"__parsed() {{\n{code}\n}}\ndeclare -f __parsed"],
                              capture_output=True, text=True, check=True).stdout

    assert shell.bash_code(name) != shell.script(name)  # comments were there to remove
    assert parsed(shell.bash_code(name)) == parsed(shell.script(name))


def test_the_relay_knows_a_cells_first_and_post_lines_as_protocol_writes_them():
    """relay.sh records which of a cell's lines reached the host by how they
    begin (see protocol.CELL_FIRST_LINE): it must match what is sent."""
    relay = (Path(shell.__file__).parent / "relay.sh").read_text()
    lines = protocol.eval_lines(b"echo a", 12).decode().splitlines()
    first, post = protocol.CELL_FIRST_LINE.decode(), protocol.POST_LINE.decode()
    assert lines[0].startswith(first) and lines[1].startswith(post)
    assert f'"{first}"*)' in relay and f'"{post}"*)' in relay
    assert f'"${{line#*"{protocol.POST_CALL.decode()}"}}" post' in relay
    assert protocol.POST_CALL.decode() + "12" in lines[1]


def test_a_session_nobody_asks_questions_is_sent_no_query_code():
    """A notebook job's shell (queries=False) gets session.bash without
    queries.bash, and what it gets is still whole bash."""
    full = protocol.session_script("ab12", state_dir="/tmp/x")
    lean = protocol.session_script("ab12", state_dir="/tmp/x", queries=False)
    assert b"__shell_kernel_query()" in full and b"__shell_kernel_complete()" in full
    assert b"__shell_kernel_query()" not in lean and b"__shell_kernel_complete()" not in lean
    assert b"__shell_kernel_post()" in lean and b"__shell_kernel_close()" in lean
    assert len(lean) < 0.85 * len(full)
    checked = subprocess.run(["bash", "-n"], input=lean, capture_output=True)
    assert checked.returncode == 0, checked.stderr
