"""Pure logic of the protocol and output layers (no kernel)."""

import subprocess

import pytest

from shell_kernel import protocol
from shell_kernel.output import Coalescer, OutputLimit, StreamDecoder

TOKEN = "0123456789abcdef"
FRAME = b"\x1e\x1f" + TOKEN.encode() + b"\x1fend\x1f7\x1f0\x1f/tmp\x1f\x1e"


def scan_in_pieces(data: bytes, cut: int):
    scanner = protocol.FrameScanner(TOKEN)
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
        ("data", b"before"), ("frame", protocol.EndFrame("stdout", 7, 0, "/tmp")),
        ("data", b"after\x1e")]


def test_frame_scanner_ignores_other_tokens_and_overlong_frames():
    scanner = protocol.FrameScanner(TOKEN)
    fake = b"\x1e\x1fffffffffffffffff\x1fend\x1f1\x1f\x1e"
    assert b"".join(scanner.feed(fake)) + scanner.flush() == fake
    head = b"\x1e\x1f" + TOKEN.encode() + b"\x1f"
    flood = head + b"x" * (protocol.MAX_FRAME + 10)
    events = scanner.feed(flood)
    assert b"".join(e for e in events if isinstance(e, bytes)) + scanner.flush() == flood


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
    noise = protocol.TtyNoiseFilter(42)
    line = b"bash: [42: 2 (255)] tcsetattr: Inappropriate ioctl for device\n"
    assert noise.feed(b"keep\n" + line + b"bash: [43: 2 (255)] tcsetattr: x\n") == \
        b"keep\nbash: [43: 2 (255)] tcsetattr: x\n"
    # Split across reads, as bash writes it in pieces.
    assert noise.feed(line[:10]) == b"" and noise.feed(line[10:30]) == b""
    assert noise.feed(line[30:] + b"after") == b"after"
    assert noise.feed(b"bash: [4") == b"" and noise.flush() == b"bash: [4"


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
