"""The measurements of one driver and its shim (benchmarks/suite.py runs them): ns per call
in interleaved rounds with the clock floor, instructions per call (callgrind), counts under
threads, and process start-up. Each takes the Settings of the run."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from shimgen.probe.child import child_env

from . import native
from .native import BenchError, Programs
from .shims import Driver
from .stats import summary

#: Functions measured. The first two are forwarded as they are (the bars are
#: about them); cuGetProcAddress is hooked by the shim, so its added cost is the hook's.
FUNCTIONS = ("cuDriverGetVersion", "cuCtxGetCurrent", "cuGetProcAddress")
CHEAP = ("cuDriverGetVersion", "cuCtxGetCurrent")
HOOKED = ("cuGetProcAddress",)
#: SHIMGEN_TRACE of each shim variant.
TRACE = {"shim": None, "count": "1", "time": "time"}
THREAD_FUNCTION = "cuDriverGetVersion"


@dataclass(frozen=True)
class Settings:
    quick: bool
    repeats: int  # rounds of the call benchmark
    iters: int  # calls per timed repetition
    inner_reps: int  # timed repetitions per process (the fastest is kept)
    threads: int
    thread_calls: int  # calls per thread
    startup_rounds: int
    build_repeats: int
    callgrind_iters: int  # calls counted by callgrind (run with N and 2N)
    pin: int | None = None  # the CPU that single-thread call timings run on (--pin)


def progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ---- calls ---------------------------------------------------------------------------------

class Runner:
    """Runs callbench for one driver and its shim, in each variant."""

    def __init__(self, progs: Programs, driver: Driver, shim: Path, tmp: Path):
        self.progs, self.driver, self.shim, self.tmp = progs, driver, shim, tmp
        self._n = 0

    def env(self, variant: str) -> tuple[dict[str, str], Path | None]:
        if variant == "direct":
            return child_env(libdir=self.driver.libdir), None
        trace = TRACE[variant]
        if trace is None:
            return child_env(self.shim, libdir=self.driver.libdir), None
        self._n += 1
        tfile = self.tmp / f"trace-{variant}-{self._n}.json"
        return child_env(self.shim, libdir=self.driver.libdir, SHIMGEN_TRACE=trace,
                         SHIMGEN_TRACE_FILE=str(tfile)), tfile

    def lib(self, variant: str) -> str:
        return str(self.driver.path) if variant == "direct" else "libcuda.so.1"

    def check_route(self, variant: str, res: dict) -> None:
        """The function must come from the real driver (direct) or from the shim."""
        want = self.driver.path if variant == "direct" else self.shim
        got = Path(res["resolved_from"])
        if got.resolve() != want.resolve():
            raise BenchError(f"{variant}: {res['function']} resolved from {got}, not {want}")

    def run(self, variant: str, func: str, iters: int, mode: str, cpu: int | None = None,
            paired: bool = False) -> tuple[dict, str, Path | None]:
        """One callbench process; `paired` also times the real driver in that process."""
        env, tfile = self.env(variant)
        direct = self.driver.path if paired else None
        res, err = native.callbench(self.progs, self.lib(variant), func, iters, mode, env, cpu,
                                    direct)
        self.check_route(variant, res)
        return res, err, tfile


def time_calls(runner: Runner, variants: list[str], s: Settings) -> tuple[dict, dict | None]:
    """ns/call of each function in each variant over s.repeats interleaved rounds, and,
    with the time variant, the clock floor measured in the same rounds."""
    fastest = {f: {v: [] for v in variants} for f in FUNCTIONS}
    # Every process also times a reference: the real driver loaded a second time with
    # dlmopen, in blocks alternating with the variant's (callbench's paired mode).
    # min(variant) - min(reference) is free of the drift between processes.
    rel = {f: {v: [] for v in variants} for f in FUNCTIONS}
    rcs: dict[str, dict[str, int]] = {f: {} for f in FUNCTIONS}
    floors = []
    for r in range(s.repeats):
        progress(f"  calls: round {r + 1}/{s.repeats}")
        k = r % len(variants)
        order = variants[k:] + variants[:k]
        for func in FUNCTIONS:
            for v in order:
                res, _err, _ = runner.run(v, func, s.iters, str(s.inner_reps), s.pin,
                                          paired=True)
                fastest[func][v].append(res["min"])
                rel[func][v].append(res["min"] - res["direct_min"])
                rcs[func].setdefault(v, res["rc"])
        if "time" in variants:
            floors.append(native.clockfloor(runner.progs, runner.driver.path, s.iters,
                                            s.inner_reps, s.pin))
    out = {}
    for func in FUNCTIONS:
        codes = set(rcs[func].values())
        if len(codes) != 1:
            raise BenchError(f"{func} returned different codes per variant: {rcs[func]}")
        base = fastest[func]["direct"]
        per_variant = {}
        for v in variants:
            vals = fastest[func][v]
            entry = {"ns_per_call": summary(vals), "runs": [round(x, 4) for x in vals]}
            if v != "direct":
                entry["added_ns"] = summary([a - b for a, b in zip(vals, base, strict=True)])
                entry["ratio"] = summary([a / b for a, b in zip(vals, base, strict=True)], 4)
                # (variant - reference) - (direct - reference), by round: the reference
                # cancels the drift, and the direct process cancels any difference between
                # the two loaded copies of the driver.
                entry["added_in_process_ns"] = summary(
                    [a - b for a, b in zip(rel[func][v], rel[func]["direct"], strict=True)])
            per_variant[v] = entry
        out[func] = {"rc": codes.pop(), "hooked": func in HOOKED, "variants": per_variant}
    return out, clock_floor(floors)


def clock_floor(floors: list[dict]) -> dict | None:
    """What two rdtsc around a direct call add when the compiler inlines them: the least
    that any per-call timer built on the TSC can add on this machine."""
    if not floors:
        return None
    return {
        "function": "cuDriverGetVersion",
        "plain_ns": summary([f["plain_ns"] for f in floors]),
        "tsc2_added_ns": summary([f["floor_added_ns"] for f in floors]),
        "tsc1_added_ns": summary([f["tsc1_ns"] - f["plain_ns"] for f in floors]),
        "bad_results": sum(f["bad_results"] for f in floors),
    }


def count_instructions(runner: Runner, variants: list[str], s: Settings) -> dict:
    """Instructions per call from callgrind: (count at 2N calls - count at N calls) / N, so
    that anything done once cancels out."""
    n = s.callgrind_iters
    out: dict[str, dict] = {}
    for func in FUNCTIONS:
        per: dict[str, dict] = {}
        for v in variants:
            env, _ = runner.env(v)
            a = native.callgrind_instructions(runner.progs, runner.lib(v), func, n, env,
                                              runner.tmp)
            b = native.callgrind_instructions(runner.progs, runner.lib(v), func, 2 * n, env,
                                              runner.tmp)
            per[v] = {"per_call": round((b - a) / n, 3)}
        for v in variants:
            if v != "direct":
                per[v]["added"] = round(per[v]["per_call"] - per["direct"]["per_call"], 3)
        out[func] = per
    return out


def thread_exactness(runner: Runner, variants: list[str], s: Settings) -> dict:
    """s.threads threads call at once; the trace must count exactly the calls made. The wall
    time per call (all threads together, on however many CPUs there are) shows what
    contention on the shared counters costs; it is one run, not a median."""
    out = {}
    for v in variants:
        res, _err, tfile = runner.run(v, THREAD_FUNCTION, s.thread_calls, f"threads={s.threads}")
        entry = {"threads": res["threads"], "calls_made": res["calls_total"],
                 "bad_results": res["bad_results"],
                 "wall_ns_per_call": round(res["wall_ns_per_call"], 3)}
        if tfile is not None:
            data = json.loads(tfile.read_text())
            counted = data.get("calls", {}).get(THREAD_FUNCTION, 0)
            entry["calls_counted"] = counted
            entry["exact"] = counted == res["calls_total"]
            timing = data.get("time", {}).get(THREAD_FUNCTION)
            if isinstance(timing, dict):
                entry["timed_calls"] = timing.get("calls")
                entry["untimed_calls"] = data.get("untimed_calls")
                entry["mean_ns"] = timing.get("mean_ns")
        out[v] = entry
    return out


def startup_cost(progs: Programs, driver: Driver, shim: Path, s: Settings) -> dict:
    times = native.spawn_times(progs, s.startup_rounds, shim, driver.libdir)
    out: dict = {"rounds": s.startup_rounds}
    for prog in ("nop", "call"):
        direct, shimmed = times[f"{prog}_direct"], times[f"{prog}_shim"]
        out[prog] = {
            "direct_ms": summary(direct, 4),
            "shim_ms": summary(shimmed, 4),
            "added_ms": summary([a - b for a, b in zip(shimmed, direct, strict=True)], 4),
        }
    return out
