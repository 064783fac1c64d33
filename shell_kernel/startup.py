"""What the user is told about a shell that is slow to start, or never does.

A login bash runs its startup files before the kernel's first line; one
that waits (for input, a lock, the network) holds every cell up until
--start-timeout. Both the progress line and the error name the files and
the ways out.
"""

from __future__ import annotations

#: What a login, interactive bash reads before the kernel's first line.
STARTUP_FILES = ("/etc/profile, ~/.bash_profile (or ~/.bash_login, ~/.profile) "
                 "and ~/.bashrc if they source it")


def not_started(description: str, reason: str) -> str:
    """The error of a shell that did not start (kernel and session say the same)."""
    return (f"The {description} bash did not start ({reason}). Check that bash is installed "
            f"and that its startup files ({STARTUP_FILES}) finish without waiting for input "
            "or a lock (e.g. `pyenv init` waiting for its rehash lock); the --clean option "
            "(`python -m shell_kernel install --clean`) starts bash without them, and "
            "--start-timeout gives them longer.")


def still_starting(elapsed_s: float, timeout_s: float, where: str) -> str:
    """The line a cell shows while it waits for the shell."""
    return (f"[shell_kernel] The shell{where} is still starting: {elapsed_s:.0f} s so far "
            f"(its startup files run first; it is given {timeout_s:g} s). This cell runs "
            "once it is ready.")

