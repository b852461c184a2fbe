"""`python -m benchmarks.topread`: whether a job read by `shimgen top` runs at the same
speed. callbench calls cuDriverGetVersion in a loop under SHIMGEN_TRACE=time with its trace
file in a directory, alone and while a reader reads that directory as `top` does (every
trace file's calls counted and calls in progress read, trace/job.py) every 100 ms; the two
alternate, in one run, and the ratio of their ns per call (read / alone) is printed with
each pair's. The first fetched Debian driver, CPU only (--driver for another)."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
from pathlib import Path

from benchmarks import native, shims
from benchmarks.native import ROOT
from shimgen.probe.child import child_env

ITERS = 2_000_000
REPS = 5
EVERY_S = 0.1


def _reader(run: Path, stop: threading.Event, reads: list[int]) -> None:
    from shimgen.trace import job

    while not stop.wait(EVERY_S):
        job.snapshot(run, counts=True)
        reads[0] += 1


def one(progs, lib: Path, env: dict, run: Path, read: bool) -> float:
    """callbench's median ns per call, with or without the reader."""
    stop, reads = threading.Event(), [0]
    t = threading.Thread(target=_reader, args=(run, stop, reads), daemon=True)
    if read:
        t.start()
    try:
        result, _ = native.callbench(progs, str(lib), "cuDriverGetVersion", ITERS, str(REPS),
                                     env)
    finally:
        stop.set()
        if read:
            t.join()
    if read and not reads[0]:
        raise native.BenchError("the reader never read: the run was too short")
    return statistics.median(result["ns_per_call"])


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.topread")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--driver", help="a libcuda file (default: the first fetched build)")
    args = ap.parse_args()
    driver = (shims.select_drivers(args.driver, quick=True)[0])
    progs = native.compile_programs(ROOT / "build" / "bench")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        lib, _, _ = shims.build(tmp / "shim", driver.path)
        run = tmp / "run"
        (run / "traces").mkdir(parents=True)
        env = child_env(lib, libdir=driver.libdir, SHIMGEN_TRACE="time",
                        SHIMGEN_TRACE_DIR=str(run / "traces"))
        ratios = []
        print(f"driver {driver.version}; callbench cuDriverGetVersion {ITERS} calls x {REPS}, "
              f"time mode, trace file; read every {EVERY_S * 1000:.0f} ms as top reads")
        for k in range(args.pairs):
            first_read = k % 2 == 1  # alternate which goes first
            a = one(progs, lib, env, run, first_read)
            b = one(progs, lib, env, run, not first_read)
            alone, read = (b, a) if first_read else (a, b)
            ratios.append(read / alone)
            print(f"pair {k + 1}: alone {alone:.2f} ns/call, read {read:.2f} ns/call, "
                  f"ratio {read / alone:.3f}")
        print(f"ratio read/alone: median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over {args.pairs} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
