"""Error returns and latency histograms of the time paths (SHIMGEN_TRACE=time, timeline):
every non-success return of a CUresult function counted per (function, code), exactly, with
threads, with a signal handler's failing calls landing anywhere in the timing path, and
across blocks reused by later threads; never a function that returns no CUresult; one
histogram count per timed call, in the bucket of its length. The real Debian drivers give
the errors (no GPU here: cuInit(0) returns CUDA_ERROR_NO_DEVICE, cuDeviceGet before a
successful init CUDA_ERROR_NOT_INITIALIZED); a FAKE driver (tests/c/fake_errors_libcuda.c)
gives codes, lengths and a function outside the rule on demand."""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from shimgen import cuda
from shimgen.report.model import bounded_percentiles, hist_segments
from shimgen.shim.pipeline import make_shim
from shimgen.trace.model import HIST_BUCKETS, fine_octave
from tests.faultkit import clean_env, run

MODES = ["time", "timeline"]


def traced_env(env: dict[str, str], tmp_path: Path, mode: str) -> dict[str, str]:
    return dict(env, SHIMGEN_TRACE=mode, SHIMGEN_QUIET="1",
                SHIMGEN_TRACE_FILE=str(tmp_path / "trace.json"),
                SHIMGEN_TIMELINE_FILE=str(tmp_path / "timeline.json"))


def tallies(stdout: str) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """errorcalls' output: calls per function, and its non-zero codes as the trace writes them."""
    calls: dict[str, int] = defaultdict(int)
    errors: dict[str, dict[str, int]] = defaultdict(dict)
    for line in stdout.splitlines():
        w = line.split()
        if len(w) == 3:
            calls[w[0]] += int(w[2])
            if w[1] != "0":
                errors[w[0]][w[1]] = int(w[2])
    return dict(calls), dict(errors)


def check_hist(trace: dict) -> None:
    """One histogram count per timed call; the last bucket holds the longest call."""
    k = trace["ns_per_tick"]
    assert k > 0
    for name, t in trace["time"].items():
        hist = t["hist"]
        assert sum(hist) == t["calls"], name
        assert hist and hist[-1] > 0, name
        b = len(hist) - 1
        max_ticks = t["max_ns"] / k
        # the bucket of the maximum: [2^b, 2^(b+1)) ticks (bucket 0: 0 or 1), within rounding
        assert max_ticks < 2 ** (b + 1) * 1.02 + 1, (name, b, max_ticks)
        assert b == 0 or max_ticks >= 2 ** b * 0.98 - 1, (name, b, max_ticks)
        # the fine buckets refine the log2 ones: each in the log2 bucket it names, and
        # no log2 bucket holds fewer calls than its fine buckets
        fine = {f: c for f, c in t["fine"]}
        assert len(fine) == len(t["fine"]) and all(c > 0 for c in fine.values()), name
        per_octave = Counter()
        for f, c in fine.items():
            per_octave[fine_octave(f)] += c
        assert all(per_octave[b] <= (hist[b] if b < len(hist) else 0) for b in per_octave), name
        # the shim's p50, p90 and p99 are the report's: one definition (docs/report.md)
        padded = hist + [0] * (HIST_BUCKETS - len(hist))
        want = bounded_percentiles(hist_segments(padded, k, t["max_ns"], fine), (0.5, 0.9, 0.99),
                                   sum(hist), t["total_ns"], t["max_ns"])
        for got, w in zip((t["p50_ns"], t["p90_ns"], t["p99_ns"]), want, strict=True):
            assert abs(got - w) <= 1.0 + 1e-6 * w, (name, got, w)


def run_errorcalls(probes, shim, tmp_path, mode, threads, rounds, interval, seed):
    proc = run([probes / "errorcalls", "libcuda.so.1", threads, rounds, interval, seed],
               traced_env(shim.env(), tmp_path, mode), timeout=60)
    trace = json.loads((tmp_path / "trace.json").read_text())
    return proc, trace


@pytest.mark.parametrize("mode", MODES)
def test_errors_of_real_driver_counted_exactly_with_threads(probes, shim, tmp_path, mode):
    """8 threads call cuInit(0), cuDeviceGet and cuDriverGetVersion in random order with random
    pauses: the trace's errors equal the program's own tally of every non-zero result, per
    function and code, and its histograms hold every call."""
    seed = random.randrange(1 << 30)
    proc, trace = run_errorcalls(probes, shim, tmp_path, mode, "8", "3000", "0", seed)
    calls, errors = tallies(proc.stdout)
    assert errors["cuInit"] == {str(cuda.CODES["CUDA_ERROR_NO_DEVICE"]): calls["cuInit"]}, seed
    assert errors["cuDeviceGet"] == {str(cuda.CUDA_ERROR_NOT_INITIALIZED): calls["cuDeviceGet"]}
    assert trace["calls"] == calls, seed
    assert trace["errors"] == errors, seed
    assert trace["error_overflow"] == 0
    assert trace["mode"] == mode and trace["rank"] is None
    check_hist(trace)


@pytest.mark.parametrize("mode", MODES)
def test_blocks_reused_by_later_threads_fold_and_clear(probes, shims, tmp_path, mode):
    """Threads one after another: each reuses the block the previous one gave back, so its
    errors and histograms must have been folded once and cleared (else counted twice)."""
    seed = random.randrange(1 << 30)
    proc, trace = run_errorcalls(probes, shims[0], tmp_path, mode, "12s", "500", "0", seed)
    calls, errors = tallies(proc.stdout)
    assert trace["calls"] == calls, seed
    assert trace["errors"] == errors, seed
    check_hist(trace)


def test_error_path_interrupted_by_failing_calls_in_a_signal_handler(probes, shims, tmp_path):
    """A timer's handler calls cuDriverGetVersion(NULL) (CUDA_ERROR_INVALID_VALUE) every 20 to
    200 us while the threads' own calls fail: the handler's timed call lands anywhere in the
    interrupted call's return path, error path included (its slot claim and its count). 120
    runs with random seeds, intervals, threads and modes; every error counted once."""
    for i in range(120):
        shim = shims[i % len(shims)]
        mode = random.choice(MODES)
        seed = random.randrange(1 << 30)
        interval = str(random.randrange(20, 200))
        threads = random.choice(["1", "2", "3s"])
        proc, trace = run_errorcalls(probes, shim, tmp_path, mode, threads, "20000", interval,
                                     seed)
        calls, errors = tallies(proc.stdout)
        what = (i, mode, seed, interval, threads, shim.driver.version)
        assert int(proc.stdout.split("handler ")[1]) > 0, what
        assert errors["cuDriverGetVersion"] == {"1": int(proc.stdout.split("handler ")[1])}
        assert trace["calls"] == calls, what
        assert trace["errors"] == errors, what
        check_hist(trace)


def test_stderr_table_has_percentiles_and_named_errors(probes, shims, tmp_path):
    """Without a trace file: p50 and p99 columns, and the errors section names each code
    from shimgen/cuda.py."""
    env = dict(shims[0].env(), SHIMGEN_TRACE="time", SHIMGEN_QUIET="1")
    proc = run([probes / "errorcalls", "libcuda.so.1", "2", "200", "0", "1"], env)
    calls, _ = tallies(proc.stdout)
    assert re.search(r"calls +total ms +mean ns +p50 ns +p90 ns +p99 ns +max ns +function",
                     proc.stderr)
    no_device = cuda.CODES["CUDA_ERROR_NO_DEVICE"]
    # in `shimgen report`'s column order: function, code, name, count
    assert re.search(r"^function +code +name +count$", proc.stderr, re.M), proc.stderr
    assert re.search(rf"^cuInit +{no_device} +CUDA_ERROR_NO_DEVICE +{calls['cuInit']}$",
                     proc.stderr, re.M), proc.stderr
    assert re.search(rf"^cuDeviceGet +3 +CUDA_ERROR_NOT_INITIALIZED +{calls['cuDeviceGet']}$",
                     proc.stderr, re.M), proc.stderr


# ---- the FAKE error driver: codes, lengths and a function outside the rule on demand ----

@pytest.fixture(scope="module")
def errors_fake_shim(probes, tmp_path_factory) -> tuple[Path, Path]:
    fake = probes / "libfake_errors_libcuda.so"
    # no hooks: the fake lacks most hooked functions, and the rule is about the table
    result = make_shim(fake, tmp_path_factory.mktemp("errorsfake"), hooks=(),
                       require_real=False)
    return fake, result.library


def run_fake(probes, errors_fake_shim, tmp_path, mode, *calls: str) -> dict:
    fake, shim = errors_fake_shim
    env = traced_env(dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_DRIVER=str(fake)),
                     tmp_path, mode)
    run([probes / "errorfake", "libcuda.so.1", *calls], env)
    return json.loads((tmp_path / "trace.json").read_text())


@pytest.mark.parametrize("mode", MODES)
def test_each_code_counted_and_a_function_without_cuResult_never(probes, errors_fake_shim,
                                                                  tmp_path, mode):
    trace = run_fake(probes, errors_fake_shim, tmp_path, mode, "ret:100:7", "ret:0:9",
                     "nores:7:50", "ret:3:5", "ret:801:2", "nores:3:11", "ret:100:4")
    assert trace["calls"] == {"cuFakeReturn": 27, "cudbgFakeNoResult": 61}
    assert trace["errors"] == {"cuFakeReturn": {"3": 5, "100": 11, "801": 2}}
    assert trace["error_overflow"] == 0
    check_hist(trace)


@pytest.mark.parametrize("mode", MODES)
def test_errors_of_declared_functions_are_counted_under_their_own_names(
        probes, errors_fake_shim, tmp_path, mode):
    """cuInit (one integer argument) and cuGetProcAddress (four) are declared in the headers:
    their stubs take the CUresult entries (x86-64: timedfns.inc's kinds 2 and 1), which count
    an error without the flag table. Each code is counted under its own function."""
    _, shim = errors_fake_shim
    kinds = re.findall(r"^SHIMGEN_TIMED\(\d+, (\d)\)$",
                       (shim.parent / "src" / "timedfns.inc").read_text(), re.M)
    names = re.findall(r"^SHIMGEN_FUNCTION\(\d+, (\w+)\)$",
                       (shim.parent / "src" / "functions.inc").read_text(), re.M)
    if cuda.returns_result("cuInit") and dict(zip(names, kinds, strict=True)).get("cuInit") == "0":
        pytest.skip("no headers: every function takes the entry of kind 0")
    trace = run_fake(probes, errors_fake_shim, tmp_path, mode, "init:1:3", "init:0:2",
                     "proc:0:4", "ret:5:1")
    assert trace["calls"] == {"cuInit": 5, "cuGetProcAddress": 4, "cuFakeReturn": 1}
    assert trace["errors"] == {"cuInit": {"1": 3}, "cuGetProcAddress": {"500": 4},
                               "cuFakeReturn": {"5": 1}}
    check_hist(trace)


def test_a_forked_child_reports_only_its_own_errors(probes, errors_fake_shim, tmp_path):
    """A thread of the parent returned errors and exited (its block folded into the
    process's errors), then the parent forks: the child's trace has the child's own calls
    and errors only, the parent's its own."""
    fake, shim = errors_fake_shim
    env = dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_DRIVER=str(fake), SHIMGEN_TRACE="time",
               SHIMGEN_TRACE_FILE=str(tmp_path / "trace.%p.json"))
    proc = run([probes / "errorfake", "libcuda.so.1", "tret:5:3", "fork:0:0", "ret:7:2"], env)
    child = re.search(r"^child (\d+)$", proc.stdout, re.M).group(1)
    traces = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("trace.*.json")}
    mine = traces.pop(f"trace.{child}.json")
    (parent,) = traces.values()
    assert (mine["calls"], mine["errors"]) == ({"cuFakeReturn": 2}, {"cuFakeReturn": {"7": 2}})
    assert (parent["calls"], parent["errors"]) == ({"cuFakeReturn": 3},
                                                   {"cuFakeReturn": {"5": 3}})


def test_flag_table_follows_the_rule(errors_fake_shim):
    """The generated table (table.c) has a 1 exactly for the functions cuda.returns_result
    accepts."""
    _, shim = errors_fake_shim
    table = (shim.parent / "src" / "table.c").read_text()
    flags = dict((m.group(2), m.group(1)) for m in
                 re.finditer(r"^    ([01]), /\* (\w+) \*/$", table, re.M))
    assert flags == {"cuInit": "1", "cuDriverGetVersion": "1", "cuGetProcAddress": "1",
                     "cuFakeReturn": "1",
                     "cuFakeSpinTicks": "1", "cuFakeSpinNs": "1", "cudbgFakeNoResult": "0"}


def test_more_codes_than_slots_go_to_the_overflow(probes, errors_fake_shim, tmp_path):
    """300 distinct codes, 3 returns each: the thread's 256 slots fill, the rest is counted in
    error_overflow; nothing is lost or counted twice."""
    trace = run_fake(probes, errors_fake_shim, tmp_path, "time",
                     *[f"ret:{c}:3" for c in range(1, 301)])
    kept = trace["errors"]["cuFakeReturn"]
    assert len(kept) == 256
    assert set(kept.values()) == {3}
    assert {int(c) for c in kept} <= set(range(1, 301))
    assert trace["error_overflow"] == 3 * (300 - 256)


@pytest.mark.parametrize("mode", MODES)
def test_histogram_bucket_of_a_call_of_known_length(probes, errors_fake_shim, tmp_path, mode):
    """cuFakeSpinTicks(2^20) lasts 2^20 ticks plus the path's few hundred: bucket 20, unless
    the spin is preempted (then later). Short calls stay in low buckets."""
    trace = run_fake(probes, errors_fake_shim, tmp_path, mode, "spin:1048576:40", "ret:0:200")
    hist = trace["time"]["cuFakeSpinTicks"]["hist"]
    assert sum(hist) == 40
    assert sum(hist[:20]) == 0, hist
    assert hist[20] >= 30, hist
    short = trace["time"]["cuFakeReturn"]["hist"]
    assert sum(short) == 200 and len(short) <= 16, short
    check_hist(trace)
