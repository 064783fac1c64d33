"""The Jupyter project's kernel conformance suite, jupyter_kernel_test, on
both backends: kernelspec "shell-test" (local) and "shell-ssh-test" (over
SSH to the test sshd), both installed by conftest's jupyter_prefix fixture.

The suite is unittest-based: each KernelTests subclass starts its kernel in
setUpClass, by kernelspec name. The autouse module fixture below depends on
jupyter_prefix, and pytest sets up a module-scoped fixture before the
class-scoped one through which it calls setUpClass, so the private
JUPYTER_PATH (and the sshd) are in place when the kernels start.

Not covered, because a shell has no such thing: execute_result (and so
history, which the suite tests through it), the pager payload.
Those tests are skipped by the suite itself; every other one runs, and
test_every_sample_is_set makes sure none of them turns into a skip.
"""

from __future__ import annotations

import jupyter_kernel_test as jkt  # not `from ... import KernelTests`: pytest would run the base class
import pytest


@pytest.fixture(scope="module", autouse=True)
def _test_kernelspecs(jupyter_prefix):
    """The test kernelspecs on JUPYTER_PATH before any setUpClass runs."""
    yield jupyter_prefix


class ShellKernelSamples:
    """What the suite sends, and what a bash kernel must answer."""

    language_name = "bash"
    file_extension = ".sh"

    code_hello_world = "echo hello, world"
    code_stderr = "echo 'this goes to stderr' >&2"
    # A non-zero exit status is an error reply with exactly one error output.
    code_generate_error = "false"

    completion_samples = [
        {"text": "ech", "matches": {"echo"}},
        {"text": "printf", "matches": {"printf"}},
        # readline's word is "$HOM" (COMP_WORDBREAKS has no "$"): it is replaced whole.
        {"text": "echo $HOM", "matches": {"$HOME"}},
    ]
    complete_code_samples = [
        "echo hello",
        "for i in 1 2; do echo $i; done",
        "cat <<EOF\nhello\nEOF",
        "",
    ]
    incomplete_code_samples = [
        "if true; then",
        "for i in 1 2; do",
        "echo 'unterminated",
        "cat <<EOF\nhello",
        "f() {",
    ]
    invalid_code_samples = [
        "fi fi",
        "done",
        "echo )",
    ]

    code_inspect_sample = "cd"

    # `clear` clears the cell's output, as it clears a terminal.
    code_clear_output = "echo before; clear; echo after"

    code_display_data = [
        {"code": "printf '<b>x</b>' | display --mime text/html", "mime": "text/html"},
        {"code": "printf 'plain text' | display --mime text/plain", "mime": "text/plain"},
    ]


class TestLocalKernel(ShellKernelSamples, jkt.KernelTests):
    kernel_name = "shell-test"


class TestSSHKernel(ShellKernelSamples, jkt.KernelTests):
    kernel_name = "shell-ssh-test"


class TestLocalIopubWelcome(jkt.IopubWelcomeTests):
    kernel_name = "shell-test"
    support_iopub_welcome = True


class TestSSHIopubWelcome(jkt.IopubWelcomeTests):
    kernel_name = "shell-ssh-test"
    support_iopub_welcome = True


REQUIRED = ["code_hello_world", "code_stderr", "code_generate_error", "completion_samples",
            "complete_code_samples", "incomplete_code_samples", "invalid_code_samples",
            "code_inspect_sample", "code_display_data", "code_clear_output", "language_name",
            "file_extension"]


@pytest.mark.parametrize("cls", [TestLocalKernel, TestSSHKernel], ids=["local", "ssh"])
def test_every_sample_is_set(cls):
    """An empty sample makes the suite skip its test silently."""
    assert issubclass(cls, jkt.KernelTests)
    missing = [name for name in REQUIRED if not getattr(cls, name)]
    assert not missing, missing
    assert cls.kernel_name != jkt.KernelTests.kernel_name
