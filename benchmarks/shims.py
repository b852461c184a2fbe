"""The drivers the benchmarks measure and the shims built for them: the fetched Debian
builds (devtools/driverfetch.py) or libcuda files given by path, and `shimgen build` run as
a child process, its result read from the build's shim.json."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from devtools.driverfetch import DriverFetchError, fetch_all
from shimgen.probe.child import child_env
from shimgen.runenv import SHIM_LIBRARY, SHIM_MANIFEST

from .native import ROOT, BenchError
from .stats import summary


@dataclass(frozen=True)
class Driver:
    version: str
    path: Path  # the real file
    libdir: Path  # its directory, which holds libcuda.so.1


def _fetched_drivers() -> list[Driver]:
    try:
        return [Driver(d.version, d.path, d.libdir) for d in fetch_all()]
    except DriverFetchError as e:
        raise BenchError(f"cannot fetch Debian's libcuda packages: {e}") from None


def select_drivers(spec: str | None, quick: bool) -> list[Driver]:
    """--drivers: comma-separated versions of the fetched Debian builds and/or paths of
    libcuda files. Default: all fetched builds (only the first with --quick)."""
    items = [i.strip() for i in spec.split(",") if i.strip()] if spec else []
    chosen: list[Driver] = []
    known: dict[str, Driver] = {}
    versions = [i for i in items if "/" not in i]
    if not items or versions:
        fetched = _fetched_drivers()
        if not items:
            return fetched[:1] if quick else fetched
        known = {d.version: d for d in fetched}
        for v in versions:
            if v not in known:
                raise BenchError(f"--drivers: no driver {v}; known: {', '.join(known)}")
    for item in items:
        if "/" in item:
            from shimgen.driver.library import read_driver
            from shimgen.errors import ShimgenError

            try:
                image = read_driver(Path(item))
            except ShimgenError as e:
                raise BenchError(f"--drivers {item}: {e}") from None
            chosen.append(Driver(image.version, image.real_path, image.real_path.parent))
        else:
            chosen.append(known[item])
    return chosen


def build(out: Path, driver: Path | None = None) -> tuple[Path, dict, float]:
    """`python -m shimgen build [--driver DRIVER] --out OUT` into an emptied OUT (default
    driver: the one ldconfig would pick): the library, the build's shim.json, and the
    command's wall time in seconds (Python start-up included)."""
    cmd = [sys.executable, "-m", "shimgen", "build", "--out", str(out)]
    if driver is not None:
        cmd[4:4] = ["--driver", str(driver)]
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise BenchError(f"shimgen build failed: {proc.stderr.strip()}")
    manifests = sorted(out.glob(f"cudashim-*/{SHIM_MANIFEST}"))
    if len(manifests) != 1:
        raise BenchError(f"shimgen build left {len(manifests)} builds in {out}")
    library = manifests[0].parent / SHIM_LIBRARY
    if not library.is_file():
        raise BenchError(f"shimgen build left no {library}")
    return library, json.loads(manifests[0].read_text()), wall


def build_timed(driver: Driver, out_root: Path, repeats: int) -> tuple[Path, dict]:
    """Build the shim `repeats` times from scratch with the real command line; the wall time
    of each (Python start-up included) and the function count of its shim.json."""
    given = driver.libdir / "libcuda.so.1"
    given = given if given.exists() else driver.path
    out = out_root / driver.version
    walls = []
    for _ in range(repeats):
        try:
            library, manifest, wall = build(out, given)
        except BenchError as e:
            raise BenchError(f"{driver.version}: {e}") from None
        walls.append(wall)
    info = {
        "command": " ".join(["python3", "-m", "shimgen", "build", "--driver", str(given),
                             "--out", str(out)]),
        "functions": manifest["functions"],
        "wall_s": summary(walls),
    }
    return library, info
