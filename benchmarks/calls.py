"""`python -m benchmarks.calls`: what SHIMGEN_TRACE=calls costs, in instructions per call
(callgrind, as the suite counts them: the count at 2N calls less the count at N, over N),
against the real driver called directly and against the `time` path, for
cuDriverGetVersion and cuCtxGetCurrent (one argument, an output read after a successful
return; cuCtxGetCurrent's a handle, which fails before cuInit) and cuLaunchKernel
(eleven arguments, five of them on the stack; an error return); and how long `shimgen
report --calls` takes over a trace of a million records (calls alike, and calls that all
differ). The first fetched Debian driver,
CPU only. The bars (docs/performance.md): at most 150 added instructions for a one-argument
function, 250 for cuLaunchKernel; the report of a million records under 5 s on 2 cores.
`--report-only`: the report's part alone (no callgrind); `--no-report`: without it;
`--captures`: only what a capture at entry costs (captures(): instructions, the safe read's
system calls and the system time per call)."""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import native, shims
from benchmarks.native import ROOT
from shimgen.probe.child import child_env

N = 20000
FUNCTIONS = ("cuDriverGetVersion", "cuCtxGetCurrent", "cuLaunchKernel")
MILLION = 1 << 20


def per_call(progs, lib: str, func: str, env: dict, tmp: Path) -> float:
    a = native.callgrind_instructions(progs, lib, func, N, env, tmp)
    b = native.callgrind_instructions(progs, lib, func, 2 * N, env, tmp)
    return (b - a) / N


def _timed(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds (user + system), first line) of one run of argv on cores 0
    and 1 (taskset, where there is one), its output to a file."""
    cores = ["taskset", "-c", "0,1"] if shutil.which("taskset") else []
    with tempfile.TemporaryFile("w+") as out:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        p = subprocess.run([*cores, *argv], stdout=out, stderr=subprocess.PIPE, text=True,
                           cwd=ROOT)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode:
            raise RuntimeError(f"report failed: {p.stderr.strip()}")
        out.seek(0)
        return (wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
                out.readline().strip())


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):5.2f} s ({min(xs):.2f}-{max(xs):.2f})"


def report_speed(progs, lib: Path, driver, tmp: Path, rounds: int = 5) -> str:
    """A million calls recorded (a ring of 2^20, which wraps: the program's own first calls
    come before), then reported as text, JSON, an SQLite table and with a filter that keeps
    nothing, each `rounds` times: median and range of the wall time and of the CPU time.
    Two recordings: cuDriverGetVersion called alike a million times (the report decodes one
    record and repeats it), and cuDeviceGetAttribute with arguments that differ every call
    (every record decoded: the worst case)."""
    out = [f"report --calls of {MILLION} records, {rounds} rounds on cores 0,1; load average "
           f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}: median (range)"]
    for func, what in (("cuDriverGetVersion", "alike"), ("cuDeviceGetAttribute", "all differ")):
        d = tmp / f"million-{func}"
        env = child_env(lib, libdir=driver.libdir, SHIMGEN_TRACE="calls",
                        SHIMGEN_TRACE_DIR=str(d), SHIMGEN_CALLS_RING=str(MILLION))
        subprocess.run([str(progs.callbench), "libcuda.so.1", func, str(MILLION), "1"],
                       env=env, check=True, capture_output=True)
        out.append(f" {func}, {what}:")
        for args in ((), ("--json",), ("--sqlite", str(tmp / "calls.db")),
                     ("--function", "cuLaunch*")):
            walls, cpus, first = [], [], ""
            try:
                for _ in range(rounds):
                    (tmp / "calls.db").unlink(missing_ok=True)
                    w, c, first = _timed([sys.executable, "-m", "shimgen", "report",
                                          "--calls", *args, str(d)])
                    walls.append(w)
                    cpus.append(c)
            except RuntimeError as e:
                return str(e)
            name = " ".join(a if not a.startswith("/") else "FILE" for a in args) or "(text)"
            out.append(f"  {name:22} wall {_spread(walls)}  cpu {_spread(cpus)}  "
                       f"({first[:60]})")
        shutil.rmtree(d, ignore_errors=True)
    out.append(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return "\n".join(out)


def main() -> int:
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        return 0
    report_only = "--report-only" in sys.argv
    why = None if report_only else native.callgrind_available()
    if why:
        print(f"benchmarks.calls: {why}", file=sys.stderr)
        return 1
    driver = shims.select_drivers(None, quick=True)[0]
    progs = native.compile_programs(ROOT / "build" / "bench")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        lib, _, _ = shims.build(tmp / "shim", driver.path)
        if "--captures" in sys.argv:
            captures(progs, lib, driver, tmp)
            return 0
        if not report_only:
            instructions(progs, lib, driver, tmp)
        if "--no-report" not in sys.argv:
            print(report_speed(progs, lib, driver, tmp))
    return 0


CAPTURES = ("cuLaunchKernelEx", "cuLaunchKernelEx:static")
CAPTURE_CALLS = 200000


def _counter(tmp: Path) -> Path:
    """benchmarks/c/countreads.c, built as a preload library."""
    out = tmp / "countreads.so"
    cc = os.environ.get("CC", "cc").split()
    subprocess.run([*cc, "-O2", "-Wall", "-shared", "-fPIC", "-o", str(out),
                    str(ROOT / "benchmarks" / "c" / "countreads.c"), "-ldl"], check=True)
    return out


def captures(progs, lib: Path, driver, tmp: Path) -> None:
    """What a capture at entry costs in calls mode: cuLaunchKernelEx with its CUlaunchConfig
    in the caller's frame and in static memory; instructions per call (callgrind), the safe
    read's system calls per call (benchmarks/c/countreads.c ahead of the shim) and the
    system and user time per call of CAPTURE_CALLS calls (getrusage of the child)."""
    counter = _counter(tmp)
    print(f"driver {driver.version}; per call of cuLaunchKernelEx (an error return), "
          f"calls mode against the driver alone")
    for func in CAPTURES:
        direct = per_call(progs, str(driver.path), func, child_env(libdir=driver.libdir), tmp)
        env = child_env(lib, libdir=driver.libdir, SHIMGEN_TRACE="calls",
                        SHIMGEN_TRACE_DIR=str(tmp / "traces-captures"))
        calls = per_call(progs, "libcuda.so.1", func, env, tmp)
        env["LD_PRELOAD"] = f"{counter}:{env['LD_PRELOAD']}"
        iters, reps = CAPTURE_CALLS // 4, 4
        made = 1 + iters // 10 + 1 + reps * iters
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run([str(progs.callbench), "libcuda.so.1", func, str(iters), str(reps)],
                           env=env, capture_output=True, text=True, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        counts = [line.split() for line in p.stderr.splitlines()
                  if line.startswith("countreads ")][-1]
        sys_us = (after.ru_stime - before.ru_stime) / made * 1e6
        user_us = (after.ru_utime - before.ru_utime) / made * 1e6
        print(f"{func:24} instructions +{calls - direct:7.1f}   process_vm_readv "
              f"{int(counts[2]) / made:5.2f}   mincore {int(counts[4]) / made:5.2f}   "
              f"system {sys_us:6.3f} us   user {user_us:6.3f} us")


def instructions(progs, lib: Path, driver, tmp: Path) -> None:
    print(f"driver {driver.version}, {N} and {2 * N} calls; instructions per call")
    for func in FUNCTIONS:
        direct = per_call(progs, str(driver.path), func, child_env(libdir=driver.libdir), tmp)
        got = {}
        for mode in ("time", "calls"):
            env = child_env(lib, libdir=driver.libdir, SHIMGEN_TRACE=mode,
                            SHIMGEN_TRACE_DIR=str(tmp / f"traces-{mode}"))
            got[mode] = per_call(progs, "libcuda.so.1", func, env, tmp)
        print(f"{func:20} direct {direct:8.1f}   time +{got['time'] - direct:6.1f}   "
              f"calls +{got['calls'] - direct:6.1f}")


if __name__ == "__main__":
    sys.exit(main())
