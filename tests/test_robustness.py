"""Nothing the user does can desynchronise cell boundaries or exit codes."""

import re
import time

import pytest

HOSTILE = {
    "overridden builtins": (
        "echo() { builtin echo \"X$*\"; }; printf() { :; }; cd() { builtin cd \"$@\"; "
        "builtin echo moved; }; pwd() { builtin echo fake; }; cat() { :; }; "
        "command() { :; }; true() { return 1; }; :() { return 1; }",
        "unset -f echo printf cd pwd cat command true :"),
    "set -u": ("set -u", "set +u"),
    "set -e": ("set -e", "set +e"),
    "set -f": ("set -f", "set +f"),
    "IFS=,": ("IFS=,", "IFS=$' \\t\\n'"),
    "failglob": ("shopt -s failglob nullglob", "shopt -u failglob nullglob"),
    "pipefail": ("set -o pipefail", "set +o pipefail"),
    "noclobber": ("set -C", "set +C"),
    "DEBUG trap": ("trap 'builtin echo dbg; builtin echo dbg2 >&2; false' DEBUG; set -T",
                   "set +T; trap - DEBUG"),
    "EXIT and ERR traps": ("trap 'echo bye' EXIT; trap 'echo err-trap' ERR", "trap - EXIT ERR"),
    "PROMPT_COMMAND": ("PROMPT_COMMAND='echo pc; false'; PS1='$(echo ps1) '; PS0=ps0", "unset PROMPT_COMMAND"),
    "deleted cwd": ("d=$(mktemp -d); cd \"$d\"; rmdir \"$d\"", "cd /"),
    "xtrace": ("set -x", "set +x"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_shell_settings_keep_cells_in_sync(kernel, name):
    setup, teardown = HOSTILE[name]
    kernel.run(setup)
    try:
        for _ in range(2):
            ok = kernel.run("(exit 0)")
            assert ok.status == "ok" and ok.exit_code == 0, (ok.errors, ok.stderr)
            bad = kernel.run("(exit 7)")
            assert bad.status == "error" and bad.exit_code == 7
        marker = kernel.run("/bin/echo marker-$((6*7))")
        assert "marker-42" in marker.stdout
        assert "\x1e" not in marker.stdout + marker.stderr
        assert "__shell_kernel" not in marker.stdout + marker.stderr
    finally:
        kernel.run(teardown)
    assert kernel.ok("/bin/echo clean") == "clean\n"


def test_debug_trap_that_returns_cannot_cut_the_end_of_a_cell(kernel):
    # Under set -T a DEBUG trap runs inside functions, where `return` would
    # leave the kernel's end-of-cell hook early.
    kernel.run("trap 'return 0' DEBUG; set -T")
    try:
        assert kernel.run("/bin/true").status == "ok"
        assert kernel.run("/bin/false").exit_code == 1
    finally:
        kernel.run("set +T; trap - DEBUG")
    assert kernel.ok("echo fine") == "fine\n"


def test_xtrace_shows_user_commands_only(kernel):
    execution = kernel.run("set -x\necho traced")
    kernel.run("set +x")
    assert execution.stdout == "traced\n"
    # bash marks commands run through eval with a doubled PS4 ("++").
    assert re.fullmatch(r"\++ echo traced\n", execution.stderr), execution.stderr


def test_printing_all_state_does_not_desync(kernel):
    kernel.ok("alias state_alias=true; STATE_VAR=$'multi\\nline\\x1e\\x1f value'; export STATE_EXPORT=$'a\\nb'")
    for dump in ["set", "env", "declare -f", "declare -p", "export -p", "alias; trap -p; jobs"]:
        execution = kernel.run(dump)
        assert execution.status == "ok", dump
        assert execution.stdout, dump
    assert kernel.ok("echo after-dumps") == "after-dumps\n"


def test_control_characters_and_nul_in_cell_text(kernel):
    text = "a\x01b\x03c\x04d\x1ae\x1b[0m\x1e\x1ff\x7fg"
    execution = kernel.run(f"printf '%s\\n' '{text}'")
    assert execution.status == "ok"
    assert execution.stdout == text + "\n"
    execution = kernel.run("echo a\x00b")
    assert execution.stdout == "ab\n"
    assert "NUL" in execution.stderr


def test_crlf_line_endings(kernel):
    assert kernel.ok("CR_VAR=one\r\nif true; then\r\n  echo \"$CR_VAR\"\r\nfi\r\n") == "one\n"


def test_200kb_one_line_cell(kernel):
    value = "x" * 200_000
    assert kernel.ok(f"BIG='{value}'; echo ${{#BIG}}; unset BIG") == "200000\n"


MALFORMED = [
    ("echo 'unbalanced", "unexpected EOF while looking for matching"),
    ("if true; then echo x", "syntax error: unexpected end of file"),
    ("fi fi", "syntax error near unexpected token `fi'"),
    ("echo $(", "unexpected EOF"),
    ("for x in; do", "syntax error"),
    (")", "syntax error near unexpected token `)'"),
]


@pytest.mark.parametrize("code, message", MALFORMED)
def test_malformed_code_reports_bash_message(kernel, code, message):
    started = time.monotonic()
    execution = kernel.run(code, timeout=30)
    assert execution.status == "error"
    assert execution.exit_code in (1, 2)  # bash's own status for the error
    assert message in execution.stderr
    assert time.monotonic() - started < 10
    assert kernel.ok("echo next") == "next\n"


def test_unterminated_heredoc_and_trailing_backslash_still_reply(kernel):
    execution = kernel.run("cat <<EOF\nhello")
    assert execution.stdout == "hello\n"
    assert "here-document" in execution.stderr
    execution = kernel.run("echo trailing \\")
    assert execution.status == "ok"
    assert kernel.ok("echo next") == "next\n"


@pytest.mark.parametrize("code, expected", [
    ("read -r line; echo \"rc=$? line=$line\"", "rc=1 line=\n"),
    ("cat; echo cat-done", "cat-done\n"),
    ("head -n 1; echo head-done", "head-done\n"),
    ("python3 -c 'import sys; print(repr(sys.stdin.read()))'", "''\n"),
])
def test_stdin_is_at_end_of_file_when_nobody_can_answer(kernel, code, expected):
    # allow_stdin=False, as nbclient and papermill send (tests/test_prompts.py has the rest).
    execution = kernel.run(code, allow_stdin=False)
    assert execution.stdout == expected
    assert "asked for input" in execution.stderr


def test_python_input_gets_eof(kernel):
    execution = kernel.run("python3 -c 'input()'", timeout=30, allow_stdin=False)
    assert execution.exit_code == 1
    assert "EOFError" in execution.stderr
