"""`python -m benchmarks.calls`: what SHIMGEN_TRACE=calls costs, in instructions per call
(callgrind, as the suite counts them: the count at 2N calls less the count at N, over N),
against the real driver called directly and against the `time` path, for
cuDriverGetVersion and cuCtxGetCurrent (one argument, an output read after a successful
return; cuCtxGetCurrent's a handle, which fails before cuInit) and cuLaunchKernel
(eleven arguments, five of them on the stack; an error return); and how long `shimgen
report --calls` takes over a trace of a million records. The first fetched Debian driver,
CPU only. The bars (docs/performance.md): at most 150 added instructions for a one-argument
function, 250 for cuLaunchKernel; the report of a million records under 5 s."""

from __future__ import annotations

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


def report_speed(progs, lib: Path, driver, tmp: Path) -> str:
    """A million cuDriverGetVersion calls recorded (a ring of 2^20), then reported."""
    d = tmp / "million"
    env = child_env(lib, libdir=driver.libdir, SHIMGEN_TRACE="calls",
                    SHIMGEN_TRACE_DIR=str(d), SHIMGEN_CALLS_RING=str(MILLION))
    subprocess.run([str(progs.callbench), "libcuda.so.1", "cuDriverGetVersion",
                    str(MILLION), "1"], env=env, check=True, capture_output=True)
    out = []
    for args in ((), ("--json",), ("--function", "cuLaunch*")):
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "shimgen", "report", "--calls", *args,
                            str(d)], capture_output=True, text=True, cwd=ROOT)
        s = time.perf_counter() - t
        if p.returncode:
            return f"report failed: {p.stderr.strip()}"
        out.append(f"report --calls {' '.join(args) or '(text)':22} {s:6.2f} s "
                   f"({p.stdout.splitlines()[0].strip()[:70]})")
    return "\n".join(out)


def main() -> int:
    why = native.callgrind_available()
    if why:
        print(f"benchmarks.calls: {why}", file=sys.stderr)
        return 1
    driver = shims.select_drivers(None, quick=True)[0]
    progs = native.compile_programs(ROOT / "build" / "bench")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        lib, _, _ = shims.build(tmp / "shim", driver.path)
        print(f"driver {driver.version}, {N} and {2 * N} calls; instructions per call")
        for func in FUNCTIONS:
            direct = per_call(progs, str(driver.path), func, child_env(libdir=driver.libdir),
                              tmp)
            got = {}
            for mode in ("time", "calls"):
                env = child_env(lib, libdir=driver.libdir, SHIMGEN_TRACE=mode,
                                SHIMGEN_TRACE_DIR=str(tmp / f"traces-{mode}"))
                got[mode] = per_call(progs, "libcuda.so.1", func, env, tmp)
            print(f"{func:20} direct {direct:8.1f}   time +{got['time'] - direct:6.1f}   "
                  f"calls +{got['calls'] - direct:6.1f}")
        if "--no-report" not in sys.argv:
            print(report_speed(progs, lib, driver, tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
