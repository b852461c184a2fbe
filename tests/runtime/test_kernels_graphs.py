"""A graph's launches by the count of its kernel nodes (runtime/kernels/hooks_graphs.c,
docs/design.md "Kernels by name and each stream's last launch") on the kernels' FAKE driver
(tests/c/fake_kernels_graphs.h): counted as the fake counts them, by every instantiation
route, a child graph's kernel nodes counted in, a conditional node's graph and one the shim
never saw instantiated not known, an executable graph's handle given again after it was
destroyed counted as its new graph, a launch into a capture not counted; the report's rows,
its JSON and the in-flight line of a SIGKILLed process that waits after a graph;
`report --by kernel`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from shimgen.runenv import KERN_GRAPH_KEY
from shimgen.trace import inflight
from tests.runtime.test_kernels import MY, env_for, one_trace, report, run_ops
from tests.shimcache import fake_driver_shim


@pytest.fixture(scope="module")
def fake(probes):
    return probes / "libfake_kernels_libcuda.so"


@pytest.fixture(scope="module")
def kshim(fake):
    return fake_driver_shim(fake)


def graphs(t) -> dict[str, tuple[int, int]]:
    """Each graph slot's name: (launches, its handle word less KERN_GRAPH_KEY)."""
    return {k.name: (k.launches, k.handle - KERN_GRAPH_KEY) for k in t.kernels.kernels
            if k.source == "cuGraphLaunch"}


def test_graph_launches_by_their_kernel_nodes(probes, fake, kshim, tmp_path):
    got = run_ops(probes, fake, kshim, tmp_path / "t", [
        "inst:3:2:0:0", "instp:1:0:4:0", "inst:2:1:0:1", "instv2:3:0:0:0",
        "glaunch:0:5:4", "glaunch:1:6:2", "glaunch:2:7:1", "glaunch:3:5:1", "graph:8:2",
        "capture:9", "glaunch:0:9:3", "endcapture:9"])
    # kernel nodes: 3; 1 and a child's 4; not known (a conditional node); 3 again
    assert got["launches"] == {"graph_kernels": 4 * 3 + 2 * 5 + 3, "graph": 10}
    assert got["captured"] == 3
    t = one_trace(tmp_path / "t")
    assert graphs(t) == {"graph:3": (5, 4), "graph:5": (2, 6), "graph:?": (3, 0)}
    streams = {s.stream: (s.launches, s.kernel) for s in t.kernels.streams}
    assert streams == {5: (5, "graph:3"), 6: (2, "graph:5"), 7: (1, "graph:?"),
                       8: (2, "graph:?")}


def test_handle_given_again_counts_its_new_graph(probes, fake, kshim, tmp_path):
    """The driver gives a destroyed executable graph's handle to the next: its launches are
    counted by the new graph's kernel nodes."""
    got = run_ops(probes, fake, kshim, tmp_path / "t", [
        "inst:3:0:0:0", "glaunch:0:5:1", "gdestroy:0", "inst:7:0:0:0", "glaunch:1:5:2"])
    assert got["launches"] == {"graph_kernels": 3 + 2 * 7, "graph": 3}
    assert graphs(one_trace(tmp_path / "t")) == {"graph:3": (1, 4), "graph:7": (2, 8)}


def test_graph_launch_asks_the_graphs_reservation(probes, tmp_path):
    """cuGraphLaunch, also the memory ledger's watch of graphs: right after the launch that
    made a graph's memory reserved, the ledger has it (on the ledger's FAKE driver)."""
    from tests.run import test_memory as tm

    ledger = probes / "libfake_ledger_libcuda.so"
    out, traces = tm.run_ops(probes, ledger, fake_driver_shim(ledger), tmp_path, [
        "ctx:1", "graph", "memnode:0:3000000:1", "instantiate:0", "launch:1"])
    assert " rc 1" not in out and " rc 4" not in out, out
    tm.assert_reserves(tm.one_trace(traces), tm.fake_totals(out))


def test_report_rows_of_graphs_and_host_functions(probes, fake, kshim, tmp_path):
    run_ops(probes, fake, kshim, tmp_path / "t", [
        f"mod:{MY}", "launch:0:0:2:64:2", "host:4:3", "inst:3:0:0:0", "inst:0:0:1:0",
        "glaunch:0:5:4", "glaunch:1:5:2", "graph:6:1"])
    text = report(tmp_path / "t")
    section = text[text.index("\nkernels "):]
    # (a row: launches, host us, the shape in 24 columns, the name)
    rows = {ln[51:]: (int(ln[:12]), ln[26:50].strip()) for ln in section.splitlines()[3:]
            if ln[:12].strip().isdigit()}
    assert rows == {"my_kernel(float*, int)": (2, "2x1x1 / 64x1x1"),
                    "kern_host_cb (host function)": (3, "-"),
                    "a graph of 3 kernel nodes": (4, "-"), "a graph of 1 kernel node": (2, "-"),
                    "a graph whose kernel nodes are not known": (1, "-")}
    assert ("graph launches 7: 14 kernel nodes run by them (their kernels not named), and 1 "
            "of graphs whose kernel nodes are not known") in section
    g = json.loads(report("--json", tmp_path / "t"))["groups"][0]
    got = {k["name"]: (k["kind"], k["graph_kernel_nodes"], k["launches"], k["shapes"])
           for k in g["kernels"]}
    assert got == {MY: ("kernel", None, 2, [{"grid": [2, 1, 1], "block": [64, 1, 1]}]),
                   "kern_host_cb": ("host function", None, 3, []),
                   "graph:3": ("graph", 3, 4, []), "graph:1": ("graph", 1, 2, []),
                   "graph:?": ("graph", None, 1, [])}


def test_report_by_kernel(probes, fake, kshim, tmp_path):
    """--by kernel: the launch functions' rows split by kernel (their launches and the host
    time of their launch calls), the other functions' rows as they are."""
    run_ops(probes, fake, kshim, tmp_path / "t", [
        f"mod:{MY}", "enumf:_Z5otherv", "launch:0:0:2:64:2", "ex:0:3:1:1:3", "ex:1:3:1:1:1",
        "launch:0:0:0:1:1", "host:4:3", "inst:3:0:0:0", "glaunch:0:5:4"])
    plain = json.loads(report("--json", tmp_path / "t"))["groups"][0]
    g = json.loads(report("--json", "--by", "kernel", tmp_path / "t"))["groups"][0]
    rows = {f["function"]: f for f in g["functions"]}
    calls = {n: r["calls"] for n, r in rows.items() if n.startswith("launches of ")}
    assert calls == {"launches of my_kernel(float*, int)": 5, "launches of other()": 1,
                     "launches of kern_host_cb (host function)": 3,
                     "launches of a graph of 3 kernel nodes": 4}
    kernels = {k["name"]: k for k in plain["kernels"]}
    assert round(rows["launches of my_kernel(float*, int)"]["total_ns"]) == kernels[MY]["host_ns"]
    assert all(r["errors"] is None and r["p50_ns"] is None for n, r in rows.items()
               if n.startswith("launches of "))
    others = {f["function"]: f["calls"] for f in plain["functions"]
              if not f["function"].startswith(("cuLaunch", "cuGraphLaunch"))}
    assert {n: r["calls"] for n, r in rows.items() if not n.startswith("launches of ")} == others
    text = report("--by", "kernel", tmp_path / "t")
    assert "== the launch functions by kernel ==" in text
    assert "launches of my_kernel(float*, int)" in text and "cuLaunchKernelEx\n" not in text
    csv = report("--csv", "--by", "kernel", tmp_path / "t")
    assert "kernel,all,launches of a graph of 3 kernel nodes,4," in csv


def test_sigkilled_process_names_the_graph_its_stream_last_ran(probes, fake, kshim, tmp_path):
    traces = tmp_path / "t"
    proc = subprocess.Popen(
        [probes / "kernlaunch", f"mod:{MY}", "launch:0:3:1:1:2", "inst:3:0:1:0",
         "glaunch:0:3:5", "sync:3"],
        env=env_for(fake, kshim, traces, FAKE_KERN_HANG="1"), stdout=subprocess.PIPE,
        text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        for _ in range(3000):  # until the file shows the call in progress, then the kill
            files = list(traces.glob("*.shimtrace"))
            if files and inflight.read(files[0]).calls:
                break
            time.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    line = next(ln for ln in report(traces).splitlines() if ln.startswith("in flight"))
    assert "stream 0x3 last ran a graph of 4 kernel nodes (#7), launched " in line, line
    last = json.loads(report("--json", traces))["groups"][0]["in_flight"][0]["last_launch"]
    assert (last["stream"], last["kernel"], last["ordinal"]) == (3, "graph:4", 7)


def test_by_kernel_refuses_a_trace_without_the_kernels(probes, fake, kshim, tmp_path):
    """A JSON trace (SHIMGEN_TRACE_FILE, no trace directory) has no kernel tables: --by kernel
    says so in one line, not a table whose launches went missing."""
    env = {k: v for k, v in env_for(fake, kshim, tmp_path / "t").items()
           if k != "SHIMGEN_TRACE_DIR"}
    trace = tmp_path / "trace.json"
    env["SHIMGEN_TRACE_FILE"] = str(trace)
    subprocess.run([probes / "kernlaunch", f"mod:{MY}", "launch:0:0:1:1:2"], env=env,
                   check=True, capture_output=True, timeout=60)
    proc = subprocess.run([sys.executable, "-m", "shimgen", "report", "--by", "kernel",
                           str(trace)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == "", proc
    assert proc.stderr.startswith("shimgen: error: report: --by kernel needs every trace's "
                                  "kernels") and proc.stderr.count("\n") == 1, proc.stderr
