"""Terminal fidelity: which command failed, the shell's history, `clear`,
bash_kernel's display helpers, and the environment Jupyter was started in.
Through real kernels, on both backends where the feature lives in the shell."""

from __future__ import annotations

import base64
import os
import queue
import time
from pathlib import Path

import pytest

# A 1x1 PNG.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAE"
                       "hQGAhKmMIQAAAABJRU5ErkJggg==")


def error_line(execution) -> str:
    """The traceback line a frontend shows for the cell's error."""
    [error] = execution.errors
    assert execution.reply["content"]["evalue"] == error["evalue"]
    return error["traceback"][0]


# ------------------------------------------------------ which command failed
@pytest.mark.parametrize("code, line, command", [
    ("echo hello | grep nomatch", 1, "grep nomatch"),
    ("echo a\necho b\necho hello | grep nomatch\necho c >/dev/null; ls /no/such/dir", 4,
     "ls /no/such/dir"),
    ("echo a\necho b\necho hello | grep nomatch", 3, "grep nomatch"),
    # A function: the call in the cell is named, not the command inside it.
    ("check() {\n  echo checking\n  grep -q nomatch /dev/null\n}\n\ncheck", 6, "check"),
    ("echo one\nexit 3\necho never", 2, "exit 3"),
    ("stop() { exit 4; }\nstop", 2, "stop"),
    ("for f in a b; do\n  false\ndone", 2, "false"),
    # A failure inside a function the line calls last (display is one).
    ("echo a; echo b; display /no/such/file.png", 1, "display /no/such/file.png"),
    ("if true; then\n  test -e /no/such/file\nfi", 2, "test -e /no/such/file"),
])
def test_the_failing_command_and_its_line_are_named(kernel, code, line, command):
    execution = kernel.run(code)
    status = execution.exit_code
    assert status != 0 and execution.status == "error"
    expected = f"exit status {status} from '{command}' (line {line})"
    assert error_line(execution) == f"ExitCode: {expected}"
    assert execution.meta["command"] == command and execution.meta["line"] == line


def test_the_failing_command_is_named_as_typed_not_as_its_alias_expands(kernel):
    """Debian's ~/.bashrc has ls='ls --color=auto' (the test sshd's home is
    /etc/skel's): the user typed ls, and is told so."""
    kernel.ok("alias ls='ls --color=auto' grep='grep --color=auto' "
              "nope='grep -q \"it'\\''s\"'")
    for code, command in (("ls /no/such/dir", "ls /no/such/dir"),
                          ("ls --color=auto /no/such/dir", "ls --color=auto /no/such/dir"),
                          ("echo x | grep nomatch", "grep nomatch"),
                          ("nope /dev/null", "nope /dev/null"),
                          ("nope /dev/null || false", "false")):
        execution = kernel.run(code)
        assert execution.meta.get("command") == command, (code, execution.meta)
    kernel.ok("unalias ls grep nope")



def test_many_aliases_leave_a_failing_cell_quick_and_named_as_typed(kernel):
    """3,000 aliases made every failing cell take 4.75 s: the failure hook
    read the whole `alias` listing, a line at a time (quadratic: 20,000 took
    minutes). It now asks only for the cell's command words. A liveness
    timeout only: the old hook outlasted it by far."""
    kernel.ok("for i in $(seq 20000); do alias sk_many_$i=true; done; alias sk_many_ll='ls -l'",
              timeout=120)
    try:
        for _ in range(3):
            execution = kernel.run("true\nsk_many_ll /no/such/dir", timeout=60)
            assert execution.exit_code == 2
            assert execution.meta["command"] == "sk_many_ll /no/such/dir" and execution.meta["line"] == 2
    finally:
        kernel.ok("for i in $(seq 20000); do unalias sk_many_$i; done; unalias sk_many_ll", timeout=120)

def test_conditions_and_successes_name_nothing(kernel):
    for code in ("false || true", "if false; then :; fi", "while false; do :; done",
                 "grep -q nomatch /dev/null && echo x; true", "echo fine"):
        execution = kernel.run(code)
        assert execution.status == "ok", code
        assert "command" not in execution.meta and "line" not in execution.meta, code


def test_pipefail_and_pipestatus_keep_their_meaning(kernel):
    assert kernel.ok("false | true; echo ${PIPESTATUS[@]} $?") == "1 0 0\n"
    execution = kernel.run("set -o pipefail\nfalse | true")
    kernel.ok("set +o pipefail")
    # The pipeline's last command did not set the status: its line is named.
    assert execution.exit_code == 1
    assert error_line(execution) == "ExitCode: exit status 1 from 'false | true' (line 2)"


def test_a_status_the_trap_cannot_see_is_reported_without_a_command(kernel):
    execution = kernel.run("! true")
    assert error_line(execution) == "ExitCode: exit status 1"


def test_a_chain_that_stopped_names_the_command_that_stopped_it(kernel):
    """No ERR trap sees `X && Y` stop at X: the last line ending so names X."""
    for code, line, command in (("[[ -d /nope ]] && echo yes", 1, "[[ -d /nope ]]"),
                                ("echo a\nfalse && true", 2, "false")):
        execution = kernel.run(code)
        assert error_line(execution) == f"ExitCode: exit status 1 from '{command}' (line {line})"


def test_set_x_shows_no_trace_of_the_kernel(kernel):
    execution = kernel.run("set -x; false; set +x")
    assert execution.stderr == "+ false\n+ set +x\n" or execution.stderr == "++ false\n++ set +x\n"


def test_users_err_and_debug_traps_are_left_alone(kernel):
    kernel.ok("__saved_err=$(trap -p ERR)")
    try:
        kernel.ok("trap 'echo \"user ERR: $BASH_COMMAND\" >&2' ERR; "
                  "trap 'debug_n=$((debug_n+1))' DEBUG")
        execution = kernel.run("echo a\nfalse")
        # Their trap runs once, as in a terminal; it replaced ours, so only the status is known.
        assert execution.stderr == "user ERR: false\n"
        assert error_line(execution) == "ExitCode: exit status 1"
        assert "user ERR" in kernel.ok("trap -p ERR")
        assert "debug_n" in kernel.ok("trap -p DEBUG")
        assert int(kernel.ok("echo $debug_n")) > 0
    finally:
        kernel.ok("trap - DEBUG; trap - ERR; eval \"$__saved_err\"")
    assert kernel.run("false").meta["command"] == "false"


def test_shell_exited_message_has_no_status_prefix(kernel):
    execution = kernel.run("exec true")
    [error] = execution.errors
    assert error["ename"] == "ShellExited"
    assert error["evalue"].startswith("The shell running this cell ended"), error["evalue"]
    assert error["traceback"] == [f"ShellExited: {error['evalue']}"]


def test_an_interrupted_cell_never_reports_status_0(kernel):
    # Like `watch`: catches SIGINT and exits 0.
    code = ("python3 -c 'import signal, sys, time\n"
            "signal.signal(signal.SIGINT, lambda *a: sys.exit(0))\n"
            "print(\"ready\", flush=True); time.sleep(60)'")
    msg_id = kernel.start(code)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until python has its handler
        try:
            msg = kernel.kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream" \
                and "ready" in msg["content"]["text"]:
            break
    kernel.km.interrupt_kernel()
    execution = kernel.collect(msg_id)
    assert execution.reply["content"]["ename"] == "KeyboardInterrupt"
    assert execution.exit_code == 130 and execution.meta["interrupted"] is True
    assert error_line(execution) == "KeyboardInterrupt: Interrupted (exit status 130)"


# ------------------------------------------------------------------ history
@pytest.fixture
def fresh_kernel(backend, start_kernel, ssh_kernel, sshd, tmp_path):
    """A new kernel, for tests that need the shell's whole history to themselves."""
    if backend == "ssh":
        return ssh_kernel(sshd.ssh_config)
    home = tmp_path / "home"
    home.mkdir()
    kernel = start_kernel(HOME=str(home))
    kernel.home = home
    return kernel


def test_history_holds_the_cells_as_typed(fresh_kernel, backend):
    kernel = fresh_kernel
    kernel.ok("echo one")
    kernel.ok("\necho two\n\necho three\n\n")
    kernel.run("grep -q nomatch /dev/null")
    assert kernel.ok("history") == (
        "    1  echo one\n"
        "    2  echo two\n\necho three\n"
        "    3  grep -q nomatch /dev/null\n")
    assert kernel.ok("history | grep -c three") == "1\n"
    listing = kernel.ok("history")
    assert "__shell_kernel" not in listing
    assert kernel.ok("echo ${HISTFILE-unset}") == "unset\n"
    if backend == "local":
        kernel.shutdown()
        assert not (kernel.home / ".bash_history").exists()


def test_fc_lists_and_reruns_the_cells(fresh_kernel):
    kernel = fresh_kernel
    kernel.ok("echo one")
    kernel.ok("\necho two\n\necho three\n\n")
    kernel.run("grep -q nomatch /dev/null")
    kernel.ok("history")
    assert kernel.ok("fc -l") == (
        "1\t echo one\n2\t echo two\n\necho three\n3\t grep -q nomatch /dev/null\n4\t history\n")
    # fc -s re-runs the last cell that starts with "echo", and says so on stderr.
    execution = kernel.run("fc -s echo")
    assert execution.stdout == "two\nthree\n" and execution.stderr == "echo two\n\necho three\n"
    assert kernel.ok("fc -s") == "two\nthree\n"  # the command re-run above, not "fc -s"
    # What fc -s re-ran is recorded, in the place of the newest entry (the
    # `fc -l` cell): bash 5.2's own `fc -s` replaces the newest entry, which
    # it takes for the line that ran it, and the shell's history is off. The
    # same on every bash (3.2 and 4.2 do it through session.bash).
    listing = ("    1  echo one\n    2  echo two\n\necho three\n    3  grep -q nomatch /dev/null\n"
               "    4  history\n    5  echo two\n\necho three\n")
    assert kernel.ok("history") == listing
    # ... and stays when the next cells are added (bash <= 4.2's next
    # `history -s` deleted it first).
    assert kernel.ok("echo four") == "four\n"
    assert kernel.ok("history") == listing + "    6  history\n    7  echo four\n"


def test_fc_in_a_cell_that_runs_more(fresh_kernel):
    kernel = fresh_kernel
    kernel.ok("echo one")
    kernel.ok("echo two")
    # fc -l in the middle of a cell lists the cells before it, the last too.
    assert kernel.ok("fc -l -2; echo after") == "1\t echo one\n2\t echo two\nafter\n"
    assert kernel.ok("fc -l -2") == "2\t echo two\n3\t fc -l -2; echo after\n"
    # fc -s there: what it re-ran replaces the newest entry (as above), then
    # the cell's own entry comes.
    assert kernel.ok("cd .; fc -s echo") == "two\n"
    assert kernel.ok("history") == (
        "    1  echo one\n    2  echo two\n    3  fc -l -2; echo after\n    4  echo two\n"
        "    5  cd .; fc -s echo\n")


# -------------------------------------------------------------------- clear
def clears_then_shows(execution) -> str:
    """The stdout shown after the last clear_output (which must wait)."""
    kinds = [m["msg_type"] for m in execution.messages]
    assert "clear_output" in kinds, kinds
    last = len(kinds) - 1 - kinds[::-1].index("clear_output")
    assert execution.messages[last]["content"] == {"wait": True}
    return "".join(m["content"]["text"] for m in execution.messages[last + 1:]
                   if m["msg_type"] == "stream")


@pytest.mark.parametrize("clear", [
    "clear", "tput clear", "printf '\\033[2J\\033[H'",
    # split across two writes, far apart
    "printf '\\033['; sleep 0.3; printf '2J'",
])
def test_clear_clears_the_cells_output(kernel, clear):
    execution = kernel.run(f"echo before; sleep 0.2; {clear}; echo after")
    assert execution.status == "ok"
    assert clears_then_shows(execution) == "after\n"
    assert "\x1b" not in execution.stdout


def test_output_without_a_clear_is_untouched(kernel):
    execution = kernel.run("printf 'a\\033[31mred\\033[0m\\033[H\\n'")
    assert execution.stdout == "a\x1b[31mred\x1b[0m\x1b[H\n"
    assert all(m["msg_type"] != "clear_output" for m in execution.messages)


# ------------------------------------------------------- bash_kernel names
def displays(execution) -> list:
    return [m["content"] for m in execution.messages
            if m["msg_type"] in ("display_data", "update_display_data")]


def one_display(execution) -> dict:
    """The cell's one display; else what the cell did instead."""
    shown = displays(execution)
    assert len(shown) == 1, (execution.status, execution.stdout, execution.stderr,
                             [m["msg_type"] for m in execution.messages])
    return shown[0]


def test_bash_kernel_display_helpers_work_unchanged(kernel):
    encoded = base64.b64encode(PNG).decode()
    kernel.ok(f"echo {encoded} | base64 -d > dot.png")
    png = one_display(kernel.run("cat dot.png | display"))
    assert png["data"]["image/png"] == encoded
    html = one_display(kernel.run("echo '<b>bold</b>' | displayHTML"))
    assert html["data"]["text/html"] == "<b>bold</b>\n"
    js = one_display(kernel.run("echo 'console.log(1)' | displayJS"))
    assert js["data"]["application/javascript"] == "console.log(1)\n"
    first = one_display(kernel.run("echo '<i>1</i>' | displayHTML fid_progress"))
    assert first["transient"] == {"display_id": "fid_progress"}
    execution = kernel.run("echo '<i>2</i>' | displayHTML fid_progress; "
                           "cat dot.png | display fid_img")
    update, image = execution.messages[-2:]
    assert update["msg_type"] == "update_display_data"
    assert image["content"]["transient"] == {"display_id": "fid_img"}
    assert kernel.ok("echo $NOTEBOOK_BASH_KERNEL_CAPABILITIES") == "image,html,javascript\n"
    kernel.ok("rm dot.png")


def test_display_sniffs_the_type_without_mime(kernel):
    svg = one_display(kernel.run("echo '<svg xmlns=\"http://www.w3.org/2000/svg\"/>' | display"))
    assert "image/svg+xml" in svg["data"]
    kernel.ok("printf 'GIF89a\\1\\0\\1\\0' > pic.data")
    gif = one_display(kernel.run("display pic.data; rm pic.data"))
    assert "image/gif" in gif["data"]
    execution = kernel.run("printf '\\0\\1\\2\\377' | display")
    assert not displays(execution)
    assert "cannot tell the type" in execution.stderr and "--mime" in execution.stderr
    # Nothing piped in: from a terminal, bash_kernel's display would wait for input.
    execution = kernel.run("display")
    if kernel.ok("[[ -t 0 ]] && echo terminal || true") == "terminal\n":
        assert execution.exit_code == 2 and "pipe the data in" in execution.stderr
    else:
        assert "cannot tell the type of these 0 bytes" in execution.stderr


# -------------------------------------------------------------- environment
def fake_environment(root: Path, name: str) -> Path:
    """A directory with bin/python3 that says which environment it belongs to."""
    python = root / name / "bin" / "python3"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\necho {name} python\n")
    python.chmod(0o755)
    return root / name


def test_the_launching_virtualenv_and_conda_env_come_first(start_kernel, tmp_path):
    venv, conda = fake_environment(tmp_path, "venv"), fake_environment(tmp_path, "conda")
    other = fake_environment(tmp_path, "base")
    home = tmp_path / "home"
    home.mkdir()
    # What a login shell does: /etc/profile resets PATH; a conda hook activates base.
    (home / ".bash_profile").write_text(
        f"export FROM_PROFILE=yes CONDA_PREFIX={other} PATH={other}/bin:/usr/bin:/bin\n")
    kernel = start_kernel(HOME=str(home), VIRTUAL_ENV=str(venv), CONDA_PREFIX=str(conda),
                          PATH=f"{venv}/bin:{conda}/bin:{os.environ['PATH']}")
    assert kernel.ok("python3") == "venv python\n"
    path = kernel.ok("echo $PATH").strip().split(":")
    assert path[:3] == [f"{venv}/bin", f"{conda}/bin", f"{other}/bin"]
    assert kernel.ok("echo $VIRTUAL_ENV $CONDA_PREFIX $FROM_PROFILE") == f"{venv} {conda} yes\n"
    # The launch's own variables are gone; only the session's mark, which
    # every process the shell starts carries (docs/cells.md), is left.
    assert kernel.ok("env | grep __shell_kernel | cut -d= -f1 || true") == \
        "__shell_kernel_session\n"


def test_no_launching_environment_leaves_path_as_the_startup_files_made_it(start_kernel, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bash_profile").write_text("export PATH=/usr/bin:/bin\n")
    env = {name: "" for name in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    kernel = start_kernel(HOME=str(home), **env)
    assert kernel.ok("echo $PATH") == "/usr/bin:/bin\n"


def test_an_err_trap_from_the_startup_files_is_kept(start_kernel, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("trap 'echo rc-trap >&2' ERR\n")
    (home / ".bash_profile").write_text(". ~/.bashrc\n")
    kernel = start_kernel(HOME=str(home))
    execution = kernel.run("false")
    assert execution.stderr == "rc-trap\n"
    assert error_line(execution) == "ExitCode: exit status 1"

