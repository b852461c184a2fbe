"""How fast the binary trace reader (shimgen/trace/binary.py) is: what the tests once asserted
with a wall-clock bound, measured here and reported as figures.

    python -m benchmarks.tracefile_load [--driver PATH] [--files 1000] [--repeats 3]

One real trace file is made by `shimgen run` on a real driver (Debian's 535 by default,
devtools/driverfetch.py; no GPU needed: cuDriverGetVersion answers without one). Then:

- `files`: that file hard-linked N times, each loaded once (best of the repeats): the
  seconds for all, and per file (the bar: 1,000 files in under 2 s, docs/performance.md);
- `sparse`: the same file grown to 16 GiB of holes, its header claiming every block, against
  the file itself: the ratio of the two load times says that the holes are skipped
  (SEEK_DATA; about 1 when they are, hundreds when every block is read).

The CPU time of the process is reported beside each figure: a busy machine changes it far
less than the wall time.
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shimgen.runenv import trace_header_layout
from shimgen.trace import binary as tracefile

BAR_S = 2.0  # 1,000 files
SPARSE_SIZE = 16 << 30
CALLS = "import ctypes; c = ctypes.CDLL('libcuda.so.1'); v = ctypes.c_int(); " \
        "[c.cuDriverGetVersion(ctypes.byref(v)) for _ in range(1000)]"


def _driver(given: str | None) -> Path:
    if given:
        return Path(given)
    from devtools.driverfetch import fetch_all

    return fetch_all()[0].path


def make_trace(driver: Path, work: Path) -> Path:
    """One real trace file: `shimgen run` of a Python process that calls the driver."""
    out = work / "run"
    env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))
    subprocess.run([sys.executable, "-m", "shimgen", "run", "--driver", str(driver), "-o",
                    str(out), "--", sys.executable, "-c", CALLS], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (f,) = (out / "traces").glob("*.shimtrace")
    return f


def sparse_copy(real: Path, path: Path) -> None:
    """`real` grown to SPARSE_SIZE of holes, its header claiming every block."""
    data = bytearray(real.read_bytes())
    h = tracefile._header(data, tracefile.VERSION)
    at = {name: (offset, code) for name, _, _, offset, code in trace_header_layout()}
    size = SPARSE_SIZE - (SPARSE_SIZE - h["blocks_off"]) % h["block_stride"]
    offset, code = at["blocks_reserved"]
    struct.pack_into("<" + code, data, offset, (size - h["blocks_off"]) // h["block_stride"])
    with open(path, "wb") as f:
        f.write(data)
        f.truncate(size)


def timed(fn, repeats: int) -> tuple[float, float]:
    """The best wall and CPU seconds of `repeats` calls of fn()."""
    best = (float("inf"), float("inf"))
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.perf_counter() - w, time.process_time() - c))
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tracefile_load",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", help="a libcuda file (default: Debian's 535, fetched)")
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shimgen-bench-") as tmp:
        work = Path(tmp)
        real = make_trace(_driver(args.driver), work)
        links = []
        for i in range(args.files):
            q = work / f"{i}.shimtrace"
            os.link(real, q)
            links.append(q)
        wall, cpu = timed(lambda: [tracefile.load(q) for q in links], args.repeats)
        scaled = wall * 1000 / args.files
        print(f"files   {args.files} files loaded in {wall:.3f} s ({cpu:.3f} s CPU), "
              f"{1e3 * wall / args.files:.2f} ms a file; for 1,000: {scaled:.2f} s "
              f"(bar {BAR_S} s: {'met' if scaled <= BAR_S else 'NOT met'})")
        sparse = work / "sparse.shimtrace"
        sparse_copy(real, sparse)
        dense_w, _ = timed(lambda: tracefile.load(real), args.repeats)
        sparse_w, sparse_c = timed(lambda: tracefile.load(sparse), args.repeats)
        print(f"sparse  a 16 GiB sparse file in {sparse_w * 1e3:.2f} ms ({sparse_c * 1e3:.2f} "
              f"ms CPU), its data alone in {dense_w * 1e3:.2f} ms: ratio "
              f"{sparse_w / dense_w:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
