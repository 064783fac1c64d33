"""Output: separate live streams, coalesced, complete, bounded."""

import os
import re
import threading
import time

import pytest

from harness import wait_until


def test_stdout_and_stderr_are_separate_streams_in_order(kernel):
    execution = kernel.run("echo a; sleep 0.3; echo b >&2; sleep 0.3; echo c")
    assert [(m["content"]["name"], m["content"]["text"]) for m in execution.messages] == [
        ("stdout", "a\n"), ("stderr", "b\n"), ("stdout", "c\n")]


def test_partial_line_shows_while_the_cell_runs(kernel):
    msg_id = kernel.start("printf partial; sleep 3; echo ' done'")
    execution = kernel.collect(msg_id)
    first = execution.messages[0]
    assert first["content"]["text"] == "partial"
    # It arrived long before the cell ended (liveness, not a speed test).
    assert execution.received_at[-1] - execution.received_at[0] > 2
    assert execution.stdout == "partial done\n"


def test_python_prints_are_not_block_buffered(kernel):
    execution = kernel.run("python3 -c 'import time; print(\"first\"); time.sleep(3); print(\"second\")'")
    texts = [(m["content"]["text"], t) for m, t in zip(execution.messages, execution.received_at)
             if m["msg_type"] == "stream"]
    assert texts[0][0] == "first\n"
    assert texts[-1][1] - texts[0][1] > 2


def test_pagers_never_start(kernel, tmp_path):
    (tmp_path / "f.txt").write_text("paged\n")
    out = kernel.ok(f"echo $PAGER $GIT_PAGER $MANPAGER; less {tmp_path}/f.txt; "
                    f"git -c core.pager=less -C {tmp_path} --version >/dev/null && echo git-ok")
    assert out == "cat cat cat\npaged\ngit-ok\n"


def test_a_million_lines_arrive_complete_in_few_messages(kernel):
    execution = kernel.run("seq 1 1000000", timeout=120)
    assert execution.status == "ok"
    expected = "".join(f"{i}\n" for i in range(1, 1000001))
    assert execution.stdout == expected
    assert len(execution.messages) <= 2000


def test_invalid_utf8_and_nul_bytes(kernel):
    execution = kernel.run(r"printf 'bad:\xff\xfe|nul:a\0b|split:\xe2\x82'; printf '\xac\n'")
    assert execution.status == "ok"
    assert execution.stdout == "bad:\ufffd\ufffd|nul:a\u2400b|split:\u20ac\n"


def test_ten_megabyte_line_without_newline_arrives_whole(kernel):
    execution = kernel.run("head -c 10000000 /dev/zero | tr '\\0' x", timeout=120)
    assert execution.stdout == "x" * 10_000_000


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def test_huge_output_is_capped_spilled_to_a_file_and_memory_stays_bounded(start_kernel, tmp_path):
    kernel = start_kernel("shell-test-limit")  # 5 MB output limit
    peak = [rss_kb(kernel.pid)]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kb(kernel.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        execution = kernel.run("head -c 120000000 /dev/zero | tr '\\0' y | fold -w 99; echo end >&2",
                               timeout=180)
    finally:
        done.set()
        sampler.join()
    assert execution.status == "ok"
    assert len(execution.stdout) == 5_000_000
    match = re.search(r"more than 5 MB; output stops here and the rest of it is saved in (\S+)\.",
                      execution.stderr)
    assert match, execution.stderr
    spill = match.group(1)
    assert os.stat(spill).st_mode & 0o777 == 0o600
    total = 120_000_000 + 120_000_000 // 99  # bytes plus fold's newlines
    # Past the limit both streams go to the file, the final "end" included.
    assert len(execution.stdout) + os.path.getsize(spill) == total + len("end\n")
    assert "end" not in execution.stderr
    assert execution.meta["output_file"] == spill
    # Streamed, not kept: far less than the 120 MB that went through.
    assert peak[0] < 200_000, f"kernel RSS peaked at {peak[0]} kB"


DISPLAY_BYTES = 3_000_000


def _big_displays(count: int) -> str:
    """A cell that displays count texts of DISPLAY_BYTES each, then prints."""
    return (f"for i in $(seq {count}); do head -c {DISPLAY_BYTES} /dev/zero | tr '\\0' \"$i\" "
            "| display --mime text/plain; done; echo after")


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_displays_count_against_the_output_limit(where, start_kernel, ssh_kernel, sshd, tmp_path):
    """Five 3 MB displays once made a 20 MB notebook past a 1 MB limit: a
    display went to the frontend whatever the cell had sent before."""
    kernel = (start_kernel("shell-test-limit") if where == "local" else
              ssh_kernel(sshd.ssh_config, flags=["--output-limit-mb", "5"]))
    execution = kernel.run(_big_displays(3), timeout=120)
    assert execution.status == "ok", execution.stderr
    shown = [m["content"]["data"]["text/plain"] for m in execution.messages
             if m["msg_type"] == "display_data"]
    assert shown == ["1" * DISPLAY_BYTES]  # the second would pass 5 MB
    saved = re.findall(r"A display of 3 MB would take this cell past its output limit of 5 MB; "
                       r"it is not shown, and is saved in (\S+)\.\n", execution.stderr)
    assert len(saved) == 2, execution.stderr
    for number, path in zip("23", saved):
        assert path.endswith(".txt") and os.stat(path).st_mode & 0o777 == 0o600
        with open(path) as file:
            assert file.read() == number * DISPLAY_BYTES
    # What comes after goes to the cell's file too, as past the limit by printing.
    assert "after" not in execution.stdout
    spill = execution.meta["output_file"]
    with open(spill) as file:
        assert file.read() == "after\n"
    assert os.path.dirname(spill) == os.path.dirname(saved[0])


def test_background_output_after_the_cell_never_lands_in_another_cell(kernel):
    first = kernel.start("(sleep 0.5; echo late-bg) & echo started")
    first_execution = kernel.collect(first)
    assert first_execution.stdout == "started\n"
    assert wait_until(lambda: any(m["msg_type"] == "stream" and "late-bg" in m["content"]["text"]
                                  for m in _drain(kernel)), timeout=10)
    assert kernel.ok("echo mine") == "mine\n"


def _drain(kernel):
    """IOPub messages that arrived outside any collected request, attributed to their cell."""
    try:
        while True:
            kernel.stray.append(kernel.kc.get_iopub_msg(timeout=0.1))
    except Exception:  # queue.Empty
        pass
    return kernel.stray


# ------------------------------------------------------------ display types
def _display_types(execution) -> list:
    return [sorted(m["content"]["data"]) for m in execution.messages
            if m["msg_type"] == "display_data"]


@pytest.mark.parametrize("text, mime", [
    ("<stdin>:1: warning: unused variable\n", "text/plain"),  # a compiler's message
    ("<img src=x onerror=alert(document.domain)>\n", "text/plain"),
    ("  <b>bold</b> <script>alert(1)</script>\n", "text/plain"),
    ("<!DOCTYPE html>\n<p>a page</p>\n", "text/html"),
    ("\n  <HTML><body>a page</body></HTML>\n", "text/html"),
])
def test_display_takes_only_an_unambiguous_start_for_html(kernel, tmp_path, text, mime):
    """JupyterLab renders a kernel's text/html as trusted: anything starting
    with '<' was HTML, so `echo '<stdin>:1: warning' | display` or an
    untrusted file on standard input ran its markup."""
    source = tmp_path / f"{kernel.backend}-untrusted.data"
    source.write_text(text)
    for cell in (f"display < {source}", f"cat {source} | display"):
        execution = kernel.run(cell)
        assert execution.status == "ok", execution.stderr
        assert _display_types(execution) == [sorted({"text/plain", mime})]


def test_display_html_by_name_or_by_mime(kernel, tmp_path):
    page = tmp_path / f"{kernel.backend}-page.HTML"
    page.write_text("<b>a fragment</b>\n")
    for cell in (f"display {page}", "echo '<b>x</b>' | display --mime text/html",
                 "echo '<b>x</b>' | displayHTML"):
        execution = kernel.run(cell)
        assert _display_types(execution) == [["text/html", "text/plain"]], cell
