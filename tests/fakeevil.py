"""A FAKE look-alike driver (tests/c/fake_evil_libcuda.c) that passes shimgen's driver
checks and does, when its FAKE_EVIL_* variables ask, what hostile code in a driver could:
built here with the C compiler, for the tests of what loads a driver (diff) and of hooks."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_fake_evil(directory: Path) -> Path:
    """tests/c/fake_evil_libcuda.c built as DIRECTORY/libcuda.so.1."""
    out = directory / "libcuda.so.1"
    cc = shlex.split(os.environ.get("CC", "cc"))
    proc = subprocess.run([*cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
                           "-Wl,-soname,libcuda.so.1", "-o", str(out),
                           str(ROOT / "tests/c/fake_evil_libcuda.c"), "-ldl"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out
