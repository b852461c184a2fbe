"""`shimgen report`: real JSON traces written by shims of the Debian drivers (CPU only), and
made-up processes (tracemodel.ProcessTrace, put on disk as the shim's extended JSON) for
merges, --by, percentiles computed by hand, the JSON and CSV schemas, the order of a
comparison, and refusals (one line on stderr, exit 1, nothing on stdout)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.report_speed import json_trace
from shimgen.cli import main
from shimgen.report.format import CSV_COLUMNS, SCHEMA, SCHEMA_VERSION, render
from shimgen.report.main import summary_for_run
from shimgen.report.model import (
    groups,
    hist_segments,
    merge,
    merged_segments,
    percentile,
    percentiles,
)
from shimgen.report.source import Source
from shimgen.trace.model import HIST_BUCKETS, FunctionStats, ProcessTrace
from tests.faultkit import run, shim_for

# ---- helpers ---------------------------------------------------------------------------

def hist(buckets: dict[int, int]) -> list[int]:
    h = [0] * HIST_BUCKETS
    for b, c in buckets.items():
        h[b] = c
    return h


def fn(calls: int, *, total: float | None = None, most: float | None = None,
       buckets: dict[int, int] | None = None, errors: dict[int, int] | None = None):
    return FunctionStats(calls=calls, total_ns=total, max_ns=most,
                         hist=hist(buckets) if buckets else None, errors=dict(errors or {}))


def proc(pid: int, functions: dict[str, FunctionStats], *, rank: str | None = None,
         mode: str = "time", npt: float | None = 1.0, complete: bool = True,
         driver: str = "555.58.02") -> ProcessTrace:
    return ProcessTrace(path=f"p{pid}", source="json", pid=pid, rank=rank, mode=mode,
                        complete=complete, shimgen_version="0.1", driver_version=driver,
                        ns_per_tick=npt if mode != "counts" else None, functions=functions)


def write_run(directory: Path, procs: list[ProcessTrace], metadata: dict | None = None) -> Path:
    traces = directory / "traces"
    traces.mkdir(parents=True)
    for p in procs:
        (traces / f"trace.{p.pid}.json").write_text(json.dumps(json_trace(p), indent=2))
    if metadata is not None:
        (directory / "run.json").write_text(json.dumps(metadata))
    return directory


def cli(capsys, *args) -> tuple[int, str, str]:
    rc = main(["report", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def ok(capsys, *args) -> str:
    rc, out, err = cli(capsys, *args)
    assert rc == 0 and err == "", err
    return out


def report_json(capsys, *args) -> dict:
    data = json.loads(ok(capsys, "--json", *args))
    assert data["schema"] == SCHEMA and data["version"] == SCHEMA_VERSION
    return data


def rows_by_function(group: dict) -> dict[str, dict]:
    return {r["function"]: r for r in group["functions"]}


# ---- percentiles from the log2 histograms, by hand ----------------------------------------

def test_percentile_of_one_process_interpolates_within_the_bucket():
    # 6 calls in bucket 4 ([16, 32) ns) and 4 in bucket 5 ([32, 64), capped at max 60).
    seg = hist_segments(hist({4: 6, 5: 4}), 1.0, 60.0)
    assert seg == [(16.0, 32.0, 6), (32.0, 60.0, 4)]
    assert percentile(seg, 0.5) == pytest.approx(16 + 16 * 5 / 6)  # rank 5 of 6 in bucket 4
    assert percentile(seg, 0.99) == pytest.approx(32 + 28 * 3.9 / 4)  # rank 3.9 of 4
    assert percentile(seg, 0.6) == pytest.approx(32.0)  # exactly the end of bucket 4
    # Bucket 0 holds 0 or 1 tick: [0, 2) ticks, here capped at max 1 ns.
    assert percentile(hist_segments(hist({0: 2}), 1.0, 1.0), 0.5) == pytest.approx(0.5)
    # ns_per_tick 0.5: bucket 3 is [8, 16) ticks = [4, 8) ns, capped at max 7.5.
    assert percentile(hist_segments(hist({3: 10}), 0.5, 7.5), 0.5) == pytest.approx(5.75)
    # The top bucket's edge is never lowered below its lower edge (a point at 16).
    assert percentile(hist_segments(hist({4: 3}), 1.0, 10.0), 0.99) == pytest.approx(16.0)


def test_percentiles_of_processes_with_different_ticks_merge_by_ns_edges():
    a = (1.0, hist({4: 10}), 32.0)  # [16, 32) ns
    b = (4.0, hist({3: 10}), 64.0)  # 8..16 ticks of 4 ns: [32, 64) ns
    seg = merged_segments([a, b])
    assert percentiles(seg, (0.25, 0.5, 0.75)) == pytest.approx((24.0, 32.0, 48.0))
    # The same bucket range from two processes of the same tick adds up.
    c = (1.0, hist({4: 10, 6: 10}), 100.0)
    d = (1.0, hist({4: 30, 5: 10}), 50.0)
    # 40 calls in [16, 32), 10 in [32, 50), 10 in [64, 100): p50 = rank 30 of 60 -> bucket 4.
    seg = merged_segments([c, d])
    assert percentile(seg, 0.5) == pytest.approx(16 + 16 * 30 / 40)
    assert percentile(seg, 0.75) == pytest.approx(32 + 18 * 5 / 10)
    assert percentile(seg, 1.0) == pytest.approx(100.0)
    # Overlapping ranges: [16, 31) ns (max 31) and, at 1.5 ns a tick, [24, 47) ns (max 47),
    # 10 calls each. Below 24: 8 ns of the first's 10/15 calls per ns; from 24 both add up.
    seg = merged_segments([(1.0, hist({4: 10}), 31.0), (1.5, hist({4: 10}), 47.0)])
    assert percentile(seg, 0.5) == pytest.approx(24 + (10 - 8 * 10 / 15) / (10 / 15 + 10 / 23))
    assert percentile(seg, 1.0) == pytest.approx(47.0)


def test_percentiles_need_every_call_in_a_histogram():
    timed = proc(1, {"cuInit": fn(10, total=100, most=20, buckets={3: 10})})
    untimed_hist = proc(2, {"cuInit": fn(5, total=50, most=20)})
    m = merge([timed, untimed_hist])["cuInit"]
    assert m.percentiles(0.5, 0.99) == (None, None)
    assert merge([timed])["cuInit"].percentiles(0.5)[0] == pytest.approx(12.0)


# ---- merging, groups, the table ----------------------------------------------------------

def three_processes() -> list[ProcessTrace]:
    return [
        proc(11, {"cuInit": fn(1, total=1000, most=1000, buckets={9: 1}),
                  "cuMemAlloc_v2": fn(2, total=60, most=40, buckets={4: 1, 5: 1},
                                      errors={2: 1})}, rank="0"),
        proc(12, {"cuInit": fn(2, total=2500, most=1500, buckets={9: 1, 10: 1})}, rank="1"),
        proc(13, {"cuInit": fn(4, total=4000, most=1200, buckets={9: 4}),
                  "cuMemAlloc_v2": fn(8, total=300, most=70, buckets={5: 8},
                                      errors={2: 3, 1: 1})}, rank="1"),
    ]


def test_merge_counts_every_process(tmp_path, capsys):
    d = write_run(tmp_path / "run", three_processes())
    g = report_json(capsys, d)["groups"]
    assert len(g) == 1 and g[0]["processes"] == 3 and g[0]["complete"] == 3
    rows = rows_by_function(g[0])
    assert rows["cuInit"]["calls"] == 7 and rows["cuInit"]["total_ns"] == 7500
    assert rows["cuInit"]["max_ns"] == 1500 and rows["cuInit"]["mean_ns"] == pytest.approx(7500 / 7)
    assert rows["cuMemAlloc_v2"]["calls"] == 10 and rows["cuMemAlloc_v2"]["errors"] == 5
    # cuInit's 7 calls, bucket 9 = [512, 1024) ns: pid 11's one call capped at its max 1000,
    # pid 12's one below its top bucket and pid 13's four (max 1200 is above the bucket).
    # Rank 3.5 falls in [512, 1000), where the density is 1/488 + 5/512 calls per ns.
    assert rows["cuInit"]["p50_ns"] == pytest.approx(512 + 3.5 / (1 / 488 + 5 / 512))
    assert rows["cuInit"]["p99_ns"] <= 1500
    assert g[0]["ranks"] == ["0", "1"]
    assert [r["function"] for r in g[0]["functions"]] == ["cuInit", "cuMemAlloc_v2"]  # by time


def test_by_rank_and_by_pid_split_the_processes(tmp_path, capsys):
    procs = three_processes() + [proc(14, {"cuInit": fn(16, total=1, most=1)})]
    d = write_run(tmp_path / "run", procs)
    by_rank = report_json(capsys, "--by", "rank", d)
    assert by_rank["by"] == "rank"
    calls = {g["group"]: rows_by_function(g)["cuInit"]["calls"] for g in by_rank["groups"]}
    assert calls == {"0": 1, "1": 6, "-": 16}
    by_pid = report_json(capsys, "--by", "pid", d)
    calls = {g["group"]: rows_by_function(g)["cuInit"]["calls"] for g in by_pid["groups"]}
    assert calls == {"11": 1, "12": 2, "13": 4, "14": 16}
    text = ok(capsys, "--by", "rank", d)
    assert text.count("== rank ") == 2 and "== rank 1 ==" in text
    assert "== no rank: the processes the launcher gave none ==" in text.splitlines(), text


def test_by_pid_heads_each_process_with_its_command_and_by_rank_says_there_are_none(
        tmp_path, capsys):
    """`--by pid`: the process `shimgen run` started is headed with the run's command (a
    process running here, with its own command line: tests/run/test_inflight.py); `--by
    rank` on a run whose processes have no rank says so in one line."""
    one = {"cuInit": fn(1, total=1000, most=1000, buckets={9: 1})}
    procs = [proc(11, dict(one)), proc(12, dict(one))]
    d = write_run(tmp_path / "run", procs, {"command": ["python3", "train.py", "--lr", "0.1"],
                                            "pid": 11})
    heads = [ln for ln in ok(capsys, "--by", "pid", d).splitlines() if ln.startswith("==")]
    assert heads == ["== pid 11: python3 train.py --lr 0.1 ==",
                     "== pid 12 (its command line is not recorded) =="], heads
    heads = [ln for ln in ok(capsys, "--by", "rank", d).splitlines() if ln.startswith("==")]
    assert heads == ["== no rank: no process of this run has one (the launcher set none of "
                     "RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID, "
                     "LOCAL_RANK) =="], heads


def test_csv_has_a_header_and_one_row_per_group_and_function(tmp_path, capsys):
    procs = three_processes() + [proc(14, {"cuCtxSynchronize": fn(3)}, mode="counts")]
    d = write_run(tmp_path / "run", procs)
    rows = list(csv.reader(io.StringIO(ok(capsys, "--csv", "--by", "pid", d))))
    assert tuple(rows[0]) == CSV_COLUMNS
    keyed = {(r[1], r[2]): dict(zip(CSV_COLUMNS, r, strict=True)) for r in rows[1:]}
    assert len(rows) == 1 + 6 and len(keyed) == 6
    assert keyed[("13", "cuMemAlloc_v2")]["errors"] == "4"
    assert keyed[("14", "cuCtxSynchronize")]["total_ns"] == ""  # counts only: no time
    assert keyed[("14", "cuCtxSynchronize")]["calls"] == "3"
    merged = list(csv.reader(io.StringIO(ok(capsys, "--csv", d))))
    assert [r[:3] for r in merged[1:]] == [["all", "all", "cuInit"],
                                           ["all", "all", "cuMemAlloc_v2"],
                                           ["all", "all", "cuCtxSynchronize"]]


def test_json_schema(tmp_path, capsys):
    d = write_run(tmp_path / "run", three_processes(),
                  {"command": ["torchrun", "train.py"], "start": "s", "end": "e",
                   "exit": {"status": 3, "code": 3, "signal": None, "signal_name": None}})
    data = report_json(capsys, d)
    assert data["sources"] == [{"path": str(d), "run": True, "inject": [], "budget": None,
                                "command": "torchrun train.py", "exit_status": 3,
                                "signal": None, "error": None, "start": "s", "end": "e",
                                "ignored": []}]
    g = data["groups"][0]
    assert set(g) == {"group", "processes", "complete", "died", "calls_missing", "execs",
                      "traces", "ranks", "driver_versions", "modes", "untimed_calls",
                      "unmapped_proc_addresses",
                      "errors_overflow", "notes", "functions", "errors", "injected",
                      "running", "in_flight", "in_flight_unknown", "memory", "kernels",
                      "gpu_time", "collectives"}
    assert g["memory"] is None  # no trace with a memory ledger (tests/run/test_memory.py)
    assert g["kernels"] is None and g["collectives"] == []  # (tests/runtime/test_kernels.py)
    assert g["gpu_time"] is None  # (tests/runtime/test_gputime.py)
    assert set(g["functions"][0]) == {"function", "calls", "total_ns", "mean_ns", "p50_ns",
                                      "p90_ns", "p99_ns", "max_ns", "errors", "injected"}
    assert g["errors"][0] == {"function": "cuMemAlloc_v2", "code": 2,
                              "name": "CUDA_ERROR_OUT_OF_MEMORY", "count": 4}


def test_errors_section_names_every_code(tmp_path, capsys):
    d = write_run(tmp_path / "run", three_processes())
    text = ok(capsys, d)
    err = text[text.index("errors (non-success returns):"):].splitlines()
    assert len(err) == 2 + 2
    assert err[2].split() == ["cuMemAlloc_v2", "2", "CUDA_ERROR_OUT_OF_MEMORY", "4"]
    assert err[3].split() == ["cuMemAlloc_v2", "1", "CUDA_ERROR_INVALID_VALUE", "1"]
    rows = report_json(capsys, d)["groups"][0]["errors"]
    assert [(r["code"], r["count"]) for r in rows] == [(2, 4), (1, 1)]


def test_table_header_and_counts_only_dashes(tmp_path, capsys):
    procs = [proc(21, {"cuInit": fn(5)}, mode="counts", rank="0"),
             proc(22, {"cuInit": fn(7)}, mode="counts", rank="1", driver="535.261.03")]
    d = write_run(tmp_path / "run", procs, {"command": ["./app", "x y"], "exit": {"status": 0}})
    text = ok(capsys, d)
    assert "command    ./app 'x y' (exit status 0)" in text
    assert "processes  2, ranks 0, 1: 2 complete" in text
    assert ("driver     warning: the processes loaded different drivers: 535.261.03 "
            "(1 process), 555.58.02 (1 process)") in text
    row = next(ln for ln in text.splitlines() if ln.endswith(" cuInit"))
    assert row.split() == ["-", "-", "12", "-", "-", "-", "-", "-", "-", "cuInit"]
    assert "errors: not recorded in these traces" in text


@pytest.mark.parametrize("end,said", [
    ({"status": 0, "code": 0, "signal": None, "signal_name": None}, "(exit status 0)"),
    ({"status": 137, "code": None, "signal": 9, "signal_name": "SIGKILL"},
     "(killed by SIGKILL, exit status 137)"),
    ({"error": "cannot run ./x: no such file", "status": 127},
     "(it did not start: cannot run ./x: no such file; exit status 127)"),
    (None, "(no exit status recorded (still running, or shimgen run was stopped))"),
])
def test_run_header_says_how_the_command_ended(tmp_path, capsys, end, said):
    d = write_run(tmp_path / "run", three_processes(), {"command": ["./x", "-v"], "exit": end})
    assert f"command    ./x -v {said}\n" in ok(capsys, d)


def test_notes_of_the_readers_are_shown():
    procs = three_processes()
    procs[0].notes.append("no times: the tick rate was never measured")
    procs[2].notes.append("no times: the tick rate was never measured")
    text = render([Source(Path("r"), True, procs)], groups(procs, None), None, "text")
    assert "note       no times: the tick rate was never measured (2 processes)" in text
    assert "traced both ways" not in text
    procs[1].pid, procs[1].source = procs[0].pid, "shimtrace"
    text = render([Source(Path("r"), True, procs)], groups(procs, None), None, "text")
    assert "its calls count twice): pid 11\n" in text


def test_a_process_that_died_says_so():
    procs = three_processes()
    procs[1].complete = False
    text = render([Source(Path("runs/x"), True, procs)], groups(procs, None), None, "text")
    assert ("processes  3, ranks 0, 1: 2 complete, 1 died (counts exact up to its last call)"
            in text)
    assert "died       pid 12 rank 1" in text
    from shimgen.report import compare as report_compare

    both = report_compare.render(Source(Path("a"), True, procs), Source(Path("b"), True, []),
                                 "text")
    assert "A  a: 3 processes (1 died: counts exact up to its last call)" in both


def test_directory_reads_traces_and_skips_other_json_by_content(tmp_path, capsys):
    d = write_run(tmp_path / "run", three_processes()[:2], {"command": "x", "exit": {"status": 0}})
    (d / "traces" / "timeline.1.json").write_text('{"displayTimeUnit": "ns", '
                                                  '"otherData": {"shimgen": "0.1"}}')
    (d / "other.json").write_text('{"shimgen": "0.1", "something": "else"}')
    (d / "trace.13.json").write_text(json.dumps(json_trace(three_processes()[2])))
    (d / "traces" / ".trace.json.shimgen-5-0.tmp").write_text("{")
    g = report_json(capsys, d)["groups"][0]
    assert g["processes"] == 3


def test_summary_for_run(tmp_path):
    d = write_run(tmp_path / "run", three_processes(), {"command": ["a"], "exit": {"status": 0}})
    text = summary_for_run(d)
    assert "processes  3" in text and "cuMemAlloc_v2" in text
    empty = tmp_path / "quiet"
    empty.mkdir()
    (empty / "run.json").write_text('{"command": ["true"], "exit": {"status": 0}}')
    assert "no process made a traced driver call" in summary_for_run(empty)


# ---- two runs compared -------------------------------------------------------------------

def test_compare_orders_errors_then_calls_then_time(tmp_path, capsys):
    a = [proc(1, {"cuErr": fn(10, total=10, most=1, errors={801: 1}),
                  "cuCalls": fn(100, total=10, most=1),
                  "cuTime": fn(5, total=10, most=5),
                  "cuSame": fn(5, total=10, most=5),
                  "cuGone": fn(3, total=10, most=5)})]
    b = [proc(2, {"cuErr": fn(10, total=10, most=1, errors={801: 2, 1: 1}),
                  "cuCalls": fn(300, total=10, most=1),
                  "cuTime": fn(5, total=9_000_000, most=5),
                  "cuSame": fn(5, total=10, most=5),
                  "cuNew": fn(50, total=10, most=5)})]
    da, db = write_run(tmp_path / "a", a), write_run(tmp_path / "b", b)
    data = json.loads(ok(capsys, "--json", da, db))
    order = [(r["function"], r["status"]) for r in data["functions"]]
    assert order == [("cuErr", ""), ("cuCalls", ""), ("cuNew", "new"), ("cuGone", "gone"),
                     ("cuTime", ""), ("cuSame", "")]
    errs = [(r["code"], r["count_a"], r["count_b"], r["status"]) for r in data["errors"]]
    assert errs == [(1, 0, 1, "new"), (801, 1, 2, "")]
    text = ok(capsys, da, db)
    assert "cuNew  (new in B)" in text and "cuGone  (gone from B)" in text
    rows = list(csv.reader(io.StringIO(ok(capsys, "--csv", da, db))))
    assert rows[1][:4] == ["cuErr", "", "10", "10"]


# ---- refusals ----------------------------------------------------------------------------

def _refusal_cases(tmp: Path) -> dict[str, list]:
    good = write_run(tmp / "good", three_processes())
    good2 = write_run(tmp / "good2", three_processes())
    (tmp / "empty").mkdir()
    (tmp / "other.json").write_text('{"a": 1}')
    whole = json.dumps(json_trace(three_processes()[0]), indent=2)
    (tmp / "cut.json").write_text(whole[: len(whole) // 2])
    (tmp / "garbage.json").write_bytes(b"\x7fELF\x00\xff\xfe")
    bad = json_trace(three_processes()[0])
    bad["time"]["cuInit"]["hist"] = [1, -1]
    (tmp / "badhist.json").write_text(json.dumps(bad))
    (tmp / "x.shimtrace").write_bytes(b"not a trace at all")
    (tmp / "notes.txt").write_text("hello")
    os.mkfifo(tmp / "fifo.json")
    return {
        "not-a-trace": [tmp / "other.json"], "truncated": [tmp / "cut.json"],
        "binary": [tmp / "garbage.json"],
        "bad-histogram": [tmp / "badhist.json"], "empty-dir": [tmp / "empty"],
        "missing": [tmp / "nothing"], "unknown-suffix": [tmp / "notes.txt"],
        "binary-trace-garbage": [tmp / "x.shimtrace"],
        "dir-and-file": [good, tmp / "cut.json"], "three-dirs": [good, good2, tmp / "empty"],
        "by-with-compare": ["--by", "rank", good, good2], "fifo": [tmp / "fifo.json"],
        "device": ["/dev/zero"], "named-twice": [tmp / "cut.json", tmp / "." / "cut.json"],
    }


REFUSALS = ("not-a-trace", "truncated", "binary", "bad-histogram",
            "empty-dir", "missing", "unknown-suffix", "binary-trace-garbage", "dir-and-file",
            "three-dirs", "by-with-compare", "fifo", "device", "named-twice")


@pytest.mark.parametrize("case", REFUSALS)
def test_refused_with_one_line(tmp_path, capsys, case):
    rc, out, err = cli(capsys, *_refusal_cases(tmp_path)[case])
    assert rc == 1 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("shimgen: error: "), err
    assert "Traceback" not in err and "internal error" not in err


def test_report_imports_no_heavy_modules(tmp_path):
    """A report of a thousand processes must start fast: no pyelftools, no Jinja2."""
    d = write_run(tmp_path / "run", three_processes())
    code = ("import sys; from shimgen.cli import main; rc = main(['report', sys.argv[1]]); "
            "heavy = [m for m in ('elftools', 'jinja2', 'capstone', 'unicorn') "
            "if m in sys.modules]; print('heavy', heavy, 'rc', rc)")
    out = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True)
    assert out.stdout.splitlines()[-1] == "heavy [] rc 0", out.stdout + out.stderr


# ---- real traces from shims of the Debian drivers ----------------------------------------

@pytest.mark.parametrize("name", ["trace.%p.json", "trace.json"])
def test_real_traces_of_a_forking_program_are_merged(shims, probes, tmp_path, capsys, name):
    """Each process's JSON trace, named with its pid, or (without %p) the first process's
    `trace.json` and every other's `trace.json.<pid>`."""
    s = shim_for(shims, "555.58.02")
    d = tmp_path / "run"
    (d / "traces").mkdir(parents=True)
    run([probes / "faults_calls", "forkexec", "4", "5"],
        s.env(SHIMGEN_TRACE="time", SHIMGEN_TRACE_FILE=str(d / "traces" / name)))
    assert len(list((d / "traces").iterdir())) == 5
    g = report_json(capsys, d)["groups"][0]
    assert g["processes"] == 5 and g["modes"] == ["time"]
    row = rows_by_function(g)["cuDriverGetVersion"]
    assert row["calls"] == 5 + 10 + 20 + 30 + 40
    assert row["total_ns"] > 0 and row["max_ns"] > 0
    assert row["mean_ns"] == pytest.approx(row["total_ns"] / row["calls"])
    if row["p50_ns"] is not None:  # a shim that writes histograms
        assert row["p50_ns"] <= row["p99_ns"] <= row["max_ns"]
    by_pid = report_json(capsys, "--by", "pid", d)["groups"]
    assert sorted(rows_by_function(x)["cuDriverGetVersion"]["calls"] for x in by_pid) == [
        5, 10, 20, 30, 40]
    assert "cuDriverGetVersion" in ok(capsys, d)


def test_real_counts_traces_of_two_drivers_warn_and_compare(shims, probes, tmp_path, capsys):
    s535, s555 = shim_for(shims, "535.261.03"), shim_for(shims, "555.58.02")
    a, b = tmp_path / "a", tmp_path / "b"
    for d, s, n in ((a, s535, 3), (b, s555, 7)):
        d.mkdir()
        run([probes / "faults_calls", "calls", n],
            s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(d / "trace.json")))
    text = ok(capsys, a / "trace.json", b / "trace.json")
    assert "different drivers: 535.261.03 (1 process), 555.58.02 (1 process)" in text
    row = next(ln for ln in text.splitlines() if ln.endswith(" cuDriverGetVersion"))
    assert row.split()[:3] == ["-", "-", "10"]
    data = json.loads(ok(capsys, "--json", a, b))
    assert [(r["function"], r["calls_a"], r["calls_b"]) for r in data["functions"]] == [
        ("cuDriverGetVersion", 3, 7)]
