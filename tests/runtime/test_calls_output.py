"""`report --calls` made fast (shimgen/report/calls.py: each distinct raw record decoded
once, the rows read in bulk) gives what the plain per-record decode gives, byte for byte,
on a varied recording (strings, structs, outputs, errors, a function the headers do not
know, rings that wrapped, several threads and processes) under every filter; and the
timeline of a calls run (report/calls_timeline.py) carries each call's decoded arguments,
outputs and result, at the records' times."""

from __future__ import annotations

import io
import json
import random
import sqlite3

import pytest

from shimgen.report import calls as report_calls
from shimgen.report import calls_timeline
from tests.faultkit import run


@pytest.fixture(scope="module")
def varied(shims, probes, tmp_path_factory):
    """One trace directory: the routes (31 kinds of call), 2 threads of 1100 calls and one
    loop of 1200 in rings of 1024 (wrapped), a forked parent and children."""
    d = tmp_path_factory.mktemp("varied") / "traces"
    env = shims[-1].env(SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR=str(d),
                        SHIMGEN_CALLS_RING="1024")
    for args in (["callsdecoded", "routes"], ["callsdecoded", "threads", "2", "1100"],
                 ["forkcall"], ["callsdecoded", "loop", "1200"]):
        run([probes / args[0], *args[1:]], env)
    return d


def _plain(d, f: report_calls.Filters, fmt: str) -> str:
    """The report as the per-record decode gives it (Shown.line, Shown.record)."""
    procs, groups, note = report_calls.shown([d], f)
    pairs = list(report_calls.in_order(groups))
    if fmt == "json":
        head = json.loads(report_calls.render([d], report_calls.Filters(pid=-1), "json"))
        head = json.dumps({k: v for k, v in head.items() if k != "calls"})
        body = ",\n".join(json.dumps(g.record(s)) for g, s in pairs)
        return head[:-1] + ', "calls": [\n' + body + "\n]}\n"
    head = report_calls._verdict(procs, groups, len(pairs)) + (
        [f"note       {note}"] if note else [])
    key = [report_calls.key_line("start")] if pairs else []  # the key above any line
    return "\n".join(head + [""] + key + [g.line(s) for g, s in pairs]) + "\n"


def _same(got: str, want: str, what: str) -> None:
    """got == want, or a failure naming the first line that differs (pytest's own diff of
    two long texts that differ throughout can take minutes)."""
    if got != want:
        a, b = got.splitlines(), want.splitlines()
        i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                 min(len(a), len(b)))
        pytest.fail(f"{what}: line {i + 1} is {a[i] if i < len(a) else None!r}, "
                    f"not {b[i] if i < len(b) else None!r}", pytrace=False)


FILTERS = [report_calls.Filters(), report_calls.Filters(function="cuMem*"),
           report_calls.Filters(errors=True), report_calls.Filters(last=3),
           report_calls.Filters(function="cuDevice*", last=700, rank=""),
           report_calls.Filters(function="cuNothing*", errors=True)]


@pytest.mark.parametrize("k", range(len(FILTERS)))
def test_the_fast_report_is_the_per_record_decode(varied, k):
    f = FILTERS[k]
    procs, _, _ = report_calls.shown([varied], f)
    assert len(procs) == 6 and any(p.dropped for p in procs)
    for fmt in ("text", "json"):
        _same(report_calls.render([varied], f, fmt), _plain(varied, f, fmt), fmt)


def test_the_table_is_the_per_record_decode(varied, tmp_path):
    """The table's rows are the JSON's records, the start under one name (`start_s`; `t`,
    its earlier name in the JSON, the same value); the export prints no call lines."""
    f = report_calls.Filters(function="cuD*", last=900)
    db = tmp_path / "calls.db"
    said = report_calls.render([varied], f, "text", str(db))
    assert said.splitlines()[-1].startswith(f"sqlite     {db}: table calls, "), said
    assert "cuD" not in said, said  # quiet: the lines are not printed
    con = sqlite3.connect(db)
    got = con.execute("SELECT * FROM calls").fetchall()
    assert [c[1] for c in con.execute("PRAGMA table_info(calls)")][4] == "start_s"
    _, groups, _ = report_calls.shown([varied], f)
    records = json.loads(report_calls.render([varied], f, "json"))["calls"]
    assert records and all(r["start_s"] == r["t"] for r in records)
    assert [r["start_s"] for r in records] == [g[4] for g in got]
    want = [(r["pid"], r["rank"], r["tid"], r["seq"], r["start_s"], r["dur_us"], r["function"],
             json.dumps(r["args"]), r["result"], r["result_name"], json.dumps(r["outputs"]),
             r["state"]) for r in (g.record(s) for g, s in report_calls.in_order(groups))]
    assert got == want


def test_one_process_filtered_and_the_same_record_twice(varied):
    """--pid of the threads' process; a memo that is cleared as it fills still gives the
    same text (MEMO_MAX made tiny)."""
    procs, _, _ = report_calls.shown([varied], report_calls.Filters())
    many = max(procs, key=lambda p: len(p.order))
    f = report_calls.Filters(pid=many.pid)
    want = _plain(varied, f, "text")
    _same(report_calls.render([varied], f, "text"), want, "text")
    old = report_calls.MEMO_MAX
    report_calls.MEMO_MAX = 3
    try:
        _same(report_calls.render([varied], f, "text"), want, "text, the memo cleared")
        f = report_calls.Filters(pid=many.pid, last=50)
        _same(report_calls.render([varied], f, "json"), _plain(varied, f, "json"), "json")
    finally:
        report_calls.MEMO_MAX = old


def test_seconds_in_json_are_round_to_nine_places():
    rng = random.Random(7)
    values = [0.0, 1e-4, 1e-5, 0.5, 2.0, 999999.999999999, 1e6, 123.4567891235,
              *(rng.uniform(0, 10 ** rng.randint(-6, 8)) for _ in range(100000))]
    for t in values:
        assert report_calls._seconds_json(t) == repr(round(t, 9)), t


def test_the_timeline_of_a_calls_run_carries_each_calls_arguments(varied, shims):
    """Each process's Chrome trace: one event per call, at the record's time (ts: the
    report's seconds in microseconds) and for its duration, with its decoded arguments,
    outputs and result in `args`; thread names say the calls kept. (A launch is also on its
    stream's track: tests/runtime/test_kernels_timeline.py.)"""
    _, groups, _ = report_calls.shown([varied], report_calls.Filters())
    for g in groups:
        out = io.StringIO()
        assert calls_timeline.timeline_text(g, out) == len(g.rows)
        doc = json.loads(out.getvalue())
        threads = [e for e in doc["traceEvents"] if e["tid"] < calls_timeline.STREAM_TID]
        ev = [e for e in threads if e["ph"] != "M"]
        recs = [g.record(s) for s in g.rows]
        assert len(ev) == len(recs) and doc["otherData"]["pid"] == g.proc.pid
        for e, r in zip(ev, recs, strict=True):
            assert (e["name"], e["pid"], e["tid"], e["cat"]) == (r["function"], r["pid"],
                                                                  r["tid"], "libcuda")
            assert abs(e["ts"] - r["start_s"] * 1e6) < 0.002
            if r["state"] == "returned":
                assert e["ph"] == "X" and abs(e["dur"] - r["dur_us"]) < 0.002
            assert (e["args"]["result"], e["args"]["result_name"]) == (r["result"],
                                                                       r["result_name"])
            for part in ("args", "outputs"):
                for name, v in r[part].items():
                    got = e["args"][part][name]
                    assert got == v or got == (f"{v:#x}" if v else "NULL"), (name, got, v)
        names = {e["tid"]: e["args"] for e in threads if e["name"] == "thread_name"}
        assert {t: a["calls_kept"] for t, a in names.items()} == {
            t: sum(r["tid"] == t for r in recs) for t in names}
    attr = [json.loads(calls_timeline._event_parts(g, g.proc.record(s))[1])
            for g in groups for s in g.rows
            if g.dec.names[g.proc.record(s)[1]] == "cuDeviceGetAttribute"]
    assert attr[0]["args"]["attrib"] == "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED"
    assert attr[0]["args"]["pi"].startswith("0x")
    ver = [json.loads(calls_timeline._event_parts(g, g.proc.record(s))[1])
           for g in groups for s in g.rows
           if g.dec.names[g.proc.record(s)[1]] == "cuDriverGetVersion"]
    assert ver and {v["outputs"]["driverVersion"] for v in ver} == {shims[-1].cuda_version}
