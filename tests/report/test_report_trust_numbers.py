"""`shimgen report` never trusts a number or a name of a JSON trace blindly: each value out of
its range (past uint64, not finite, too long to convert, a histogram longer than the shim's,
a name that is not text) is one line naming the file and the key, exit 1, through the real
command line; times that each fit but add up past the range of a float are refused the same
way; the JSON printed is always valid JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.errors import ShimgenError
from shimgen.report.format import render
from shimgen.report.model import groups
from shimgen.report.output import dump_json
from shimgen.report.source import Source
from shimgen.trace.model import HIST_BUCKETS, FunctionStats, ProcessTrace

ROOT = Path(__file__).resolve().parents[2]
U64 = 2**64 - 1


def trace(pid: int = 5, total: float = 30.0) -> dict:
    return {"shimgen": "0.1", "driver": "/usr/lib/libcuda.so.1", "driver_version": "555.58.02",
            "pid": pid, "mode": "time", "rank": None, "ns_per_tick": 1.0, "untimed_calls": 0,
            "unmapped_proc_addresses": 0, "calls": {"cuInit": 3},
            "errors": {"cuInit": {"100": 1}}, "error_overflow": 0,
            "time": {"cuInit": {"calls": 3, "total_ns": total, "mean_ns": total / 3,
                                "max_ns": 12, "hist": [0, 0, 0, 3]}}}


def shimgen(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shimgen", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def refused(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("shimgen: error: ")
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    return proc.stderr


def _set(data: dict, key: str, value) -> None:
    *parents, last = key.split("/")
    for k in parents:
        data = data[k]
    data[last] = value


# (what is changed, to what, the key the refusal must name). A value given as a str is put
# into the file's text as it is (JSON that json.dumps would not write).
BAD_VALUES = {
    "count-past-uint64": ("calls/cuInit", 2**64, "calls.cuInit"),
    "count-of-5000-digits": ("calls/cuInit", "9" * 5000, "calls.cuInit"),
    "time-1e400": ("time/cuInit/total_ns", "1e400", "time.cuInit.total_ns"),
    "time-an-int-past-float": ("time/cuInit/total_ns", "9" * 400, "time.cuInit.total_ns"),
    "time-nan": ("time/cuInit/max_ns", "NaN", "time.cuInit.max_ns"),
    "time-negative": ("time/cuInit/max_ns", -1.0, "time.cuInit.max_ns"),
    "hist-huge": ("time/cuInit/hist", [1] * 100_000, "time.cuInit.hist"),
    "hist-one-too-long": ("time/cuInit/hist", [0] * HIST_BUCKETS + [3], "time.cuInit.hist"),
    "hist-count-past-uint64": ("time/cuInit/hist", [0, 0, 0, 2**64], "time.cuInit.hist"),
    "error-count-past-uint64": ("errors/cuInit/100", 2**64, "errors.cuInit.100"),
    # impossible numbers: more failures than calls, or a success listed as a failure
    "injected-above-calls": ("injected", {"cuInit": {"1": 1000}}, "injected.cuInit"),
    "failures-2**64-1-of-3-calls": ("errors/cuInit/100", U64, "errors.cuInit"),
    "injected-and-errors-above-calls": ("injected", {"cuInit": {"2": 3}}, "injected.cuInit"),
    "injected-success": ("injected", {"cuInit": {"0": 1}}, "injected.cuInit.0"),
    "error-success": ("errors/cuInit", {"0": 1}, "errors.cuInit.0"),
    "pid-past-pid_t": ("pid", 2**40, "pid"),
    "untimed-of-5000-digits": ("untimed_calls", "1" * 5000, "untimed_calls"),
    "ns-per-tick-1e300": ("ns_per_tick", 1e300, "ns_per_tick"),
    "rank-lone-surrogate": ("rank", '"r\\ud800"', "rank"),
    "driver-version-control-character": ("driver_version", "555\x1b[2J", "driver_version"),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_a_value_out_of_range_is_one_line_naming_the_file_and_key(tmp_path, case):
    key, value, named = BAD_VALUES[case]
    data = trace()
    if isinstance(value, str) and case != "driver-version-control-character":
        _set(data, key, "@@")
        text = json.dumps(data).replace('"@@"', value)
    else:
        _set(data, key, value)
        text = json.dumps(data)
    path = tmp_path / "trace.json"
    path.write_text(text)
    err = refused(shimgen("report", path))
    assert f"{path}: " in err and f" {named} " in err, err
    # the same inside a run directory: that file is named, the run still reported
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / "traces" / "trace.5.json").write_text(text)
    (run / "traces" / "trace.6.json").write_text(json.dumps(trace(6)))
    proc = shimgen("report", "--json", run)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    data = json.loads(proc.stdout)
    assert [u["file"] for u in data["unreadable"]] == [str(run / "traces" / "trace.5.json")]
    assert f" {named} " in data["unreadable"][0]["reason"]
    assert data["groups"][0]["processes"] == 1


@pytest.mark.parametrize("name", ["cu\\ud800Init", "cu\\u001bInit", "", "c" * 300])
def test_a_function_name_that_is_not_a_name_is_refused(tmp_path, name):
    data = trace()
    data["calls"] = {"@@": 3}
    data["time"] = {"@@": data["time"]["cuInit"]}
    data["errors"] = {}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(data).replace('"@@"', f'"{name}"'))
    err = refused(shimgen("report", path))
    assert f"{path}: not a valid shimgen trace: calls: " in err and "function's name" in err


@pytest.mark.parametrize("code", ["01", " 1", "1_0", "-1", "4294967296", "\\u0661"])
def test_an_error_code_is_as_the_shim_writes_it(tmp_path, code):
    data = trace()
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(data).replace('{"100": 1}', f'{{"{code}": 1}}'))
    assert "errors.cuInit: " in refused(shimgen("report", path))


@pytest.mark.parametrize("fmt", ["text", "--json", "--csv"])
def test_times_that_add_up_past_a_float_are_one_line(tmp_path, fmt):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(trace(5, total=1.7e308)))
    b.write_text(json.dumps(trace(6, total=1.7e308)))
    err = refused(shimgen("report", *([] if fmt == "text" else [fmt]), a, b))
    assert "cuInit: " in err and f"{a}" in err and "too large" in err
    # two run directories compared: the same
    for d, t in (("ra", a), ("rb", b)):
        (tmp_path / d).mkdir()
        (tmp_path / d / "trace.json").write_text(t.read_text())
    (tmp_path / "ra" / "trace.6.json").write_text(b.read_text())
    assert "cuInit: " in refused(shimgen("report", tmp_path / "ra", tmp_path / "rb"))


def test_json_output_is_always_valid_json(tmp_path):
    """Large times that still add up are printed as numbers JSON has, never Infinity."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(trace(5, total=1e307)))
    b.write_text(json.dumps(trace(6, total=1e307)))
    proc = shimgen("report", "--json", a, b)
    assert proc.returncode == 0, proc.stderr

    def no_constant(name):
        raise AssertionError(f"{name} in the JSON")

    data = json.loads(proc.stdout, parse_constant=no_constant)
    assert data["groups"][0]["functions"][0]["total_ns"] == pytest.approx(2e307)
    assert "inf" not in shimgen("report", a, b).stdout


def test_percentiles_that_are_not_finite_are_refused_not_printed():
    """A trace put together by a reader with a tick out of range: its histogram's edges are
    past the range of a float. The report refuses it rather than print inf or nan."""
    hist = [0] * HIST_BUCKETS
    hist[HIST_BUCKETS - 1] = 3
    p = ProcessTrace(path="x", source="shimtrace", pid=5, rank=None, mode="time",
                     complete=True, ns_per_tick=1e300,
                     functions={"cuInit": FunctionStats(calls=3, total_ns=1.0, hist=hist)})
    for fmt in ("text", "json", "csv"):
        with pytest.raises(ShimgenError, match="^report: cuInit: its p50 is (inf|nan): "):
            render([Source(Path("x"), False, [p])], groups([p], None), None, fmt)


def test_json_is_dumped_without_infinity_and_text_without_lone_surrogates():
    """The last guards: a number that is not finite is refused rather than written as
    Infinity, and text a reader decoded with surrogateescape (a binary trace's rank) is
    printed escaped rather than failing to print."""
    with pytest.raises(ShimgenError, match="^report: a number to write is not finite"):
        dump_json({"total_ns": float("inf")})
    p = ProcessTrace(path="x", source="shimtrace", pid=5, rank="r\udcff", mode="counts",
                     complete=True, functions={"cuInit": FunctionStats(calls=3)})
    for fmt in ("text", "csv"):
        out = render([Source(Path("x"), False, [p])], groups([p], "rank"), "rank", fmt)
        assert "r\\udcff" in out and out.encode("utf-8")
