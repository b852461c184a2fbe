"""`python -m benchmarks.tracedir`: the instructions per call that SHIMGEN_TRACE_DIR adds to
the counting and timing paths, counted by callgrind as the suite counts them (the count at
2N calls less the count at N, over N, so what happens once cancels out): with the blocks
mapped from the trace file, the stubs run the same instructions as with anonymous blocks.
Prints one line per function and mode; the first fetched Debian driver, CPU only."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from benchmarks import native, shims
from benchmarks.native import ROOT
from benchmarks.suite import FUNCTIONS
from shimgen.probe.child import child_env

N = 20000


def per_call(progs, func: str, env: dict, tmp: Path) -> float:
    a = native.callgrind_instructions(progs, "libcuda.so.1", func, N, env, tmp)
    b = native.callgrind_instructions(progs, "libcuda.so.1", func, 2 * N, env, tmp)
    return (b - a) / N


def main() -> int:
    why = native.callgrind_available()
    if why:
        print(f"benchmarks.tracedir: {why}", file=sys.stderr)
        return 1
    driver = shims.select_drivers(None, quick=True)[0]
    progs = native.compile_programs(ROOT / "build" / "bench")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        lib, _, _ = shims.build(tmp / "shim", driver.path)
        print(f"driver {driver.version}, {N} and {2 * N} calls; instructions per call")
        for func in FUNCTIONS:
            for mode in ("1", "time"):
                env = child_env(lib, libdir=driver.libdir, SHIMGEN_TRACE=mode)
                mem = per_call(progs, func, env, tmp)
                env["SHIMGEN_TRACE_DIR"] = str(tmp / "traces")
                in_file = per_call(progs, func, env, tmp)
                added = round(in_file - mem, 3) + 0.0  # no "-0.000"
                print(f"{func:20} SHIMGEN_TRACE={mode:5} blocks in memory {mem:8.3f}   "
                      f"in the trace file {in_file:8.3f}   added {added:+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
