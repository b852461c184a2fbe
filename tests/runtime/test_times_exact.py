"""Times a user can trust: a process's times however short its life, and percentiles within
3% of the exact ones, against a FAKE driver (tests/c/fake_errors_libcuda.c) whose
cuFakeSpinNs lasts a chosen number of nanoseconds; the probe (tests/c/errorfake.c) measures
each call with CLOCK_MONOTONIC around it, so the exact values are known. Both outputs are
checked: the shim's own (the JSON trace of SHIMGEN_TRACE_FILE, percentiles computed in C)
and `shimgen report`'s (the binary traces of SHIMGEN_TRACE_DIR, computed in Python). The
JSON trace's fine counts are exact whatever the calls' lengths: per log2 bucket they sum to
its count."""

from __future__ import annotations

import json
import math
import random
import subprocess
from pathlib import Path

import pytest

from shimgen.report.model import merge
from shimgen.shim.pipeline import make_shim
from shimgen.trace import binary as tracefile
from shimgen.trace.model import fine_octave
from tests.runtime.test_timing import clean_env

FN = "cuFakeSpinNs"
QS = (0.5, 0.9, 0.99)


@pytest.fixture(scope="module")
def fake(probes, tmp_path_factory) -> tuple[Path, Path]:
    lib = probes / "libfake_errors_libcuda.so"
    result = make_shim(lib, tmp_path_factory.mktemp("timesfake"), hooks=(), require_real=False)
    return lib, result.library


def run_probe(probes: Path, fake: tuple[Path, Path], env: dict, calls: list[str]) -> list[int]:
    """The calls made under the shim; each cuFakeSpinNs call's length, as measured around
    it."""
    lib, shim = fake
    env = dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_DRIVER=str(lib), SHIMGEN_QUIET="1",
               **env)
    proc = subprocess.run([str(probes / "errorfake"), "libcuda.so.1", *calls], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == (-9 if calls[-1].startswith("kill") else 0), proc.stderr
    return [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("ns ")]


def requested(calls: list[str]) -> list[int]:
    """The length each cuFakeSpinNs call was asked to last: each lasts at least that long,
    and at most as long as the probe measured around it. A call's true length is between
    the two; so is a percentile's (order statistics keep the order), and a report within 3%
    of the truth lies between 0.97 times the one and 1.03 times the other, however the
    machine's load stretched some calls outside the shim's part of them."""
    out = []
    for c in calls:
        kind, v, n = c.split(":")
        if kind == "ns":
            out += [int(v)] * int(n)
    return out


def between(got: float, low: list[int], high: list[int], q: float | None, tol: float) -> bool:
    lo, hi = ((sum(low), sum(high)) if q is None else (exact(low, q), exact(high, q)))
    return (1 - tol) * lo <= got <= (1 + tol) * hi


def exact(values: list[int], q: float) -> float:
    """The nearest-rank q-percentile: the smallest value with at least q of the calls at or
    below it."""
    s = sorted(values)
    return float(s[max(math.ceil(q * len(s)) - 1, 0)])


def from_dir(d: Path) -> tuple[float, float, tuple]:
    """(total_ns, max_ns, (p50, p90, p99)) of FN as `shimgen report` merges the traces."""
    procs = [tracefile.load(p) for p in sorted(d.glob("*.shimtrace"))]
    m = merge(procs)[FN]
    return m.total_ns, m.max_ns, m.percentiles(*QS)


def from_json(path: Path) -> tuple[float, float, tuple]:
    t = json.loads(path.read_text())["time"][FN]
    return t["total_ns"], t["max_ns"], (t["p50_ns"], t["p90_ns"], t["p99_ns"])


def distribution(kind: str) -> list[str]:
    """The probe's arguments: clusters that straddle no percentile's rank, or values spread
    log-uniformly from 8 us to 1.5 ms, in a fixed random order."""
    if kind == "clusters":
        return ["ns:20000:450", "ns:37000:400", "ns:300000:130", "ns:2300000:20"]
    rng = random.Random(20261202)
    return [f"ns:{int(8000 * 190 ** rng.random())}:1" for _ in range(600)]


@pytest.mark.parametrize("kind", ["clusters", "spread"])
@pytest.mark.parametrize("mode", ["time", "timeline"])
@pytest.mark.parametrize("output", ["dir", "json"])
def test_percentiles_are_within_3_percent_of_the_exact_ones(probes, fake, tmp_path, kind, mode,
                                                            output):
    env = {"SHIMGEN_TRACE": mode, "SHIMGEN_TIMELINE_FILE": str(tmp_path / "tl.json")}
    if output == "dir":
        env["SHIMGEN_TRACE_DIR"] = str(tmp_path / "traces")
    else:
        env["SHIMGEN_TRACE_FILE"] = str(tmp_path / "trace.json")
    calls = distribution(kind)
    values = run_probe(probes, fake, env, ["ret:0:3", *calls])
    asked = requested(calls)
    total, mx, got = (from_dir(tmp_path / "traces") if output == "dir"
                      else from_json(tmp_path / "trace.json"))
    for q, p in zip(QS, got, strict=True):
        assert between(p, asked, values, q, 0.03), (q, p, exact(asked, q), exact(values, q))
    assert between(mx, asked, values, 1.0, 0.03), (mx, max(asked), max(values))
    assert between(total, asked, values, None, 0.005), (total, sum(asked), sum(values))


@pytest.mark.parametrize("kind", ["clusters", "spread"])
def test_json_fine_counts_of_each_log2_bucket_sum_to_its_count(probes, fake, tmp_path, kind):
    """Each call is counted once in its log2 bucket and once in a fine bucket of it (the
    table has room for these): in the JSON trace, for every function, the fine counts of
    each log2 bucket sum to its count, however long the calls really took. A block's fine
    slots are folded for their own function and bucket only, each once."""
    path = tmp_path / "trace.json"
    run_probe(probes, fake, {"SHIMGEN_TRACE": "time", "SHIMGEN_TRACE_FILE": str(path)},
              ["ret:0:3", *distribution(kind)])
    times = json.loads(path.read_text())["time"]
    assert FN in times
    for name, t in times.items():
        per_bucket = [0] * len(t["hist"])
        for f, n in t["fine"]:
            per_bucket[fine_octave(f)] += n
        assert per_bucket == t["hist"], (name, per_bucket, t["hist"])


@pytest.mark.parametrize("output", ["dir", "json"])
def test_one_call_reports_its_own_length_at_every_percentile(probes, fake, tmp_path, output):
    """One call of 10.18 ms: p50, p90 and p99 are that call (a log2 histogram said 9.08 ms
    for p50)."""
    env = {"SHIMGEN_TRACE": "time"}
    if output == "dir":
        env["SHIMGEN_TRACE_DIR"] = str(tmp_path / "traces")
    else:
        env["SHIMGEN_TRACE_FILE"] = str(tmp_path / "trace.json")
    (value,) = run_probe(probes, fake, env, ["ret:0:1", "ns:10180000:1"])
    total, mx, got = (from_dir(tmp_path / "traces") if output == "dir"
                      else from_json(tmp_path / "trace.json"))
    for p in (*got, mx, total):
        assert 0.97 * 10180000 <= p <= 1.03 * value, (got, mx, total, value)


@pytest.mark.parametrize("output", ["dir", "json"])
def test_a_short_process_gets_times_within_half_a_percent(probes, fake, tmp_path, output):
    """A process that lives a few milliseconds and never calls cuInit: its times are there
    every time, and their total is within 0.5% of CLOCK_MONOTONIC over the same calls (the
    first call is another function's: the trace's first-call work is not in FN's calls)."""
    for i in range(25):
        d = tmp_path / str(i)
        env = {"SHIMGEN_TRACE": "time"}
        if output == "dir":
            env["SHIMGEN_TRACE_DIR"] = str(d)
        else:
            d.mkdir()
            env["SHIMGEN_TRACE_FILE"] = str(d / "trace.json")
        calls = [f"ns:{200_000 + 1000 * i}:4"]
        values = run_probe(probes, fake, env, ["ret:0:1", *calls])
        total, mx, _ = from_dir(d) if output == "dir" else from_json(d / "trace.json")
        assert total is not None, f"run {i}: no times"
        asked = requested(calls)
        assert between(total, asked, values, None, 0.005), (i, total, sum(asked), sum(values))
        assert between(mx, asked, values, 1.0, 0.005), (i, mx, max(asked), max(values))


def test_a_process_killed_early_gets_times_from_the_reading_made_with_its_file(probes, fake,
                                                                               tmp_path):
    """SIGKILLed after a few calls, with one thread: no exit, no later reading; the pair
    made with the file (before its magic) gives its times, to 0.5%, every time."""
    for i in range(25):
        d = tmp_path / str(i)
        calls = [f"ns:{100_000 + 1000 * i}:3"]
        values = run_probe(probes, fake, {"SHIMGEN_TRACE": "time", "SHIMGEN_TRACE_DIR": str(d)},
                           ["ret:0:1", *calls, "kill:0:0"])
        (f,) = d.glob("*.shimtrace")
        t = tracefile.load(f)
        assert not t.complete and not any("time" in n for n in t.notes), t.notes
        total = t.functions[FN].total_ns
        assert total is not None, f"run {i}: no times"
        assert between(total, requested(calls), values, None, 0.005), (i, total, values)


def test_the_json_trace_reader_takes_the_fine_buckets(probes, fake, tmp_path):
    """`shimgen report` of the shim's JSON trace gives the shim's own percentiles (which come
    from the fine buckets), not the log2 histogram's."""
    from shimgen.trace import jsonfile as tracejson

    env = {"SHIMGEN_TRACE": "time", "SHIMGEN_TRACE_FILE": str(tmp_path / "trace.json")}
    run_probe(probes, fake, env, ["ret:0:1", *distribution("clusters")])
    _, _, shim = from_json(tmp_path / "trace.json")
    m = merge([tracejson.load(tmp_path / "trace.json")])[FN]
    for a, b in zip(m.percentiles(*QS), shim, strict=True):
        assert abs(a - b) <= 1.0 + 1e-6 * b, (a, b)
