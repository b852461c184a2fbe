"""The decisions of in flight, `top` and `--stall` on what trace files say, without a job:
which trace files a part has and which image of an exec chain is the process
(shimgen/trace/job.py), the order and counts of `top`'s rows (shimgen/top/view.py),
`--stall`'s "left after" (shimgen/run/watch.py), and the command line that their lines name
(shimgen/trace/cmdline.py)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from shimgen.report import inflight as report_inflight
from shimgen.run import watch
from shimgen.top import view
from shimgen.trace import job


def _file(path: str, start_ns: int, complete: bool, pid: int = 7, rank=None) -> SimpleNamespace:
    return SimpleNamespace(path=path, pid=pid, rank=rank, boot_id="b", proc_start=99,
                           complete=complete, start_ns=start_ns, calls=[], counts=0,
                           why_unknown="", device_bytes=None, uid=None, functions={},
                           launches=[])


def test_the_trace_files_of_a_part_are_its_own_and_its_traces_directorys(tmp_path):
    """Named *.shimtrace, not hidden (a file being made is), at the top or under traces/."""
    (tmp_path / job.TRACES).mkdir()
    for name in ("a" + job.TRACE_SUFFIX, ".b" + job.TRACE_SUFFIX, "c.txt",
                 f"{job.TRACES}/d{job.TRACE_SUFFIX}", f"{job.TRACES}/e.json"):
        (tmp_path / name).write_text("")
    assert job._trace_files(tmp_path) == [tmp_path / ("a" + job.TRACE_SUFFIX),
                                          tmp_path / job.TRACES / ("d" + job.TRACE_SUFFIX)]


def test_a_part_that_cannot_be_listed_still_has_its_traces_directorys_files(tmp_path,
                                                                           monkeypatch):
    """A part's directory that can be entered but not read (listing it fails, which a mode
    does not make so for root): the files under its traces/ are still found."""
    (tmp_path / job.TRACES).mkdir()
    for name in ("a" + job.TRACE_SUFFIX, f"{job.TRACES}/d{job.TRACE_SUFFIX}"):
        (tmp_path / name).write_text("")
    listdir = os.listdir

    def refused(path):
        if Path(path) == tmp_path:
            raise PermissionError(13, "Permission denied", str(path))
        return listdir(path)

    monkeypatch.setattr(job.os, "listdir", refused)
    assert job._trace_files(tmp_path) == [tmp_path / job.TRACES / ("d" + job.TRACE_SUFFIX)]


def test_an_exec_chain_is_one_process_its_last_image():
    """exec keeps pid and start time: the image that started last is the one running, in
    whatever order the files are read."""
    before = _file("/t/before", 100, True)
    after = _file("/t/after", 200, False)
    other = _file("/t/other", 50, False, pid=8)
    for files in ([before, after, other], [after, before, other], [other, after, before]):
        got = job._last_images([(f, None, "") for f in files])
        assert sorted(e[0].path for e in got) == ["/t/after", "/t/other"]
    ended, running = _file("/t/ended", 300, True), _file("/t/running", 300, False)
    for files in ([ended, running], [running, ended]):  # started at once: the one not ended
        assert [e[0].path for e in job._last_images([(f, None, "") for f in files])] == [
            "/t/running"]
    unbooted = [_file("/t/x", 1, False), _file("/t/y", 2, False)]
    for f in unbooted:
        f.boot_id = ""  # no boot id: each file is a process of its own
    assert len(job._last_images([(f, None, "") for f in unbooted])) == 2


def test_a_process_is_judged_by_its_pid_on_this_boot_and_by_its_node_elsewhere(monkeypatch):
    """On this machine (same boot id) a process runs while its pid lives; on another its
    node's heartbeat decides, and without a node it died. A call's age: from the monotonic
    clock here, the real clock elsewhere, until the node's run ended for a died one."""
    alive: list = []
    monkeypatch.setattr(job.live, "alive_here", lambda pid, start, uid: alive.append(pid) or True)
    call = SimpleNamespace(tid=3, function="cuX", real_ns=1_000_000_000, mono_ns=500_000_000)

    def judged(boot, part, now_real=4_000_000_000, now_mono=2_500_000_000):
        f = _file("/t/a", 1, False)
        f.boot_id, f.calls = boot, [call]
        return job.judge(f, part, "h", "b", now_real, now_mono)

    here = judged("b", None)
    assert (here.state, [c.seconds for c in here.calls], alive) == (job.RUNNING, [2.0], [7])
    young = SimpleNamespace(tid=4, function="cuY", real_ns=3_500_000_000, mono_ns=2_000_000_000)
    f = _file("/t/a", 1, False)
    f.boot_id, f.calls = "b", [young, call]
    assert [c.seconds for c in job.judge(f, None, "h", "b", 0, 2_500_000_000).calls] == [2.0, 0.5]
    alive.clear()
    node = SimpleNamespace(node_running=lambda now: True, end_ns=lambda now: None)
    away = judged("other", node)
    assert (away.state, [c.seconds for c in away.calls], alive) == (job.RUNNING, [3.0], [])
    f = _file("/t/a", 1, False)
    f.boot_id, f.calls = "other", [SimpleNamespace(tid=5, function="cuZ", real_ns=None,
                                                   mono_ns=None), young]
    assert [c.seconds for c in job.judge(f, node, "h", "b", 4_000_000_000, 0).calls] == [
        0.5, None]  # an age not known: last
    ended = SimpleNamespace(node_running=lambda now: False, end_ns=lambda now: 2_500_000_000)
    died = judged("other", ended)
    assert (died.state, died.until, [c.seconds for c in died.calls]) == (
        job.DIED, job.UNTIL_END, [1.5])
    lost = judged("other", None)
    assert (lost.state, lost.until, [c.seconds for c in lost.calls]) == (
        job.DIED, job.UNTIL_NOW, [3.0])


def test_a_processs_longest_call_and_its_key():
    p = job.ProcNow(_file("/t/a", 1, False), "h")
    p.calls = [job.Busy(1, "cuA", None), job.Busy(2, "cuB", None)]
    assert p.longest.tid == 1  # none timed: the first
    p.calls = [job.Busy(1, "cuA", None), job.Busy(2, "cuB", 0.5), job.Busy(3, "cuC", 2.0)]
    assert p.longest.tid == 3
    assert p.key == ("b", 7, 99)
    f = _file("/t/a", 1, False)
    f.boot_id = ""
    assert job.ProcNow(f, "h").key == ("/t/a",)  # no boot id: the file is the process
    f = _file("/t/a", 1, False)
    f.proc_start = None
    assert job.ProcNow(f, "h").key == ("/t/a",)


def _proc(pid: int, rank: str | None, state: str = job.RUNNING, calls: int = 0) -> job.ProcNow:
    p = job.ProcNow(_file(f"/t/{pid}", 1, state == job.COMPLETE, pid=pid, rank=rank), "h")
    p.state = state
    p.calls = [job.Busy(1, "cuX", 1.0, None) for _ in range(calls)]
    return p


def test_top_orders_ranks_by_number():
    procs = [_proc(1, "10"), _proc(2, "2"), _proc(3, None), _proc(4, "1"), _proc(5, "x")]
    rows = [line.split()[1] for line in view.text("r", procs, {}, []).splitlines()[2:]]
    assert rows == ["1", "2", "10", "x", "-"]
    got = view.as_json("r", procs, {}, [])
    assert [p["rank"] for p in got["processes"]] == ["1", "2", "10", "x", None]
    assert {p["host"] for p in got["processes"]} == {"h"}
    assert {p["in_flight_unknown"] for p in got["processes"]} == {None}
    procs[0].why_unknown = "calls in progress are not known in counts mode"
    assert view.as_json("r", procs, {}, [])["processes"][2]["in_flight_unknown"] == (
        "calls in progress are not known in counts mode")
    assert (got["schema"], got["version"]) == ("shimgen-top", 1)  # a change is a new version


def test_top_counts_processes_by_their_state_and_the_calls_of_those_not_complete():
    procs = [_proc(1, "0", job.RUNNING, 2), _proc(2, "1", job.DIED, 1),
             _proc(3, "2", job.COMPLETE, 4), _proc(4, "3", job.RUNNING), _proc(5, "4", job.DIED)]
    text = view.text("r", procs, {}, []).splitlines()
    head = text[0]
    assert text[2].endswith(" inside cuX 1.0 s (tid 1)") and text[3].endswith(
        " died inside cuX 1.0 s (tid 1)") and text[5].endswith(" -"), text
    assert head.endswith("   5 processes: 2 running, 1 complete, 2 died; 3 calls in flight"), head
    got = view.as_json("r", procs, {}, [])
    assert got["running"] == [1, 4] and [d["pid"] for d in got["died"]] == [2, 5]
    assert [c["pid"] for c in got["in_flight"]] == [1, 1, 2]
    procs[0].calls = [job.Busy(7, "cuX", None), job.Busy(8, "cuX", 0.5004)]
    procs[1].calls = [job.Busy(9, "cuX", 5.0)]
    got = view.as_json("r", procs, {}, [])["in_flight"]  # the longest first, unknown last
    assert [(c["pid"], c["tid"], c["host"], c["seconds"], c["state"]) for c in got] == [
        (2, 9, "h", 5.0, job.DIED), (1, 8, "h", 0.5, job.RUNNING), (1, 7, "h", None, job.RUNNING)]
    one = view.text("r", procs[1:2], {}, []).splitlines()[0]
    assert one.endswith("   1 process: 0 running, 0 complete, 1 died; 1 call in flight"), one


def test_a_calls_seconds_are_minutes_from_ten_minutes_on():
    # (one rule for `top` and the report's in-flight lines)
    assert view.seconds_text is report_inflight.seconds_text
    assert [view.seconds_text(x) for x in (None, 0.04, 599.9, 600.0, 6000.0)] == [
        "?", "0.0 s", "599.9 s", "10.0 min", "100.0 min"]


def _reported(pid: int, rank, state: str, seconds=()) -> SimpleNamespace:
    """A report.Process as report/inflight.py reads it, its calls in progress `seconds`."""
    now = None
    if state != job.COMPLETE:
        now = _proc(pid, rank, state)
        now.calls = [job.Busy(pid * 10 + k, "cuX", x, None) for k, x in enumerate(seconds)]
    return SimpleNamespace(complete=state == job.COMPLETE,
                           last=SimpleNamespace(now=now, rank=rank, pid=pid))


def test_the_in_flight_sentence_counts_the_processes_in_no_call_by_their_state():
    """The longest call, the other calls in progress (a died process's too), and the
    processes neither complete nor in a call: a complete one is not among them, nor
    decides whether they are called ranks."""
    procs = [_reported(1, "0", job.RUNNING, (5.0, 1.0)), _reported(2, "1", job.RUNNING),
             _reported(3, "2", job.DIED, (3.0,)), _reported(4, "3", job.COMPLETE),
             _reported(5, "4", job.RUNNING)]
    assert report_inflight.section(procs)[1] == (
        "in flight  rank 0 (pid 1) on h has been inside cuX for 5.0 s; 2 more calls in progress; "
        "the other 2 ranks are in no driver call")
    assert report_inflight.section(procs[2:4] + [_reported(6, None, job.RUNNING)])[1] == (
        "in flight  rank 2 (pid 3) on h was inside cuX for 3.0 s; "
        "the other 1 process is in no driver call")
    assert report_inflight.section(procs[3:4]) == []
    # ranks are named as such when every process not complete has one: a complete one
    # without a rank (a launcher that ended) does not make them processes
    assert report_inflight.section(procs[:3] + [_reported(7, None, job.COMPLETE)])[1].endswith(
        "; 2 more calls in progress; the other 1 rank is in no driver call")
    got = report_inflight.json_fields(procs)
    assert got["running"] == [1, 2, 5]
    assert [(c["pid"], c["seconds"]) for c in got["in_flight"]] == [(1, 5.0), (3, 3.0), (1, 1.0)]


def test_a_stalled_call_left_after_its_whole_time(monkeypatch):
    """A call seen 5 s into it, over a 2 s threshold, then seen ended: left after at least
    5 s, counted from its start, not from when it was seen."""
    call = job.Busy(3, "cuX", 5.0, 123)
    proc = SimpleNamespace(key=("b", 7, 99), pid=7, rank="0", calls=[call], proc_start=None,
                           boot_id=None, launches=[])
    answers = [([proc], []), ([], [])]
    monkeypatch.setattr(job, "snapshot", lambda *a, **k: answers.pop(0))
    w = watch.Watcher(SimpleNamespace(path=Path("/nonexistent")), 2.0)
    said: list[str] = []
    monkeypatch.setattr(w, "_say", said.append)
    w._look()
    w._look()
    assert said[0] == watch.stall_line(7, "0", "cuX", 2.0)
    assert said[1].startswith("shimgen: pid 7 (rank 0) left cuX after ")
    assert float(said[1].split(" after ")[1].split()[0]) >= 5.0


def test_stall_reads_only_the_top_part_and_top_every_part(monkeypatch, tmp_path):
    """--stall's watcher says what its own node does (only_top); top reads every node's."""
    parts = [SimpleNamespace(path=tmp_path / n, host=n) for n in ("top", "node2", "node3")]
    monkeypatch.setattr(job.live, "parts", lambda d: parts)
    asked: list = []
    monkeypatch.setattr(job, "_trace_files", lambda d: asked.append(d.name) or [])
    assert job.snapshot(tmp_path, only_top=True) == ([], []) and asked == ["top"]
    asked.clear()
    assert job.snapshot(tmp_path) == ([], []) and asked == ["top", "node2", "node3"]


def test_a_command_line_is_the_live_processs_own_whole_to_80_characters():
    """A process's command line (the stall notices', report's and top's), its words joined
    by spaces: whole up to SHOWN_MAX characters, cut to SHOWN_MAX with "..." past it; none
    for another start time, pid or boot, nor once the process is gone."""
    import subprocess
    import sys
    import time

    from shimgen.trace import live
    from shimgen.trace.cmdline import SHOWN_MAX, command_line

    # argv[0] short and fixed, so that the checkout's path (the interpreter's) never makes
    # the line longer than SHOWN_MAX before the words the test adds
    code = "import sys; sys.stdin.read()"
    base = f"py -c {code} "
    for extra, want in ((SHOWN_MAX - len(base), None), (SHOWN_MAX - len(base) + 1, "cut")):
        p = subprocess.Popen(["py", "-c", code, "y" * extra], executable=sys.executable,
                             stdin=subprocess.PIPE)
        try:
            # Popen returns once the child's exec closed its descriptors, a moment before
            # the kernel has set its arguments' place: its cmdline reads empty until then
            deadline = time.monotonic() + 10
            while not Path(f"/proc/{p.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
                time.sleep(0.001)
            start = live.proc_start(p.pid)
            whole = base + "y" * extra
            got = command_line(p.pid, start)
            assert got == (whole if want is None else whole[:SHOWN_MAX - 3] + "..."), got
            assert len(got) == SHOWN_MAX and command_line(p.pid, start, live.boot_id()) == got
            for args in ((p.pid, start + 1), (p.pid, None), (0, start), (-p.pid, start),
                         (p.pid, start, ""), (p.pid, start, "another boot")):
                assert command_line(*args) is None, args
        finally:
            p.communicate(b"")
        assert command_line(p.pid, start) is None


def test_the_parts_of_a_run_are_the_top_then_each_node_directory_by_name(tmp_path):
    """A run's parts: the top, then each directory with a run.json and a traces/ of its own,
    by name, its host its run.json's (else its name); not traces/, a hidden directory, a
    symbolic link to a node's directory, one without traces/ or run.json, nor a file."""
    import json

    from shimgen.runenv import RUN_JSON, TRACES
    from shimgen.trace import live

    run = tmp_path / "run"
    (run / TRACES).mkdir(parents=True)
    (run / RUN_JSON).write_text(json.dumps({"host": "top"}))

    def node(name, host=None, traces=True, record=True):
        d = run / name
        d.mkdir()
        if traces:
            (d / TRACES).mkdir()
        if record:
            (d / RUN_JSON).write_text(json.dumps({"host": host} if host else {}))
        return d
    node("b", "host-b")
    node("a")
    node(".c", "host-c")
    node("d", traces=False)
    node("e", record=False)
    (run / TRACES / RUN_JSON).write_text("{}")
    (run / "f").symlink_to(node("g", "host-g", record=True).resolve())
    (run / "h").write_text("{}")
    got = [(p.path, p.host) for p in live.parts(run)]
    assert got == [(run, "top"), (run / "a", "a"), (run / "b", "host-b"),
                   (run / "g", "host-g")], got
    assert [p.run for p in live.parts(run)][2] == {"host": "host-b"}
