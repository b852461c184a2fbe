"""`shimgen report`'s in-flight view (shimgen/report/inflight.py) on processes made here, no
shim: which traces `attach` reads and what it notes, the header's running and died lines,
the section's sentence (a launch, unknown calls, one more call or several, idle processes
or ranks), its table (unknown ages, ranks and hosts, names cut, the first SHOWN calls) and
its JSON (each call, the last launch, what is not known)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from shimgen.errors import ShimgenError
from shimgen.report import inflight as report_inflight
from shimgen.trace import NOT_FINISHED, inflight, job, live
from tests.run.test_inflight_units import _file


def _now(pid: int, rank, state: str, seconds=(), host: str = "h", launches=(),
         why: str = "") -> job.ProcNow:
    now = job.ProcNow(_file(f"/t/{pid}", 1, False, pid=pid, rank=rank), host)
    now.state, now.why_unknown, now.launches = state, why, list(launches)
    now.calls = [job.Busy(pid * 10 + k, f"cu{pid}_{k}", x, None) for k, x in enumerate(seconds)]
    return now


def _reported(now: job.ProcNow | None, complete: bool = False, pid: int = 0) -> SimpleNamespace:
    """A report.Process as report/inflight.py reads it."""
    last = SimpleNamespace(now=now, rank=now.rank if now else None, pid=now.pid if now else pid)
    return SimpleNamespace(complete=complete, last=last)


def test_attach_reads_the_unfinished_binary_traces_and_keeps_a_died_ones_note(monkeypatch,
                                                                            tmp_path):
    part = SimpleNamespace(path=tmp_path / "node2", ignored=lambda now: ["a heartbeat"])
    monkeypatch.setattr(live, "parts", lambda d: [SimpleNamespace(
        path=tmp_path / "top", ignored=lambda now: []), part])
    monkeypatch.setattr(live, "boot_id", lambda: "here")
    read: list[str] = []

    def read_file(path):
        read.append(Path(path).name)
        if Path(path).name == "bad.shimtrace":
            raise ShimgenError("unreadable")
        return SimpleNamespace(name=Path(path).name)
    monkeypatch.setattr(inflight, "read", read_file)
    judged = []

    def judge(f, p, host, here, now_real, now_mono):
        judged.append((f.name, p, here))
        return SimpleNamespace(state=job.RUNNING if f.name == "run.shimtrace" else job.DIED)
    monkeypatch.setattr(job, "judge", judge)

    def trace(name, complete=False, source="shimtrace"):
        return SimpleNamespace(path=str(tmp_path / "node2" / "traces" / name), complete=complete,
                               source=source, host="h", now=None,
                               notes=[NOT_FINISHED, "other"])
    traces = [trace("done.shimtrace", complete=True), trace("json.json", source="json"),
              trace("bad.shimtrace"), trace("run.shimtrace"), trace("died.shimtrace")]
    s = SimpleNamespace(path=tmp_path, is_run=True, processes=traces)
    report_inflight.attach([s])
    assert read == ["bad.shimtrace", "run.shimtrace", "died.shimtrace"]
    assert judged == [("run.shimtrace", part, "here"), ("died.shimtrace", part, "here")]
    assert [t.now is not None for t in traces] == [False, False, False, True, True]
    assert [t.notes for t in traces[3:]] == [["other"], [NOT_FINISHED, "other"]]
    assert s.ignored == ["a heartbeat"]
    assert report_inflight._part_of(str(tmp_path / "node2" / "x.shimtrace"), [part]) is part
    assert report_inflight._part_of(str(tmp_path / "node3" / "traces" / "x"), [part]) is None


def test_the_headers_lines_name_the_running_and_the_died_with_their_call():
    who = lambda t: f"pid {t.pid}"  # noqa: E731
    died = _reported(_now(3, None, job.DIED, (70.0,)))
    quiet = _reported(_now(4, None, job.DIED))
    lines = report_inflight.who_lines([SimpleNamespace(pid=1), SimpleNamespace(pid=2)],
                                      [died, quiet], who, ", ".join)
    assert lines == ["running    pid 1, pid 2",
                     "died       pid 3 (died inside cu3_0 after 70.0 s), pid 4"]
    assert report_inflight.who_lines([], [], who, ", ".join) == []
    assert report_inflight.died_inside(_reported(None, pid=5)) == ""


def test_the_sentence_says_a_launch_what_is_not_known_and_one_call_more():
    la = job.LastLaunch(5, "my_kernel", 4812, 40.25)
    procs = [_reported(_now(1, None, job.RUNNING, (5.0, 1.0), launches=[la])),
             _reported(_now(2, None, job.RUNNING)), _reported(_now(3, None, job.RUNNING))]
    head = report_inflight.section(procs)[1]
    assert head == ("in flight  pid 1 on h has been inside cu1_0 for 5.0 s; stream 0x5 last "
                    "ran my_kernel (#4812), launched 40.2 s ago; 1 more call in progress; the "
                    "other 2 processes are in no driver call")
    # no call in progress: why, or that there is none, and a launch where one is known
    why = "calls in progress are not known in counts mode"
    idle = [_reported(_now(4, None, job.RUNNING, why=why)), _reported(None, complete=True,
                                                                         pid=9)]
    assert report_inflight.section(idle) == ["", f"in flight  {why}"]
    assert report_inflight.json_fields(idle)["in_flight_unknown"] == why
    idle = [_reported(_now(4, None, job.RUNNING)), _reported(_now(5, "0", job.RUNNING,
                                                                  launches=[la]))]
    assert report_inflight.section(idle) == [
        "", "in flight  no driver call in progress; rank 0 (pid 5) on h: stream 0x5 last ran "
            "my_kernel (#4812), launched 40.2 s ago"]
    assert report_inflight.json_fields(idle)["in_flight_unknown"] is None
    # a complete process's why is none of the group's
    assert report_inflight._unknown([_reported(_now(6, None, job.RUNNING, why=why),
                                               complete=True)]) == ""


def test_the_table_lists_the_first_calls_with_unknown_ages_ranks_and_hosts():
    long = "cu" + "x" * 400
    one = _now(1, None, job.RUNNING, (2.0, None, 0.5), host="")
    one.calls[0].function = long
    two = _now(2, "r" * 10, job.DIED, (3.0,), host="node-" + "n" * 20)
    lines = report_inflight.section([_reported(one), _reported(two)])
    assert lines[1].startswith("in flight  rank rrrrrrrrrr (pid 2) on node-nnnnnnnnnnnnnnnnnnnn "
                               "was inside cu2_0 for 3.0 s; 3 more calls in progress")
    assert lines[3] == f"  {'3.0':>9}  {'died':<8} {2:>8} {20:>8}  rrrrrr... node-nnnnnnn... cu2_0"
    assert lines[4] == f"  {'2.0':>9}  {'running':<8} {1:>8} {10:>8}  -      -            " + (
        long[:report_inflight.CUT] + "...")
    assert lines[5] == f"  {'0.5':>9}  {'running':<8} {1:>8} {12:>8}  -      -            cu1_2"
    assert lines[6] == f"  {'?':>9}  {'running':<8} {1:>8} {11:>8}  -      -            cu1_1"
    assert lines[7].startswith("  (a died process's calls:") and len(lines) == 8
    # the first 20 calls listed (docs/report.md), the rest counted
    many = _now(1, None, job.RUNNING, [float(k) for k in range(21)])
    lines = report_inflight.section([_reported(many)])
    assert lines[-1] == "  ... and 1 more" and len(lines) == 3 + 20 + 1
    many.calls.pop()
    assert report_inflight.section([_reported(many)])[-1].endswith(" cu1_0")


def test_a_name_longer_than_300_characters_is_shown_cut_there():
    """docs/report.md: a function's name, a rank or a host is shown whole up to 300
    characters, longer as its first 300 and "..."; the JSON has it whole."""
    whole, cut = "cu" + "w" * 298, "cu" + "c" * 299
    one = _now(1, "r" * 301, job.DIED, (9.0, 1.0), host="h" * 300)
    one.calls[0].function, one.calls[1].function = cut, whole
    lines = report_inflight.section([_reported(one)])
    assert lines[1].startswith(f"in flight  rank {'r' * 300}... (pid 1) on {'h' * 300} was "
                               f"inside {cut[:300]}... for 9.0 s")
    assert lines[3].endswith(f" {cut[:300]}...") and lines[4].endswith(f" {whole}")
    assert report_inflight.died_inside(_reported(one)) == f"died inside {cut[:300]}... after 9.0 s"
    assert [c["function"] for c in report_inflight.json_fields([_reported(one)])["in_flight"]] \
        == [cut, whole]


def test_the_json_has_each_call_and_its_processs_last_launch():
    la = job.LastLaunch(5, "_Z6kernelv", 7, 1.23456)
    unknown = job.LastLaunch(6, None, 8, None)
    procs = [_reported(_now(1, "0", job.RUNNING, (2.34567,), host="", launches=[la, unknown])),
             _reported(_now(2, None, job.DIED, (1.0,), launches=[unknown]))]
    got = report_inflight.json_fields(procs)
    assert got["in_flight"] == [
        {"pid": 1, "tid": 10, "rank": "0", "host": None, "function": "cu1_0", "seconds": 2.346,
         "state": job.RUNNING, "last_launch": {"stream": 5, "kernel": "_Z6kernelv",
                                               "kernel_demangled": "kernel()", "kernel_cut": False,
                                               "ordinal": 7,
                                               "seconds": 1.235}},
        {"pid": 2, "tid": 20, "rank": None, "host": "h", "function": "cu2_0", "seconds": 1.0,
         "state": job.DIED, "last_launch": {"stream": 6, "kernel": None,
                                            "kernel_demangled": None, "kernel_cut": False,
                                                "ordinal": 8,
                                            "seconds": None}}]
    assert got["running"] == [1] and got["in_flight_unknown"] is None
