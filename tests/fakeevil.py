"""A FAKE look-alike driver (tests/c/fake_evil_libcuda.c) that passes shimgen's driver
checks and does, when its FAKE_EVIL_* variables ask, what hostile code in a driver could:
built here with the C compiler, for the tests of what loads a driver (diff) and of hooks."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_fake_evil(directory: Path, build_id: str = "sha1") -> Path:
    """tests/c/fake_evil_libcuda.c built as DIRECTORY/libcuda.so.1 (`build_id`: the linker's
    --build-id, e.g. 0x<hex> for a second build of the same code)."""
    out = directory / "libcuda.so.1"
    cc = shlex.split(os.environ.get("CC", "cc"))
    proc = subprocess.run([*cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
                           "-Wl,-soname,libcuda.so.1", f"-Wl,--build-id={build_id}",
                           "-o", str(out),
                           str(ROOT / "tests/c/fake_evil_libcuda.c"), "-ldl"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out
