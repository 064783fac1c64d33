"""Completion as a terminal's Tab: the host's programmable completion (the
user's `complete` specs, bash-completion's functions), run with what
readline sets, and the shell's state untouched; on both backends."""

import os
import pty
import select
import shlex
import subprocess
import time

import pytest

from conftest import TEST_BASH
from shell_kernel.completion_words import command_line

BASH = TEST_BASH or "bash"


def complete(kernel, code, cursor=None):
    cursor = len(code) if cursor is None else cursor
    return kernel.request("complete", code, cursor)["content"]


def has_bash_completion(kernel) -> bool:
    return kernel.ok("type -t _completion_loader || :").strip() == "function"


def test_the_hosts_bash_completion_is_loaded_as_a_login_would_load_it(kernel):
    """Debian's bash-completion (which .ci/run installs) is loaded by the
    shell's own startup files: /etc/profile.d for a login shell, and the
    ~/.bashrc of /etc/skel that the test sshd's home is seeded from."""
    if not os.path.exists("/usr/share/bash-completion/bash_completion"):
        pytest.skip("no bash-completion on this machine")
    version = kernel.ok("echo ${BASH_VERSINFO[0]}${BASH_VERSINFO[1]}").strip()
    if int(version) < 42:
        pytest.skip("bash-completion 2 needs bash 4.2")
    assert has_bash_completion(kernel)


def test_git_make_and_other_commands_complete_as_in_a_terminal(kernel, tmp_path):
    if not has_bash_completion(kernel):
        pytest.skip("no bash-completion in this shell (bash < 4.2, or not installed)")
    (tmp_path / "Makefile").write_text("all: build\nbuild:\n\ttrue\ntest-unit:\n\ttrue\n")
    kernel.ok(f"cd {shlex.quote(str(tmp_path))}")
    reply = complete(kernel, "git chec")
    assert "checkout" in reply["matches"] and reply["cursor_start"] == 4
    assert all(m.startswith("chec") for m in reply["matches"])
    assert complete(kernel, "make t")["matches"] == ["test-unit"]
    assert complete(kernel, "make ")["matches"] == ["all", "build", "test-unit"]
    assert complete(kernel, "echo x; make b")["matches"] == ["build"]
    reply = complete(kernel, "ssh -o ConnectT")
    assert reply["matches"] == ["ConnectTimeout="] and reply["cursor_start"] == len("ssh -o ")
    assert "install" in complete(kernel, "apt-get ins")["matches"]
    kernel.ok("cd /")


@pytest.mark.parametrize("code, expected", [
    ("ls /usr/sh", ["/usr/share/"]),
    ("cat /etc/hostn", ["/etc/hostname"]),
])
def test_paths_never_list_the_command_word(kernel, code, expected):
    reply = complete(kernel, code)
    assert reply["matches"] == expected
    assert reply["cursor_start"] == code.index("/")


def test_a_users_complete_spec_sees_what_readline_sets(kernel):
    """The user's own function, defined in a cell: it gets COMP_WORDS,
    COMP_CWORD, COMP_LINE, COMP_POINT, COMP_TYPE and COMP_KEY as in a
    terminal, and its matches replace readline's word (after the `=`)."""
    kernel.ok("_sk_seen() { COMPREPLY=(\"${#COMP_WORDS[@]}|${COMP_WORDS[*]}|$COMP_CWORD|"
              "$COMP_LINE|$COMP_POINT|$COMP_TYPE|$COMP_KEY|$1|$2|$3\"); }\n"
              "complete -F _sk_seen sk_cmd\n"
              "_sk_words() { COMPREPLY=($(compgen -W 'alpha beta alps' -- \"$2\")); }\n"
              "complete -F _sk_words sk_words; complete -W 'red green' sk_colours")
    reply = complete(kernel, "echo a; sk_cmd x --opt=va")
    assert reply["cursor_start"] == len("echo a; sk_cmd x --opt=")
    [seen] = reply["matches"]
    words = seen.split("|")
    old = kernel.ok("echo ${BASH_VERSINFO[0]}").strip() == "3"
    if old:  # bash 3.2 splits COMP_WORDS where its parser would, not at =
        assert words[:3] == ["3", "sk_cmd x --opt=va", "2"]
    else:
        assert words[:3] == ["5", "sk_cmd x --opt = va", "4"]
    assert words[3] in ("sk_cmd x --opt=va", " sk_cmd x --opt=va")  # (3.2, 4.2: the blank)
    assert int(words[4]) == len(words[3])
    assert words[5:] == ["9", "9", "sk_cmd", "va", "=" if not old else "x"]
    assert complete(kernel, "sk_words al")["matches"] == ["alpha", "alps"]
    assert complete(kernel, "sk_colours g")["matches"] == ["green"]
    assert complete(kernel, "sudo true; sk_words b")["matches"] == ["beta"]
    kernel.ok("complete -r sk_cmd sk_words sk_colours; unset -f _sk_seen _sk_words")


def test_file_names_are_quoted_as_readline_quotes_them(kernel, tmp_path):
    (tmp_path / "my dir").mkdir()
    (tmp_path / "a&b.txt").write_text("")
    kernel.ok(f"cd {shlex.quote(str(tmp_path))}; complete -f sk_files")
    assert complete(kernel, "sk_files my")["matches"] == ["my\\ dir/"]
    assert complete(kernel, "sk_files a")["matches"] == ["a\\&b.txt"]
    assert complete(kernel, 'sk_files "my d')["matches"] == ["my dir/"]
    assert complete(kernel, "sk_files my\\ d")["matches"] == ["my\\ dir/"]
    kernel.ok("complete -r sk_files; cd /")


def test_completion_functions_leave_the_shell_as_it_was(kernel, tmp_path):
    """A completion function that changes everything it can: none of it
    stays, and none of its output reaches a cell."""
    kernel.ok(f"cd {shlex.quote(str(tmp_path))}; sk_var=before; sleep 0 & sk_bg=$!\n"
              "_sk_messy() { set -f; set -u; shopt -s nocaseglob; trap 'echo trapped' USR2;"
              " cd /; sk_var=changed; export SK_NEW=1; echo noise; echo noise >&2;"
              " sleep 0 & COMPREPLY=(done); return 3; }\n"
              "complete -F _sk_messy sk_messy")
    kernel.run("(exit 7)")
    assert complete(kernel, "sk_messy x")["matches"] == ["done"]
    execution = kernel.run('echo "$? $PWD $sk_var ${SK_NEW-unset} $-"; [[ $! == "$sk_bg" ]] && echo same-bg;'
                           " shopt -p nocaseglob; trap -p USR2")
    status, cwd, var, new, flags = execution.stdout.split("\n")[0].split(" ")
    assert (status, cwd, var, new) == ("7", str(tmp_path), "before", "unset")
    assert "f" not in flags and "u" not in flags
    assert execution.stdout.split("\n")[1:] == ["same-bg", "shopt -u nocaseglob", ""]
    assert "noise" not in execution.stdout + execution.stderr
    kernel.ok("complete -r sk_messy; unset -f _sk_messy; cd /")


def test_a_slow_completion_function_is_stopped(kernel):
    kernel.ok("_sk_slow() { while :; do :; done; }; complete -F _sk_slow sk_slow; sk_var=kept")
    children = "read -r kids < /proc/$$/task/$$/children; echo $kids"
    before = set(kernel.ok(children).split())
    started = time.monotonic()
    reply = complete(kernel, "sk_slow x")
    waited = time.monotonic() - started
    assert reply["matches"] == [] and waited < 15
    started = time.monotonic()
    assert kernel.ok("echo $sk_var") == "kept\n"
    assert time.monotonic() - started < 5
    assert set(kernel.ok(children).split()) <= before  # the spinning subshell is gone
    kernel.ok("complete -r sk_slow; unset -f _sk_slow")


# ------------------------------------------------------------ the split
# What bash itself hands a completion function, read from a real bash on a
# terminal (Tab typed after each line), against completion_words.

LINES = ["sk_cmd ", "sk_cmd --foo=ba", "sk_cmd --foo=", "echo a; sk_cmd x y",
         'sk_cmd "a b" c', "sk_cmd a:b", "sk_cmd my\\ fi", 'sk_cmd "my fi', "FOO=1 sk_cmd x",
         "sk_cmd a | sk_cmd b", "sk_cmd  x", "{ sk_cmd x", "sk_cmd 'a'b:c", 'sk_cmd a"b c"d',
         "sk_cmd a>b", "sk_cmd x && sk_cmd y", "sk_cmd x y"]


def _bash_on_a_terminal(lines):
    """What a completion function is given for each line: COMP_LINE,
    COMP_POINT, COMP_CWORD, $1, $2, then COMP_WORDS."""
    seen = []
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(BASH, [BASH, "--norc", "--noprofile", "-i"],
                   {"PS1": "$ ", "TERM": "dumb", "PATH": os.environ["PATH"], "HOME": "/"})

    def read_until(marker: bytes, seconds: float) -> bytes:
        data, end = b"", time.monotonic() + seconds
        while marker not in data and time.monotonic() < end:
            if select.select([fd], [], [], 0.05)[0]:
                try:
                    data += os.read(fd, 65536)
                except OSError:
                    break
        return data

    try:
        os.write(fd, b"_p() { printf '\\036%s\\037' \"$COMP_LINE\" \"$COMP_POINT\" \"$COMP_CWORD\""
                     b" \"$1\" \"$2\" \"${COMP_WORDS[@]}\"; printf '\\035'; COMPREPLY=(); }\n"
                     b"complete -F _p sk_cmd\n")
        for line in lines:
            os.write(fd, line.encode() + b"\t")
            data = read_until(b"\x1d", 20)
            assert b"\x1d" in data, f"bash gave no completion for {line!r}"
            body = data[data.index(b"\x1e"): data.index(b"\x1d")].decode()
            seen.append([field[1:] for field in body.split("\x1f")[:-1]])
            os.write(fd, b"\x15")  # C-u: the line goes
        os.write(fd, b"exit\n")
        read_until(b"\0", 0.5)
    finally:
        os.close(fd)
        os.waitpid(pid, 0)
    return seen


def test_the_command_line_is_cut_as_bash_cuts_it():
    major, minor = subprocess.run([BASH, "-c", "echo ${BASH_VERSINFO[0]} ${BASH_VERSINFO[1]}"],
                                  capture_output=True, text=True, check=True).stdout.split()
    version = (int(major), int(minor))
    lines = LINES
    if version < (4, 4):  # the assignment is taken for the name
        lines = [line for line in LINES if not line.startswith("FOO=1")]
        assert command_line("FOO=1 sk_cmd x", 14, version=version).name == "FOO=1"
    seen_by_bash = _bash_on_a_terminal(lines)
    assert len(seen_by_bash) == len(lines)
    for line, seen in zip(lines, seen_by_bash):
        cut = command_line(line, len(line), version=version)
        assert cut is not None, line
        assert [cut.line, str(cut.point), str(cut.cword), cut.name, cut.text, *cut.words] == seen, line
    for line in ("sk_cmd x; ", "sk_cmd >| x", "sk_c", "sk_cmd x | "):
        assert command_line(line, len(line)) is None, line
