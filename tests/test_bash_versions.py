"""The bash the suite names (SHELL_KERNEL_TEST_BASH, else `bash` on PATH) is
the one that the kernels of both backends run: the proof that a run with
the switch tested that bash."""

from __future__ import annotations

import subprocess

from conftest import TEST_BASH


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
