"""`shimgen report`: traces (trace files or run directories, binary or JSON) read into
`tracemodel.ProcessTrace`s, merged (all processes, or one group per rank or pid), with
percentiles from the log2 histograms; printed as tables (report_format.py) or two runs side
by side (report_compare.py). docs/report.md describes what is read and what is printed.

Only the standard library and shimgen's own light modules are imported on this path: a
report of a thousand processes must start and finish fast."""

from __future__ import annotations

import os
from itertools import compress
from pathlib import Path

from .errors import ShimgenError
from .runenv import RUN_JSON, TRACE_SUFFIX, TRACES
from .tracemodel import HIST_BUCKETS, ProcessTrace

# The layout of a run directory (`shimgen run`) is runenv.py's; other traces are JSON.
JSON_SUFFIX = ".json"
BY = ("rank", "pid")  # --by
_DOWN = range(HIST_BUCKETS - 1, -1, -1)


def _load_shimtrace(path: Path) -> ProcessTrace:
    try:
        from . import tracefile
    except ImportError:
        raise ShimgenError(f"{path}: a binary trace, and this shimgen has no reader for "
                           "them (shimgen/tracefile.py)") from None
    return tracefile.load(path)


def _load_json_trace(path: Path) -> ProcessTrace:
    from . import tracejson

    return tracejson.load(path)


# How each kind of trace file is read (binary by its suffix, any other file as JSON): the
# one seam between the report and the readers. Each returns a ProcessTrace or raises
# ShimgenError with one line.
READERS = {TRACE_SUFFIX: _load_shimtrace, JSON_SUFFIX: _load_json_trace}


def _looks_like_json_trace(path: Path) -> bool:
    """The shim writes "shimgen" as a JSON trace's first key; a timeline or run.json does
    not (both are then also checked by content when read)."""
    try:
        with open(path, "rb") as f:  # a regular file (os.scandir said so)
            head = f.read(64)
    except OSError as e:
        raise ShimgenError(f"{path}: cannot read it: {e.strerror or e}") from None
    return head.lstrip().startswith(b"{") and head.lstrip()[1:].lstrip().startswith(
        b'"shimgen"')


class Source:
    """One path given to `shimgen report`: a trace file, or a directory (a run). (Plain
    classes in this module, not dataclasses: see tracemodel.py.)"""

    __slots__ = ("path", "is_run", "processes", "run", "run_problem")

    def __init__(self, path: Path, is_run: bool,
                 processes: list[ProcessTrace] | None = None) -> None:
        self.path = path
        self.is_run = is_run
        self.processes: list[ProcessTrace] = [] if processes is None else processes
        self.run: dict | None = None  # run.json, when the directory has one
        self.run_problem = ""  # why run.json could not be used

    @property
    def name(self) -> str:
        return str(self.path)


def _read_run_metadata(src: Source) -> None:
    path = src.path / RUN_JSON
    if not path.is_file():
        return
    from .tracejson import read_json

    try:
        data = read_json(path)
    except ShimgenError as e:
        src.run_problem = str(e)
        return
    if isinstance(data, dict):
        src.run = data
    else:
        src.run_problem = f"{path}: not an object"


def _trace_files(directory: Path) -> list[Path]:
    """The binary traces by their suffix; the JSON traces by content, whatever their name
    (the shim names a process's trace `<name>.<pid>` when SHIMGEN_TRACE_FILE has no %p)."""
    found = []
    for d in (directory, directory / TRACES):
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as e:
            raise ShimgenError(f"{d}: cannot list it: {e.strerror or e}") from None
        for e in entries:
            if e.name.startswith(".") or not e.is_file():
                continue  # the shim's temporary files start with "."
            path = Path(e.path)
            if e.name.endswith(TRACE_SUFFIX) or (
                    e.name != RUN_JSON and _looks_like_json_trace(path)):
                found.append(path)
    return found


def _read_file(path: Path, *, skip_other_json: bool) -> ProcessTrace | None:
    """A trace file: binary by its suffix, anything else as a JSON trace. With
    `skip_other_json`, None for valid JSON that is no shimgen trace."""
    from .tracejson import NotATrace

    reader = READERS[TRACE_SUFFIX if path.name.endswith(TRACE_SUFFIX) else JSON_SUFFIX]
    try:
        return reader(path)
    except NotATrace:
        if skip_other_json:
            return None
        raise


def load_source(path: Path, *, explicit: bool = True) -> Source:
    """The traces at one path. A file must be a trace; a directory must hold at least one,
    or be a run (run.json) whose command made no traced call."""
    if path.is_dir():
        src = Source(path, is_run=True)
        _read_run_metadata(src)
        for f in _trace_files(path):
            trace = _read_file(f, skip_other_json=True)
            if trace is not None:
                src.processes.append(trace)
        if not src.processes and src.run is None and explicit:
            raise ShimgenError(f"{path}: no traces in it (no *{TRACE_SUFFIX} or shimgen "
                               f"JSON trace in it or in {TRACES}/, and no {RUN_JSON})")
        return src
    if not path.exists():
        raise ShimgenError(f"{path}: no such file or directory")
    return Source(path, is_run=False, processes=[_read_file(path, skip_other_json=False)])


# ---- merging ---------------------------------------------------------------------------

class Merged:
    """One function over the processes of a group."""

    __slots__ = ("calls", "timed_calls", "total_ns", "max_ns", "hists", "hist_calls", "errors",
                 "errors_known")

    def __init__(self) -> None:
        self.calls = 0
        self.timed_calls = 0  # calls of the processes that timed it
        self.total_ns = 0.0  # over those processes
        self.max_ns: float | None = None
        self.hists: list = []  # (ns_per_tick, hist, max_ns) per process
        self.hist_calls = 0  # calls that the histograms cover
        self.errors: dict[int, int] = {}
        self.errors_known = True  # every process that called it counted its errors

    @property
    def timed(self) -> bool:
        return self.timed_calls > 0

    @property
    def mean_ns(self) -> float | None:
        return self.total_ns / self.timed_calls if self.timed_calls else None

    @property
    def error_count(self) -> int | None:
        return sum(self.errors.values()) if self.errors_known else None

    def percentiles(self, *qs: float) -> tuple[float | None, ...]:
        """p(100q) for each q over every call of the group; None unless every call is in a
        histogram."""
        if not self.hists or self.hist_calls != self.calls:
            return tuple(None for _ in qs)
        return percentiles(merged_segments(self.hists), qs)


def bucket_edges_ns(bucket: int, ns_per_tick: float) -> tuple[float, float]:
    """A histogram bucket's range in ns: bucket 0 holds 0 or 1 tick, [0, 2); bucket b >= 1
    holds [2**b, 2**(b+1)) ticks."""
    lo = 0.0 if bucket == 0 else float(1 << bucket) * ns_per_tick
    return lo, float(1 << (bucket + 1)) * ns_per_tick


def hist_segments(hist: list[int], ns_per_tick: float,
                  max_ns: float | None) -> list[tuple[float, float, int]]:
    """One process's histogram as (lo_ns, hi_ns, calls) ranges, the top non-empty bucket's
    upper edge lowered to the process's max_ns (never below the bucket's lower edge)."""
    top = next(compress(_DOWN, reversed(hist)), -1)
    out = [(*bucket_edges_ns(b, ns_per_tick), hist[b]) for b in range(top) if hist[b]]
    if top >= 0:
        out.append(top_segment(top, hist[top], ns_per_tick, max_ns))
    return out


def top_segment(top: int, calls: int, ns_per_tick: float,
                max_ns: float | None) -> tuple[float, float, int]:
    """The top non-empty bucket's range: its upper edge lowered to max_ns."""
    lo, hi = bucket_edges_ns(top, ns_per_tick)
    if max_ns is not None:
        hi = max(lo, min(hi, max_ns))
    return lo, hi, calls


def merged_segments(hists: list) -> list[tuple[float, float, int]]:
    """`hist_segments` of every (ns_per_tick, hist, max_ns), with the buckets below each
    process's top one summed first across the processes of the same ns_per_tick (the
    same ranges): a thousand processes give a thousand ranges, not tens of thousands."""
    if len(hists) == 1:  # --by pid, or a process of its own
        npt, hist, max_ns = hists[0]
        return hist_segments(hist, npt, max_ns)
    by_tick: dict[float, tuple[list, list]] = {}
    out = []
    for npt, hist, max_ns in hists:
        top = next(compress(_DOWN, reversed(hist)), -1)
        if top >= 0:
            group, tops = by_tick.setdefault(npt, ([], []))
            group.append(hist)
            tops.append(top)
            out.append(top_segment(top, hist[top], npt, max_ns))
    for npt, (group, tops) in by_tick.items():
        summed = [sum(column) for column in zip(*group, strict=True)]
        for hist, top in zip(group, tops, strict=True):
            summed[top] -= hist[top]  # in `out` already, with its own upper edge
        out.extend((*bucket_edges_ns(b, npt), c) for b, c in enumerate(summed) if c)
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


def percentile(segments: list[tuple[float, float, int]], q: float) -> float | None:
    return percentiles(segments, (q,))[0]


def errors_counted(p: ProcessTrace) -> bool:
    """Whether a trace counted its non-success returns: the time and timeline modes do,
    unless the reader says the shim did not."""
    from .tracejson import NO_ERROR_COUNTS

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
                m.hists.append((p.ns_per_tick, fs.hist, fs.max_ns))
                m.hist_calls += sum(fs.hist)
            if not counted:
                m.errors_known = False
            for code, n in fs.errors.items():
                m.errors[code] = m.errors.get(code, 0) + n
    return out


class Group:
    """Processes reported together: all of them, or those of one rank or pid."""

    __slots__ = ("key", "processes", "functions")

    def __init__(self, key: str, processes: list[ProcessTrace],
                 functions: dict[str, Merged]) -> None:
        self.key = key  # "all", the rank, or the pid
        self.processes = processes
        self.functions = functions


def _rank_order(key: str) -> tuple:
    return (0, int(key), "") if key.isdigit() else (1, 0, key)


def groups(processes: list[ProcessTrace], by: str | None) -> list[Group]:
    if by is None:
        return [Group("all", processes, merge(processes))]
    if by not in BY:
        raise ShimgenError(f"--by {by}: one of {', '.join(BY)}")
    split: dict[str, list[ProcessTrace]] = {}
    for p in processes:
        key = str(p.pid) if by == "pid" else (p.rank if p.rank is not None else "-")
        split.setdefault(key, []).append(p)
    return [Group(k, split[k], merge(split[k])) for k in sorted(split, key=_rank_order)]


def sorted_functions(functions: dict[str, Merged]) -> list[tuple[str, Merged]]:
    """By total time when any function is timed, else by calls; then by name."""
    if any(m.timed for m in functions.values()):
        return sorted(functions.items(), key=lambda kv: (-kv[1].total_ns, -kv[1].calls, kv[0]))
    return sorted(functions.items(), key=lambda kv: (-kv[1].calls, kv[0]))


# ---- the command -----------------------------------------------------------------------

def _sources(paths: list[Path]) -> list[Source]:
    if not paths:
        raise ShimgenError("report: name a run directory or trace files")
    seen: set[str] = set()
    for p in paths:
        real = os.path.realpath(p)
        if real in seen:
            raise ShimgenError(f"report: {p} is named twice (its calls would count twice)")
        seen.add(real)
    dirs = [p for p in paths if p.is_dir()]
    if (dirs and len(paths) > 2) or (len(dirs) == 1 and len(paths) == 2):
        raise ShimgenError("report: give one run directory, two run directories to compare, "
                           "or any number of trace files to merge")
    return [load_source(p) for p in paths]


def report(paths: list[Path], *, by: str | None = None, fmt: str = "text") -> str:
    """What `shimgen report` prints for these paths (cli.py parses the arguments)."""
    from . import report_format

    sources = _sources(paths)
    if len(sources) == 2 and all(s.is_run for s in sources):
        if by is not None:
            raise ShimgenError("report: --by goes with one run, not with two compared")
        from . import report_compare

        return report_compare.render(sources[0], sources[1], fmt)
    processes = [p for s in sources for p in s.processes]
    run = sources[0] if sources[0].is_run else None
    if not processes and run is None:
        raise ShimgenError("report: no traces")
    return report_format.render(sources, groups(processes, by), by, fmt)


def summary_for_run(run_dir: Path) -> str:
    """The report `shimgen run` prints at the end of a run: every process merged."""
    from . import report_format

    src = load_source(run_dir, explicit=False)
    return report_format.render([src], groups(src.processes, None), None, "text")
