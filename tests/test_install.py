"""The installer CLI and what a kernel reports about itself."""

import json
import subprocess
import sys

import pytest


def cli(*args):
    return subprocess.run([sys.executable, "-m", "shell_kernel", *args],
                          capture_output=True, text=True)


def test_install_writes_spec_with_logos_and_uninstall_removes_it(tmp_path):
    done = cli("install", "--prefix", str(tmp_path), "--name", "mysh",
               "--display-name", "My Shell", "--interrupt-grace", "2.5", "--clean")
    assert done.returncode == 0, done.stderr
    spec_dir = tmp_path / "share" / "jupyter" / "kernels" / "mysh"
    spec = json.loads((spec_dir / "kernel.json").read_text())
    assert spec["language"] == "bash"
    assert spec["interrupt_mode"] == "message"
    assert spec["display_name"] == "My Shell"
    assert spec["argv"][0] == sys.executable
    assert spec["argv"][1:4] == ["-m", "shell_kernel", "kernel"]
    assert "--clean" in spec["argv"] and "2.5" in spec["argv"]
    assert spec["argv"][-2:] == ["-f", "{connection_file}"]
    assert {"logo-32x32.png", "logo-64x64.png", "logo-svg.svg"} <= {p.name for p in spec_dir.iterdir()}

    env_cli = subprocess.run([sys.executable, "-m", "shell_kernel", "uninstall", "mysh"],
                             capture_output=True, text=True,
                             env={"JUPYTER_PATH": str(tmp_path / "share" / "jupyter"),
                                  "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert env_cli.returncode == 0, env_cli.stderr
    assert not spec_dir.exists()


def test_default_name_is_shell(tmp_path):
    assert cli("install", "--prefix", str(tmp_path)).returncode == 0
    assert (tmp_path / "share" / "jupyter" / "kernels" / "shell" / "kernel.json").exists()


@pytest.mark.parametrize("args, message", [
    (["install", "--name", "bad name!"], "not valid"),
    (["install", "--interrupt-grace", "-1"], "must be greater than 0"),
    (["install", "--output-limit-mb", "lots"], "is not a number"),
    (["install", "--user", "--sys-prefix"], "not allowed with"),
    (["install", "--bogus"], "unrecognized arguments"),
    (["uninstall", "no-such-kernel-here"], "no kernelspec named"),
    (["uninstall"], "required"),
    ([], "required"),
])
def test_bad_arguments_get_clear_errors(tmp_path, args, message):
    if args[:1] == ["install"] and "--user" not in args:
        args = args + ["--prefix", str(tmp_path)]
    done = cli(*args)
    assert done.returncode != 0
    assert message in done.stderr


def test_kernel_info(kernel):
    reply = kernel.request("kernel_info")["content"]
    info = reply["language_info"]
    assert info["name"] == "bash"
    assert info["codemirror_mode"] == "shell"
    assert info["mimetype"] == "text/x-sh"
    assert info["file_extension"] == ".sh"
    assert info["pygments_lexer"] == "bash"
    assert info["version"] == kernel.ok("builtin printf %s \"$BASH_VERSION\"")
    assert "bash" in reply["banner"]
    assert "kernel subshells" not in reply.get("supported_features", [])
    assert "debugger" not in reply.get("supported_features", [])
    assert reply["implementation"] == "shell_kernel"


@pytest.mark.parametrize("flags, name, display", [
    ([], "shell", "Bash (shell_kernel)"),
    (["--tty"], "shell-tty", "Bash (tty)"),
    (["--session", "migrate"], "shell-session-migrate", "Bash (session migrate)"),
    (["--clean", "--tty"], "shell-clean-tty", "Bash (clean, tty)"),
    (["--ssh", "db1"], "shell-ssh-db1", "Bash on db1 (SSH)"),
    (["--ssh", "db1", "--tty"], "shell-ssh-db1-tty", "Bash on db1 (SSH, tty)"),
    (["--ssh", "me@db1:2222", "--session", "migrate"], "shell-ssh-db1-2222-session-migrate",
     "Bash on me@db1:2222 (SSH, session migrate)"),
])
def test_kernelspec_variants_get_names_that_say_what_differs(tmp_path, flags, name, display):
    """The launcher shows each variant as its own card, and a variant does not
    replace the plain kernelspec."""
    done = cli("install", "--prefix", str(tmp_path), *flags)
    assert done.returncode == 0, done.stderr
    spec = json.loads((tmp_path / "share" / "jupyter" / "kernels" / name / "kernel.json")
                      .read_text())
    assert spec["display_name"] == display


def fake_bash(directory, version_line: str):
    """A `bash` that only answers --version, as the bash it stands for would."""
    path = directory / "bin" / "bash"
    path.parent.mkdir(parents=True)
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' '{version_line}' 'Copyright (C) 2007 ...'\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("flags, name, display", [
    ([], "shell-bash-3.2", "Bash 3.2 (shell_kernel)"),
    (["--tty"], "shell-bash-3.2-tty", "Bash 3.2 (tty)"),
    (["--clean", "--session", "old"], "shell-bash-3.2-clean-session-old",
     "Bash 3.2 (clean, session old)"),
])
def test_another_bash_gets_a_name_that_says_which(tmp_path, flags, name, display):
    """install --bash /opt/bash-3.2/bin/bash gave the plain kernelspec's name
    and display name ("Bash (shell_kernel)"), replacing it."""
    bash = fake_bash(tmp_path, "GNU bash, version 3.2.57(1)-release (x86_64-apple-darwin23)")
    done = cli("install", "--prefix", str(tmp_path), "--bash", bash, *flags)
    assert done.returncode == 0, done.stderr
    spec = json.loads((tmp_path / "share" / "jupyter" / "kernels" / name / "kernel.json")
                      .read_text())
    assert spec["display_name"] == display
    assert spec["argv"][spec["argv"].index("--bash") + 1] == bash


def test_a_remote_bash_is_named_by_its_path(tmp_path):
    """Over SSH the bash is on the host, not run at install: its path says which."""
    done = cli("install", "--prefix", str(tmp_path), "--ssh", "db1", "--bash",
               "/opt/bash-3.2/bin/bash")
    assert done.returncode == 0, done.stderr
    spec = json.loads((tmp_path / "share" / "jupyter" / "kernels"
                       / "shell-ssh-db1-bash-opt-bash-3.2-bin-bash" / "kernel.json").read_text())
    assert spec["display_name"] == "Bash on db1 (SSH, bash /opt/bash-3.2/bin/bash)"


@pytest.mark.parametrize("what", ["missing", "not-bash"])
def test_a_path_that_runs_no_bash_here_names_it_by_path(tmp_path, what):
    bash = str(tmp_path / "nope") if what == "missing" else fake_bash(tmp_path, "dash 0.5")
    done = cli("install", "--prefix", str(tmp_path), "--bash", bash)
    assert done.returncode == 0, done.stderr
    kernels = tmp_path / "share" / "jupyter" / "kernels"
    [spec_dir] = kernels.iterdir()
    assert spec_dir.name.startswith("shell-bash-tmp-")
    assert spec_dir.name.endswith("-nope" if what == "missing" else "-bin-bash")
    assert json.loads((spec_dir / "kernel.json").read_text())["display_name"] == \
        f"Bash {bash} (shell_kernel)"
