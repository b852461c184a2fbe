"""Helpers and fixtures shared by the run-time fault tests (test_faults_*.py): running a probe,
reading the shim's messages and trace tables, a driver copy with another build-id, and the
shims those tests need besides the `shims` fixture (the fake driver's, a second one, another
interposer) are in conftest.py."""


import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from shimgen.driver.library import read_driver

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


WRITTEN = re.compile(r"^shimgen: (?:trace|timeline of \d+ calls) written to (.*)$")


def shim_lines(stderr: str) -> list[str]:
    """The shim's own messages (not its trace table, nor the lines that say where a trace
    or timeline was written: written_to)."""
    return [ln for ln in stderr.splitlines()
            if ln.startswith("shimgen: ") and not WRITTEN.match(ln)]


def written_to(stderr: str) -> list[str]:
    """The paths the shim said it wrote a trace or timeline to, in order."""
    return [m.group(1) for m in map(WRITTEN.match, stderr.splitlines()) if m]


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


OTHER = 65534  # the second user of the tests that act as another local user (`other`)


def as_other(other: list[str], script: str) -> None:
    """Runs `script` (sh) as the second user, through the `other` fixture's prefix."""
    proc = subprocess.run([*other, "sh", "-c", script], capture_output=True, text=True,
                          cwd="/", timeout=30)
    assert proc.returncode == 0, proc.stderr
