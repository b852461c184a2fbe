"""`shimgen report`'s model: the traces of one process across exec (`Process`), every
function summed over a group of processes (`Merged`, `merge`), the groups (all processes,
or one per rank or pid), and percentiles from the fine and log2 histograms (`percentiles`,
the one definition; docs/report.md). The views (report/format.py, report/compare.py) print
it; report/main.py is the command.

Only the standard library and shimgen's own light modules are imported on this path."""

from __future__ import annotations

from math import ceil, isfinite

from ..errors import ShimgenError
from ..trace import HIST_BUCKETS, NOT_FINISHED, ProcessTrace, tick_segments

BY = ("rank", "pid", "host", "kernel")  # --by


# ---- processes: the traces of one process, across exec ----------------------------------

class Process:
    """One process: its traces, one per program it ran, in the order they ran. exec keeps
    the process (its pid, and its start time in its boot), so every trace but the last ended
    in an exec, not a death; the last says whether the process completed."""

    __slots__ = ("traces",)

    def __init__(self, traces: list[ProcessTrace]) -> None:
        self.traces = traces

    @property
    def last(self) -> ProcessTrace:
        return self.traces[-1]

    @property
    def complete(self) -> bool:
        return self.traces[-1].complete

    @property
    def execs(self) -> int:
        return len(self.traces) - 1


def _ran_order(t: ProcessTrace) -> tuple:
    """A process's traces in the order they ran: by their first traced call (a trace with
    none first); at the same time, one that did not finish its file first."""
    return (t.start_ns is not None, t.start_ns or 0, t.complete)


def processes_of(traces: list[ProcessTrace]) -> list[Process]:
    """The traces as processes, in the order of their first trace. Traces of the same
    (boot_id, pid, proc_start), from the same reader, are one process that exec'd; a trace
    whose reader does not know that identity is a process of its own."""
    out: list[Process] = []
    by_id: dict[tuple, Process] = {}
    for t in traces:
        if t.proc_start is None or not t.boot_id:
            out.append(Process([t]))
            continue
        key = (t.boot_id, t.pid, t.proc_start, t.source)
        p = by_id.get(key)
        if p is None:
            p = by_id[key] = Process([t])
            out.append(p)
        else:
            p.traces.append(t)
    for p in by_id.values():
        if len(p.traces) > 1:
            p.traces.sort(key=_ran_order)
            for t in p.traces[:-1]:  # ended by exec: not a death, no note of one
                t.notes = [n for n in t.notes if n != NOT_FINISHED]
    return out


# ---- merging ---------------------------------------------------------------------------

class Merged:
    """One function over the processes of a group."""

    __slots__ = ("calls", "timed_calls", "total_ns", "max_ns", "hists", "hist_calls", "errors",
                 "errors_known", "injected")

    def __init__(self) -> None:
        self.calls = 0
        self.timed_calls = 0  # calls of the processes that timed it
        self.total_ns = 0.0  # over those processes
        self.max_ns: float | None = None
        self.hists: list = []  # (ns_per_tick, hist, max_ns, fine) per process
        self.hist_calls = 0  # calls that the histograms cover
        self.errors: dict[int, int] = {}
        self.errors_known = True  # every process that called it counted its errors
        self.injected: dict[int, int] = {}  # code -> failures SHIMGEN_INJECT returned

    @property
    def timed(self) -> bool:
        return self.timed_calls > 0

    @property
    def mean_ns(self) -> float | None:
        return self.total_ns / self.timed_calls if self.timed_calls else None

    @property
    def error_count(self) -> int | None:
        return sum(self.errors.values()) if self.errors_known else None

    @property
    def injected_count(self) -> int:
        return sum(self.injected.values())

    def percentiles(self, *qs: float) -> tuple[float | None, ...]:
        """p(100q) for each q over every call of the group; None unless every call is in a
        histogram. Within what the calls' total and maximum allow (bounded_percentiles)."""
        if not self.hists or self.hist_calls != self.calls:
            return tuple(None for _ in qs)
        return bounded_percentiles(merged_segments(self.hists), qs, self.timed_calls,
                                   self.total_ns, self.max_ns)


def hist_segments(hist: list[int], ns_per_tick: float, max_ns: float | None,
                  fine: dict[int, int] | None = None) -> list[tuple[float, float, int]]:
    """One process's histogram of a function as (lo_ns, hi_ns, calls) ranges: its fine
    buckets where they hold every call of a log2 bucket, else the log2 bucket
    (tracemodel.tick_segments), the top range's upper edge lowered to the process's max_ns
    (never below its lower edge)."""
    ticks = tick_segments(hist, fine)
    out = [(lo * ns_per_tick, hi * ns_per_tick, c) for lo, hi, c in ticks[:-1]]
    if ticks:
        out.append(top_segment(ticks[-1], ns_per_tick, max_ns))
    return out


def top_segment(seg: tuple[int, int, int], ns_per_tick: float,
                max_ns: float | None) -> tuple[float, float, int]:
    """The top non-empty range (in ticks) in ns: its upper edge lowered to max_ns."""
    lo, hi = seg[0] * ns_per_tick, seg[1] * ns_per_tick
    if max_ns is not None:
        hi = max(lo, min(hi, max_ns))
    return lo, hi, seg[2]


def merged_segments(hists: list) -> list[tuple[float, float, int]]:
    """`hist_segments` of every (ns_per_tick, hist, max_ns[, fine]), with the ranges below
    each process's top one summed first across the processes of the same ns_per_tick (the
    same ranges): a thousand processes give a few thousand ranges, not millions."""
    if len(hists) == 1:  # --by pid, or a process of its own
        npt, hist, max_ns, *rest = hists[0]
        return hist_segments(hist, npt, max_ns, rest[0] if rest else None)
    by_tick: dict[float, dict[tuple[int, int], int]] = {}
    out = []
    for npt, hist, max_ns, *rest in hists:
        ticks = tick_segments(hist, rest[0] if rest else None)
        if not ticks:
            continue
        group = by_tick.setdefault(npt, {})
        for lo, hi, c in ticks[:-1]:
            group[lo, hi] = group.get((lo, hi), 0) + c
        out.append(top_segment(ticks[-1], npt, max_ns))
    for npt, group in by_tick.items():
        out.extend((lo * npt, hi * npt, c) for (lo, hi), c in group.items())
    return out


def percentiles(segments: list[tuple[float, float, int]],
                qs: tuple[float, ...]) -> tuple[float | None, ...]:
    """For each q, the value below which a fraction q of the calls lie, each range's calls
    spread evenly across it (a range of width 0 is a point). For one process this is
    linear interpolation within the bucket that holds the call of rank q * calls; ranges
    of several processes (of any ns_per_tick) add up by their ns edges. docs/report.md."""
    total = sum(c for _, _, c in segments)
    if total <= 0:
        return tuple(None for _ in qs)
    found: dict[float, float] = {}
    todo = sorted(qs)
    segments = sorted(segments)
    if all(a[1] <= b[0] for a, b in zip(segments, segments[1:], strict=False)):
        below = 0.0  # ranges that do not overlap (one process's): each in turn
        for lo, hi, c in segments:
            while todo and below + c >= todo[0] * total:
                q = todo.pop(0)
                found[q] = lo + (hi - lo) * (q * total - below) / c
            below += c
        return tuple(found.get(q, segments[-1][1]) for q in qs)
    density: dict[float, float] = {}
    points: dict[float, float] = {}
    for lo, hi, c in segments:
        if hi > lo:
            density[lo] = density.get(lo, 0.0) + c / (hi - lo)
            density[hi] = density.get(hi, 0.0) - c / (hi - lo)
        else:
            points[lo] = points.get(lo, 0.0) + c
    edges = sorted(density.keys() | points.keys())
    below = dens = 0.0
    prev = edges[0]
    for x in edges:
        mass = dens * (x - prev)
        while todo and mass > 0 and below + mass >= todo[0] * total:
            q = todo.pop(0)
            found[q] = prev + (q * total - below) / dens
        below += mass + points.get(x, 0.0)
        while todo and below >= todo[0] * total:
            found[todo.pop(0)] = x
        if not todo:
            break
        dens += density.get(x, 0.0)
        prev = x
    return tuple(found.get(q, edges[-1]) for q in qs)


def bounded_percentiles(segments: list[tuple[float, float, int]], qs: tuple[float, ...],
                        calls: int, total: float, top: float | None) -> tuple[float | None, ...]:
    """`percentiles`, kept within the values the calls can have: none above the maximum
    `top`, none below the least the smallest call can be (`total` less every other call at
    the maximum). One or two calls are known exactly (one: the maximum; two: the maximum and
    the total less it), and their percentiles are those values: the call of rank
    ceil(q * calls). The same rule as the shim's table (runtime/stats/quantiles.c)."""
    if top is None or calls <= 0:
        return percentiles(segments, qs)
    if calls <= 2:
        values = [top] if calls == 1 else [min(top, max(0.0, total - top)), top]
        return tuple(values[max(1, ceil(q * calls)) - 1] for q in qs)
    low = max(0.0, total - (calls - 1) * top)
    return tuple(None if p is None else min(top, max(low, p))
                 for p in percentiles(segments, qs))


def percentile(segments: list[tuple[float, float, int]], q: float) -> float | None:
    return percentiles(segments, (q,))[0]


def errors_counted(p: ProcessTrace) -> bool:
    """Whether a trace counted its non-success returns: the time and timeline modes do,
    unless the reader says the shim did not."""
    from ..trace import NO_ERROR_COUNTS

    return p.mode != "counts" and NO_ERROR_COUNTS not in p.notes


def merge(processes: list[ProcessTrace]) -> dict[str, Merged]:
    """Every function of `processes`, summed."""
    out: dict[str, Merged] = {}
    for p in processes:
        counted = errors_counted(p)
        for name, fs in p.functions.items():
            m = out.get(name)
            if m is None:
                m = out[name] = Merged()
            m.calls += fs.calls
            if fs.total_ns is not None:
                m.timed_calls += fs.calls
                m.total_ns += fs.total_ns
            if fs.max_ns is not None and (m.max_ns is None or fs.max_ns > m.max_ns):
                m.max_ns = fs.max_ns
            if fs.hist is not None and p.ns_per_tick and len(fs.hist) == HIST_BUCKETS:
                m.hists.append((p.ns_per_tick, fs.hist, fs.max_ns, fs.fine))
                m.hist_calls += sum(fs.hist)
            if not counted:
                m.errors_known = False
            for code, n in fs.errors.items():
                m.errors[code] = m.errors.get(code, 0) + n
            for code, n in fs.injected.items():
                m.injected[code] = m.injected.get(code, 0) + n
    return out


def check_sums(functions: dict[str, Merged], processes: list[ProcessTrace]) -> None:
    """Times that are each in range can add up past the range of a float: refused with one
    line naming the function and the trace with the largest share, never an infinite total
    (nor `Infinity` in the JSON)."""
    grand = 0.0
    for name, m in functions.items():
        if not m.timed:
            continue
        if not isfinite(m.total_ns) or (m.max_ns is not None and not isfinite(m.max_ns)):
            having = [p for p in processes if name in p.functions
                      and p.functions[name].total_ns is not None]
            worst = max(having, key=lambda p: p.functions[name].total_ns, default=None)
            where = "" if worst is None else (
                f" (the largest: total_ns {worst.functions[name].total_ns:.6g} in {worst.path})")
            raise ShimgenError(f"report: {name}: its total time over {len(having)} traces is "
                               f"too large to add up{where}: a trace's times are wrong")
        grand += m.total_ns
    if not isfinite(grand):
        raise ShimgenError("report: the total time of all functions is too large to add up: "
                           "a trace's times are wrong")


class Group:
    """Processes reported together: all of them, or those of one rank or pid."""

    __slots__ = ("key", "processes", "functions", "procs")

    def __init__(self, key: str, processes: list[ProcessTrace],
                 functions: dict[str, Merged], procs: list[Process] | None = None) -> None:
        self.key = key  # "all", the rank, or the pid
        self.processes = processes  # the traces, one per program a process ran
        self.functions = functions
        # the processes those traces are: one per process, however many programs it ran
        self.procs = processes_of(processes) if procs is None else procs


def _rank_order(key: str) -> tuple:
    return (0, int(key), "") if key.isascii() and key.isdigit() else (1, 0, key)


def groups(processes: list[ProcessTrace], by: str | None) -> list[Group]:
    """The traces reported together: all of them, or one group per rank or pid. A process
    that exec'd is in one group, that of its last trace."""
    procs = processes_of(processes)
    if by is None or by == "kernel":  # (kernel: report/main.py splits its rows by kernel)
        functions = merge(processes)
        check_sums(functions, processes)
        return [Group("all", processes, functions, procs)]
    if by not in BY:
        raise ShimgenError(f"--by {by}: one of {', '.join(BY)}")
    split: dict[str, list[Process]] = {}
    for proc in procs:
        p = proc.last
        key = (str(p.pid) if by == "pid" else (p.host or "-") if by == "host"
               else p.rank if p.rank is not None else "-")
        split.setdefault(key, []).append(proc)
    out = []
    for k in sorted(split, key=_rank_order):
        traces = [t for proc in split[k] for t in proc.traces]
        out.append(Group(k, traces, merge(traces), split[k]))
        check_sums(out[-1].functions, traces)
    return out


def sorted_functions(functions: dict[str, Merged]) -> list[tuple[str, Merged]]:
    """By total time when any function is timed, else by calls; then by name."""
    if any(m.timed for m in functions.values()):
        return sorted(functions.items(), key=lambda kv: (-kv[1].total_ns, -kv[1].calls, kv[0]))
    return sorted(functions.items(), key=lambda kv: (-kv[1].calls, kv[0]))
