"""Public-key login as OpenSSH does it, and nothing more.

A kernel has no terminal: it never asks for a passphrase, a password or a one-time
code, never reads its own stdin, and sends no secret it was not given. paramiko's
SSHClient login would (after a key, a host asking for keyboard-interactive gets a
`Password:` prompt on stdout and a read of stdin), so the login is driven here, on the
Transport, as the client's auth_strategy.
"""

from __future__ import annotations

import binascii
import functools
import logging
import os
import threading
from dataclasses import dataclass

import paramiko

from .. import BackendError
from .target import SSHTarget

log = logging.getLogger("shell_kernel.ssh")

KEY_CLASSES = (paramiko.RSAKey, paramiko.ECDSAKey, paramiko.Ed25519Key)


@dataclass
class Identity:
    label: str  # how the user knows the key: its file, or its agent comment
    key: paramiko.PKey


@dataclass
class IdentityFile:
    path: str
    public_blob: bytes | None  # to recognise the key in ssh-agent
    key: paramiko.PKey | None  # None when the private key cannot be used here
    problem: str | None = None  # why not, e.g. "encrypted"


class KeyLogin:
    """Offer keys in OpenSSH's order; anything else the host wants is a clear error."""

    def __init__(self, target: SSHTarget):
        self._target = target

    def authenticate(self, transport: paramiko.Transport) -> None:
        methods = _methods_offered(transport, self._target.user)
        if methods is None:
            return  # the host lets this user in without credentials
        if "publickey" not in methods:
            raise self._no_key_login(methods)
        agent = _open_agent()
        try:
            files = [f for f in map(_read_identity_file, self._target.identity_files) if f]
            identities = _identities(files, agent.get_keys() if agent else (),
                                     self._target.identities_only)
            self._offer(transport, identities, files)
        finally:
            if agent:
                agent.close()

    def _offer(self, transport: paramiko.Transport, identities: list[Identity],
               files: list[IdentityFile]) -> None:
        offered: list[str] = []
        still_wanted: list[str] = []  # what the host wants besides a key already accepted
        for identity in identities:
            try:
                remaining = transport.auth_publickey(self._target.user, identity.key)
            except paramiko.BadAuthenticationType as err:
                raise self._no_key_login(err.allowed_types) from None
            except paramiko.SSHException as err:
                offered.append(identity.label)
                if not transport.is_active():
                    raise self._hung_up(offered, err) from None
                continue
            if not remaining:
                return
            still_wanted = [m for m in remaining if m != "publickey"]
            if "publickey" not in remaining:  # AuthenticationMethods publickey,keyboard-interactive
                raise self._second_step(identity, still_wanted)
            offered.append(identity.label)  # accepted, but the host wants another key too
        if still_wanted:
            raise self._second_step(None, still_wanted)
        raise self._refused(offered, files)

    def _no_key_login(self, methods: list[str]) -> BackendError:
        return BackendError(
            f"{self._target.describe()} does not accept key authentication (it offers: "
            f"{', '.join(methods) or 'nothing'}). shell_kernel never sends passwords or answers "
            "prompts: set up a key (ssh-copy-id) or an agent.")

    def _second_step(self, identity: Identity | None, methods: list[str]) -> BackendError:
        accepted = f"accepted the key {identity.label}" if identity else "accepted a key"
        return BackendError(
            f"{self._target.describe()} {accepted} but then also wants {' or '.join(methods)} "
            "(a second step such as a one-time code or a password, required by the host's "
            "sshd AuthenticationMethods). shell_kernel cannot answer such prompts: it never "
            "reads its own input or sends a secret it was not given, so nothing more was sent "
            "and no shell was started. Log in with a key alone: ask the host's administrator "
            "to allow `AuthenticationMethods publickey` for your account, or use a host that "
            "does not require the second step.")

    def _hung_up(self, offered: list[str], err: Exception) -> BackendError:
        return BackendError(
            f"{self._target.describe()} closed the connection during login after "
            f"{len(offered)} key(s) were offered ({', '.join(offered)}): {err}. A host allows "
            "only a few attempts (sshd MaxAuthTries): if ssh-agent holds many keys, set "
            "`IdentitiesOnly yes` and the right `IdentityFile` for this host in your ssh config.")

    def _refused(self, offered: list[str], files: list[IdentityFile]) -> BackendError:
        encrypted = [f.path for f in files if f.problem == "encrypted"]
        if encrypted and not offered:
            return BackendError(
                f"The key for {self._target.describe()} ({', '.join(encrypted)}) is encrypted "
                "and no ssh-agent offered it. shell_kernel never asks for or stores "
                "passphrases: load the key into your agent with `ssh-add` (in an environment "
                "whose SSH_AUTH_SOCK Jupyter sees), or use an unencrypted key for this kernel.")
        if not offered:
            files_tried = ", ".join(self._target.identity_files)
            agent = ("no matching key in ssh-agent (IdentitiesOnly yes)"
                     if self._target.identities_only else "no key in ssh-agent")
            return BackendError(
                f"There is no key to offer to {self._target.describe()}: none of {files_tried} "
                f"can be used, and {agent}. Create one (ssh-keygen), install it on the host "
                "(ssh-copy-id), and name it with IdentityFile in your ssh config.")
        also = f" The encrypted key(s) {', '.join(encrypted)} were not used: load them with " \
               "`ssh-add`." if encrypted else ""
        return BackendError(
            f"{self._target.describe()} refused the keys offered ({', '.join(offered)}).{also} "
            "If it wants a password: shell_kernel never sends passwords; set up a key "
            "(ssh-copy-id) or load one into ssh-agent.")


def _methods_offered(transport: paramiko.Transport, user: str) -> list[str] | None:
    """Ask with method "none", as OpenSSH does first: the answer lists the methods the
    host accepts. None if the host lets the user in with that."""
    try:
        transport.auth_none(user)
    except paramiko.BadAuthenticationType as err:
        return err.allowed_types
    return None


def _identities(files: list[IdentityFile], agent_keys, identities_only: bool) -> list[Identity]:
    """OpenSSH's order: agent keys that are configured identity files, then (unless
    IdentitiesOnly) the agent's other keys, then the files the agent does not hold."""
    from_agent, others = [], []
    unmatched = list(files)
    for agent_key in agent_keys:
        match = next((f for f in unmatched if f.public_blob == agent_key.asbytes()), None)
        if match:
            unmatched.remove(match)
            from_agent.append(Identity(f"{match.path} (from ssh-agent)", agent_key))
        elif not identities_only:
            others.append(Identity(f"ssh-agent key {agent_key.comment or agent_key.fingerprint}",
                                   agent_key))
    from_files = [Identity(f.path, f.key) for f in unmatched if f.key is not None]
    return from_agent + others + from_files


def _read_identity_file(path: str) -> IdentityFile | None:
    """The key at path and its public half; None if neither exists (OpenSSH skips those).
    Read once per version of its files (the key, its .pub and its -cert.pub, each as
    its stat tells: a chmod is a new version too), one thread at a time: every host
    of a fleet uses the same key, and loading an RSA key checks it (0.1 s of CPU for
    3072 bits)."""
    versions = tuple(_version(name) for name in (path, path + ".pub", path + "-cert.pub"))
    with _IDENTITY_FILES_LOCK:
        return _read_identity_version(path, versions)


_IDENTITY_FILES_LOCK = threading.Lock()


def _version(path: str) -> tuple[int, ...] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino, stat.st_ctime_ns, stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=16)
def _read_identity_version(path: str, versions: tuple) -> IdentityFile | None:
    public = _public_blob(path + ".pub")
    if not os.path.exists(path):
        return IdentityFile(path, public, None, "no private key file") if public else None
    try:
        key = _load_private_key(path)
    except paramiko.PasswordRequiredException:
        return IdentityFile(path, public, None, "encrypted")
    except (paramiko.SSHException, OSError, ValueError) as err:
        log.warning("cannot use the identity file %s: %s", path, err)
        return IdentityFile(path, public, None, str(err))
    return IdentityFile(path, public or key.asbytes(), key)


def _public_blob(path: str) -> bytes | None:
    try:
        return paramiko.PublicBlob.from_file(path).key_blob
    except (OSError, ValueError, binascii.Error, paramiko.SSHException):
        return None


def _load_private_key(path: str) -> paramiko.PKey:
    """As paramiko's SSHClient loads one, with its certificate (path-cert.pub) if any.
    Raises PasswordRequiredException for an encrypted key."""
    error: Exception | None = None
    for key_class in KEY_CLASSES:
        try:
            key = key_class.from_private_key_file(path)
        except paramiko.PasswordRequiredException:
            raise
        except paramiko.SSHException as err:  # not this class's kind of key
            error = err
            continue
        if os.path.isfile(path + "-cert.pub"):
            key.load_certificate(path + "-cert.pub")
        return key
    raise error


def _open_agent() -> paramiko.Agent | None:
    try:
        return paramiko.Agent()
    except paramiko.SSHException as err:
        log.warning("ssh-agent (SSH_AUTH_SOCK) did not answer, its keys are not offered: %s", err)
        return None
