"""A new build is flushed to disk, every file of it, before it replaces the old one
(shimgen/shim/install.py fsync_tree, docs/performance.md): the fsyncs run side by side, and
an error of any of them fails the install."""

from __future__ import annotations

import errno
import os

import pytest

from shimgen.shim import install


def _tree(root):
    names = []
    for d in ("", "src", "src/arch/x86_64"):
        (root / d).mkdir(parents=True, exist_ok=True)
        for k in range(7):
            (root / d / f"f{k}.c").write_text(str(k))
            names.append(str(root / d / f"f{k}.c"))
    return sorted(names)


def test_every_file_of_the_tree_is_flushed(tmp_path, monkeypatch):
    names = _tree(tmp_path / "build")
    flushed = []
    real = os.fsync

    def fsync(fd):
        flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(install.os, "fsync", fsync)
    install.fsync_tree(tmp_path / "build")
    assert sorted(flushed) == names


def test_a_failed_flush_fails_the_install(tmp_path, monkeypatch):
    names = _tree(tmp_path / "build")
    real = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}") == names[-1]:
            raise OSError(errno.EIO, "I/O error")
        real(fd)

    monkeypatch.setattr(install.os, "fsync", fsync)
    with pytest.raises(OSError, match="I/O error"):
        install.fsync_tree(tmp_path / "build")
