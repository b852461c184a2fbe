"""`shimgen top --functions` (and `--pid N`): the hottest driver functions of the job, or of
one process, between two readings of the trace files: each function's calls per second and
its share of the time spent in driver calls then (the time modes; `-` in counts mode), as
py-spy's and nsys's users expect. Only the processes' counters are read (trace/inflight.py
with counts): per function, calls and ticks summed over the threads' blocks."""

from __future__ import annotations

from ..report import shown
from ..trace import job

SHOWN = 15  # functions in the text (--json has every one)


def totals(procs: list[job.ProcNow]) -> dict:
    """What rows() compares: per process, function -> (calls, ns or None) so far."""
    return {p.key: dict(p.functions) for p in procs}


def rows(before: dict | None, procs: list[job.ProcNow], seconds: float,
         pid: int | None) -> list[dict] | None:
    """Per function over the window: calls per second and share of the driver time (None
    without times), hottest first; None without a reading before (no window yet)."""
    if before is None or seconds <= 0:
        return None
    calls: dict[str, int] = {}
    ns: dict[str, float | None] = {}
    for p in procs:
        if pid is not None and p.pid != pid:
            continue
        old = before.get(p.key, {})  # a process that began in the window: all its calls
        for fn, (n, t) in p.functions.items():
            n0, t0 = old.get(fn, (0, 0.0))
            if n - n0 <= 0:
                continue
            calls[fn] = calls.get(fn, 0) + n - n0
            ns[fn] = None if t is None or ns.get(fn, 0.0) is None else (
                ns.get(fn, 0.0) + max(t - (t0 or 0.0), 0.0))
    timed = sum(v for v in ns.values() if v is not None)
    out = [{"function": fn, "calls": n, "calls_per_second": n / seconds,
            "time_share": None if ns[fn] is None or not timed else ns[fn] / timed}
           for fn, n in calls.items()]
    return sorted(out, key=lambda r: (-(r["time_share"] or 0.0), -r["calls"], r["function"]))


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def text(found: list[dict] | None, procs: list[job.ProcNow], pid: int | None,
         seconds: float) -> list[str]:
    scope = "the job" if pid is None else f"pid {pid}"
    if pid is not None and not any(p.pid == pid for p in procs):
        return ["", f"hottest functions of pid {pid}: no process of this run has that pid"]
    if found is None:
        return ["", f"hottest functions of {scope}: from the next reading on"]
    head = [f"hottest functions of {scope}, over the last {seconds:.1f} s "
            "(time %: of the time in driver calls)",
            f"{'calls/s':>10} {'time %':>7}  function"]
    if not found:
        return ["", *head, "  (no driver call in that time)"]
    lines = [f"{r['calls_per_second']:>10.1f} {_share(r['time_share']):>7}  "
             f"{shown(r['function'], 80)}" for r in found[:SHOWN]]
    if len(found) > SHOWN:
        lines.append(f"  ... and {len(found) - SHOWN} more functions (--json has every one)")
    return ["", *head, *lines]
