"""known_hosts lookups: the index by plain name gives what reading every line
would, in file order, and a file is read again once it changes."""

import paramiko

from shell_kernel.backends.ssh import known_hosts

KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def lines_text() -> str:
    hashed = paramiko.HostKeys.hash_host("secret.example")
    return "\n".join([
        "# a comment", "",
        f"web1,Web2 ssh-ed25519 {KEY}",
        f"web* ssh-ed25519 {KEY}",
        f"*.corp,!bad.corp ssh-rsa {KEY}",
        f"[10.0.0.1]:2222 ssh-ed25519 {KEY}",
        f"@revoked web1 ssh-ed25519 {KEY}",
        f"@cert-authority *.example ssh-ed25519 {KEY}",
        f"{hashed} ssh-ed25519 {KEY}",
        f"web2 ecdsa-sha2-nistp256 {KEY}",
        "garbage line",
        f"db? ssh-ed25519 {KEY}",
    ]) + "\n"


def scanned(known, host, marker):
    return [line for line in known.lines if line.marker == marker and line.names(host)]


def test_indexed_lookups_equal_a_scan_of_every_line(tmp_path):
    path = tmp_path / "known_hosts"
    path.write_text(lines_text())
    known = known_hosts.KnownHosts.read([str(path)])
    hosts = ["web1", "WEB2", "web2", "web3", "a.corp", "bad.corp", "[10.0.0.1]:2222",
             "10.0.0.1", "secret.example", "x.example", "db1", "db12", "nothing"]
    for host in hosts:
        for marker in (None, known_hosts.REVOKED, known_hosts.CERT_AUTHORITY):
            assert known._naming(host, marker) == scanned(known, host, marker), (host, marker)
    assert [line.number for line in known._naming("web2", None)] == [3, 4, 10]
    assert known.key_types("web2") == {"ssh-ed25519", "ecdsa-sha2-nistp256"}


def test_a_changed_file_is_read_again(tmp_path):
    path = tmp_path / "known_hosts"
    path.write_text(f"one ssh-ed25519 {KEY}\n")
    first = known_hosts.KnownHosts.read([str(path), str(tmp_path / "missing")])
    assert known_hosts.KnownHosts.read([str(path)]).key_types("one") == {"ssh-ed25519"}
    with open(path, "a") as f:
        f.write(f"two ssh-ed25519 {KEY}\n")
    assert first.key_types("two") == set()
    assert known_hosts.KnownHosts.read([str(path)]).key_types("two") == {"ssh-ed25519"}
