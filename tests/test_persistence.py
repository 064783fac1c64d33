"""State carries over from cell to cell, and startup files behave."""

import subprocess
import sys


def test_cwd_variables_functions_aliases_options_persist(kernel, tmp_path):
    kernel.ok(f"cd {tmp_path}; export P_EXPORTED=e1; P_PLAIN='p 1'; "
              "p_func() { echo \"func $1\"; }; alias p_alias='echo aliased'; "
              "shopt -s extglob; set -o pipefail; declare -A P_MAP=([k]=v)")
    out = kernel.ok("pwd; echo $P_EXPORTED; echo \"$P_PLAIN\"; p_func x; p_alias; "
                    "shopt -q extglob && echo extglob; [[ -o pipefail ]] && echo pipefail; "
                    "echo ${P_MAP[k]}; bash -c 'echo child:$P_EXPORTED'")
    assert out.splitlines() == [str(tmp_path), "e1", "p 1", "func x", "aliased", "extglob",
                                "pipefail", "v", "child:e1"]
    kernel.ok("set +o pipefail; cd /")


def test_activated_virtualenv_persists(kernel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    kernel.ok(f"source {venv}/bin/activate")
    out = kernel.ok("echo $VIRTUAL_ENV; command -v python; python -c 'import sys; print(sys.prefix)'")
    assert out.splitlines() == [str(venv), f"{venv}/bin/python", str(venv)]
    kernel.ok("deactivate")
    assert kernel.ok("echo ${VIRTUAL_ENV-none}") == "none\n"


def write_rc_files(home, noisy=False):
    noise = ""
    if noisy:
        noise = ("echo 'profile says hello'; echo 'profile error' >&2; "
                 "PS1='\\u@\\h \\$(date) > '; PROMPT_COMMAND='echo prompt-noise; echo prompt-err >&2'; "
                 "bind 'set enable-bracketed-paste on' 2>/dev/null; set -o vi; "
                 "printf '\\033]0;title\\007'; PS0='ps0-noise'\n")
    (home / ".profile").write_text("export FROM_PROFILE=yes\n. \"$HOME/.bashrc\"\n" + noise)
    (home / ".bashrc").write_text("FROM_BASHRC=yes\nalias from_rc='echo rc-alias'\n" + noise)


def test_user_startup_files_are_loaded(start_kernel, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    write_rc_files(home)
    kernel = start_kernel(HOME=str(home))
    assert kernel.ok("echo $FROM_PROFILE $FROM_BASHRC; from_rc") == "yes yes\nrc-alias\n"


def test_clean_shell_skips_startup_files(start_kernel, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    write_rc_files(home)
    kernel = start_kernel("shell-test-clean", HOME=str(home))
    assert kernel.ok("echo ${FROM_PROFILE-no} ${FROM_BASHRC-no}") == "no no\n"


def test_noisy_startup_files_never_leak(start_kernel, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    write_rc_files(home, noisy=True)
    kernel = start_kernel(HOME=str(home))
    for _ in range(3):
        execution = kernel.run("echo out; echo err >&2")
        assert execution.status == "ok"
        assert execution.stdout == "out\n"
        assert execution.stderr == "err\n"
    execution = kernel.run("false")
    assert execution.exit_code == 1 and execution.stdout == "" and execution.stderr == ""
