"""`python -m benchmarks.report_speed`: how long `shimgen report` takes on a run directory of
many processes (the bar: 1,000 processes in under 2 s, docs/performance.md). It writes a
run directory of made-up but full-sized traces (every process timed, with histograms and
errors), then times the whole command, start-up included, several times.

The trace writer is pluggable (`WRITERS`): JSON traces now; binary ones once a writer for
them exists. `json_trace` (a ProcessTrace as the shim's extended JSON) is also what the
report's tests use to put made-up processes on disk."""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shimgen.runenv import RUN_JSON, TRACES
from shimgen.trace.jsonfile import NO_ERROR_COUNTS
from shimgen.trace.model import FunctionStats, ProcessTrace

ROOT = Path(__file__).resolve().parent.parent


def json_trace(t: ProcessTrace) -> dict:
    """The JSON the shim writes at exit for this trace (its extended form)."""
    data = {"shimgen": t.shimgen_version or "0", "driver": t.driver_path,
            "driver_version": t.driver_version, "build_id": t.driver_build_id,
            "loaded_build_id": t.driver_build_id, "pid": t.pid,
            "unmapped_proc_addresses": t.unmapped_proc_addresses,
            "calls": {n: f.calls for n, f in t.functions.items()}, "mode": t.mode,
            "rank": t.rank}
    if t.ns_per_tick is not None:
        data["ns_per_tick"] = t.ns_per_tick
    if t.mode != "counts":
        data["untimed_calls"] = t.untimed_calls
        data["time"] = {}
        for n, f in t.functions.items():
            entry = {"calls": f.calls, "total_ns": f.total_ns, "mean_ns": f.total_ns / f.calls,
                     "max_ns": f.max_ns}
            if f.hist is not None:
                top = max((b for b, c in enumerate(f.hist) if c), default=-1)
                entry["hist"] = f.hist[:top + 1]
            data["time"][n] = entry
        if NO_ERROR_COUNTS not in t.notes:
            data["errors"] = {n: {str(c): k for c, k in f.errors.items()}
                              for n, f in t.functions.items() if f.errors}
            data["error_overflow"] = t.errors_overflow
    return data


def write_json(t: ProcessTrace, directory: Path) -> Path:
    path = directory / f"trace.{t.pid}.json"
    path.write_text(json.dumps(json_trace(t)) + "\n")
    return path


# How a generated process is put on disk, by format name.
WRITERS = {"json": write_json}


def made_up_process(pid: int, rank: int, functions: int, rng: random.Random) -> ProcessTrace:
    t = ProcessTrace(path="", source="json", pid=pid, rank=str(rank), mode="time",
                     complete=True, shimgen_version="0.1", driver_path="/usr/lib/libcuda.so.1",
                     driver_version="555.58.02", driver_build_id="0" * 40,
                     ns_per_tick=rng.choice((0.25, 0.3125, 0.4)))
    for i in range(functions):
        hist = [0] * 64
        for b in range(3, 3 + rng.randrange(4, 18)):
            hist[b] = rng.randrange(1, 5000)
        calls = sum(hist)
        top = max(b for b, c in enumerate(hist) if c)
        fs = FunctionStats(calls=calls, hist=hist,
                           max_ns=(1 << top) * t.ns_per_tick * 1.5,
                           total_ns=calls * 100.0 * rng.random())
        if i % 7 == 0:
            fs.errors = {801: rng.randrange(1, 50), 1: rng.randrange(1, 5)}
        t.functions[f"cuBenchFunction{i:03d}"] = fs
    return t


def make_run(directory: Path, processes: int, functions: int, fmt: str, seed: int = 1) -> Path:
    rng = random.Random(seed)
    traces = directory / TRACES
    traces.mkdir(parents=True, mode=0o700)
    writer = WRITERS[fmt]
    for i in range(processes):
        writer(made_up_process(10000 + i, i, functions, rng), traces)
    (directory / RUN_JSON).write_text(json.dumps(
        {"command": ["python", "train.py"], "exit": {"status": 0, "code": 0, "signal": None,
                                                     "signal_name": None}}) + "\n")
    return directory


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.report_speed")
    ap.add_argument("--processes", type=int, default=1000)
    ap.add_argument("--functions", type=int, default=60, help="functions each process called")
    ap.add_argument("--format", choices=sorted(WRITERS), default="json")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--args", default="", help="extra `shimgen report` options, e.g. --json")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shimgen-report-speed-") as tmp:
        run = make_run(Path(tmp) / "run", args.processes, args.functions, args.format)
        cmd = [sys.executable, "-m", "shimgen", "report", *args.args.split(), str(run)]
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        times, cpu = [], []
        for _ in range(args.repeats):
            used = _children_cpu()
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
            times.append(time.perf_counter() - t0)
            cpu.append(_children_cpu() - used)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr, end="")
                return 1
        size = sum(f.stat().st_size for f in (run / TRACES).iterdir())
    print(f"shimgen report {args.args} on {args.processes} processes x {args.functions} "
          f"functions ({args.format}, {size / 1e6:.1f} MB): median {statistics.median(times):.3f}"
          f" s (min {min(times):.3f}, max {max(times):.3f}), CPU time median "
          f"{statistics.median(cpu):.3f} s, over {args.repeats} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
