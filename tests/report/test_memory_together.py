"""What a run's processes held together (shimgen/report/memory.py): the ledger keeps each
process's own peak, not when it came, so the run's peak is bounded by the processes' times:
at least the largest process's own peak, at most the peaks of the processes that ran at
once, summed; exact where those agree (processes one after another). Each process's own
peak is on a line of its own. Four processes that each took 5 GiB and held it to their exit
are 5 to 20 GiB together, never 'peak 5 GiB, at exit 20 GiB'."""

from __future__ import annotations

from shimgen.report.memory import memory_json, memory_section
from shimgen.report.model import groups
from shimgen.trace.memory import MemoryColumn, MemoryLedger
from shimgen.trace.model import ProcessTrace

GIB = 1 << 30


def traced(pid: int, start: int, end: int | None, peak: int, held: int,
           device: int = 0) -> ProcessTrace:
    t = ProcessTrace(path=f"p{pid}", source="shimtrace", pid=pid, rank=None, mode="time",
                     complete=end is not None, start_ns=start, end_ns=end)
    t.memory = MemoryLedger()
    col = t.memory.columns[device] = MemoryColumn()
    col.peak, col.held, col.live, col.taken = peak, {"cuMemAlloc_v2": held}, {
        "cuMemAlloc_v2": 1 if held else 0}, {"cuMemAlloc_v2": peak}
    return t


def section(traces: list[ProcessTrace]) -> tuple[dict, list[str]]:
    (g,) = groups(traces, None)
    return memory_json(g), memory_section(g)


def test_four_processes_at_once_are_bounded_and_each_has_its_own_line():
    m, lines = section([traced(10 + i, 1000 + i, 5000, 5 * GIB, 5 * GIB) for i in range(4)])
    assert m["peak_together_bytes"] == {"at_least": 5 * GIB, "at_most": 20 * GIB}
    assert m["devices"][0]["peak_together_bytes"] == {"at_least": 5 * GIB,
                                                      "at_most": 20 * GIB}
    assert lines[1].startswith("device memory  peak 5.00 GiB to 20.00 GiB together (at "
                               "least one process's own peak; at most the peaks of those "
                               "that ran at once, summed), at exit 20.00 GiB"), lines
    assert [ln for ln in lines if ln.startswith("  pid ")] == [
        f"  pid {10 + i}: own peak 5.00 GiB, at exit 5.00 GiB" for i in range(4)], lines


def test_processes_one_after_another_have_an_exact_peak():
    m, lines = section([traced(10 + i, 1000 * i, 1000 * i + 999, (i + 1) * GIB, 0)
                        for i in range(3)])
    assert m["peak_together_bytes"] == {"at_least": 3 * GIB, "at_most": 3 * GIB}
    assert lines[1].startswith("device memory  peak 3.00 GiB, at exit 0 B"), lines


def test_a_process_that_died_is_counted_as_holding_on():
    """A process whose end is not known (it died) may hold its peak to the end: the bound
    counts it alongside every process that began after it."""
    m, _ = section([traced(10, 1000, None, 2 * GIB, 2 * GIB),
                    traced(11, 5000, 6000, 3 * GIB, 0)])
    assert m["peak_together_bytes"] == {"at_least": 3 * GIB, "at_most": 5 * GIB}


def test_two_devices_each_bounded_on_its_own():
    m, lines = section([traced(10, 1000, 5000, 4 * GIB, 0, device=0),
                        traced(11, 1000, 5000, 4 * GIB, 0, device=1)])
    assert [d["peak_together_bytes"] for d in m["devices"]] == [
        {"at_least": 4 * GIB, "at_most": 4 * GIB}] * 2
    assert "  device 0: peak 4.00 GiB, at exit 0 B" in lines, lines
    assert m["peak_together_bytes"] == {"at_least": 4 * GIB, "at_most": 8 * GIB}


def test_a_runs_counts_are_summed_over_its_processes_and_its_peaks_are_the_largest():
    """What each process counts (held at exit, allocations left, by function, refused,
    untracked, pools and graph allocations known, pools' and graphs' bytes) is summed over
    the run's processes; a peak (held, reserved) is the largest of one process's own, never
    a sum (the bound of those that ran at once is peak_together_bytes)."""
    numbers = [  # pid, peak, held, reserved peak, refused, untracked, pools, graph allocations
        (10, 3 * GIB, 1 * GIB, 4 * GIB, 1, 2, 1, 2),
        (11, 2 * GIB, 2 * GIB, 6 * GIB, 4, 8, 3, 5),
    ]
    traces = []
    for pid, peak, held, reserved, refused, untracked, pools, graphs in numbers:
        t = traced(pid, 1000 * pid, 1000 * pid + 999, peak, held)
        t.memory.refused, t.memory.untracked = refused, untracked
        t.memory.pools, t.memory.graph_allocs = pools, graphs
        col = t.memory.columns[0]
        col.reserved_peak = reserved
        col.pool = {"reserved": reserved, "reserved_high": reserved, "used": held,
                    "used_high": peak}
        col.graph = {"reserved": pid, "reserved_high": pid, "used": 0, "used_high": pid}
        traces.append(t)
    m, _ = section(traces)
    (d,) = m["devices"]
    assert (m["peak_bytes"], d["peak_bytes"]) == (3 * GIB, 3 * GIB)
    assert (m["reserved_peak_bytes"], d["reserved_peak_bytes"]) == (6 * GIB, 6 * GIB)
    assert (m["at_exit_bytes"], d["at_exit_bytes"]) == (3 * GIB, 3 * GIB)
    assert m["leaked"] == d["leaked"] == {"count": 2, "bytes": 3 * GIB}
    assert m["by_function"] == d["by_function"] == {"cuMemAlloc_v2": 5 * GIB}
    assert (m["refused"], m["untracked"]) == (5, 10)
    assert d["pools"] == {"reserved_bytes": 10 * GIB, "reserved_high_bytes": 10 * GIB,
                          "used_bytes": 3 * GIB, "used_high_bytes": 5 * GIB}
    assert d["graphs"] == {"reserved_bytes": 21, "reserved_high_bytes": 21, "used_bytes": 0,
                           "used_high_bytes": 21}
    assert m["reserved"] == {"pools": d["pools"], "graphs": d["graphs"], "pools_known": 4,
                             "graph_allocations": 7}
    assert [(p["pid"], p["peak_bytes"], p["at_exit_bytes"]) for p in m["processes"]] == [
        (10, 3 * GIB, 1 * GIB), (11, 2 * GIB, 2 * GIB)]
