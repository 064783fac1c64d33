"""ssh_config Host and Match patterns: shell_kernel compiles each list once
(a fleet resolves hundreds of hosts through one config); the answers must be
paramiko's own."""

import itertools

import paramiko
import pytest

from shell_kernel.backends.ssh.target import _OpenSSHConfig, resolve

PATTERNS = ["*", "web*", "web?", "!web3", "db[12]", "!*.corp", "*.example.com", "10.0.*.*",
            "h1", "[!a]*", "a*b?c", "!db2", "", "!", "x,y"]
TARGETS = ["web1", "web3", "web12", "db1", "db2", "db3", "h1", "h10", "mail.corp",
           "api.example.com", "10.0.3.4", "abc", "aXbYc", "", "x", "x,y"]


@pytest.mark.parametrize("size", [1, 2, 3])
def test_pattern_lists_match_as_paramiko_matches(size):
    ours, theirs = _OpenSSHConfig(), paramiko.SSHConfig()
    for patterns in itertools.permutations(PATTERNS, size):
        for target in TARGETS:
            assert ours._pattern_matches(list(patterns), target) == \
                theirs._pattern_matches(list(patterns), target), (patterns, target)
            joined = ",".join(patterns)
            assert ours._pattern_matches(joined, target) == \
                theirs._pattern_matches(joined, target), (joined, target)


def test_a_host_line_of_many_aliases_resolves_each(tmp_path):
    names = [f"h{i}" for i in range(1, 2001)]
    config = tmp_path / "config"
    config.write_text(f"Host {' '.join(names)}\n  HostName 127.0.0.1\n  Port 2222\n"
                      "Host h7*\n  User seven\nHost *\n  User everyone\n")
    for name in ("h1", "h7", "h70", "h2000"):
        target = resolve(name, str(config))
        assert (target.hostname, target.port) == ("127.0.0.1", 2222)
        assert target.user == ("seven" if name.startswith("h7") else "everyone")
    assert resolve("h2001", str(config)).hostname == "h2001"



MATCH_EXEC = """
import sys
from shell_kernel.backends.ssh.target import resolve
print(sorted(m for m in sys.modules if m.startswith("invoke.")))
print(resolve("h1", sys.argv[1]).user, resolve("h2", sys.argv[1]).user)
print("invoke.runners" in sys.modules)
"""


def test_match_exec_loads_invoke_then_runs_its_command(tmp_path):
    """paramiko evaluates `Match exec` with invoke, which the backend imports
    only then (backends/ssh/__init__.py). In a new interpreter (invoke reads
    the standard input, which pytest holds)."""
    import subprocess
    import sys
    (tmp_path / "h1").touch()
    config = tmp_path / "config"
    config.write_text(f"Match exec \"test -e {tmp_path}/%n\"\n  User matched\n"
                      "Host *\n  User everyone\n")
    out = subprocess.run([sys.executable, "-c", MATCH_EXEC, str(config)], capture_output=True,
                         text=True, stdin=subprocess.DEVNULL, check=True, timeout=60)
    assert out.stdout.splitlines() == ["[]", "matched everyone", "True"]
