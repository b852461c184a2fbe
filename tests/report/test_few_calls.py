"""The numbers a user reads first, made by the shim's own table at exit (runtime/stats/trace.c,
stats/quantiles.c) and by `shimgen report` of the same calls: a function called once shows its one
time in every column (mean, p50, p90, p99, max), one called twice its two exact times, every
percentile within [min, max], the mean in whole nanoseconds as the other columns; the error
returns in one column order in both (function, code, name, count). A real Debian driver, no
GPU: cuInit(0) returns CUDA_ERROR_NO_DEVICE."""

from __future__ import annotations

import sys

from shimgen import cli
from tests.faultkit import run

# cuInit twice: two calls of tens of milliseconds, whose fine buckets are wide enough that an
# interpolated percentile lies ticks away from either call (two fast calls can share a bucket
# a few ticks wide, where interpolating and the exact times round to the same nanoseconds)
CALLS = ("import ctypes; c = ctypes.CDLL('libcuda.so.1'); c.cuInit(0); c.cuInit(0); "
         "v = ctypes.c_int(); c.cuDriverGetVersion(ctypes.byref(v))")
ERRORS_HEAD = ["function", "code", "name", "count"]


def rows(lines: list[str], first: str) -> dict[str, list[str]]:
    """The table that starts with the header line holding `first`: its rows by function."""
    start = next(i for i, ln in enumerate(lines) if first in ln)
    out = {}
    for ln in lines[start + 1:]:
        w = ln.split()
        if not w or not w[0][0].isdigit():
            break
        out[w[-1] if w[-1].startswith("cu") else w[-2]] = w
    return out


def check_times(calls: int, mean: str, p50: str, p90: str, p99: str, top: str) -> None:
    for v in (mean, p50, p90, p99, top):
        assert v.isdigit(), (mean, p50, p90, p99, top)  # whole nanoseconds, as max
    mean_, p50_, p90_, p99_, top_ = map(int, (mean, p50, p90, p99, top))
    if calls == 1:
        assert mean_ == p50_ == p90_ == p99_ == top_
    else:  # two calls: the smaller one, then the larger (the maximum) twice
        assert p90_ == p99_ == top_ and p50_ <= top_
        assert abs((p50_ + top_) - 2 * mean_) <= 2, (mean, p50, top)


def test_the_shims_table(shims):
    proc = run([sys.executable, "-c", CALLS], shims[0].env(SHIMGEN_TRACE="time"))
    lines = proc.stderr.splitlines()
    table = rows(lines, "mean ns")
    # calls, total ms, mean, p50, p90, p99, max, function
    assert table["cuInit"][0] == "2" and table["cuDriverGetVersion"][0] == "1", lines
    for name in ("cuInit", "cuDriverGetVersion"):
        w = table[name]
        check_times(int(w[0]), *w[2:7])
    i = next(i for i, ln in enumerate(lines) if ln.startswith("shimgen errors returned"))
    assert lines[i + 1].split() == ERRORS_HEAD, lines
    assert lines[i + 2].split() == ["cuInit", "100", "CUDA_ERROR_NO_DEVICE", "2"], lines


def test_the_report(shims, tmp_path, capsys):
    d = tmp_path / "traces"
    run([sys.executable, "-c", CALLS],
        shims[0].env(SHIMGEN_TRACE="time", SHIMGEN_TRACE_DIR=str(d)))
    assert cli.main(["report", *map(str, d.iterdir())]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = rows(lines, "mean ns")
    # time %, total ms, calls, mean, p50, p90, p99, max, errors, function
    for name, calls in (("cuInit", 2), ("cuDriverGetVersion", 1)):
        w = table[name]
        assert w[2] == str(calls), w
        check_times(calls, *w[3:8])
    i = lines.index("errors (non-success returns):")
    assert lines[i + 1].split() == ERRORS_HEAD, lines
    assert lines[i + 2].split() == ["cuInit", "100", "CUDA_ERROR_NO_DEVICE", "2"], lines


def test_bounded_percentiles_of_few_and_many_calls():
    from shimgen.report.model import bounded_percentiles

    qs = (0.5, 0.9, 0.99)
    one = [(512.0, 700.0, 1)]  # the call's bucket, its top edge lowered to the max, 700
    assert bounded_percentiles(one, qs, 1, 700.0, 700.0) == (700.0, 700.0, 700.0)
    two = [(100.0, 128.0, 1), (512.0, 700.0, 1)]
    assert bounded_percentiles(two, qs, 2, 820.0, 700.0) == (120.0, 700.0, 700.0)
    # three calls of 690, 695 and 700: none can be below 2085 - 2 * 700 = 685, whatever the
    # bucket's lower edge
    three = [(512.0, 700.0, 3)]
    p = bounded_percentiles(three, qs, 3, 2085.0, 700.0)
    assert all(685.0 <= x <= 700.0 for x in p), p
