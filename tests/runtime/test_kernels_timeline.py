"""The timeline of a calls run (report/calls_timeline.py) on the kernels' FAKE driver
(tests/c/fake_kernels_libcuda.c): each launch named after its kernel, demangled unless
--mangled, its call on its thread's track and an instant event on its stream's, a track per
stream after the threads'; a name the trace file cut given as it is there and in `report
--calls`."""

from __future__ import annotations

import io
import json

import pytest

from shimgen.report import calls_timeline
from shimgen.report.calls import Filters, shown
from shimgen.report.kernels import demangle
from shimgen.runenv import KERN_NAME_BYTES
from tests.runtime.test_kernels import MY, report, run_ops
from tests.shimcache import fake_driver_shim


@pytest.fixture(scope="module")
def fake(probes):
    return probes / "libfake_kernels_libcuda.so"


@pytest.fixture(scope="module")
def kshim(fake):
    return fake_driver_shim(fake)


def timeline(traces, mangled: bool = False) -> list[dict]:
    _, (g,), _ = shown([traces], Filters(mangled=mangled))
    out = io.StringIO()
    calls_timeline.timeline_text(g, out)
    return json.loads(out.getvalue())["traceEvents"]


def test_each_launch_on_its_streams_track(probes, fake, kshim, tmp_path):
    run_ops(probes, fake, kshim, tmp_path / "t", [
        f"mod:{MY}", "enumf:_Z5otherv", "launch:0:0:2:256:2", "ex:1:7:1:1:1",
        "coop:0:7:1:1:1", "host:4:1", "inst:3:0:0:0", "glaunch:0:7:1", "sync:7"], mode="calls")
    events = timeline(tmp_path / "t")
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    tracks = {tid: n for tid, n in names.items() if tid >= calls_timeline.STREAM_TID}
    assert sorted(tracks.values()) == ["stream#1 (launches)", "stream#2 (launches)",
                                       "the null stream (launches)"]
    on = {n: [] for n in tracks.values()}
    threads = [e for e in events if e["ph"] == "X" and e["tid"] < calls_timeline.STREAM_TID]
    for e in events:
        if e["tid"] in tracks and e["ph"] != "M":
            assert (e["ph"], e["s"]) == ("i", "t")
            on[tracks[e["tid"]]].append((e["name"], e["args"]["call"]["function"]
                                         if "function" in e["args"]["call"] else None))
            twin = next(t for t in threads if t["ts"] == e["ts"] and t["name"] == e["name"])
            assert twin["tid"] == e["args"]["thread"]
    assert on == {
        "the null stream (launches)": [("my_kernel(float*, int)", "cuLaunchKernel")] * 2,
        "stream#1 (launches)": [("other()", "cuLaunchKernelEx"),
                                ("my_kernel(float*, int)", "cuLaunchCooperativeKernel"),
                                ("cuGraphLaunch", None)],
        "stream#2 (launches)": [("cuLaunchHostFunc", None)]}
    # (a function that launches nothing has no stream track)
    assert not any(e["name"] == "cuStreamSynchronize" and e["tid"] in tracks for e in events)
    raw = timeline(tmp_path / "t", mangled=True)
    assert sum(e["name"] == MY for e in raw if e["ph"] in "Xi") == 2 * 3


def test_a_cut_name_is_not_demangled_in_the_calls_or_the_timeline(probes, fake, kshim,
                                                                   tmp_path):
    """A name cut at the names' arena's end, whose part, f064(int, int, ...), is another
    function's name: report --calls and the timeline give it as it is."""
    size = 4090  # (as in test_kernels.py's test_names_past_the_arena_are_cut_and_said_so)
    names = [f"_Z4f{i:03}" + "i" * (size - 7) for i in range(KERN_NAME_BYTES // size + 1)]
    whole = KERN_NAME_BYTES // size
    part = names[whole][:KERN_NAME_BYTES - whole * size]
    assert demangle(part).startswith(f"f{whole:03}(int, int")
    run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{n}" for n in names] + [
        f"launch:{whole}:5:1:1:1", "launch:0:5:1:1:1"], mode="calls")
    calls = json.loads(report("--calls", "--json", "--function", "cuLaunchKernel",
                              tmp_path / "t"))["calls"]
    assert [(c["kernel"], c["kernel_demangled"]) for c in calls] == [
        (part, part), (names[0], demangle(names[0]))]
    launched = [e["name"] for e in timeline(tmp_path / "t") if e["ph"] in "Xi"
                and e["name"] != "cuModuleGetFunction"]
    assert launched.count(part) == 2 and launched.count(demangle(names[0])) == 2
