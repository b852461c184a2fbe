"""The benchmark suite (benchmarks/) in its quick mode: it must run against a real
driver and write sane JSON. Nothing here asserts a speed: the bars are reported by the
benchmark (docs/performance.md), not asserted by timed tests."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.report import BUILD_BAR_S, CALL_BARS, STARTUP_BAR_MS
from benchmarks.stats import summary
from shimgen.runenv import SHIM_LIBRARY

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("direct", "shim", "count")
FUNCTIONS = ("cuDriverGetVersion", "cuCtxGetCurrent", "cuGetProcAddress")


def _sane(s: dict) -> bool:
    vals = [s[k] for k in ("median", "p25", "p75", "min", "max")]
    return s["n"] >= 1 and all(math.isfinite(v) for v in vals) and (
        s["min"] <= s["p25"] <= s["median"] <= s["p75"] <= s["max"])


#: The quick run pins its call timings to the last CPU this process may use.
PIN = max(os.sched_getaffinity(0))


@pytest.fixture(scope="module")
def quick(drivers, tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--drivers", drivers[0].version,
         "--pin", str(PIN), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def test_quick_run_prints_a_table(quick):
    _, stdout = quick
    assert "== bars ==" in stdout
    for func in FUNCTIONS:
        assert func in stdout


def test_quick_json_header(quick, drivers):
    result, stdout = quick
    assert result["settings"]["pin"] == PIN and f"on CPU {PIN} alone (--pin)" in stdout
    assert result["schema"] == "shimgen.bench/1"
    assert result["settings"]["quick"] is True
    assert result["machine"]["cpus_usable"] >= 1
    assert result["command"].startswith("python -m benchmarks --quick")
    assert [d["version"] for d in result["drivers"]] == [drivers[0].version]


def test_quick_call_timings_are_sane(quick):
    d = quick[0]["drivers"][0]
    variants = d["variants"]
    # This repository's shims take SHIMGEN_TRACE=time (runtime/arch/x86_64/timing.S): the time
    # variant is always measured, never silently left out.
    assert d["time_mode"] == {"available": True, "reason": None}
    assert variants == [*VARIANTS, "time"]
    assert set(d["calls"]) == set(FUNCTIONS)
    for func, c in d["calls"].items():
        assert set(c["variants"]) == set(variants), func
        for v, e in c["variants"].items():
            assert _sane(e["ns_per_call"]) and e["ns_per_call"]["min"] > 0, (func, v)
            assert len(e["runs"]) == quick[0]["settings"]["repeats"]
            if v != "direct":
                assert _sane(e["added_ns"]) and _sane(e["ratio"]), (func, v)
                # paired in each process with a dlmopen'ed reference copy of the driver
                assert _sane(e["added_in_process_ns"]), (func, v)
                assert e["added_in_process_ns"]["n"] == quick[0]["settings"]["repeats"]
    # On the CPU: the driver answers these two, and refuses cuCtxGetCurrent before cuInit.
    assert d["calls"]["cuDriverGetVersion"]["rc"] == 0
    assert d["calls"]["cuGetProcAddress"]["rc"] == 0
    assert d["calls"]["cuCtxGetCurrent"]["rc"] != 0
    assert d["calls"]["cuGetProcAddress"]["hooked"] is True


def test_quick_clock_floor_is_measured_with_the_time_variant(quick):
    """The floor is measured in every round and reported; its size is not asserted (a
    preempted round can reorder medians of 3: this module asserts no speed)."""
    d = quick[0]["drivers"][0]
    fl = d["clock_floor"]
    assert "time" in d["variants"] and fl["function"] == "cuDriverGetVersion"
    assert fl["bad_results"] == 0
    rounds = quick[0]["settings"]["repeats"]
    assert _sane(fl["plain_ns"]) and fl["plain_ns"]["min"] > 0
    for k in ("plain_ns", "tsc2_added_ns", "tsc1_added_ns"):
        assert _sane(fl[k]) and fl[k]["n"] == rounds, k
    assert "clock floor: two inline rdtsc" in quick[1]


def test_quick_instruction_counts_are_exact(quick):
    result = quick[0]
    d = result["drivers"][0]
    if result["method"]["instructions"] is None:
        pytest.skip(f"no instruction counter: {result['method']['instructions_unavailable']}")
    for func, per in d["instructions"].items():
        for v, e in per.items():
            # callgrind counts are deterministic: a whole number of instructions per call.
            # Timing alone has data-dependent paths: a call slower than the maximum so far
            # stores the new maximum, and a call whose fine bucket is new to the thread
            # claims its slot (a few more instructions, and more probes where slots are
            # taken). Under callgrind the calls' lengths vary widely, so some of the 10000
            # calls --quick counts take them: a few hundredths of an instruction per call
            # (with 1000 calls, up to 0.13 was seen).
            assert e["per_call"] > 0, (func, v)
            if v == "time":
                assert abs(e["per_call"] - round(e["per_call"])) < 0.1, (func, v, e)
            else:
                assert float(e["per_call"]).is_integer(), (func, v, e)
        # the shim is really on the path, and counting does more than forwarding
        assert per["shim"]["added"] >= 1, func
        assert per["count"]["added"] > per["shim"]["added"], func


def test_quick_counts_are_exact_with_threads(quick):
    d = quick[0]["drivers"][0]
    by_variant = d["threads"]["by_variant"]
    assert set(by_variant) == set(d["variants"])
    for v, e in by_variant.items():
        assert e["threads"] == 16
        assert e["bad_results"] == 0, v
        assert e["wall_ns_per_call"] > 0, v
        if v in ("count", "time"):
            assert e["exact"] is True and e["calls_counted"] == e["calls_made"], v


def test_quick_startup_and_build(quick):
    d = quick[0]["drivers"][0]
    for prog in ("nop", "call"):
        for k in ("direct_ms", "shim_ms", "added_ms"):
            assert _sane(d["startup"][prog][k]), (prog, k)
    assert _sane(d["build"]["wall_s"]) and d["build"]["wall_s"]["min"] > 0
    assert d["build"]["functions"] > 500
    assert Path(d["shim"]).name == SHIM_LIBRARY


def test_quick_bars(quick):
    """Each bar recomputed here from the run's own numbers: what is measured (the worst
    case), and whether it is met."""
    result = quick[0]
    bars = {b["bar"]: b for b in result["bars"]}
    assert len(bars) == len(result["bars"]) == 6
    drivers = result["drivers"]
    for variant, what, limit in CALL_BARS:
        worst = max(d["calls"][f]["variants"][variant]["added_in_process_ns"]["median"]
                    for d in drivers for f in ("cuDriverGetVersion", "cuCtxGetCurrent"))
        exact = all(d["threads"]["by_variant"][variant].get("exact", True) for d in drivers)
        b = bars[what]
        assert (b["limit"], b["measured"]) == (limit, worst), what
        assert b["met"] is (worst <= limit and exact), what
    start = max(d["startup"][p]["added_ms"]["median"] for d in drivers for p in ("nop", "call"))
    b = bars["process start-up added by the shim"]
    assert (b["measured"], b["met"]) == (start, start <= STARTUP_BAR_MS)
    wall = max(d["build"]["wall_s"]["median"] for d in drivers)
    b = next(b for name, b in bars.items() if name.startswith("shimgen build wall time"))
    assert (b["measured"], b["met"]) == (wall, wall <= BUILD_BAR_S)
    b = bars["PyTorch training step on the H200, shim vs none"]
    assert (b["measured"], b["met"]) == (None, None) and b["detail"].startswith("not measured")


def test_unknown_driver_is_one_error_line(drivers):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--drivers", "1.2.3"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("benchmarks: error: --drivers: no driver 1.2.3")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_pin_to_a_cpu_this_process_may_not_use_is_one_error_line():
    bad = max(os.sched_getaffinity(0)) + 1
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--pin", str(bad)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"benchmarks: error: --pin {bad}: this process may not run "
                                   f"on CPU {bad}")


def test_gpu_option_reports_the_gpu_bar_as_skipped_without_a_gpu(drivers, tmp_path):
    """`--gpu` runs benchmarks/gpu_step.py from the one entry point; with no CUDA GPU
    visible it is reported as skipped, and the GPU bar is n/a with the reason."""
    out = tmp_path / "bench.json"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--drivers", drivers[0].version,
         "--gpu", "small", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert "skipped" in result["gpu_step"]
    bar = [b for b in result["bars"] if b["bar"].startswith("PyTorch training step")]
    assert len(bar) == 1 and bar[0]["met"] is None
    assert bar[0]["detail"] == f"skipped: {result['gpu_step']['skipped']}"
    assert "== PyTorch training step (benchmarks/gpu_step.py) ==" in proc.stdout


def test_summary():
    s = summary([5, 1, 4, 2, 3])
    assert (s["median"], s["min"], s["max"], s["n"]) == (3, 1, 5, 5)
    assert s["p25"] == 2 and s["p75"] == 4
    assert summary([7])["p25"] == summary([7])["p75"] == 7


def _torch_with_cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    probe = "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


def test_gpu_step_skips_politely_without_a_gpu(tmp_path):
    if _torch_with_cuda():
        pytest.skip("a CUDA GPU is here: gpu_step would run for real")
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_step", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("gpu_step: skipped: ")
    assert "skipped" in json.loads(out.read_text())
