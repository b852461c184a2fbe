"""A run's numbers over its processes (shimgen/report/model.py's merge, format.py's group
header): what each process counts (calls, failures returned, failures injected, calls not
timed, cuGetProcAddress answers that are no export) is summed over them, never the largest
of one process nor the last one read. The memory ledger's are in test_memory_together.py."""

from __future__ import annotations

from shimgen.report.format import group_header
from shimgen.report.model import groups
from shimgen.trace.model import FunctionStats, ProcessTrace


def traced(pid: int, calls: int, failed: int, injected: int, untimed: int,
           unmapped: int) -> ProcessTrace:
    f = FunctionStats(calls=calls, total_ns=None, max_ns=None, hist=None,
                      errors={100: failed}, injected={2: injected})
    return ProcessTrace(path=f"p{pid}", source="json", pid=pid, rank=None, mode="time",
                        complete=True, shimgen_version="0.1", driver_version="555.58.02",
                        ns_per_tick=1.0, functions={"cuMemAlloc_v2": f},
                        untimed_calls=untimed, unmapped_proc_addresses=unmapped)


def test_a_runs_counts_are_summed_over_its_processes():
    (g,) = groups([traced(10, 5, 2, 1, 3, 1), traced(11, 7, 4, 6, 2, 5),
                   traced(12, 1, 1, 3, 0, 0)], None)
    m = g.functions["cuMemAlloc_v2"]
    assert (m.calls, m.errors, m.injected) == (13, {100: 7}, {2: 10})
    lines = group_header(g)
    assert [ln.split()[:2] for ln in lines if ln.startswith(("untimed ", "unmapped "))] == [
        ["untimed", "5"], ["unmapped", "6"]], lines
