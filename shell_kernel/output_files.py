"""The files a run writes (`run`'s notebook; `run --hosts`' host notebooks,
summary.json and summary.html; a cell's output past the limit), written so
that nobody else can make them land elsewhere.

A directory that output goes into must be this user's (or root's) and
writable by nobody else (its group's write is fine where that group is the
user's alone), unless it has the sticky bit (/tmp), where others cannot
rename or remove this user's files; a symlink to it must be this user's too. A file is never opened through a symlink: the directory is
opened without following one and checked, and every name is created in it
through that descriptor (O_EXCL, O_NOFOLLOW), a whole file under a new name
then renamed over the old one (which replaces a symlink, never its target).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import secrets
import stat
from pathlib import Path
from typing import BinaryIO

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeOutput(OSError):
    """Output cannot go there; the message says why and what to do."""


def check_dir(path: Path, create: bool = True) -> None:
    """Make path (and its parents) if missing and create is set; raise
    UnsafeOutput if output must not go there."""
    os.close(_open_dir(Path(path), create))


def write_file(path: Path, data: bytes | str, mode: int = 0o644) -> Path:
    """Replace path with data in one step (a reader sees the old file or
    the new one), in a checked directory, following no symlink."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    directory = _open_dir(path.parent, create=True)
    temporary = f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        file = _new_file(directory, temporary, mode)
        try:
            with file:
                file.write(data)
            os.rename(temporary, path.name, src_dir_fd=directory, dst_dir_fd=directory)
        except OSError as err:  # a full disk; a directory where the file goes
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=directory)
            raise UnsafeOutput(f"cannot write {path}: {err.strerror}") from None
    finally:
        os.close(directory)
    return path


def new_file(directory: Path, name: str, mode: int = 0o600) -> BinaryIO:
    """A new file named name in directory (made if missing, mode 0700),
    open for writing; raises UnsafeOutput if the name is taken."""
    fd = _open_dir(Path(directory), create=True, mode=0o700)
    try:
        return _new_file(fd, name, mode)
    finally:
        os.close(fd)


def _new_file(directory: int, name: str, mode: int) -> BinaryIO:
    try:
        return os.fdopen(os.open(name, _NEW_FILE, mode, dir_fd=directory), "wb")
    except OSError as err:
        raise UnsafeOutput(f"cannot create {name}: {err.strerror}") from None


def _open_dir(path: Path, create: bool, mode: int = 0o755) -> int:
    """A descriptor of the checked directory at path."""
    if create:
        try:
            path.mkdir(mode=mode, parents=True, exist_ok=True)
        except FileExistsError:
            pass  # a file or a dangling symlink: said below
        except OSError as err:
            raise UnsafeOutput(f"{path}: cannot create it ({err.strerror})") from None
    try:
        link = os.lstat(path)
    except OSError as err:
        raise UnsafeOutput(f"{path}: cannot use it ({err.strerror})") from None
    if stat.S_ISLNK(link.st_mode) and not _trusted(link):
        raise UnsafeOutput(f"{path} is a symlink made by another user (uid {link.st_uid}); "
                           "nothing was written: give a directory of your own")
    try:
        fd = os.open(path, _DIR_FLAGS)
    except NotADirectoryError:
        raise UnsafeOutput(f"{path}: a file is there, not a directory; give another directory "
                           "(it is created if missing)") from None
    except OSError as err:
        raise UnsafeOutput(f"{path}: cannot use it ({err.strerror})") from None
    found = os.fstat(fd)
    problem = None
    if not _trusted(found):
        problem = f"is owned by another user (uid {found.st_uid})"
    elif not found.st_mode & stat.S_ISVTX and (
            found.st_mode & 0o002 or found.st_mode & 0o020 and not _only_mine(found.st_gid)):
        problem = "is writable by other users"
    if problem:
        os.close(fd)
        raise UnsafeOutput(f"{path} {problem}, who could make the output land on files of "
                           "their choosing; nothing was written: give a directory of your own "
                           "(or chmod go-w it)")
    return fd


def _trusted(found: os.stat_result) -> bool:
    return found.st_uid in (os.geteuid(), 0)


def _only_mine(gid: int) -> bool:
    """The group has no member but this user: a user private group, whose
    directories umask 002 makes group-writable."""
    me = os.geteuid()
    try:
        name = pwd.getpwuid(me).pw_name
        if any(member != name for member in grp.getgrgid(gid).gr_mem):
            return False
    except KeyError:
        return False
    return all(user.pw_gid != gid or user.pw_uid == me for user in pwd.getpwall())
