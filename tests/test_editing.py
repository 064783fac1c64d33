"""Completion, inspection, is_complete and rich display, on both backends."""

import base64

import pytest


def complete(kernel, code, cursor=None):
    cursor = len(code) if cursor is None else cursor
    return kernel.request("complete", code, cursor)["content"]


def test_completes_commands_functions_aliases_variables_and_paths(kernel, tmp_path):
    (tmp_path / "alpha_dir").mkdir()
    (tmp_path / "alpha_file.txt").write_text("x")
    kernel.ok(f"cd {tmp_path}; cmpl_func() {{ :; }}; alias cmpl_alias=ls; CMPL_VAR=1")
    reply = complete(kernel, "cmpl_f")
    assert reply["matches"] == ["cmpl_func"] and reply["cursor_start"] == 0
    assert complete(kernel, "x; cmpl_al")["matches"] == ["cmpl_alias"]
    assert "echo" in complete(kernel, "ech")["matches"]
    reply = complete(kernel, "echo ${CMPL_V")
    # (bash-completion, where the shell has it, closes the brace as a terminal does)
    [match] = reply["matches"]
    assert "echo ${CMPL_V"[:reply["cursor_start"]] + match in ("echo ${CMPL_VAR", "echo ${CMPL_VAR}")
    reply = complete(kernel, "cat alpha_")
    assert reply["matches"] == ["alpha_dir/", "alpha_file.txt"]
    assert (reply["cursor_start"], reply["cursor_end"]) == (4, 10)
    reply = complete(kernel, "cat alpha_ | wc", cursor=10)  # cursor in the middle
    assert reply["cursor_end"] == 10 and "alpha_file.txt" in reply["matches"]
    kernel.ok("cd /")


def test_completion_leaves_the_shell_state_alone(kernel):
    kernel.ok("cd /tmp; trap 'echo trapped' USR1")
    kernel.run("(exit 3)")
    for code in ["ec", "echo $HO", "ls /"]:
        complete(kernel, code)
    kernel.request("inspect", "ls", 2)
    kernel.request("is_complete", "if true; then")
    execution = kernel.run("echo \"$? $PWD\"; trap -p USR1")
    assert execution.stdout == "3 /tmp\ntrap -- 'echo trapped' SIGUSR1\n"
    kernel.ok("trap - USR1; cd /")


# The indent that jupyter console puts before the next line: a terminal
# user's indent inside an open compound command, none where spaces would
# become data (a quoted string, a here-document, a backslash continuation).
@pytest.mark.parametrize("code, status, indent", [
    ("echo ok", "complete", None),
    ("for x in 1 2; do echo $x; done", "complete", None),
    ("if true; then", "incomplete", "  "),
    ("for f in *; do", "incomplete", "  "),
    ("f() {", "incomplete", "  "),
    ("echo a &&", "incomplete", "  "),
    ("echo 'open quote", "incomplete", ""),
    ('echo "a', "incomplete", ""),
    ('if true; then echo "a', "incomplete", ""),
    ("echo $(ls", "incomplete", ""),
    ("cat <<EOF\nline", "incomplete", ""),
    ("if true; then\n  cat <<EOF", "incomplete", ""),
    ("f() {\n  cat <<-EOF\n\tline", "incomplete", ""),
    ("echo continued \\", "incomplete", ""),
    ("fi fi", "invalid", None),
    ("done", "invalid", None),
])
def test_is_complete_uses_bash_parser(kernel, code, status, indent):
    reply = kernel.request("is_complete", code)["content"]
    assert reply["status"] == status
    assert reply.get("indent") == indent


def test_continued_lines_run_as_typed(kernel):
    """What jupyter console sends after Enter on an incomplete line: the
    code, a newline, the indent it was given, the next line."""
    def typed(*lines):
        code = lines[0]
        for line in lines[1:]:
            reply = kernel.request("is_complete", code)["content"]
            assert reply["status"] == "incomplete", code
            code += "\n" + reply["indent"] + line
        return kernel.ok(code)
    assert typed('echo "a', 'b"') == "a\nb\n"
    assert typed("cat <<EOF", "x", "EOF") == "x\n"
    assert typed("if true; then", "cat <<EOF", "y", "EOF", "fi") == "y\n"


def test_is_complete_runs_nothing(kernel, tmp_path):
    marker = tmp_path / "ran"
    kernel.request("is_complete", f"touch {marker}; if true; then")
    kernel.request("is_complete", f"touch {marker}")
    assert not marker.exists()


def test_inspect_builtins_commands_functions_and_unknown_words(kernel):
    kernel.ok("insp_func() { echo inspected; }")
    reply = kernel.request("inspect", "cd /tmp", 1)["content"]
    assert reply["found"] and "cd is a shell builtin" in reply["data"]["text/plain"]
    assert "cd: cd [-L" in reply["data"]["text/plain"]  # help's usage line (bash 3.2 too)
    reply = kernel.request("inspect", "insp_func", 4)["content"]
    assert "insp_func is a function" in reply["data"]["text/plain"]
    reply = kernel.request("inspect", "ls -l", 1)["content"]
    text = reply["data"]["text/plain"]
    assert "ls is /" in text and len(text.splitlines()) <= 90
    assert kernel.request("inspect", "no_such_command_xyz", 3)["content"]["found"] is False


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def test_display_images_html_markdown_json_and_updates(kernel, tmp_path):
    (tmp_path / "dot.png").write_bytes(PNG)
    (tmp_path / "data.json").write_text('{"a": [1, 2]}')
    (tmp_path / "pic.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    execution = kernel.run(
        f"cd {tmp_path}; echo before; display dot.png; printf '<b>bold</b>' | display --mime text/html; "
        "printf '# Title' | display --mime text/markdown; display data.json; display pic.svg; "
        "echo progress-1 | display --mime text/plain --id prog; "
        "echo progress-2 | display --mime text/plain --id prog; echo after; cd /")
    assert execution.status == "ok", execution.stderr
    kinds = [(m["msg_type"], sorted(m["content"].get("data", {}))) for m in execution.messages]
    assert kinds == [
        ("stream", []),
        ("display_data", ["image/png", "text/plain"]),
        ("display_data", ["text/html", "text/plain"]),
        ("display_data", ["text/markdown", "text/plain"]),
        ("display_data", ["application/json", "text/plain"]),
        ("display_data", ["image/svg+xml", "text/plain"]),
        ("display_data", ["text/plain"]),
        ("update_display_data", ["text/plain"]),
        ("stream", []),
    ]
    data = [m["content"].get("data", {}) for m in execution.messages]
    assert base64.b64decode(data[1]["image/png"]) == PNG
    assert data[2]["text/html"] == "<b>bold</b>"
    assert data[4]["application/json"] == {"a": [1, 2]}
    assert data[6]["text/plain"] == "progress-1\n" and data[7]["text/plain"] == "progress-2\n"
    assert execution.messages[6]["content"]["transient"]["display_id"] == "prog"
    assert execution.messages[0]["content"]["text"] == "before\n"


def test_display_errors_are_clear(kernel, tmp_path):
    execution = kernel.run("display /no/such/file.png")
    assert execution.exit_code == 1 and "no such readable file" in execution.stderr
    execution = kernel.run("printf '\\0\\1\\377' | display")
    assert "cannot tell the type" in execution.stderr and "--mime" in execution.stderr
    execution = kernel.run("head -c 2000 /dev/zero | SHELL_KERNEL_DISPLAY_LIMIT=1000 display --mime image/png")
    assert execution.exit_code == 1 and "over the 1000 byte limit" in execution.stderr
    assert not [m for m in execution.messages if m["msg_type"] == "display_data"]
    assert kernel.ok("echo fine") == "fine\n"


def test_display_tells_the_type_from_a_name_in_capitals(kernel, tmp_path):
    # JSON: its bytes alone would make it text.
    (tmp_path / "DATA.JSON").write_text('{"b": 1}')
    execution = kernel.run(f"display {tmp_path}/DATA.JSON")
    [shown] = [m["content"] for m in execution.messages if m["msg_type"] == "display_data"]
    assert shown["data"]["application/json"] == {"b": 1}
