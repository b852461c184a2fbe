"""What else a file can say to `shimgen report`, `top` and `run --stall`: a function's name
or rank with control characters in the in-flight lines, top's table and the stall notices
(escaped); a rank that Python calls a digit but int() refuses; a heartbeat from the future
(not a node that runs), one that is no number, a link or a FIFO (none, never waited on); a
trace that names a process of another user (not taken for it); a trace file cut at any byte,
or with its end lost to zeros (a file system that lost power), read by every view without a
traceback. And `--first-difference` and the durations of
`report --calls` on small made-up inputs: the context of a difference among the first
calls, a thread that stopped early, a call that never returned."""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from shimgen.errors import ShimgenError
from shimgen.report import calls as report_calls
from shimgen.report import calls_diff, inflight
from shimgen.report.main import report
from shimgen.run.watch import left_line, stall_line
from shimgen.runenv import HEARTBEAT
from shimgen.top import functions, view
from shimgen.trace import inflight as trace_inflight
from shimgen.trace import job, live
from tests.report.test_calls_hostile import _changed, _record_at, cli, evil, printable  # noqa: F401
from tests.report.test_tracefile_reader import put, real_file  # noqa: F401

NAME = "cuEvil\x1b]0;TITLE\x07\x1b[2J"
RANK = "0\x1b[31m"


def _now(state=job.DIED, rank=RANK, function=NAME, pid=7) -> job.ProcNow:
    f = SimpleNamespace(pid=pid, rank=rank, path="p", complete=False, why_unknown="",
                        counts=0, device_bytes=None, boot_id="", proc_start=None,
                        functions={function: (3, 30.0)})
    p = job.ProcNow(f, "host\x1b[2J")
    p.state = state
    p.calls = [job.Busy(pid, function, 12.5)]
    return p


def test_in_flight_lines_top_and_stall_notices_escape_what_a_file_says():
    now = _now()
    proc = SimpleNamespace(complete=False, last=SimpleNamespace(now=now, rank=RANK, pid=7))
    lines = inflight.section([proc]) + [inflight.died_inside(proc)]
    lines += view.text("run", [now, _now(rank="\u00b2", pid=8)], {}, []).splitlines()
    lines += [stall_line(7, RANK, NAME, 60), left_line(7, RANK, NAME, 61.0)]
    lines += functions.text(functions.rows({}, [now], 1.0, None), [now], None, 1.0)
    for line in lines:
        assert line.isprintable(), repr(line)
    assert sum("\\x1b]0;TITLE\\x07" in line for line in lines) == 8


def test_a_heartbeat_from_the_future_is_no_node_that_runs(tmp_path):
    now = time.time_ns()
    for ahead, running in ((-2e9, True), (2e9, True), (3600e9, False), (-3600e9, False)):
        (tmp_path / HEARTBEAT).write_text(f"{int(now + ahead)}\n")
        part = live.Part(tmp_path, "h", {})
        assert part.node_running(now) is running, ahead
        # said as ignored only when further ahead than the hosts' clocks may differ
        said = part.ignored(now)
        assert len(said) == (ahead > 0 and not running) and all(
            f"{HEARTBEAT}: its time is 3600 s ahead" in line for line in said), said


def test_a_heartbeat_is_a_files_digits_never_read_through_a_link_nor_waited_for(tmp_path):
    """A heartbeat is the digits of a small file (fewer than 25: a time in ns), else none;
    never read through a symbolic link, and a FIFO put in its place is not waited on."""
    hb = tmp_path / HEARTBEAT
    for text, want in (("123\n", 123), ("12a\n", None), ("\n", None), ("-5\n", None),
                       ("9" * 24, int("9" * 24)), ("9" * 25, None)):
        hb.write_text(text)
        assert live.read_heartbeat(tmp_path) == want, text
    hb.unlink()
    (tmp_path / "elsewhere").write_text("77\n")
    hb.symlink_to(tmp_path / "elsewhere")
    assert live.read_heartbeat(tmp_path) is None
    hb.unlink()
    os.mkfifo(hb)  # no writer: an open that waited would never end
    got: list = []
    t = threading.Thread(target=lambda: got.append(live.read_heartbeat(tmp_path)), daemon=True)
    t.start()
    t.join(20)  # (an open that waits never returns: a generous bound, no timing)
    assert got == [None]


def test_a_trace_naming_a_process_of_another_user_is_not_taken_for_it(real_file, tmp_path):  # noqa: F811
    """This process's pid, start time and boot in an unfinished trace: running while the file
    is its user's, not once the file belongs to another user."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user")
    data = bytearray(real_file.read_bytes())
    put(data, "state", trace_inflight.binary.RUNNING)
    put(data, "pid", os.getpid())
    put(data, "proc_start", live.proc_start(os.getpid()))
    put(data, "boot_id", live.boot_id().encode())
    f = tmp_path / "1.shimtrace"
    f.write_bytes(data)
    def state() -> str:
        return job.judge(trace_inflight.read(f), None, "", live.boot_id(), time.time_ns(),
                         time.monotonic_ns()).state
    assert state() == job.RUNNING
    os.chown(f, 65534, 65534)
    assert state() == job.DIED


# ---- a trace file cut at any byte, or its end lost ---------------------------------------------

def _views(run: Path, calls: bool):
    yield lambda: report([run])
    yield lambda: report([run], fmt="json")
    if calls:
        yield lambda: report_calls.render([run], report_calls.Filters())
        yield lambda: report_calls.render([run], report_calls.Filters(), "json")
        yield lambda: report_calls.render([run], report_calls.Filters(),
                                          sqlite=str(run / "calls.db"))


def _cuts(size: int) -> list[tuple[int, bool]]:
    """(where, whether the rest is zeros rather than gone), a dense sample: every cut in the
    first 64 bytes (the magic and the version), 150 in the rest of the first 5000 (the
    header, the start of the names), and at 40 page boundaries (a byte either side) and 100
    places at random, both cut and zeroed."""
    rng = random.Random(size)
    pages = rng.sample(range(0, size, 4096), min(40, size // 4096))
    some = {p + d for p in pages for d in (-1, 0)} | set(rng.sample(range(size), 100))
    return sorted({(c, False) for c in [*range(64), *rng.sample(range(64, 5000), 150)]}
                  | {(c, z) for c in some if 0 <= c < size for z in (False, True)})


@pytest.mark.parametrize("mode", ["calls", "time"])
def test_a_trace_cut_or_zeroed_at_any_byte_is_said_never_a_traceback(evil, real_file, mode,  # noqa: F811
                                                                        tmp_path):
    src = next((evil[0] / "traces").glob("*.shimtrace")) if mode == "calls" else real_file
    data = src.read_bytes()
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / "run.json").write_text('{"command": ["x"]}')
    f = run / "traces" / "1.shimtrace"
    results = set()
    for cut, zeros in _cuts(len(data)):
        f.write_bytes(data[:cut] + bytes(len(data) - cut if zeros else 0))
        for view_of in _views(run, mode == "calls"):
            try:
                out = view_of()
            except ShimgenError as e:
                assert "\n" not in str(e)
                results.add("refused")
                continue
            if not zeros and out is not None:  # the run's report names the file, cut
                assert any(w in out for w in ("truncated", "no magic", "not a shimgen",
                                              "empty")), (cut, out[:300])
            results.add("read")
        assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    assert "read" in results


# ---- --first-difference and durations on made-up calls ---------------------------------------

def _thread(calls: list[str]) -> list:
    return [((c, ()), f"line {c} {i}", float(i)) for i, c in enumerate(calls)]


def _diff(monkeypatch, a: list[str], b: list[str], more_b: int = 0) -> str:
    return _parted(monkeypatch, a, b, more_b)[0]


def _parted(monkeypatch, a: list[str], b: list[str], more_b: int = 0) -> tuple[str, bool]:
    """The first difference of A's one thread and B's (and `more_b` threads more in B)."""
    threads = {"A": [("pid 1 thread 1", _thread(a))],
               "B": [("pid 2 thread 2", _thread(b))]
               + [(f"pid 2 thread {3 + i}", _thread(b)) for i in range(more_b)]}
    monkeypatch.setattr(calls_diff, "_threads", lambda path, f, unreadable: threads[str(path)])
    return calls_diff.first_difference(Path("A"), Path("B"), None)


@pytest.mark.parametrize("a, b, more_b, parted", [
    (["x", "y"], ["x", "y"], 0, False), (["x", "y"], ["x", "q"], 0, True),
    (["x", "y"], ["x"], 0, True), (["x", "y"], ["x", "y"], 1, True)])
def test_the_runs_part_when_a_thread_or_their_number_differs(monkeypatch, a, b, more_b,
                                                               parted):
    """What decides --first-difference's exit status (1 when the runs part, 0 when not)."""
    text, got = _parted(monkeypatch, a, b, more_b)
    assert got is parted, text


def test_a_difference_in_the_first_calls_has_the_calls_before_it(monkeypatch):
    out = _diff(monkeypatch, ["x", "y", "z"], ["x", "q", "z"]).splitlines()
    at = out.index("pid 1 thread 1 of A / pid 2 thread 2 of B: call 2")
    assert out[at + 1:at + 4] == ["    line x 0", "  A line y 1", "  B line q 1"]


def test_a_later_difference_has_exactly_the_three_calls_before_it(monkeypatch):
    calls = [f"c{i}" for i in range(9)]
    out = _diff(monkeypatch, calls, calls[:7] + ["q", "c8"]).splitlines()
    at = out.index("pid 1 thread 1 of A / pid 2 thread 2 of B: call 8")
    assert out[at + 1:] == ["    line c4 4", "    line c5 5", "    line c6 6", "  A line c7 7",
                            "  B line q 7"]


def test_threads_are_paired_by_rank_then_start_then_first_call(monkeypatch):
    """Process 2 (rank 0) before process 1 (rank 1), whichever started first; of process 2's
    threads, 21 (first call at 3) before 20 (first call at 5, second at 6)."""
    from shimgen.calls import TID

    def group(pid, calls):  # calls: (tid, time) in order of time
        rows = list(range(len(calls)))
        proc = SimpleNamespace(pid=pid, record=lambda s: {TID: calls[s][0]})
        return SimpleNamespace(proc=proc, rows=rows, line=lambda s: f"{pid}/{calls[s][0]}",
                               t=lambda s: calls[s][1])

    procs = [SimpleNamespace(pid=1, rank="1", calib_ns0=100),
             SimpleNamespace(pid=2, rank="0", calib_ns0=200)]
    groups = [group(1, [(10, 1.0)]), group(2, [(21, 3.0), (20, 5.0), (20, 6.0), (21, 9.0)])]
    monkeypatch.setattr(calls_diff, "shown", lambda paths, f, unreadable: (procs, groups, None))
    monkeypatch.setattr(calls_diff, "_key", lambda g, r: (r[TID],))
    got = calls_diff._threads(Path("A"), None, [])
    assert [name for name, _ in got] == ["pid 2 thread 21", "pid 2 thread 20", "pid 1 thread 10"]


def test_calls_are_compared_without_their_addresses_which_are_kept_apart():
    dec = SimpleNamespace(
        names=["cuF"], result=lambda r: (0, "CUDA_SUCCESS"),
        decode=lambda r, h: ([("n", 5, "5", False), ("p", 0x10, "0x10", True)],
                             [("o", 7, "7", False), ("q", 0x20, "0x20", True)]))
    from shimgen.calls import IDX

    key = calls_diff._key(SimpleNamespace(dec=dec, handles={}), {IDX: 0})
    assert key == (("cuF", (("n", "5"),), "CUDA_SUCCESS", (("o", "7"),)), (("0x10",), ("0x20",)))


def test_addresses_part_two_threads_only_when_asked():
    a = [(("cuF", ("0x1000",)), "a", 0.0)]
    b = [(("cuF", ("0x2000",)), "b", 0.0)]
    assert calls_diff._first(a, b, False) is None and calls_diff._first(a, b, True) == 0


def test_a_thread_that_stopped_early_is_a_difference(monkeypatch):
    out = _diff(monkeypatch, ["x", "y", "z"], ["x", "y"])
    assert out.startswith("first difference: 1 of 1 threads part")
    assert "  A line z 2\n  B (no more calls)\n" in out


def test_a_call_that_never_returned_has_no_duration(evil, tmp_path):  # noqa: F811
    """The first call's state made `entered` (a call in progress when the process died), its
    duration word left as it was: the text gives it no duration, the JSON none either."""
    def change(data, f):
        struct.pack_into("<H", data, _record_at(f) + 10, 1)
    d = _changed(evil[0], tmp_path, change)
    out = cli("--calls", d)
    first = [ln for ln in printable(out.stdout).splitlines() if " cuModuleLoad(" in ln]
    assert first and first[0].endswith(") = ?"), first
    import json

    calls = json.loads(cli("--calls", "--json", d).stdout)["calls"]
    assert (calls[0]["state"], calls[0]["dur_us"]) == ("entered", None)
    shutil.rmtree(d)


def test_the_difference_counts_the_threads_that_agree_in_text_and_in_json(monkeypatch):
    """Of two pairs of threads, the first alike and the second parted by B's stopping early:
    the count of each, the call that has none (null), the unreadable files of both runs;
    the runs part when a pair does, or when one run has more threads."""
    threads = {"A": [("pid 1 thread 1", _thread(["x"])), ("pid 1 thread 2", _thread(["x", "y"]))],
               "B": [("pid 2 thread 1", _thread(["x"])), ("pid 2 thread 2", _thread(["x"]))]}

    def fake(path, f, unreadable):
        unreadable.append((f"{path}/bad", "cut short"))
        return threads[str(path)]
    monkeypatch.setattr(calls_diff, "_threads", fake)
    text, parted = calls_diff.first_difference(Path("A"), Path("B"), None, addresses=True)
    assert parted and text.startswith("first difference: 1 of 2 threads part (addresses "
                                      "compared)\n"), text
    data, parted = calls_diff.first_difference(Path("A"), Path("B"), None, fmt="json")
    assert parted and data.startswith('{\n "schema": "shimgen-calls-difference",\n')
    assert json.loads(data) == {
        "schema": "shimgen-calls-difference", "same_threads": 1, "threads_a": 2,
        "threads_b": 2, "differences": [{"a": "pid 1 thread 2", "b": "pid 2 thread 2",
                                         "index": 1, "before": ["line x 0"],
                                         "a_call": "line y 1", "b_call": None}],
        "unreadable": [{"file": "A/bad", "reason": "cut short"},
                       {"file": "B/bad", "reason": "cut short"}]}
    threads["B"] = threads["A"][:1] * 2
    threads["A"] = threads["A"][:1] * 3
    text, parted = calls_diff.first_difference(Path("A"), Path("B"), None)
    assert parted and text.startswith("no difference: 2 threads make the same calls "
                                      "(addresses ignored)\n"), text
    assert "threads    A has 3, B has 2\n" in text
    data, parted = calls_diff.first_difference(Path("A"), Path("B"), None, fmt="json")
    assert parted and json.loads(data)["same_threads"] == 2
    threads["A"] = threads["B"]
    assert calls_diff.first_difference(Path("A"), Path("B"), None, fmt="json")[1] is False
    threads["B"] = [("pid 2 thread 1", _thread(["x", "y"]))]  # A stopped early
    (d,) = json.loads(calls_diff.first_difference(Path("A"), Path("B"), None,
                                                  fmt="json")[0])["differences"]
    assert (d["a_call"], d["b_call"]) == (None, "line y 1")
