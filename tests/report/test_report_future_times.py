"""A run directory whose files say times in the future (a crafted run.json `start` or `end`,
a node's heartbeat): each is ignored, never taken as now or as when the run ended, and
`shimgen report` and `shimgen top` say so in one escaped line each."""

from __future__ import annotations

import json
import shutil
import time
from types import SimpleNamespace

from shimgen.report.main import report
from shimgen.runenv import HEARTBEAT
from shimgen.top import main as top
from shimgen.trace import job, live
from tests.report.test_tracefile_reader import real_file  # noqa: F401

YEAR_NS = 365 * 86400 * 10**9


def _stamp(ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ns // 10**9))


def test_a_run_end_in_the_future_is_not_when_a_died_process_call_is_measured_to(tmp_path):
    now = time.time_ns()
    (tmp_path / HEARTBEAT).write_text(f"{now + YEAR_NS}\n")
    busy = SimpleNamespace(tid=1, function="cuCtxSynchronize", real_ns=now - 5 * 10**9,
                           mono_ns=None)
    f = SimpleNamespace(pid=7, rank=None, path="p", complete=False, why_unknown="", counts=0,
                        device_bytes=None, boot_id="another boot", proc_start=None, uid=None,
                        calls=[busy], launches=[])
    for end, until in ((now + YEAR_NS, job.UNTIL_NOW), (now - 10**9, job.UNTIL_END)):
        part = live.Part(tmp_path, "h", {"end": _stamp(end)})
        p = job.judge(f, part, "h", live.boot_id(), now, time.monotonic_ns())
        assert p.state == job.DIED and p.until == until, end
        assert 3 < p.calls[0].seconds < 7, (end, p.calls[0].seconds)
    # a clock a little ahead is no future: the end is taken
    part = live.Part(tmp_path, "h", {"end": _stamp(now + 3 * 10**9)})
    assert part.end_ns(now) is not None and not part.node_running(now)


def test_report_and_top_name_each_time_in_the_future_that_they_ignored(real_file, tmp_path):  # noqa: F811
    run = tmp_path / "run\x1b[2J"
    (run / "traces").mkdir(parents=True)
    shutil.copy(real_file, run / "traces" / "1.shimtrace")
    now = time.time_ns()
    (run / "run.json").write_text(json.dumps({"command": ["x"], "start": _stamp(now + YEAR_NS),
                                              "end": _stamp(now + 2 * YEAR_NS)}))
    (run / HEARTBEAT).write_text(f"{now + YEAR_NS}\n")
    shown = "run\\x1b[2J"
    for out, lead in ((report([run]), "ignored    "), (top.once(run, False), "(ignored: ")):
        lines = [line for line in out.splitlines() if line.startswith(lead)]
        assert all(line.isprintable() for line in out.splitlines()), out
        assert len(lines) == 3, out
        assert any(f"{shown}/run.json: its start is 3153" in line for line in lines), lines
        assert any(f"{shown}/run.json: its end is 6307" in line for line in lines), lines
        assert any(f"{shown}/{HEARTBEAT}: its time is 3153" in line for line in lines), lines
    data = json.loads(report([run], fmt="json"))["sources"][0]
    assert len(data["ignored"]) == 3
    assert len(json.loads(top.once(run, True))["ignored"]) == 3
    (run / "run.json").write_text(json.dumps({"command": ["x"], "end": _stamp(now)}))
    (run / HEARTBEAT).write_text(f"{now}\n")
    assert "ignored" not in report([run]) and "ignored" not in top.once(run, False)
