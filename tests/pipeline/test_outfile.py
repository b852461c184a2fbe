"""outfile.replacing, the one writer of a file written whole (run.json, the shim cache's
manifests and memo, a gate profile): an owner-only temporary file beside the target, never
one that was there, renamed over the target only when complete."""

from __future__ import annotations

import os

import pytest

from shimgen.errors import ShimgenError
from shimgen.files.writing import replacing, write_whole


def _temp(name: str, n: int = 0) -> str:
    return f".{name}.shimgen-{os.getpid()}-{n}.tmp"


def test_written_whole_owner_only_through_a_directory_descriptor(tmp_path):
    (tmp_path / "t.json").write_text("old")
    old = os.umask(0o022)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with replacing("t.json", dir_fd=fd) as fh:
            fh.write("new")
            assert (tmp_path / "t.json").read_text() == "old"  # not before the block ends
    finally:
        os.close(fd)
        os.umask(old)
    assert (tmp_path / "t.json").read_text() == "new"
    assert (tmp_path / "t.json").stat().st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["t.json"]


@pytest.mark.parametrize("sync", [True, False])
def test_a_failure_leaves_the_target_as_it_was_and_no_temporary(tmp_path, sync):
    (tmp_path / "t.json").write_text("old")
    with pytest.raises(RuntimeError), replacing(tmp_path / "t.json", sync=sync) as fh:
        fh.write("half")
        raise RuntimeError
    assert (tmp_path / "t.json").read_text() == "old"
    assert os.listdir(tmp_path) == ["t.json"]


def test_a_name_already_there_is_neither_used_nor_followed_nor_removed(tmp_path):
    """A file or a symlink at the first temporary name (planted, or left by a process of the
    same pid): the next name is taken; what was there stays as it was."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("theirs")
    (tmp_path / _temp("t.json", 0)).symlink_to(elsewhere)
    write_whole(tmp_path / "t.json", "mine")
    assert (tmp_path / "t.json").read_text() == "mine"
    assert elsewhere.read_text() == "theirs"
    assert (tmp_path / _temp("t.json", 0)).is_symlink()
    assert sorted(os.listdir(tmp_path)) == sorted(["elsewhere", "t.json", _temp("t.json", 0)])


def test_no_free_temporary_name_is_one_line(tmp_path):
    for n in range(100):
        (tmp_path / _temp("t.json", n)).write_text("")
    with pytest.raises(ShimgenError) as e:
        write_whole(tmp_path / "t.json", "mine")
    assert str(e.value) == f"cannot write {tmp_path / 't.json'}: no free temporary name beside it"
    assert not (tmp_path / "t.json").exists()
