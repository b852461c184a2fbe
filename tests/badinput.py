"""What the bad-input tests (test_bad_driver.py, test_bad_output.py, test_bad_cli.py) share:
running `shimgen` in a subprocess, the one-line error check, small file helpers, and the
`no_dac` fixture that runs a command as root without the permission override (setpriv), so
that the kernel checks permissions as it would for a user."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CC = shutil.which("cc") or shutil.which("gcc")


def shimgen(*args: str, env: dict[str, str] | None = None, prefix: list[str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*(prefix or []), sys.executable, "-m", "shimgen", *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


def assert_one_line_error(proc: subprocess.CompletedProcess, needle: str, code: int = 1) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("shimgen: error: ") and needle in lines[0], lines[0]
    return lines[0]


def entries(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def copy_of(src: Path, dest: Path) -> Path:
    shutil.copyfile(src, dest)
    return dest


def patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def _no_dac_prefix() -> list[str] | None:
    """A command prefix that runs without the capabilities that let root past file
    permissions; [] when not root; None when that cannot be done here."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        return None
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "print('ok')"], capture_output=True,
                           text=True, cwd=ROOT)
    return prefix if probe.returncode == 0 and probe.stdout.strip() == "ok" else None


def no_dac() -> list[str]:
    """The prefix of _no_dac_prefix, or skip the test when there is none. Each module that
    needs it makes it a fixture: `no_dac = pytest.fixture(scope="module", name="no_dac")(...)`."""
    prefix = _no_dac_prefix()
    if prefix is None:
        pytest.skip("cannot drop CAP_DAC_OVERRIDE here (no setpriv, or not allowed)")
    return prefix
