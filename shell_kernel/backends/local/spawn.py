"""How a local child of the kernel starts (signals at their defaults, the
launch environment), and the local shell's own start: its private state
directory, bash in a session of its own, and its guard.

The kernel's launcher (launch.py) spawns the shell with this before
ipykernel is imported, so this module imports only the standard library's
process basics: bash runs its startup files while Python imports the rest.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading

from ... import shell

GUARD_SCRIPT = shell.script("guard.sh")
REAP_SCRIPT = shell.script("reap.sh")
#: The environment variable that marks the local shell's processes (guard.sh).
SESSION_MARK = "__shell_kernel_session"
#: How long the end of a shell waits for bash to exit after end-of-file.
END_WAIT_S = 2.0


def default_signals() -> None:
    """In the shell's process, before exec: every signal at its default and
    none blocked, whatever the kernel inherited. A kernel started by
    `jupyter lab &` in a script ignores SIGINT; an ignored signal stays
    ignored across exec, bash cannot undo that, and Stop could then never
    interrupt a cell (its processes would ignore SIGINT too)."""
    for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


# The virtualenv or conda environment active where Jupyter was started.
LAUNCH_ENVIRONMENT = ("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV")


def with_launch_environment(env: dict | None) -> dict:
    """The shell's environment, plus a copy of LAUNCH_ENVIRONMENT under
    names that startup files leave alone (a login shell's /etc/profile resets
    PATH, a conda hook in .bashrc activates another environment): after them,
    session.bash makes these first on PATH again."""
    env = dict(os.environ if env is None else env)
    for name in LAUNCH_ENVIRONMENT:
        if env.get(name):
            env["__shell_kernel_launch_" + name] = env[name]
    return env


def make_state_dir(tmpdir: str) -> str | None:
    """The session's private directory (0700, a random name), made before
    bash starts so that the guard knows it; None if TMPDIR refuses it (bash
    then tries itself, as session.bash does without one)."""
    path = os.path.join(tmpdir, "shell_kernel." + os.urandom(8).hex())
    try:
        os.mkdir(path, 0o700)
    except OSError:
        return None
    return path


def exit_descriptor(pid: int) -> int | None:
    """A descriptor of the child pid that becomes readable when it exits (a
    pidfd, Linux 5.3 and later), so that its reader waits for the exit
    without a clock; None where the system gives none. Opened before anyone
    can reap the child: a pid reaped already may name another process."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        return pidfd_open(pid)
    except OSError:  # an older kernel, or a seccomp filter that refuses it
        return None


class SpawnedShell:
    """A local bash that has started (its startup files may still run) and
    its guard, which reaps what the shell started if the kernel dies. The
    thread that spawned it hands it on; whoever holds it may close it."""

    def __init__(self, argv: list[str], env: dict | None = None):
        self._close_lock = threading.Lock()
        self._closed = False
        self.state_dir = make_state_dir((env or os.environ).get("TMPDIR") or "/tmp")
        # In the environment of every process the shell starts, unless one
        # clears it: how the guard finds those that left the shell's tree.
        self._mark = os.urandom(8).hex()
        env = with_launch_environment(env)
        env[SESSION_MARK] = self._mark
        try:
            # A new session: terminal Ctrl-C aimed at the kernel never reaches
            # the shell, and the reaper can find double-forked daemons by sid.
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=default_signals, env=env, bufsize=0)
        except BaseException:
            self._remove_state_dir()
            raise
        self.exit_fd = exit_descriptor(self.proc.pid)
        try:
            # Its own session too, so that a kill of the kernel's process
            # group (jupyter_client's) does not take the guard with it. It
            # holds the shell's input open (see guard.sh).
            self.guard: subprocess.Popen | None = subprocess.Popen(
                self._guard_argv(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
                pass_fds=(self.proc.stdin.fileno(),))
        except BaseException:
            self.guard = None
            self.close()
            raise

    def _guard_argv(self) -> list[str]:
        return ["/bin/sh", "-c", GUARD_SCRIPT, "shell_kernel", REAP_SCRIPT, str(self.proc.pid),
                self.state_dir or "", self._mark]

    def close(self, before_pipes_close=None) -> None:
        """End the shell and its guard (the kernel closes the session: nothing
        to guard any more). before_pipes_close: called once bash has ended,
        e.g. to let the thread that reads its pipes (and exit_fd) finish.
        Once: the launcher
        and the backend that took the shell over may both close it."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._close(before_pipes_close)

    def _close(self, before_pipes_close) -> None:
        guard, self.guard = self.guard, None
        if guard is not None:
            guard.kill()
            guard.wait()
            guard.stdin.close()
        proc = self.proc
        try:
            proc.stdin.close()  # end-of-file: bash exits
        except OSError:
            pass
        try:
            proc.wait(timeout=END_WAIT_S)
        except subprocess.TimeoutExpired:
            # Its whole group (bash leads it, and is not reaped yet): a shell
            # whose startup files hang (a `sleep`, a lock wait) never reached
            # the reaper, and what they started must not outlive it.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            proc.wait()
        # What left its tree (a double-forked daemon) ends with it, as when
        # the kernel dies: the guard's work, its input at end-of-file at once.
        try:
            subprocess.run(self._guard_argv(), stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=END_WAIT_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if before_pipes_close is not None:
            before_pipes_close()
        for pipe in (proc.stdout, proc.stderr):
            try:
                pipe.close()
            except OSError:
                pass
        if self.exit_fd is not None:
            os.close(self.exit_fd)
        self._remove_state_dir()

    def _remove_state_dir(self) -> None:
        if self.state_dir:  # reap.sh removed it, unless the shell never got going
            shutil.rmtree(self.state_dir, ignore_errors=True)


def bash_version_probe(bash: str) -> subprocess.Popen:
    """The same bash asked its version without any startup files, started now
    and read when a kernel_info asks before the shell is up (so that a
    notebook's saved language_info does not depend on start timing)."""
    return subprocess.Popen([bash, "--noprofile", "--norc", "-c", 'builtin printf %s "$BASH_VERSION"'],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
