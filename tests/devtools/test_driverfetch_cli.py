"""`python -m devtools.driverfetch`, the README's one command for a real driver file without
a GPU: --help prints help and fetches nothing; --path VERSION prints one usable path (what
`shimgen run --driver "$(...)"` takes); a version it does not have is a usage error, before
any download."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.driverfetch import DRIVERS

ROOT = Path(__file__).resolve().parents[2]


def fetch(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "devtools.driverfetch", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("args", [["--help"], ["--path", "9"]])
def test_help_and_a_bad_version_fetch_nothing(args, tmp_path):
    """With an empty cache and no apt-get on PATH, a fetch would fail: these never try."""
    cache = tmp_path / "drivers"
    env = dict(os.environ, SHIMGEN_DRIVER_CACHE=str(cache), PATH=str(tmp_path))
    proc = fetch(*args, env=env)
    assert not cache.exists(), proc.stderr
    if args == ["--help"]:
        assert proc.returncode == 0 and proc.stdout.startswith("usage: "), proc
        assert "--path VERSION" in proc.stdout and proc.stderr == ""
    else:
        assert proc.returncode == 2 and "not one of" in proc.stderr, proc


def test_path_prints_one_real_driver(drivers):
    version = DRIVERS[1].version
    proc = fetch("--path", version.split(".")[0])
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    path = Path(line)
    assert path.is_file() and path.name == f"libcuda.so.{version}"
    assert path.read_bytes()[:4] == b"\x7fELF"
