"""Run a real OpenSSH ``sshd`` on 127.0.0.1 for tests.

Plain Python (no pytest import) so fixtures can wrap it::

    srv = SSHServer(tmp_path / "sshd")
    srv.start()
    try:
        cfg = srv.write_ssh_config(tmp_path / "ssh_config")   # Host testhost
        ...  # ssh -F cfg testhost ..., or paramiko with srv.known_hosts_path
    finally:
        srv.stop()

Everything (keys, authorized_keys, sshd_config, pid file, log, known_hosts)
lives under ``workdir``; the machine's ssh configuration and ``~/.ssh`` are
never read or written.  The only thing outside ``workdir`` that may be
created is sshd's privilege-separation directory ``/run/sshd`` (only when
running as root, and only if it is missing), without which a root sshd
refuses to start.

As root, sshd does full privilege separation and logs in as root
(``PermitRootLogin yes``).  As a normal user, sshd runs unprivileged and only
that same user can log in, which is all the tests need.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from .hosts import TEST_HOST_ENVIRONMENT, setenv_config  # noqa: F401 - re-exported
from .processes import (argv, children, config_quote, current_user, descendants, free_port,
                        freeze, freeze_and_signal, make_subreaper, process_table, send_signal,
                        tcp_listening)

SSHD = "/usr/sbin/sshd"  # sshd insists on being started via an absolute path
PRIVSEP_DIR = Path("/run/sshd")  # Debian's --with-privsep-path
ENCRYPTED_KEY_PASSPHRASE = "secret"


class SSHServerError(RuntimeError):
    pass




# --------------------------------------------------------------------------


class SSHServer:
    """A throw-away OpenSSH server on 127.0.0.1 living entirely in ``workdir``."""

    host = "127.0.0.1"

    def __init__(self, workdir: Path, name: str = "sshd", extra_config: str = ""):
        self.workdir = Path(workdir).resolve()
        self.name = name
        self.extra_config = extra_config
        self.user = current_user()
        self._port: int | None = None
        self._proc: subprocess.Popen | None = None
        self._log_file = None
        self._host_key_generation = 0
        self._known_hosts_written = False

    # ---------------------------------------------------------------- paths
    @property
    def port(self) -> int:
        if self._port is None:
            raise SSHServerError("server not started yet")
        return self._port

    @property
    def config_path(self) -> Path:
        return self.workdir / f"{self.name}_config"

    @property
    def tmp_dir(self) -> Path:
        """The sessions' TMPDIR, unless extra_config sets one."""
        return self.workdir / "tmp"

    @property
    def home_dir(self) -> Path:
        """The sessions' HOME, unless extra_config sets one: a host's
        default home (Debian's /etc/skel), not this machine's, whose rc
        files (here `pyenv init`: 0.13 s of CPU a login) every command of
        every test would run, and which every test run would share."""
        return self.workdir / "home"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def pid_file(self) -> Path:
        return self.workdir / f"{self.name}.pid"

    @property
    def host_key_path(self) -> Path:
        suffix = f".{self._host_key_generation}" if self._host_key_generation else ""
        return self.workdir / f"host_key{suffix}"

    @property
    def host_public_key(self) -> str:
        """The current host key as ``"ssh-ed25519 AAAA..."`` (no comment)."""
        return self._pubkey_line(self.host_key_path)

    @property
    def user_key_path(self) -> Path:
        return self.workdir / "user_key"

    @property
    def user_key_encrypted_path(self) -> Path:
        return self.workdir / "user_key_encrypted"

    @property
    def user_key_passphrase(self) -> str:
        return ENCRYPTED_KEY_PASSPHRASE

    @property
    def authorized_keys_path(self) -> Path:
        return self.workdir / "authorized_keys"

    @property
    def known_hosts_path(self) -> Path:
        return self.workdir / "known_hosts"

    @property
    def pid(self) -> int | None:
        """pid of the listening sshd (None when not running)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # -------------------------------------------------------------- keys
    @staticmethod
    def _pubkey_line(private_key: Path) -> str:
        fields = Path(str(private_key) + ".pub").read_text().split()
        return f"{fields[0]} {fields[1]}"

    @staticmethod
    def _keygen(path: Path, passphrase: str = "", comment: str = "") -> None:
        for p in (path, Path(str(path) + ".pub")):
            p.unlink(missing_ok=True)  # ssh-keygen would ask before overwriting
        res = subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase,
             "-C", comment or path.name, "-f", str(path)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
        )
        if res.returncode != 0:
            raise SSHServerError(
                f"ssh-keygen failed for {path} (rc={res.returncode}):\n"
                f"{res.stdout}{res.stderr}"
            )
        os.chmod(path, 0o600)

    def _generate_keys(self) -> None:
        if not self.host_key_path.exists():
            self._keygen(self.host_key_path, comment=f"{self.name}-host")
        if not self.user_key_path.exists():
            self._keygen(self.user_key_path, comment=f"{self.name}-user")
        if not self.user_key_encrypted_path.exists():
            self._keygen(self.user_key_encrypted_path, ENCRYPTED_KEY_PASSPHRASE,
                         comment=f"{self.name}-user-encrypted")
        self.authorized_keys_path.write_text(
            f"{self._pubkey_line(self.user_key_path)} {self.name}-user\n"
            f"{self._pubkey_line(self.user_key_encrypted_path)} {self.name}-user-encrypted\n"
        )
        os.chmod(self.authorized_keys_path, 0o600)

    def _write_sshd_config(self) -> None:
        lines = [
            f"ListenAddress {self.host}",
            f"Port {self.port}",
            f"HostKey {config_quote(self.host_key_path)}",
            f"AuthorizedKeysFile {config_quote(self.authorized_keys_path)}",
            f"PidFile {config_quote(self.pid_file)}",
            "StrictModes no",
            "UsePAM no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "PermitRootLogin yes",
            "Subsystem sftp internal-sftp",
            "LogLevel VERBOSE",
            "ClientAliveInterval 0",
            "MaxSessions 50",
            "MaxStartups 50",
            "AcceptEnv none",
            "PrintMotd no",
            "UseDNS no",
            # A test's own SetEnv (extra_config) comes first and wins; it
            # carries TEST_HOST_ENVIRONMENT too. By default the sessions'
            # TMPDIR is in workdir, so that the state directories its shells
            # leave when it stops under them (a host that went down) go with
            # the test's files, not into the machine's /tmp; so is their HOME.
            setenv_config({"TMPDIR": str(self.tmp_dir), "HOME": str(self.home_dir)}),
        ]
        # sshd_config: the first value obtained wins, so extra global options
        # go first (they override the defaults above); everything from the
        # first "Match" line on must stay at the very end. For MaxStartups the
        # last value wins instead, so an overridden default is left out.
        extra = [ln.strip() for ln in self.extra_config.splitlines() if ln.strip()]
        cut = next((i for i, ln in enumerate(extra)
                    if ln.split()[0].lower() == "match"), len(extra))
        overridden = {ln.split()[0].lower() for ln in extra[:cut]} & {"maxstartups"}
        lines = [ln for ln in lines if ln.split()[0].lower() not in overridden]
        lines = extra[:cut] + lines + extra[cut:]
        self.config_path.write_text("\n".join(lines) + "\n")

    def _write_known_hosts(self) -> None:
        self.known_hosts_path.write_text(
            f"[{self.host}]:{self.port} {self.host_public_key}\n"
        )
        self._known_hosts_written = True

    # ---------------------------------------------------------- lifecycle
    def start(self, timeout: float = 10.0) -> "SSHServer":
        """Generate keys/config (first time) and start sshd; returns self.

        Calling start() again after stop() restarts on the same port with
        the same keys."""
        if self.running:
            return self
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(mode=0o755, exist_ok=True)
        if not self.home_dir.is_dir():
            skel = Path("/etc/skel")
            if skel.is_dir():
                shutil.copytree(skel, self.home_dir, symlinks=True)
            self.home_dir.mkdir(mode=0o755, exist_ok=True)
        if not os.path.isfile(SSHD):
            raise SSHServerError(f"{SSHD} not found (install openssh-server)")
        if os.geteuid() == 0 and not PRIVSEP_DIR.is_dir():
            PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
            os.chmod(PRIVSEP_DIR, 0o755)  # must not be group/world writable
        self._generate_keys()

        fixed_port = self._port is not None
        attempts = 1 if fixed_port else 5
        for attempt in range(attempts):
            if not fixed_port:
                self._port = free_port(self.host)
            try:
                self._launch(timeout)
                break
            except SSHServerError as exc:
                bind_race = "Address already in use" in str(exc)
                if fixed_port or not bind_race or attempt == attempts - 1:
                    raise
        if not self._known_hosts_written:
            self._write_known_hosts()
        return self

    def _launch(self, timeout: float) -> None:
        self._write_sshd_config()
        self.pid_file.unlink(missing_ok=True)
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._log_file = open(self.log_path, "ab", buffering=0)
        self._log_file.write(
            f"=== {time.strftime('%H:%M:%S')} starting {SSHD} on port {self.port}\n".encode()
        )
        self._proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=self._log_file,
            close_fds=True,
            start_new_session=True,  # keep terminal signals (^C) away from it
            # Make the listener a child subreaper: processes orphaned when a
            # session is killed get re-parented to (and reaped by) sshd
            # instead of PID 1, which in containers often never reaps.
            preexec_fn=make_subreaper,
        )
        ready = f"Server listening on {self.host} port {self.port}"
        deadline = time.monotonic() + timeout
        listening_since = None
        while True:
            # Readiness = sshd logged that it is listening (it does so right
            # after listen(), so the port accepts connections).  Fallback if
            # extra_config lowered LogLevel: the socket is in LISTEN state and
            # sshd has survived for a moment (bind errors are immediate).  We
            # deliberately do not probe with a TCP connect: that would spawn
            # a per-connection child that could show up in session_pids().
            with open(self.log_path, "rb") as f:
                f.seek(log_offset)
                if ready in f.read().decode(errors="replace"):
                    return
            if tcp_listening(self.host, self.port):
                listening_since = listening_since or time.monotonic()
                if time.monotonic() - listening_since > 0.5 and self._proc.poll() is None:
                    return
            rc = self._proc.poll()
            if rc is not None or time.monotonic() > deadline:
                what = (f"exited with code {rc}" if rc is not None
                        else f"did not start listening within {timeout:.0f}s")
                self._teardown()
                raise SSHServerError(
                    f"sshd ({self.name}) {what} on {self.host}:{self.port}.\n"
                    f"config: {self.config_path}\nlog tail ({self.log_path}):\n"
                    + self._log_tail()
                )
            time.sleep(0.02)

    def _log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the listener and every session (and their commands).  Idempotent."""
        self._teardown(timeout)

    def _teardown(self, timeout: float = 5.0) -> None:
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                # Freeze the listener and everything below it (so nothing can
                # fork away), kill everything below it, let the listener --
                # a child subreaper, see _launch -- reap all of that, and
                # only then terminate the listener itself.  This leaves no
                # orphans/zombies behind, even under a non-reaping PID 1.
                tree = freeze([proc.pid])
                for p in tree:
                    if p != proc.pid:
                        send_signal(p, signal.SIGKILL)
                send_signal(proc.pid, signal.SIGCONT)
                others = set(tree) - {proc.pid}
                deadline = time.monotonic() + min(timeout, 2.0)
                while (others & process_table().keys()  # not yet reaped
                       and time.monotonic() < deadline):
                    time.sleep(0.01)
                send_signal(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                send_signal(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeout)
            self._proc = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        self.pid_file.unlink(missing_ok=True)

    def __enter__(self) -> "SSHServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self):  # last-resort cleanup; stop() is the real API
        try:
            if self._proc is not None and self._proc.poll() is None:
                self._teardown(1.0)
        except Exception:
            pass

    # ----------------------------------------------------------- sessions
    def session_pids(self, authenticated: bool = False) -> list[int]:
        """pids of the per-connection sshd processes: the sshd children of the
        listener, one per TCP connection.  As root that is the monitor
        "sshd: root [priv]" (whose child is "sshd: root@notty" once logged
        in); before login you may also see "sshd: [accepted]".
        With ``authenticated=True`` only logged-in connections are listed."""
        if not self.running:
            return []
        table = process_table()
        pids = [p for p in children(self._proc.pid, table) if comm(p) == "sshd"]
        if authenticated:
            pids = [p for p in pids
                    if any(self._is_logged_in_title(cmdline(q))
                           for q in [p, *children(p, table)])]
        return pids

    def _is_logged_in_title(self, title: str) -> bool:
        # "sshd: root@notty" / "sshd: root@pts/3" only exist after login
        # (the "root [priv]" monitor title already appears during auth).
        return title.startswith(f"sshd: {self.user}@")

    def wait_for_sessions(self, count: int = 1, timeout: float = 5.0,
                          authenticated: bool = True) -> list[int]:
        """Wait until at least ``count`` (by default: logged-in) sessions
        exist; returns their pids."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.session_pids(authenticated=authenticated)
            if len(pids) >= count:
                return pids
            if time.monotonic() > deadline:
                raise SSHServerError(
                    f"expected >= {count} sshd sessions, have {len(pids)}: "
                    + ", ".join(f"{p}={cmdline(p)!r}" for p in self.session_pids())
                )
            time.sleep(0.02)

    def kill_sessions(self, sig: int = signal.SIGKILL,
                      include_commands: bool = True) -> list[int]:
        """Send ``sig`` to every current connection (simulates a dropped
        connection); the listener keeps running.  With include_commands the
        connection's whole process tree (remote shell, commands) gets ``sig``
        too; otherwise only its sshd processes do (orphaned commands are
        then reaped by stop()).  Returns the pids signalled."""
        sessions = self.session_pids()
        if not sessions:
            return []
        if include_commands:
            return freeze_and_signal(sessions, sig)
        hit = sorted(p for p in descendants(sessions) if comm(p) == "sshd")
        for pid in hit:
            send_signal(pid, sig)
        return hit

    # --------------------------------------------------------- host keys
    def regenerate_host_key(self, timeout: float = 10.0) -> str:
        """Restart sshd on the same port with a brand-new host key; the
        known_hosts file keeps the old key (-> "host key changed").
        Returns the new public key line."""
        self.stop()
        self._host_key_generation += 1
        self._keygen(self.host_key_path,
                     comment=f"{self.name}-host-{self._host_key_generation}")
        self.start(timeout)  # same port: self._port is kept
        return self.host_public_key

    # -------------------------------------------------------- client side
    def write_ssh_config(self, path: Path, alias: str = "testhost",
                         extra: str = "") -> Path:
        """Append a ``Host <alias>`` block for this server to the ssh_config
        file ``path`` (created if missing) and return ``path``.

        ``extra`` lines (e.g. "ProxyJump jump") are put first in the block:
        in ssh_config the first obtained value wins, so they can override
        the defaults written here."""
        path = Path(path)
        extra_lines = [ln.strip() for ln in extra.splitlines() if ln.strip()]
        body = extra_lines + [
            f"HostName {self.host}",
            f"Port {self.port}",
            f"User {self.user}",
            f"IdentityFile {config_quote(self.user_key_path)}",
            "IdentitiesOnly yes",
            f"UserKnownHostsFile {config_quote(self.known_hosts_path)}",
            "StrictHostKeyChecking yes",
        ]
        block = f"Host {alias}\n" + "".join(f"    {ln}\n" for ln in body)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            if f.tell() > 0:
                f.write("\n")
            f.write(block)
        return path

    def write_rekeyed_alias(self, path: Path, scratch: Path, alias: str = "rekeyed") -> Path:
        """A ``Host <alias>`` block for this server whose known_hosts (in
        ``scratch``) holds another key for it: a host whose key changed."""
        other = Path(scratch) / f"{alias}_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
                       check=True, capture_output=True)
        key = " ".join(other.with_suffix(".pub").read_text().split()[:2])
        known = Path(scratch) / f"{alias}_known_hosts"
        known.write_text(f"[{self.host}]:{self.port} {key}\n")
        return self.write_ssh_config(path, alias=alias, extra=f"UserKnownHostsFile {known}")

    def __repr__(self) -> str:
        state = f"port={self._port} pid={self.pid}" if self.running else "stopped"
        return f"<SSHServer {self.name} {self.workdir} {state}>"


def cmdline(pid: int) -> str:
    """A process's command line as one string; "" once it has ended."""
    return b" ".join(argv(pid)).decode(errors="replace").strip()


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def ssh_available() -> bool:
    """True if both sshd and the ssh/ssh-keygen clients are present."""
    return (os.path.isfile(SSHD) and shutil.which("ssh") is not None
            and shutil.which("ssh-keygen") is not None)
