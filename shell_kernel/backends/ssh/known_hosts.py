"""known_hosts files read as OpenSSH reads them.

paramiko's HostKeys cannot be used for this: it raises on `@cert-authority` and
`@revoked` lines, knows no wildcard or negated host patterns, and has no notion of a
revoked key. Here a line that cannot be used is skipped, as OpenSSH skips it.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import os
import re
from dataclasses import dataclass

import paramiko

from .. import BackendError
from .target import ensure_file_parent

REVOKED = "@revoked"
CERT_AUTHORITY = "@cert-authority"  # host certificates: paramiko cannot check them
HASHED = "|1|"


@dataclass(frozen=True)
class HostKeyLine:
    path: str
    number: int
    marker: str | None  # REVOKED, CERT_AUTHORITY, or None for a host's own key
    hosts: str  # comma-separated patterns, or one hashed name
    key_type: str
    key_blob: bytes

    @property
    def where(self) -> str:
        return f"{self.path} line {self.number}"

    @property
    def fingerprint(self) -> str:
        """As ssh-keygen -l shows it (and paramiko's PKey.fingerprint)."""
        digest = base64.b64encode(hashlib.sha256(self.key_blob).digest()).decode().rstrip("=")
        return f"{self.key_type} SHA256:{digest}"

    def names(self, host: str) -> bool:
        if self.hosts.startswith(HASHED):
            return _hashed_name_matches(self.hosts, host)
        return _patterns_match(self.hosts, host)

    def holds(self, key: paramiko.PKey) -> bool:
        return self.key_blob == key.asbytes()


class KnownHosts:
    """The usable lines of some known_hosts files, looked up by host name."""

    def __init__(self, lines: list[HostKeyLine]):
        self.lines = lines
        # Lines naming plain host names, by name; the rest (wildcards, negations,
        # hashed names) are tried line by line. A fleet looks up a thousand hosts
        # in a known_hosts of a thousand lines: a scan per lookup is quadratic.
        self._by_name: dict[str, list[int]] = {}
        self._tried: list[int] = []
        for index, line in enumerate(lines):
            names = line.hosts.lower().split(",")
            if line.hosts.startswith(HASHED) or any(c in line.hosts for c in "*?!"):
                self._tried.append(index)
            else:
                for name in dict.fromkeys(names):
                    self._by_name.setdefault(name, []).append(index)

    @classmethod
    def read(cls, paths: list[str]) -> "KnownHosts":
        """The usable lines of these files; missing files count as empty. A file
        is parsed once per version of it (its inode, mtime and size)."""
        versions = []
        for path in paths:
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                continue
            except OSError as err:
                raise _unreadable(path, err) from None
            versions.append((path, stat.st_ino, stat.st_mtime_ns, stat.st_size))
        return _read_versions(tuple(versions))

    def revocation(self, host: str, key: paramiko.PKey) -> HostKeyLine | None:
        return next((line for line in self._naming(host, REVOKED) if line.holds(key)), None)

    def entry(self, host: str, key: paramiko.PKey) -> HostKeyLine | None:
        """The line that makes this the host's known key, if any."""
        return next((line for line in self._naming(host, None) if line.holds(key)), None)

    def same_type_entries(self, host: str, key: paramiko.PKey) -> list[HostKeyLine]:
        """The host's known keys of this key's type: if the key is not among them, it changed."""
        return [line for line in self._naming(host, None) if line.key_type == key.get_name()]

    def key_types(self, host: str) -> set[str]:
        return {line.key_type for line in self._naming(host, None)}

    def _naming(self, host: str, marker: str | None) -> list[HostKeyLine]:
        """In file order, the lines with this marker that name host."""
        candidates = self._by_name.get(host.lower(), []) + self._tried
        return [self.lines[index] for index in sorted(candidates)
                if self.lines[index].marker == marker and self.lines[index].names(host)]


@functools.lru_cache(maxsize=16)
def _read_versions(versions: tuple[tuple[str, int, int, int], ...]) -> KnownHosts:
    lines: list[HostKeyLine] = []
    for path, *_ in versions:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except FileNotFoundError:
            continue
        except OSError as err:
            raise _unreadable(path, err) from None
        lines += [line for number, text_line in enumerate(text.splitlines(), 1)
                  if (line := _parse(path, number, text_line)) is not None]
    return KnownHosts(lines)


def _unreadable(path: str, err: OSError) -> BackendError:
    return BackendError(f"could not read the known_hosts file {path}: {err.strerror}. "
                        "Nothing was sent. Make it readable, or name other files "
                        "with UserKnownHostsFile / GlobalKnownHostsFile in your ssh "
                        "config.")


def record(path: str, host: str, key: paramiko.PKey, hashed: bool) -> None:
    """Append the host's key, its name hashed as `HashKnownHosts yes` asks."""
    name = paramiko.HostKeys.hash_host(host) if hashed else host
    line = f"{name} {key.get_name()} {key.get_base64()}\n".encode()
    ensure_file_parent(path)
    with open(path, "ab+") as f:
        if f.tell() > 0:  # a last line without its newline would swallow ours
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                line = b"\n" + line
        f.write(line)


def _parse(path: str, number: int, text: str) -> HostKeyLine | None:
    fields = text.split()
    if not fields or fields[0].startswith("#"):
        return None
    marker = fields.pop(0) if fields[0].startswith("@") else None
    if marker not in (None, REVOKED, CERT_AUTHORITY) or len(fields) < 3:
        return None
    hosts, key_type, key_text = fields[:3]
    try:
        blob = base64.b64decode(key_text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return HostKeyLine(path, number, marker, hosts, key_type, blob)


def _hashed_name_matches(hashed: str, host: str) -> bool:
    try:
        expected = paramiko.HostKeys.hash_host(host, hashed)
    except (binascii.Error, ValueError, AssertionError):  # a damaged salt
        return False
    return hmac.compare_digest(expected, hashed)


def _patterns_match(patterns: str, host: str) -> bool:
    """OpenSSH's match_hostname: some pattern matches and no negated one does."""
    matched = False
    for pattern in patterns.lower().split(","):
        negated = pattern.startswith("!")
        if _wildcard(pattern.lstrip("!")).fullmatch(host.lower()):
            if negated:
                return False
            matched = True
    return matched


@functools.lru_cache(maxsize=4096)
def _wildcard(pattern: str) -> re.Pattern:
    """`*` and `?` as OpenSSH reads them; everything else, `[` included, is literal."""
    return re.compile(re.escape(pattern).replace(r"\*", ".*").replace(r"\?", "."), re.DOTALL)
