"""`shimgen report` and the end-of-run report when a run is not all well: a trace file that
cannot be read is named with why and the rest is reported; a process that exec'd is one
process, not a death; the shim's notices (notices.log) are shown, counted by kind; the
readers' notes of many processes are one line per kind; p90 next to p50 and p99."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
from pathlib import Path

import pytest

from benchmarks.report_speed import json_trace
from shimgen.cli import main
from shimgen.report.format import NOTICES_SHOWN, UNREADABLE_SHOWN, render
from shimgen.report.main import summary_for_run
from shimgen.report.model import groups
from shimgen.report.source import NOTICES_MAX_BYTES, Source
from shimgen.trace.model import HIST_BUCKETS, NOT_FINISHED, FunctionStats, ProcessTrace

BOOT = "6f1c2a1e-5d0b-4b8e-9d7a-0c1e2f3a4b5c"


def fn(calls: int, *, total: float | None = None, most: float | None = None,
       buckets: dict[int, int] | None = None) -> FunctionStats:
    hist = None
    if buckets:
        hist = [0] * HIST_BUCKETS
        for b, c in buckets.items():
            hist[b] = c
    return FunctionStats(calls=calls, total_ns=total, max_ns=most, hist=hist)


def proc(pid: int, functions: dict[str, FunctionStats], *, complete: bool = True,
         proc_start: int | None = None, boot_id: str = BOOT, start_ns: int | None = None,
         path: str | None = None, notes: list[str] | None = None, rank: str | None = None,
         source: str = "shimtrace") -> ProcessTrace:
    return ProcessTrace(path=path or f"traces/{pid}.{start_ns}.shimtrace", source=source,
                        pid=pid, rank=rank, mode="time", complete=complete,
                        shimgen_version="0.1", driver_version="555.58.02", ns_per_tick=1.0,
                        start_ns=start_ns, functions=functions, notes=notes,
                        boot_id=boot_id, proc_start=proc_start)


def good_trace(pid: int, calls: int = 3) -> dict:
    return json_trace(proc(pid, {"cuInit": fn(calls, total=10.0 * calls, most=12.0,
                                              buckets={3: calls})}, source="json"))


def write_run(d: Path, pids=(11, 12, 13), run_json: bool = True) -> Path:
    (d / "traces").mkdir(parents=True)
    for pid in pids:
        (d / "traces" / f"trace.{pid}.json").write_text(json.dumps(good_trace(pid)))
    if run_json:
        (d / "run.json").write_text('{"command": ["./app"], "exit": {"status": 0}}')
    return d


def cli(capsys, *args) -> tuple[int, str, str]:
    rc = main(["report", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def text_of(procs: list[ProcessTrace], by: str | None = None) -> str:
    return render([Source(Path("run"), True, procs)], groups(procs, by), by, "text")


def json_of(procs: list[ProcessTrace], by: str | None = None) -> dict:
    return json.loads(render([Source(Path("run"), True, procs)], groups(procs, by), by, "json"))


def reason_of(path: Path) -> str:
    """What the report must say of an unreadable file: its reader's line, without the path."""
    from shimgen.errors import ShimgenError
    from shimgen.report.source import READERS

    reader = READERS[".shimtrace" if path.name.endswith(".shimtrace") else ".json"]
    with pytest.raises(ShimgenError) as e:
        reader(path)
    assert str(e.value).startswith(f"{path}: ")
    return str(e.value)[len(f"{path}: "):]


# ---- one bad file never loses the run -------------------------------------------------------

WHOLE = json.dumps(good_trace(99), indent=2)
BAD_FILES = {
    "empty": ("99.shimtrace", b""),
    "no-magic": ("99.shimtrace", b"not a trace"),
    "wrong-magic": ("99.shimtrace", b"SHIMTRX\n" + bytes(5000)),
    "truncated": ("99.shimtrace", b"SHIMTRC\n" + bytes(100)),
    "broken-json": ("trace.99.json", WHOLE[: len(WHOLE) // 2].encode()),
    "bad-json-value": ("trace.99.json", WHOLE.replace('"pid": 99', '"pid": -1').encode()),
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_an_unreadable_trace_in_a_run_is_named_and_the_rest_reported(tmp_path, capsys, kind):
    d = write_run(tmp_path / "run")
    name, content = BAD_FILES[kind]
    bad = d / "traces" / name
    bad.write_bytes(content)
    why = reason_of(bad)
    rc, out, err = cli(capsys, d)
    assert rc == 0 and err == "", err
    assert "processes  3: 3 complete" in out
    assert f"\n           {bad}: {why}\n" in out
    row = next(ln for ln in out.splitlines() if ln.endswith(" cuInit"))
    assert row.split()[2] == "9"  # the three readable traces' calls, exactly
    rc, out, err = cli(capsys, "--json", d)
    data = json.loads(out)
    assert rc == 0 and data["unreadable"] == [{"file": str(bad), "reason": why}]
    assert data["groups"][0]["processes"] == 3
    # the CSV keeps its rows; that a file was left out is one line on stderr
    rc, out, err = cli(capsys, "--csv", d)
    rows = list(csv.reader(io.StringIO(out)))
    assert rc == 0 and rows[1][2:4] == ["cuInit", "9"]
    assert len(err.splitlines()) == 1 and "1 trace file could not be read" in err
    # and the end of `shimgen run` reports the same
    text = summary_for_run(d)
    assert "processes  3: 3 complete" in text and f"{bad}: {why}" in text


def test_a_run_whose_every_trace_is_unreadable_still_reports(tmp_path, capsys):
    d = write_run(tmp_path / "run", pids=())
    for i in range(UNREADABLE_SHOWN + 5):
        (d / "traces" / f"{100 + i}.shimtrace").write_bytes(b"")
    rc, out, err = cli(capsys, d)
    assert rc == 0 and err == "", err
    assert f"unreadable {UNREADABLE_SHOWN + 5} files of the run could not be read" in out
    assert "processes  0: no trace could be read" in out
    named = [ln for ln in out.splitlines() if ".shimtrace: " in ln]
    assert len(named) == UNREADABLE_SHOWN and "           ... and 5 more (" in out
    assert len(json.loads(cli(capsys, "--json", d)[1])["unreadable"]) == UNREADABLE_SHOWN + 5
    assert "processes  0: no trace could be read" in summary_for_run(d)
    # without run.json there is no run to report: one line naming a file that is unreadable
    (d / "run.json").unlink()
    rc, out, err = cli(capsys, d)
    assert rc == 1 and out == "" and len(err.splitlines()) == 1
    assert f"{d / 'traces' / '100.shimtrace'}: " in err and "(and 24 more)" in err


def test_an_unreadable_trace_named_on_the_command_line_is_refused(tmp_path, capsys):
    d = write_run(tmp_path / "run")
    bad = d / "traces" / "99.shimtrace"
    bad.write_bytes(b"")
    good = d / "traces" / "trace.11.json"
    rc, out, err = cli(capsys, good, bad)
    assert rc == 1 and out == ""
    assert err == f"shimgen: error: {bad}: {reason_of(bad)}\n"


def test_a_file_name_that_is_not_utf8_is_shown_escaped(tmp_path, capsys):
    d = write_run(tmp_path / "run")
    bad = os.path.join(os.fsencode(d / "traces"), b"\xff\x1b[2J.shimtrace")
    with open(bad, "wb"):
        pass
    rc, out, err = cli(capsys, d)
    assert rc == 0 and err == ""
    assert "\x1b" not in out and "\\udcff\\x1b[2J.shimtrace: " in out
    assert "\\udcff" in cli(capsys, "--json", d)[1]


# ---- exec is not death ---------------------------------------------------------------------

def forked_and_execd(children: int = 200) -> list[ProcessTrace]:
    """A parent, and children that fork and exec a traced program: each child leaves the
    trace of its image before exec (never finished) and that of the program it exec'd."""
    procs = [proc(100, {"cuInit": fn(1, total=5.0, most=5.0)}, proc_start=10, start_ns=1)]
    for i in range(children):
        pid, started = 1000 + i, 20 + i
        procs.append(proc(pid, {"cuInit": fn(1, total=5.0, most=5.0),
                                "cuDriverGetVersion": fn(2, total=4.0, most=2.0)},
                          complete=False, proc_start=started, start_ns=100 + i,
                          notes=["the process did not finish the file"]))
        procs.append(proc(pid, {"cuDriverGetVersion": fn(3 + i, total=3.0 + i, most=2.0)},
                          proc_start=started, start_ns=10_000 + i))
    return procs


def test_a_process_that_execs_is_one_process_not_a_death():
    procs = forked_and_execd()
    text = text_of(procs)
    assert "processes  201: 201 complete\n" in text
    assert "died" not in text and "exec       200 times a process ran another program" in text
    g = json_of(procs)["groups"][0]
    assert (g["processes"], g["complete"], g["died"], g["execs"], g["traces"]) == (
        201, 201, [], 200, 401)
    assert g["driver_versions"] == {"555.58.02": 201}
    calls = {r["function"]: r["calls"] for r in g["functions"]}
    assert calls == {"cuInit": 201, "cuDriverGetVersion": 200 * 2 + sum(range(3, 203))}
    # --by pid: a child's two traces are one group, one process
    by_pid = {x["group"]: x for x in json_of(procs, "pid")["groups"]}
    assert len(by_pid) == 201
    child = by_pid["1007"]
    assert (child["processes"], child["complete"], child["execs"]) == (1, 1, 1)
    assert {r["function"]: r["calls"] for r in child["functions"]} == {
        "cuInit": 1, "cuDriverGetVersion": 2 + 10}


def test_the_last_trace_of_a_process_says_whether_it_died():
    """Ordered by start time whatever the order read: the program exec'd last decides."""
    before = proc(7, {"cuInit": fn(1)}, complete=True, proc_start=5, start_ns=100,
                  path="traces/7.a.shimtrace")
    after = proc(7, {"cuInit": fn(1)}, complete=False, proc_start=5, start_ns=200,
                 path="traces/7.b.shimtrace")
    for procs in ([before, after], [after, before]):
        g = json_of(procs)["groups"][0]
        assert (g["processes"], g["complete"], g["execs"]) == (1, 0, 1)
        assert g["died"] == [{"pid": 7, "rank": None, "path": "traces/7.b.shimtrace",
                              "inside": None}]
        assert "processes  1: 0 complete, 1 died" in text_of(procs)


@pytest.mark.parametrize("case", ["no-start-time", "no-boot", "pid-reused", "other-boot",
                                  "other-reader"])
def test_traces_that_are_not_one_process_count_as_today(case):
    """Without the identity (proc_start None, or no boot_id), or with a different one, two
    traces of a pid are two processes, as they were before exec was known."""
    a = {"proc_start": 5, "start_ns": 1}
    b = {"proc_start": 5, "start_ns": 2}
    if case == "no-start-time":
        a["proc_start"] = b["proc_start"] = None
    elif case == "no-boot":
        a["boot_id"] = b["boot_id"] = ""
    elif case == "pid-reused":
        b["proc_start"] = 9
    elif case == "other-boot":
        b["boot_id"] = "another boot"
    else:
        b["source"] = "json"
    procs = [proc(7, {"cuInit": fn(1)}, complete=False, **a),
             proc(7, {"cuInit": fn(2)}, **b)]
    g = json_of(procs)["groups"][0]
    assert (g["processes"], g["complete"], g["execs"], len(g["died"])) == (2, 1, 0, 1)
    assert "processes  2: 1 complete, 1 died" in text_of(procs)


# ---- the shim's notices --------------------------------------------------------------------

def test_the_shims_notices_are_counted_by_message(tmp_path, capsys):
    d = write_run(tmp_path / "run")
    kinds = NOTICES_SHOWN + 2
    lines = []
    for pid in range(300, 305):  # the same notice from five processes
        lines.append(f"[pid {pid}] shimgen: SHIMGEN_ATTR_OVERRIDE: 'foo' is not "
                     "ATTRIBUTE=VALUE; ignored")
    lines += [f"[pid 400] notice number {k}" for k in range(kinds - 1)]
    lines.append("[pid 401] notice number 0")
    (d / "notices.log").write_text("\n".join(lines) + "\n")
    rc, out, err = cli(capsys, d)
    assert rc == 0 and err == ""
    log = d / "notices.log"
    assert f"notices    {len(lines)} from the shim in {log}, {kinds} different:" in out
    shown = [ln.split(None, 2)[:3] for ln in out.splitlines() if " x " in ln]
    assert shown[0] == ["5", "x", "shimgen: SHIMGEN_ATTR_OVERRIDE: 'foo' is not "
                                  "ATTRIBUTE=VALUE; ignored"]
    assert shown[1] == ["2", "x", "notice number 0"]
    assert [s[2] for s in shown[2:]] == [f"notice number {k}" for k in range(1, NOTICES_SHOWN - 1)]
    assert "           ... and 2 more kinds (" in out
    notices = json.loads(cli(capsys, "--json", d)[1])["notices"]
    assert notices["total"] == len(lines) and len(notices["distinct"]) == kinds
    assert notices["distinct"][:2] == [
        {"message": "shimgen: SHIMGEN_ATTR_OVERRIDE: 'foo' is not ATTRIBUTE=VALUE; ignored",
         "count": 5}, {"message": "notice number 0", "count": 2}]
    assert "notices    17 from the shim" in summary_for_run(d)


def test_a_run_with_no_traced_call_still_shows_its_notices(tmp_path):
    d = write_run(tmp_path / "run", pids=())
    (d / "notices.log").write_text("[pid 5] shimgen: something went wrong\n")
    text = summary_for_run(d)
    assert "notices    1 from the shim" in text and "    1 x shimgen: something went wrong" in text
    assert "no process made a traced driver call" in text


def _alarm(signum, frame):
    raise AssertionError("reading notices.log waited")


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory", "large"])
def test_notices_log_is_read_with_care(tmp_path, capsys, monkeypatch, kind):
    d = write_run(tmp_path / "run")
    log = d / "notices.log"
    if kind == "fifo":
        os.mkfifo(log)  # no writer: an open or read that blocks would wait for ever
    elif kind == "symlink":
        (tmp_path / "elsewhere").write_text("[pid 1] not to be read\n")
        log.symlink_to(tmp_path / "elsewhere")
    elif kind == "directory":
        log.mkdir()
    else:
        line = b"[pid 1] " + b"x" * 90 + b"\n"  # 99 bytes
        log.write_bytes(line * (2 * NOTICES_MAX_BYTES // len(line)))
        got = []
        real_read = os.read

        def read(fd, n):  # what is read of it, the only file read with os.read
            got.append(real_read(fd, n))
            return got[-1]

        monkeypatch.setattr(os, "read", read)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(10)
    try:
        rc, out, err = cli(capsys, d)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert rc == 0 and err == "" and "processes  3: 3 complete" in out
    said = next(ln for ln in out.splitlines() if ln.startswith("notices    "))
    if kind == "large":
        read = NOTICES_MAX_BYTES // 99
        assert said == f"notices    {read} from the shim in {log}:"
        unread = log.stat().st_size - read * 99
        assert f"           ... and {unread} bytes more of it, not read" in out
        assert NOTICES_MAX_BYTES < sum(map(len, got)) <= NOTICES_MAX_BYTES + 1
    else:
        why = {"fifo": "not a regular file", "symlink": "a symbolic link, not followed",
               "directory": "not a regular file"}[kind]
        assert said == f"notices    {log}: not read: {why}"
        assert "not to be read" not in out


# ---- the readers' notes: one line per kind -------------------------------------------------

def test_notes_that_differ_only_in_a_number_are_one_line():
    procs = [proc(2000 + i, {"cuInit": fn(1)},
                  notes=[f"{i + 1} calls counted in memory are not in the file",
                         f"no times: the tick calibration spans {i / 100:.3f} ms, less than "
                         "the 10 ms needed", "no error counts (the shim did not count them)"])
             for i in range(200)]
    text = text_of(procs)
    notes = [ln for ln in text.splitlines() if ln.startswith("note ")]
    assert notes == [
        "note       1 calls counted in memory are not in the file (and 199 more processes "
        "with the like, their numbers differ)",
        "note       no times: the tick calibration spans 0.000 ms, less than the 10 ms needed "
        "(and 199 more processes with the like, their numbers differ)",
        "note       no error counts (the shim did not count them) (200 processes)"]
    # the JSON keeps each note as it is
    assert len(json_of(procs)["groups"][0]["notes"]) == 1 + 200 + 200


# ---- p90 -----------------------------------------------------------------------------------

def test_p90_is_in_the_table_the_json_and_the_csv(tmp_path, capsys):
    # 6 calls in [16, 32) ns and 4 in [32, 64) ns capped at max 60: p90 is the call of rank
    # 9, 3 of the 4 into [32, 60): 32 + 28 * 3 / 4 = 53.
    t = proc(5, {"cuInit": fn(10, total=300.0, most=60.0, buckets={4: 6, 5: 4})}, source="json")
    d = tmp_path / "run"
    (d / "traces").mkdir(parents=True)
    (d / "traces" / "trace.5.json").write_text(json.dumps(json_trace(t)))
    row = json.loads(cli(capsys, "--json", d)[1])["groups"][0]["functions"][0]
    assert row["p50_ns"] == pytest.approx(16 + 16 * 5 / 6)
    assert row["p90_ns"] == pytest.approx(53.0)
    assert row["p99_ns"] == pytest.approx(32 + 28 * 3.9 / 4)
    out = cli(capsys, d)[1]
    head = next(ln for ln in out.splitlines() if "p50 ns" in ln).split()
    cells = next(ln for ln in out.splitlines() if ln.endswith(" cuInit")).split()
    assert head[head.index("p50"):head.index("p50") + 6] == ["p50", "ns", "p90", "ns", "p99", "ns"]
    assert cells[4:7] == ["29", "53", "59"]
    rows = list(csv.DictReader(io.StringIO(cli(capsys, "--csv", d)[1])))
    assert rows[0]["p90_ns"] == "53.0" and rows[0]["p50_ns"] == "29.3"


def test_a_process_whose_last_program_was_killed_did_not_finish():
    """A launcher's `sh -c` that execs the program, which is then killed: the trace of the
    image before exec loses its note (exec is no death), the last one keeps it, and the
    process is said to have died, with the note."""
    before = proc(7, {"cuInit": fn(1)}, complete=False, proc_start=5, start_ns=100,
                  path="traces/7.shimtrace", notes=[NOT_FINISHED])
    after = proc(7, {"cuInit": fn(2)}, complete=False, proc_start=5, start_ns=200,
                 path="traces/7-1.shimtrace", notes=[NOT_FINISHED])
    for procs in ([before, after], [after, before]):
        for t in procs:
            t.notes = [NOT_FINISHED]
        text = text_of(procs)
        assert "processes  1: 0 complete, 1 died (counts exact up to its last call)" in text
        assert f"note       {NOT_FINISHED} (1 process)" in text, text
        g = json_of(procs)["groups"][0]
        assert g["notes"] == {NOT_FINISHED: 1} and g["execs"] == 1
        assert before.notes == [] and after.notes == [NOT_FINISHED]


# ---- a full disk: calls not in the traces ------------------------------------------------

def test_a_process_with_calls_missing_is_never_said_exact(tmp_path, capsys):
    """A trace whose header says that calls are not in it (a full disk) is of a process whose
    counts are not exact, whether it died or exited: said per process, in the text, the JSON
    and a comparison."""
    died = proc(8, {"cuInit": fn(1)}, complete=False, proc_start=5, start_ns=1)
    died.calls_missing = 6000
    exited = proc(9, {"cuInit": fn(1)}, proc_start=6, start_ns=1)
    exited.calls_missing = 40
    fine = proc(10, {"cuInit": fn(1)}, complete=False, proc_start=7, start_ns=1)
    procs = [died, exited, fine]
    text = text_of(procs)
    assert ("processes  3: 1 complete, 1 died (counts exact up to its last call), 1 died with "
            "calls not in their traces\n") in text, text
    assert ("missing    calls not in the traces (no room on the disk): pid 8 (6000 calls at "
            "least), pid 9 (40 calls at least)") in text, text
    g = json_of(procs)["groups"][0]
    assert [(m["pid"], m["calls"], m["trace"]) for m in g["calls_missing"]] == [
        (8, 6000, True), (9, 40, True)]
    from shimgen.report import compare as report_compare

    both = report_compare.render(Source(Path("a"), True, procs), Source(Path("b"), True, []),
                                 "text")
    assert "3 processes (1 died: counts exact up to its last call) (2 with calls not" in both


def test_a_note_of_no_room_is_a_process_without_a_trace(tmp_path, capsys):
    """`<name>.nospace`, the empty note a process leaves where the disk had no room for its
    trace file: a process of the run (its pid and rank from the name), with no trace."""
    d = tmp_path / "run"
    (d / "traces").mkdir(parents=True)
    (d / "run.json").write_text('{"command": ["x"], "exit": {"status": 0}}')
    (d / "traces" / "123.nospace").write_bytes(b"")
    (d / "traces" / "r2-456-1.nospace").write_bytes(b"")
    rc, out, err = cli(capsys, d)
    assert rc == 0, err
    assert "processes  2, ranks 2: 0 complete, 2 with no trace (no room on the disk for one)" in out
    assert "pid 123 (no trace), pid 456 rank 2 (no trace)" in out, out
    assert "no process made a traced driver call" not in out and "driver     " not in out
    g = json.loads(cli(capsys, "--json", d)[1])["groups"][0]
    assert [(m["pid"], m["rank"], m["trace"]) for m in g["calls_missing"]] == [
        (123, None, False), (456, "2", False)]
