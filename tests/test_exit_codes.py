"""Exit statuses: status file, reply metadata, error replies, shell death."""

from pathlib import Path


def state_dir(kernel) -> Path:
    """The session's private directory, on whichever host runs the shell (here, both)."""
    return Path(kernel.ok('builtin printf %s "$__shell_kernel_dir"'))


def test_first_cell_has_exit_code_metadata(start_kernel):
    kernel = start_kernel()
    execution = kernel.run("echo first")
    assert execution.status == "ok"
    assert execution.meta["exit_code"] == 0
    assert execution.meta["duration_s"] >= 0
    assert execution.meta["cwd"]


def test_status_file_holds_the_exit_code(kernel):
    state = state_dir(kernel)
    assert state.stat().st_mode & 0o777 == 0o700
    execution = kernel.run("echo hi; (exit 5)")
    seq, code, cwd = (state / "status").read_text().split("\n", 2)
    assert code == "5" and execution.exit_code == 5
    assert cwd == execution.meta["cwd"]
    kernel.ok("true")
    assert (state / "status").read_text().split("\n")[1] == "0"


def test_status_file_follows_cwd_longer_shorter_and_not_ascii(kernel, tmp_path):
    """The status file is rewritten in place when its text is no shorter, and
    cut when it is: a directory with a long name, a short one, one whose name is
    longer in bytes than in characters, then one as long in characters but
    shorter in bytes (its text overwriting the last would leave bytes behind)."""
    state = state_dir(kernel)
    names = ["a" * 40, "b", "\u00e9" * 10, "c" * 10]
    for name in names:
        (tmp_path / name).mkdir()
        kernel.ok(f"cd '{tmp_path / name}'")
        assert (state / "status").read_bytes().decode().split("\n", 2)[2] == str(tmp_path / name)


def test_nonzero_status_is_one_error_output(kernel):
    execution = kernel.run("echo before; false")
    assert execution.status == "error"
    assert execution.reply["content"]["ename"] == "ExitCode"
    evalue = "exit status 1 from 'false' (line 1)"
    assert execution.reply["content"]["evalue"] == evalue
    assert [m["msg_type"] for m in execution.messages] == ["stream", "error"]
    assert execution.errors[0]["ename"] == "ExitCode" and execution.errors[0]["evalue"] == evalue


def test_status_of_last_command_as_in_a_script(kernel):
    assert kernel.run("false; true").exit_code == 0
    assert kernel.run("true; false").exit_code == 1
    assert kernel.run("false | true").exit_code == 0
    assert kernel.run("set -o pipefail; false | true").exit_code == 1
    kernel.run("set +o pipefail")


def test_status_carries_to_the_next_cell_as_in_a_script(kernel):
    kernel.run("(exit 5)")
    assert kernel.ok("echo $?") == "5\n"
    kernel.run("exit 6")
    assert kernel.ok("echo $?") == "6\n"
    assert kernel.ok("echo $?") == "0\n"


def test_exit_ends_the_cell_and_keeps_the_shell(kernel):
    kernel.ok("EXIT_KEEP=kept; cd /tmp")
    execution = kernel.run("echo one; exit 3; echo never")
    assert execution.exit_code == 3 and execution.stdout == "one\n"
    assert execution.reply["content"]["evalue"] == "exit status 3 from 'exit 3' (line 1)"
    execution = kernel.run("stop() { echo stopping; exit 4; }; stop; echo never")
    assert execution.exit_code == 4 and execution.stdout == "stopping\n"
    assert kernel.run("true; exit").exit_code == 0
    assert kernel.run("false; exit").exit_code == 1
    assert kernel.run("(exit 6); echo sub=$?").stdout == "sub=6\n"
    execution = kernel.run("exit nope")
    assert execution.exit_code == 2 and "numeric argument required" in execution.stderr
    assert kernel.ok("echo $EXIT_KEEP; pwd") == "kept\n/tmp\n"


def test_shell_death_is_reported_and_a_new_shell_works(kernel):
    cases = [("exec true", 0), ("kill -9 $$", 137), ("set -e; false; echo never", 1),
             ("exec bash -c 'exit 3'", 3)]
    for code, status in cases:
        kernel.ok("DEATH_VAR=set; cd /tmp")
        execution = kernel.run(code)
        assert execution.status == "error", code
        assert execution.exit_code == status, code
        error = execution.errors[0]
        assert error["ename"] == "ShellExited"
        assert "new shell was started" in error["evalue"]
        assert "working directory, variables" in error["evalue"]
        assert execution.meta["shell_restarted"] is True
        assert kernel.ok("echo ${DEATH_VAR-reset}; pwd") == f"reset\n{kernel.home_dir}\n"
