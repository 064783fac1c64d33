"""shell_kernel/output_files.py: where a run's output may go, and files
made there without following a symlink. Runs as root (as the tests do),
giving directories and links to `nobody` to stand for another user."""

from __future__ import annotations

import grp
import os
import pwd
import re

import pytest

from shell_kernel.output_files import UnsafeOutput, check_dir, new_file, write_file

NOBODY = 65534


def test_write_file_replaces_a_symlink_and_leaves_its_target(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.json").symlink_to(victim)
    write_file(tmp_path / "out" / "a.json", "new")
    assert victim.read_text() == "precious"
    assert not (tmp_path / "out" / "a.json").is_symlink()
    assert (tmp_path / "out" / "a.json").read_text() == "new"
    assert os.listdir(tmp_path / "out") == ["a.json"]


def test_new_file_takes_no_name_that_is_there(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "spill").mkdir(mode=0o700)
    (tmp_path / "spill" / "link").symlink_to(victim)
    for name in ("link", "link"):
        with pytest.raises(UnsafeOutput, match="cannot create link: File exists"):
            new_file(tmp_path / "spill", name)
    with new_file(tmp_path / "spill", "new") as file:
        file.write(b"x")
    assert (tmp_path / "spill" / "new").stat().st_mode & 0o777 == 0o600
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("mode, owner, group, problem", [
    (0o755, NOBODY, 0, f"is owned by another user (uid {NOBODY})"),
    (0o775, 0, NOBODY, "is writable by other users"),  # nogroup: nobody, sync, _apt
    (0o757, 0, 0, "is writable by other users"),
])
def test_directories_others_control_are_refused(tmp_path, mode, owner, group, problem):
    directory = tmp_path / "dir"
    directory.mkdir()
    directory.chmod(mode)
    os.chown(directory, owner, group)
    with pytest.raises(UnsafeOutput, match="^" + re.escape(f"{directory} {problem}")):
        check_dir(directory)
    with pytest.raises(UnsafeOutput):
        write_file(directory / "x", "data")
    assert not (directory / "x").exists()


def test_a_sticky_directory_and_own_symlinks_are_fine(tmp_path):
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    write_file(sticky / "x", "data")
    (tmp_path / "mine").symlink_to(sticky)
    check_dir(tmp_path / "mine")
    (tmp_path / "theirs").symlink_to(sticky)
    os.chown(tmp_path / "theirs", NOBODY, NOBODY, follow_symlinks=False)
    with pytest.raises(UnsafeOutput, match=f"is a symlink made by another user .uid {NOBODY}."):
        check_dir(tmp_path / "theirs")


def test_missing_directories_are_made_and_a_file_is_refused(tmp_path):
    check_dir(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir()
    (tmp_path / "f").write_text("")
    with pytest.raises(UnsafeOutput, match="a file is there, not a directory"):
        check_dir(tmp_path / "f")


def test_a_group_of_the_users_own_may_write(tmp_path):
    """umask 002 (Debian's user private groups) makes directories group-writable:
    with no one else in the group, that is no one else's write."""
    if grp.getgrgid(0).gr_mem or any(u.pw_gid == 0 and u.pw_uid for u in pwd.getpwall()):
        pytest.skip("the root group has other members here")
    directory = tmp_path / "dir"
    directory.mkdir()
    directory.chmod(0o775)
    os.chown(directory, 0, 0)
    write_file(directory / "x", "data")
