"""GPU time per kernel (runtime/kernels/gputime.c, docs/design.md "GPU time per kernel") on
the FAKE driver of tests/c/fake_kernels_libcuda.c, whose timing events read a fake GPU clock
per stream that each launch advances by gx * 1000 + len(name) ns (fake_kernels_events.c):
each kernel's GPU total in the trace and the report exactly the fake's, graphs timed as a
whole; sampling one launch in N; no event recorded into a capture, those launches said;
events the driver refused said; launches still running at exit said, never waited for; a
context destroyed first; a SIGKILLed process keeping what was resolved; a forked child
forgetting its parent's pairs; the calls timeline's GPU track; launches and resolutions from
racing threads each counted once; `run --gpu-time`'s value."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from shimgen.cli import glue_gpu_time
from shimgen.errors import ShimgenError
from shimgen.run.options import gpu_time_option
from shimgen.runenv import KERN_GRAPH_PREFIX
from tests.runtime.test_kernels import MY, NCCL, env_for, one_trace, report, run_ops
from tests.shimcache import fake_driver_shim


@pytest.fixture(scope="module")
def fake(probes):
    return probes / "libfake_kernels_libcuda.so"


@pytest.fixture(scope="module")
def kshim(fake):
    return fake_driver_shim(fake)


# (the ops' graph, 0x1234, is not one the shim saw instantiated: its count is not known)
GRAPH = KERN_GRAPH_PREFIX + "?"


def ns(name: str, gx: int) -> int:
    return gx * 1000 + len(name)


def gpu_by_name(t) -> dict[str, tuple[int, int]]:
    return {k.name: (k.gpu.ns, k.gpu.timed) for k in t.kernels.kernels if k.gpu and k.gpu.timed}


def test_gpu_times_are_the_fakes(probes, fake, kshim, tmp_path):
    ops = [f"mod:{MY}", f"lib:{NCCL}", "kfunc:1", "launch:0:0:2:256:3", "launch:0:0:5:256:1",
           "ex:2:7:3:1:2", "graph:7:2", "sync:0"]
    got = run_ops(probes, fake, kshim, tmp_path / "t", ops, SHIMGEN_GPU_TIME="1")
    assert got["gpu_ns"] == {MY: 3 * ns(MY, 2) + ns(MY, 5), NCCL: 2 * ns(NCCL, 3),
                             "graph": 2 * ns("graph", 1)}, got
    # (two events a launch, and the context's reference event of the GPU track)
    assert got["recorded_in_capture"] == 0 and got["events"] == 2 * 8 + 1, got
    t = one_trace(tmp_path / "t")
    assert gpu_by_name(t) == {MY: (got["gpu_ns"][MY], 4), NCCL: (got["gpu_ns"][NCCL], 2),
                              GRAPH: (got["gpu_ns"]["graph"], 2)}
    assert t.kernels.gpu_every == 1 and not any(t.kernels.gpu_not.values())
    g = json.loads(report("--json", tmp_path / "t"))["groups"][0]
    rows = {k["name"]: k for k in g["kernels"]}
    busy = sum(got["gpu_ns"].values())
    mine = rows[MY]
    assert (mine["gpu_total_ns"], mine["gpu_timed"], mine["gpu_max_ns"]) == \
        (got["gpu_ns"][MY], 4, ns(MY, 5))
    assert mine["gpu_mean_ns"] == round(got["gpu_ns"][MY] / 4)
    assert mine["gpu_share"] == pytest.approx(got["gpu_ns"][MY] / busy)
    # one time for each launch of a kernel: its percentiles are that time, exactly
    assert (rows[NCCL]["gpu_p50_ns"], rows[NCCL]["gpu_p99_ns"]) == (ns(NCCL, 3),) * 2
    assert mine["gpu_p99_ns"] == ns(MY, 5) and ns(MY, 2) * 0.75 <= mine["gpu_p50_ns"] <= \
        ns(MY, 2) * 1.25
    assert g["gpu_time"] == {"every": [1], "pending": 0,
                             "not_timed": dict.fromkeys(g["gpu_time"]["not_timed"], 0)}
    text = report(tmp_path / "t")
    assert "GPU time" in text and "timed: every launch" in text and "not timed" not in text


def test_an_instantiated_graph_is_timed_as_a_whole_under_its_count(probes, fake, kshim,
                                                                      tmp_path):
    """(The fake's graph of 2 kernel nodes runs them, then itself, on its stream's clock.)"""
    got = run_ops(probes, fake, kshim, tmp_path / "t",
                  ["inst:2:0:0:0", "glaunch:0:4:3", "capture:9", "glaunch:0:9:1",
                   "endcapture:9", "sync:0"], SHIMGEN_GPU_TIME="1")
    one = 2 * ns("graph_kernels", 1) + ns("graph", 1)
    assert got["gpu_ns"] == {"graph_kernels": 6 * ns("graph_kernels", 1),
                             "graph": 3 * ns("graph", 1)}, got
    t = one_trace(tmp_path / "t")
    assert gpu_by_name(t) == {KERN_GRAPH_PREFIX + "2": (3 * one, 3)}
    assert t.kernels.gpu_not["capture"] == 1


def test_a_ptsz_launchs_stream_0_is_timed_on_the_per_thread_stream(probes, fake, kshim,
                                                                     tmp_path):
    """(Its events recorded on stream 0, the legacy stream, would time nothing of it.)"""
    got = run_ops(probes, fake, kshim, tmp_path / "t",
                  [f"mod:{MY}", "launchptsz:0:0:2:1:2", "coopptsz:0:0:3:1:1",
                   "exptsz:0:0:4:1:1", "launch:0:0:5:1:1"], SHIMGEN_GPU_TIME="1")
    want = 2 * ns(MY, 2) + ns(MY, 3) + ns(MY, 4) + ns(MY, 5)
    assert got["gpu_ns"] == {MY: want}
    assert gpu_by_name(one_trace(tmp_path / "t")) == {MY: (want, 5)}


def test_sampling_times_one_launch_in_n(probes, fake, kshim, tmp_path):
    got = run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{MY}", "launch:0:0:2:256:10",
                                                        "graph:0:3"],
                  SHIMGEN_GPU_TIME="every=3")
    t = one_trace(tmp_path / "t")
    # every graph launch counted, timed or not (launches 11 to 13 of the process: the 13th
    # timed, as were the 1st, 4th, 7th and 10th)
    graph = next(k for k in t.kernels.kernels if k.name == GRAPH)
    assert (graph.launches, graph.gpu.timed, graph.gpu.ns) == (3, 1, ns("graph", 1))
    t.kernels.kernels.remove(graph)
    assert gpu_by_name(t) == {MY: (4 * ns(MY, 2), 4)} and got["events"] == 2 * 5 + 1
    assert t.kernels.gpu_every == 3 and t.kernels.gpu_not["sampled"] == 6 + 2
    text = report(tmp_path / "t")
    assert "1 launch in 3 (every=3)" in text and "skipped by the sampling 8" in text


def test_no_event_is_recorded_into_a_capture(probes, fake, kshim, tmp_path):
    ops = [f"mod:{MY}", "capture:9", "launch:0:9:1:1:2", "endcapture:9", "launch:0:0:1:1:1"]
    got = run_ops(probes, fake, kshim, tmp_path / "t", ops, SHIMGEN_GPU_TIME="1")
    assert got["recorded_in_capture"] == 0 and got["records"] == 2 + 1, got
    t = one_trace(tmp_path / "t")
    assert gpu_by_name(t) == {MY: (ns(MY, 1), 1)} and t.kernels.gpu_not["capture"] == 2
    assert "into a stream capture 2" in report(tmp_path / "t")


@pytest.mark.parametrize("refuse,timed", [("create", 0), ("record:2", 0), ("record:3", 1)])
def test_events_the_driver_refused_are_said(probes, fake, kshim, tmp_path, refuse, timed):
    """record:N: the driver records N events, then none (the first is the context's
    reference of the GPU track, then each launch's start and end)."""
    run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{MY}", "launch:0:0:1:1:4"],
            SHIMGEN_GPU_TIME="1", FAKE_KERN_REFUSE=refuse)
    t = one_trace(tmp_path / "t")
    assert gpu_by_name(t) == ({MY: (timed * ns(MY, 1), timed)} if timed else {})
    assert t.kernels.gpu_not["refused"] == 4 - timed
    assert f"events refused by the driver {4 - timed}" in report(tmp_path / "t")


def test_launches_still_running_at_exit_are_said_not_waited_for(probes, fake, kshim, tmp_path):
    got = run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{MY}", "launch:0:0:1:1:3",
                                                        "query:0"],
                  SHIMGEN_GPU_TIME="1", FAKE_KERN_NOT_READY="1")
    assert got["queried_not_ready"] >= 3, got
    t = one_trace(tmp_path / "t")
    assert gpu_by_name(t) == {} and t.kernels.gpu_not["unfinished"] == 3
    assert t.kernels.gpu_pending == 0
    assert "still running at exit 3" in report(tmp_path / "t")


def test_a_query_while_the_gpu_is_behind_asks_a_few_pairs(probes, fake, kshim, tmp_path):
    """100 launches not done, then 10 queries the driver answers done (cuEventQuery of the
    program's own event would be one): each resolve asks at most 16 pairs not done, then
    stops; at exit every pair is asked once more, and counted unfinished."""
    got = run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{MY}", "launch:0:0:1:1:100",
                                                        *["ctxsync:"] * 10],
                  SHIMGEN_GPU_TIME="1", FAKE_KERN_NOT_READY="1")
    assert got["queried_not_ready"] == 10 * 16 + 100, got
    assert one_trace(tmp_path / "t").kernels.gpu_not["unfinished"] == 100


def test_a_context_destroyed_first_drops_its_pairs(probes, fake, kshim, tmp_path):
    got = run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{MY}", "launch:0:0:1:1:2",
                                                        "ctxdestroy:"], SHIMGEN_GPU_TIME="1")
    assert got["asked_destroyed"] == 0, got  # (dropped before, never asked after)
    t = one_trace(tmp_path / "t")
    assert gpu_by_name(t) == {} and t.kernels.gpu_not["context"] == 2
    assert "context destroyed first 2" in report(tmp_path / "t")


def test_a_sigkilled_process_keeps_what_was_resolved(probes, fake, kshim, tmp_path):
    ops = [f"mod:{MY}", "launch:0:0:2:1:3", "ctxsync:", "launch:0:0:1:1:2", "sync:0"]
    env = env_for(fake, kshim, tmp_path / "t", SHIMGEN_GPU_TIME="1", FAKE_KERN_HANG="1")
    proc = subprocess.Popen([probes / "kernlaunch", *ops], env=env, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.stdout.close()
    t = one_trace(tmp_path / "t")
    assert gpu_by_name(t) == {MY: (3 * ns(MY, 2), 3)} and t.kernels.gpu_pending == 2
    assert "2 launches never resolved" in report(tmp_path / "t")


def test_a_forked_child_forgets_its_parents_pairs(probes, fake, kshim, tmp_path):
    # the parent: 2 launches resolved, 1 pending at the fork; the child: 1 of its own
    run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{MY}", "launch:0:0:2:1:2", "ctxsync:",
                                                  "launch:0:0:3:1:1", "fork:",
                                                  "launch:0:0:1:1:1", "ctxsync:"],
            SHIMGEN_GPU_TIME="1")
    traces = [load_file(f) for f in sorted((tmp_path / "t").glob("*.shimtrace"))]
    got = sorted(gpu_by_name(t).get(MY) for t in traces)
    assert got == [(ns(MY, 1), 1), (2 * ns(MY, 2) + ns(MY, 3), 3)]
    assert [t.kernels.gpu_pending for t in traces] == [0, 0]
    assert [sum(t.kernels.gpu_not.values()) for t in traces] == [0, 0]


def load_file(path):
    from shimgen.trace.binary import load

    return load(path)


def test_run_gpu_time_values():
    assert glue_gpu_time(["run", "--gpu-time", "prog", "--gpu-time"]) == \
        ["run", "--gpu-time=1", "prog", "--gpu-time"]
    assert glue_gpu_time(["run", "--trace", "calls", "--gpu-time", "every=10", "--", "p"]) == \
        ["run", "--trace", "calls", "--gpu-time=every=10", "--", "p"]
    assert glue_gpu_time(["run", "prog", "--gpu-time"]) == ["run", "prog", "--gpu-time"]
    assert gpu_time_option("every=10") == "every=10" and gpu_time_option("every=1") == "1"
    for bad in ("every=0", "every=x", "2", "every=01", "every=1000000001"):
        with pytest.raises(ShimgenError, match="give no value, or every=N"):
            gpu_time_option(bad)


def test_the_calls_timeline_has_a_gpu_track_per_stream(probes, fake, kshim, tmp_path):
    import io

    from shimgen.report import calls_timeline
    from shimgen.report.calls import Filters, shown

    run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{MY}", "mod:_Z5otherv",
                                                  "launch:0:0:2:1:2", "launch:1:5:3:1:1",
                                                  "ctxsync:"],
            mode="calls", SHIMGEN_GPU_TIME="1")
    _, (g,), _ = shown([tmp_path / "t"], Filters())
    out = io.StringIO()
    calls_timeline.timeline_text(g, out)
    events = json.loads(out.getvalue())["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and
             e["name"] == "thread_name" and e["args"]["name"].startswith("GPU: ")}
    assert sorted(names.values()) == ["GPU: stream 0x5", "GPU: the null stream"]
    gpu = [(names[e["tid"]], e["name"], e["ts"], e["dur"]) for e in events
           if e.get("cat") == calls_timeline.GPU_CAT]
    null = [x for x in gpu if x[0] == "GPU: the null stream"]
    assert [(n, d) for _, n, _, d in null] == [("my_kernel(float*, int)", ns(MY, 2) / 1e3)] * 2
    # one after the other on the stream's (fake) GPU clock, from the context's reference
    assert null[1][2] - null[0][2] == pytest.approx(ns(MY, 2) / 1e3, abs=0.002)
    assert [(n, d) for s, n, _, d in gpu if s != null[0][0]] == \
        [("other()", ns("_Z5otherv", 3) / 1e3)]
    # the reference was recorded inside the first launch's call: its kernel starts there
    first = next(e for e in events if e.get("cat") == calls_timeline.CAT and
                 e["args"].get("kernel") == MY)
    assert first["ts"] - 0.002 <= null[0][2] <= first["ts"] + first["dur"] + 0.002


RACE_RUNS = 8  # each 8 threads x 400 launches, random spins, resolved meanwhile


def test_launches_from_racing_threads_are_each_timed_once(probes, fake, kshim, tmp_path):
    """Pairs taken by 8 threads at once, each querying its stream after each launch, while
    another thread resolves them (cuStreamQuery in a loop): each launch timed once, its time
    whole (every launch here took the same
    time, so any pair resolved twice, lost or mixed shows in the totals)."""
    d, n = ns(MY, 1), 8 * 400
    for run in range(RACE_RUNS):
        traces = tmp_path / f"t{run}"
        got = run_ops(probes, fake, kshim, traces, [f"mod:{MY}", "racers:8:400:0"],
                      SHIMGEN_GPU_TIME="1")
        assert got["gpu_ns"] == {MY: n * d}, got
        k = next(k for k in one_trace(traces).kernels.kernels if k.name == MY)
        t = one_trace(traces).kernels
        nots = {r: c for r, c in t.gpu_not.items() if c}
        assert k.launches == n and k.gpu.timed + nots.pop("pool", 0) == n and not nots, nots
        assert (k.gpu.ns, k.gpu.max_ns, sum(k.gpu.hist)) == (k.gpu.timed * d, d, k.gpu.timed)
        assert t.gpu_pending == 0


def test_run_gives_the_shim_its_gpu_time_and_no_inherited_one(tmp_path):
    from pathlib import Path

    from shimgen.run.child import child_environment
    from shimgen.run.options import RunOptions

    opts = RunOptions(command=["true"], driver=Path("/x"), driver_given=False, trace="time",
                      gates=None, gate_profile=None, out=None)
    base = {"SHIMGEN_GPU_TIME": "every=3", "PATH": "/bin"}
    assert "SHIMGEN_GPU_TIME" not in child_environment(base, tmp_path / "s.so", tmp_path, opts)
    opts.gpu_time = gpu_time_option("every=10")
    env = child_environment(base, tmp_path / "s.so", tmp_path, opts)
    assert env["SHIMGEN_GPU_TIME"] == "every=10"
