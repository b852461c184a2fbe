"""Helpers and fixtures shared by the run-time fault tests (test_faults_*.py): running a probe,
reading the shim's messages and trace tables, a driver copy with another build-id, and the
shims those tests need besides the `shims` fixture (the fake driver's, a second one, another
interposer)."""


import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.build import build
from shimgen.driver import read_driver
from shimgen.model import build_model

ROOT = Path(__file__).resolve().parent.parent
NEW_IN_555 = "cuLibraryGetKernelCount"  # (unsigned *count, CUlibrary lib); not in 535


# ---- helpers ----

def shim_for(shims, version: str):
    return next(s for s in shims if s.driver.version == version)


def run(cmd, env, *, ok=True, timeout=120, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True,
                          timeout=timeout, **kw)
    if ok:
        assert proc.returncode == 0, f"{cmd[0]} exited {proc.returncode}: {proc.stderr[-3000:]}"
    return proc


def shim_lines(stderr: str) -> list[str]:
    """The shim's own messages (not its trace table)."""
    return [ln for ln in stderr.splitlines() if ln.startswith("shimgen: ")]


def trace_tables(stderr: str) -> list[dict[str, int]]:
    """Every `SHIMGEN_TRACE` table on stderr, as {function: calls}."""
    tables = []
    header = r"^shimgen trace \(pid \d+, libcuda [^)]*\): .*$"
    for block in re.split(header, stderr, flags=re.M)[1:]:
        rows = {}
        for m in re.finditer(r"^\s+(\d+)\s+(cu\w+)$", block, re.M):
            rows[m.group(2)] = int(m.group(1))
        tables.append(rows)
    return tables


def with_other_build_id(src: Path, dst: Path) -> str:
    """Writes to `dst` a copy of the driver `src` that differs in one byte of its GNU
    build-id, and returns the new build-id."""
    data = bytearray(src.read_bytes())
    bid = bytes.fromhex(read_driver(src, require_real=False).build_id)
    at = data.find(bid)
    assert at > 0
    data[at] ^= 0xFF
    tmp = dst.with_name(dst.name + ".new")
    tmp.write_bytes(bytes(data))
    os.replace(tmp, dst)  # as a package upgrade does: a new file under the same name
    return read_driver(dst, require_real=False).build_id


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("SHIMGEN_", "LD_", "FAKE_"))}


def no_dac_prefix() -> list[str] | None:
    """Run as root without CAP_DAC_OVERRIDE, so the kernel checks permissions as for a user."""
    if not shutil.which("setpriv"):
        return None
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]
    probe = subprocess.run([*prefix, "true"], capture_output=True)
    return prefix if probe.returncode == 0 else None


# ---- fixtures ----

@pytest.fixture(scope="module")
def fake_shim(probes, tmp_path_factory) -> Path:
    """A shim for the fake driver (tests/c/fake_libcuda.c), built through the Python API as in
    tests/test_timing.py: `shimgen build` refuses the fake, a stub by design."""
    fake = probes / "libfake_libcuda_for_tests.so"
    img = read_driver(fake, require_real=False)
    return build(build_model(img, ["shimgen", "build", "--driver", str(fake)]),
                 tmp_path_factory.mktemp("fakeshim")).library


@pytest.fixture(scope="module")
def second_shim(drivers, tmp_path_factory) -> Path:
    """Another shim for the first driver, in another place (as a second tool would ship it)."""
    out = tmp_path_factory.mktemp("second")
    proc = subprocess.run([sys.executable, "-m", "shimgen", "build", "--driver",
                           str(drivers[0].libdir / "libcuda.so.1"), "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return next(out.glob("cudashim-*/libcudashim.so"))


@pytest.fixture(scope="module")
def interposer(tmp_path_factory) -> Path:
    """tests/c/faults_interposer.c as a shared library, built with the C compiler."""
    out = tmp_path_factory.mktemp("interposer") / "libfaults_interposer.so"
    cc = shlex.split(os.environ.get("CC", "cc"))
    proc = subprocess.run([*cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o",
                           str(out), str(ROOT / "tests/c/faults_interposer.c"), "-ldl"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out

