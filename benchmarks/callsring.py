"""`python -m benchmarks.callsring`: what calls mode's ring costs per record besides its
instructions, measured without perf: the minor page faults, system and user time of the
child (getrusage) and its wall time, per call, for a trivial call (cuCtxGetCurrent, an
error return before cuInit: a record with no capture) made N and 2N times, the difference
over N (process start and exit cancel out). Each case in its own rounds, interleaved,
the order rotated each round; the median and the range over the rounds.

Cases: time mode (no ring: the baseline), calls mode with the trace file on this machine's
disk (a file-backed ring: page cache, writeback) and on tmpfs (/dev/shm: the same ring in
memory), each in a ring's first pass (N + 2N calls within a ring of 2^20 records: every 16th
record starts a page, as in the default ring's first 65536) and after the default ring has
wrapped (its pages all there:
what a long-running program pays); and a small ring (SHIMGEN_CALLS_RING=4096: 1 MiB, which
stays in the caches) after it has wrapped.

Then the caches (`--workset`, or alone with `--workset-only`): the program reads 8 cache
lines of a working set of 256 KiB, 1 MiB and 4 MiB after each call (callbench's
CALLBENCH_WORKSET), in time mode and in calls mode after the ring has wrapped: the ns per
iteration callbench measures in process (the median of its repetitions), calls less time,
against the same difference without the working set; what is left is what the ring's
writes evict of the program's data.

`--rounds R` (default 5), `--disk DIR` (a directory on the disk to measure; default the
system's temporary directory), `--json FILE`. The first fetched Debian driver; CPU only."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import native, shims
from benchmarks.native import ROOT
from shimgen.probe.child import child_env
from shimgen.runenv import CALLS_RING_DEFAULT, ENV

FUNC = "cuCtxGetCurrent"
FIRST_RING = 1 << 20  # records: a ring whose first pass holds N + 2N calls of the first pass
FIRST = FIRST_RING // 8
WRAPPED = CALLS_RING_DEFAULT * 4  # N calls wrap the default ring four times before 2N
SMALL_RING = 4096


def _cases(disk: Path, shm: Path) -> list[tuple[str, dict, int]]:
    """(name, the shim's settings, N) of every case."""
    cases = [("time", {"SHIMGEN_TRACE": "time", "SHIMGEN_TRACE_DIR": str(disk)}, WRAPPED)]
    for where, root in (("disk", disk), ("tmpfs", shm)):
        for phase, n, ring in (("first pass", FIRST, FIRST_RING),
                               ("wrapped", WRAPPED, CALLS_RING_DEFAULT)):
            cases.append((f"calls, {where}, {phase}",
                          {"SHIMGEN_TRACE": "calls", "SHIMGEN_TRACE_DIR": str(root),
                           ENV["CALLS_RING"]: str(ring)}, n))
    cases.append((f"calls, disk, ring {SMALL_RING}, wrapped",
                  {"SHIMGEN_TRACE": "calls", "SHIMGEN_TRACE_DIR": str(disk),
                   ENV["CALLS_RING"]: str(SMALL_RING)}, WRAPPED))
    return cases


def _one(progs, env: dict, n: int) -> dict:
    """One run of callbench making about `n` calls (its warm-up included): the child's
    getrusage and wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([str(progs.callbench), "libcuda.so.1", FUNC, str(n), "1"], env=env,
                   capture_output=True, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"minflt": after.ru_minflt - before.ru_minflt,
            "sys": after.ru_stime - before.ru_stime,
            "user": after.ru_utime - before.ru_utime, "wall": wall}


def _per_call(progs, env: dict, n: int) -> dict:
    """The cost of the calls between N and 2N, per call."""
    a, b = _one(progs, env, n), _one(progs, env, 2 * n)
    made = (2 * n + 2 * n // 10) - (n + n // 10)  # callbench's warm-up is a tenth of ITERS
    return {"minflt": (b["minflt"] - a["minflt"]) / made,
            "sys_ns": (b["sys"] - a["sys"]) / made * 1e9,
            "user_ns": (b["user"] - a["user"]) / made * 1e9,
            "wall_ns": (b["wall"] - a["wall"]) / made * 1e9}


WORKSETS = (0, 1 << 18, 1 << 20, 1 << 22)


def _workset_ns(progs, env: dict, workset: int) -> float:
    """ns per iteration (a call, and 8 reads of the working set when there is one): the
    median of callbench's repetitions, in process, after WRAPPED calls of warm-up."""
    env = dict(env, CALLBENCH_WORKSET=str(workset)) if workset else env
    p = subprocess.run([str(progs.callbench), "libcuda.so.1", FUNC, str(WRAPPED), "5"],
                       env=env, capture_output=True, text=True, check=True)
    return json.loads(p.stdout)["median"]


def worksets(progs, lib: Path, driver, traces: Path, rounds: int) -> None:
    modes = {"time": {"SHIMGEN_TRACE": "time"}, "calls": {"SHIMGEN_TRACE": "calls"}}
    got: dict[tuple[int, str], list[float]] = {(w, m): [] for w in WORKSETS for m in modes}
    for r in range(rounds):
        order = list(got)
        for w, m in order[r % len(order):] + order[:r % len(order)]:
            env = child_env(lib, libdir=driver.libdir, SHIMGEN_TRACE_DIR=str(traces),
                            **modes[m])
            got[w, m].append(_workset_ns(progs, env, w))
    print(f"{'working set':>12} {'time ns/iter':>22} {'calls ns/iter':>22} "
          f"{'calls - time':>22}")
    for w in WORKSETS:
        diff = [c - t for t, c in zip(got[w, "time"], got[w, "calls"], strict=True)]
        print(f"{w >> 10:>9} KiB " + " ".join(
            f"{_spread(xs, '.1f'):>22}" for xs in (got[w, "time"], got[w, "calls"], diff)))


def _spread(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} [{min(xs):{fmt}}..{max(xs):{fmt}}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.callsring", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--disk", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--workset", action="store_true")
    ap.add_argument("--workset-only", action="store_true")
    args = ap.parse_args(argv)
    if not Path("/dev/shm").is_dir():
        print("benchmarks.callsring: no /dev/shm to hold a ring in memory", file=sys.stderr)
        return 1
    driver = shims.select_drivers(None, quick=True)[0]
    progs = native.compile_programs(ROOT / "build" / "bench")
    print(f"driver {driver.version}; {FUNC} (an error return), per call of the calls "
          f"from N to 2N; load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    with tempfile.TemporaryDirectory(dir=args.disk) as d, \
            tempfile.TemporaryDirectory(dir="/dev/shm") as m:
        lib, _, _ = shims.build(Path(d) / "shim", driver.path)
        cases = _cases(Path(d) / "traces", Path(m) / "traces")
        for _, env, _ in cases:
            Path(env["SHIMGEN_TRACE_DIR"]).mkdir(mode=0o700, exist_ok=True)
        if args.workset or args.workset_only:
            worksets(progs, lib, driver, Path(d) / "traces", args.rounds)
            if args.workset_only:
                return 0
        got: dict[str, list[dict]] = {name: [] for name, _, _ in cases}
        for r in range(args.rounds):
            for name, settings, n in cases[r % len(cases):] + cases[:r % len(cases)]:
                env = child_env(lib, libdir=driver.libdir, **settings)
                got[name].append(_per_call(progs, env, n))
    print(f"{'case':38} {'faults/call':>22} {'system ns':>22} {'user ns':>22} "
          f"{'wall ns':>22}")
    for name, rows in got.items():
        print(f"{name:38} " + " ".join(
            f"{_spread([row[k] for row in rows], fmt):>22}"
            for k, fmt in (("minflt", ".4f"), ("sys_ns", ".1f"), ("user_ns", ".1f"),
                           ("wall_ns", ".1f"))))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        args.json.write_text(json.dumps({"driver": driver.version, "rounds": got}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
