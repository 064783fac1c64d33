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
