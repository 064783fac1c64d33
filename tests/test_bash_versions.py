"""The bash the suite names (SHELL_KERNEL_TEST_BASH, else `bash` on PATH) is
the one that the kernels of both backends run: the proof that a run with
the switch tested that bash."""

from __future__ import annotations

import subprocess

from conftest import TEST_BASH
from test_interrupt import interrupt_when_seen


def named_bash_version() -> str:
    return subprocess.run([TEST_BASH or "bash", "--norc", "--noprofile", "-c",
                           'builtin printf %s "$BASH_VERSION"'],
                          check=True, capture_output=True, text=True).stdout


def test_the_kernel_runs_the_bash_the_suite_names(kernel):
    version = named_bash_version()
    assert version
    assert kernel.ok('echo "$BASH_VERSION"') == version + "\n"
    info = kernel.request("kernel_info")["content"]
    assert info["language_info"]["version"] == version


def test_cells_read_the_terminal_the_kernel_names_last(kernel, tmp_path):
    """The kernel points the cells' input (descriptor 60) at a new prompt
    terminal after a reconnection: bash 3.2 undid a second `exec 60<` made
    inside a redirected group, and cells read the lost one."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_text("one\n")
    second.write_text("two\n")
    kernel.ok('__sk_restore=$(cat "$__shell_kernel_dir/tty" 2>/dev/null)')
    try:
        kernel.ok(f"__shell_kernel_stdin {first}; true")  # (stty -g fails on a file)
        kernel.ok(f"__shell_kernel_stdin {second}; true")
        assert kernel.ok('read -r line; echo "$line"') == "two\n"
    finally:
        kernel.ok('__shell_kernel_stdin "$__sk_restore"; unset -v __sk_restore')


def test_an_interrupted_cell_reports_130_and_leaves_it_in_dollar_question(kernel):
    """Bash 3.2 left 1, 4.2 128, where 5 leaves 130, once SIGINT abandoned
    the cell's line: the kernel reports 130 on every bash, and the next
    cell's $? and the status file say so too."""
    for code in ("sleep 30.373", "while :; do :; done", "sleep 30.373; echo after"):
        stdout, execution = interrupt_when_seen(kernel, f"echo started; {code}", "started")
        assert execution.exit_code == 130 and execution.meta["interrupted"], code
        assert "after" not in stdout and execution.stderr == "", (code, execution.stderr)
        assert kernel.ok('echo $?; sed -n 2p "$__shell_kernel_dir/status"') == "130\n130\n", code


def test_sigpiped_pipelines_print_no_tcsetattr_complaint(kernel):
    """Bash 3.2 says `bash: [PID: 2] tcsetattr: ...` (4.2 and later add the
    descriptor) after a program of a pipeline dies of SIGPIPE."""
    for code in ("yes | head -2", "seq 1 100000 | sort -n | head -1"):
        execution = kernel.run(code)
        assert execution.status == "ok" and execution.stderr == "", (code, execution.stderr)
