"""The benchmark suite: `python -m benchmarks [--quick] [--drivers ...]
[--repeats N] [--pin CPU] [--gpu CONFIGS] [--json PATH]`.

For each real driver (the Debian builds of devtools/driverfetch.py, or paths given with
--drivers) it builds a shim with `shimgen build` (timing the build), then measures, with
four variants side by side:

  direct  the real driver, dlopen'ed by path, no shim
  shim    LD_PRELOAD of the shim, no tracing: each call is one indirect jump
  count   the same with SHIMGEN_TRACE=1: one per-thread increment more
  time    the same with SHIMGEN_TRACE=time (per-call timing), when the shim accepts it

* ns per call of cheap driver functions (benchmarks/c/callbench.c: dlopen, dlsym, a tight
  loop timed with clock_gettime). Every round runs every variant once, as separate
  processes in an order that rotates from round to round, so that all variants see the
  same machine load; a process reports the fastest of its inner repetitions. Added ns and
  ratios are paired with the direct run of the same round. Medians and quartiles over the
  rounds are reported.
  Each process also loads the real driver a second time with dlmopen (a namespace of its
  own, out of the shim's reach) as a reference, and times it in blocks that alternate
  with the variant's. "Added in process" is (variant - reference) - (direct - reference),
  by round: free of the drift between processes, and of any difference between the two
  loaded copies of the driver. The bars use it.
* with the time variant, the clock floor (benchmarks/c/clockfloor.c): what two inline
  rdtsc around a direct call add, the least any TSC-based per-call timer can add.
* instructions per call, counted by callgrind in callbench's loop only: deterministic,
  so unaffected by the noise of a shared machine (perf's hardware counters are used by
  nothing here: they are often unavailable in VMs, and callgrind's count is exact).
* 16 threads calling at once: the counts in the trace must equal the calls made, exactly.
* process start-up added by LD_PRELOAD of the shim (benchmarks/c/spawnbench.c).
* with --gpu, on a GPU machine: the PyTorch training step with and without the shim
  (benchmarks/gpu_step.py), for the GPU bar.

The measurements are in benchmarks/measure.py; this module picks the drivers and variants,
runs them and writes the result. Progress goes to stderr, the table to stdout, everything
to --json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import native, report, shims
from .measure import (
    THREAD_FUNCTION,
    Runner,
    Settings,
    count_instructions,
    progress,
    startup_cost,
    thread_exactness,
    time_calls,
)
from .native import ROOT, BenchError, Programs
from .shims import Driver

SCHEMA = "shimgen.bench/1"


def make_settings(args: argparse.Namespace) -> Settings:
    if args.quick:
        s = Settings(True, 3, 100_000, 3, 16, 10_000, 10, 1, 10_000)
    else:
        s = Settings(False, 11, 1_000_000, 5, 16, 100_000, 100, 3, 20_000)
    if args.pin is not None:
        if args.pin not in os.sched_getaffinity(0):
            raise BenchError(f"--pin {args.pin}: this process may not run on CPU {args.pin}")
        s = dataclasses.replace(s, pin=args.pin)
    if args.repeats is not None:
        if args.repeats < 1:
            raise BenchError("--repeats must be at least 1")
        s = dataclasses.replace(s, repeats=args.repeats)
    return s


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return fields
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _git_commit() -> str | None:
    """The shimgen commit measured, with "-dirty" when tracked files are modified."""
    try:
        proc = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def machine_info() -> dict:
    info = _cpuinfo()
    return {
        "cpu": info.get("model name", "unknown"),
        "cpu_family_model": f"{info.get('cpu family', '?')}/{info.get('model', '?')}",
        "cpu_mhz": info.get("cpu MHz"),
        "virtualized": "hypervisor" in info.get("flags", "").split(),
        "cpus_online": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


# ---- one driver ----------------------------------------------------------------------------

def time_mode_status(runner: Runner) -> str | None:
    """None when the shim accepts SHIMGEN_TRACE=time, else the reason it is unavailable."""
    _res, err, _ = runner.run("time", "cuDriverGetVersion", 100, "1")
    if "not a known mode" in err:
        line = next((ln for ln in err.splitlines() if "not a known mode" in ln), err.strip())
        return f"the shim does not accept SHIMGEN_TRACE=time ({line.strip()})"
    return None


def bench_driver(progs: Programs, driver: Driver, s: Settings, out_root: Path,
                 counter: str | None) -> dict:
    progress(f"driver {driver.version}: shimgen build x{s.build_repeats}")
    shim, build = shims.build_timed(driver, out_root / "shims", s.build_repeats)
    with tempfile.TemporaryDirectory(prefix="shimgen-bench-") as tmpname:
        runner = Runner(progs, driver, shim, Path(tmpname))
        time_unavailable = time_mode_status(runner)
        variants = ["direct", "shim", "count"] + ([] if time_unavailable else ["time"])
        calls, floor = time_calls(runner, variants, s)
        instructions = None
        if counter is None:
            progress("  instructions: callgrind")
            instructions = count_instructions(runner, variants, s)
        progress(f"  {s.threads} threads")
        threads = thread_exactness(runner, variants, s)
        progress(f"  start-up x{s.startup_rounds}")
        startup = startup_cost(progs, driver, shim, s)
    return {
        "version": driver.version,
        "driver": str(driver.path),
        "shim": str(shim),
        "build": build,
        "variants": variants,
        "time_mode": {"available": time_unavailable is None, "reason": time_unavailable},
        "calls": calls,
        "clock_floor": floor,
        "instructions": instructions,
        "threads": {"function": THREAD_FUNCTION, "by_variant": threads},
        "startup": startup,
    }


# ---- main ----------------------------------------------------------------------------------

def gpu_step(args: argparse.Namespace, benched: list[dict]) -> dict:
    """benchmarks/gpu_step.py in a subprocess: its JSON, and the table it printed. The shim
    of a benchmarked driver is reused when that driver is the one this machine loads."""
    progress(f"PyTorch training step ({args.gpu}) x{args.gpu_runs}")
    cmd = [sys.executable, "-m", "benchmarks.gpu_step", "--configs", args.gpu,
           "--runs", str(args.gpu_runs), "--steps", str(args.gpu_steps)]
    installed = shutil.which("ldconfig") and _installed_driver()
    for d in benched:
        if installed and Path(d["driver"]).resolve() == installed:
            cmd += ["--shim", d["shim"]]
            break
    with tempfile.TemporaryDirectory(prefix="shimgen-gpu-") as tmp:
        out = Path(tmp) / "gpu.json"
        proc = subprocess.run(cmd + ["--json", str(out)], cwd=ROOT, capture_output=True,
                              text=True)
        if proc.returncode != 0 or not out.exists():
            raise BenchError(f"benchmarks.gpu_step exited {proc.returncode}: "
                             f"{proc.stderr.strip()[-1500:]}")
        data = json.loads(out.read_text())
    data["table"] = proc.stdout.strip()
    return data


def _installed_driver() -> Path | None:
    """The libcuda.so.1 that the dynamic loader would pick here, resolved."""
    proc = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.strip().startswith("libcuda.so.1 ") and "x86-64" in line:
            return Path(line.rsplit("=>", 1)[1].strip()).resolve()
    return None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="few repetitions and the first driver only (CI: it must work, "
                        "not be precise)")
    p.add_argument("--drivers", metavar="LIST",
                   help="comma-separated Debian driver versions (535.261.03, 550.163.01, "
                        "555.58.02) and/or paths of libcuda files; default: all")
    p.add_argument("--repeats", type=int, metavar="N",
                   help="rounds of the call benchmark (default 11, 3 with --quick)")
    p.add_argument("--pin", type=int, metavar="CPU",
                   help="run the single-thread call timings (and the clock floor) on this "
                        "CPU alone, so that no process migrates mid-measurement")
    p.add_argument("--gpu", metavar="CONFIGS",
                   help="also run the PyTorch training-step benchmark (benchmarks/gpu_step.py) "
                        "with these configs (small, large), for the GPU bar; on a machine "
                        "without PyTorch and a CUDA GPU it is reported as skipped")
    p.add_argument("--gpu-runs", type=int, default=5, metavar="N",
                   help="interleaved runs of each variant for --gpu (default 5)")
    p.add_argument("--gpu-steps", type=int, default=100, metavar="N",
                   help="timed training steps per run for --gpu (default 100)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write every result here")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    started = time.monotonic()
    try:
        s = make_settings(args)
        machine = machine_info()
        out_root = ROOT / "build" / "bench"
        progs = native.compile_programs(out_root)
        counter = native.callgrind_available()
        drivers = shims.select_drivers(args.drivers, args.quick)
        result = {
            "schema": SCHEMA,
            "command": " ".join(["python", "-m", "benchmarks", *argv]),
            "shimgen_commit": _git_commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": {**machine, "compiler": progs.compiler,
                        "valgrind": native.valgrind_version()},
            "settings": dataclasses.asdict(s),
            "method": {
                "wall_time": "clock_gettime(CLOCK_MONOTONIC) around a tight loop; per "
                             "process the fastest of its inner repetitions; median and "
                             "quartiles over interleaved rounds; added ns and ratios paired "
                             "with the direct run of the same round",
                "instructions": "callgrind" if counter is None else None,
                "instructions_unavailable": counter,
                "perf_stat_instructions": native.perf_instructions_available() or "available",
            },
            "drivers": [],
        }
        for d in drivers:
            result["drivers"].append(bench_driver(progs, d, s, out_root, counter))
        if args.gpu:
            result["gpu_step"] = gpu_step(args, result["drivers"])
        result["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        result["bars"] = report.bars(result)
        result["seconds"] = round(time.monotonic() - started, 1)
    except BenchError as e:
        print(f"benchmarks: error: {e}", file=sys.stderr)
        return 1
    print(report.table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nJSON: {args.json}")
    return 0
