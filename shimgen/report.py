"""`shimgen report`: traces (trace files or run directories, binary or JSON) read into
`tracemodel.ProcessTrace`s, merged (all processes, or one group per rank or pid), with
percentiles from the log2 histograms; printed as tables (report_format.py) or two runs side
by side (report_compare.py). docs/report.md describes what is read and what is printed.

Only the standard library and shimgen's own light modules are imported on this path: a
report of a thousand processes must start and finish fast."""

from __future__ import annotations

import os
import stat
from math import isfinite
from pathlib import Path

from .errors import ShimgenError
from .runenv import NOTICES, RUN_JSON, TRACE_SUFFIX, TRACES
from .tracemodel import HIST_BUCKETS, NOT_FINISHED, ProcessTrace, tick_segments

# The layout of a run directory (`shimgen run`) is runenv.py's; other traces are JSON.
JSON_SUFFIX = ".json"
BY = ("rank", "pid")  # --by
NOTICES_MAX_BYTES = 1 << 20  # what is read of notices.log; the rest is said to be left


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
    try:  # a regular file (os.scandir said so); should it be a FIFO now, never waited on
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise ShimgenError(f"{path}: cannot read it: {e.strerror or e}") from None
    return head.lstrip().startswith(b"{") and head.lstrip()[1:].lstrip().startswith(
        b'"shimgen"')


class Source:
    """One path given to `shimgen report`: a trace file, or a directory (a run). (Plain
    classes in this module, not dataclasses: see tracemodel.py.)"""

    __slots__ = ("path", "is_run", "processes", "run", "run_problem", "unreadable", "notices")

    def __init__(self, path: Path, is_run: bool,
                 processes: list[ProcessTrace] | None = None) -> None:
        self.path = path
        self.is_run = is_run
        self.processes: list[ProcessTrace] = [] if processes is None else processes
        self.run: dict | None = None  # run.json, when the directory has one
        self.run_problem = ""  # why run.json could not be used
        # (path, why) of each file of a run that could not be read: left out of the totals
        self.unreadable: list[tuple[str, str]] = []
        self.notices: Notices | None = None  # the run's notices.log, when it has one

    @property
    def name(self) -> str:
        return str(self.path)


class Notices:
    """What the shim said in a run's notices.log, a line per notice, "[pid N] " first. A
    message is its line without that prefix; the same message from several processes is one
    kind, counted; kinds are in the order first seen."""

    __slots__ = ("path", "total", "kinds", "unread", "problem")

    def __init__(self, path: str) -> None:
        self.path = path
        self.total = 0  # notices (lines) read
        self.kinds: dict[str, int] = {}  # message -> notices
        self.unread = 0  # bytes past NOTICES_MAX_BYTES, not read
        self.problem = ""  # why the file was not read


def notice_message(line: str) -> str:
    """A notice's message: the line without the "[pid N] " the shim writes first."""
    if line.startswith("[pid "):
        end = line.find("] ", 5)
        if end > 5 and line[5:end].isascii() and line[5:end].isdigit():
            return line[end + 2:]
    return line


def read_notices(path: Path) -> Notices | None:
    """A run's notices.log, None when there is none. Read with care, as anything may be in
    its place: never through a symbolic link, only a regular file (opened without blocking,
    so a FIFO is refused, never waited on), at most NOTICES_MAX_BYTES of it."""
    import errno

    notices = Notices(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                     | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        notices.problem = ("a symbolic link, not followed" if e.errno == errno.ELOOP
                           else f"cannot read it: {e.strerror or e}")
        return notices
    chunks: list[bytes] = []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            notices.problem = "not a regular file"
            return notices
        left = NOTICES_MAX_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        notices.problem = f"cannot read it: {e.strerror or e}"
        return notices
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    lines = raw[:NOTICES_MAX_BYTES].split(b"\n")
    if len(raw) > NOTICES_MAX_BYTES:
        notices.unread = max(st.st_size, len(raw)) - NOTICES_MAX_BYTES + len(lines[-1])
        lines.pop()  # cut short: the rest of it is not read
    for line in lines:
        text = line.decode("utf-8", "replace").rstrip("\r")
        if text.strip():
            message = notice_message(text)
            notices.total += 1
            notices.kinds[message] = notices.kinds.get(message, 0) + 1
    return notices


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


def _why(e: Exception, path: Path | str) -> str:
    """A reader's one line ("PATH: reason") without the path."""
    msg = str(e)
    return msg[len(f"{path}: "):] if msg.startswith(f"{path}: ") else msg


def _trace_files(directory: Path, unreadable: list[tuple[str, str]]) -> list[Path]:
    """The binary traces by their suffix; the JSON traces by content, whatever their name
    (the shim names a process's trace `<name>.<pid>` when SHIMGEN_TRACE_FILE has no %p).
    What cannot be looked at (traces/ or a file that cannot be listed or opened) goes to
    `unreadable`."""
    found = []
    for d in (directory, directory / TRACES):
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as e:
            if d == directory:
                raise ShimgenError(f"{d}: cannot list it: {e.strerror or e}") from None
            unreadable.append((str(d), f"cannot list it: {e.strerror or e}"))
            continue
        for e in entries:
            if e.name.startswith(".") or not e.is_file():
                continue  # the shim's temporary files start with "."
            path = Path(e.path)
            try:
                if e.name.endswith(TRACE_SUFFIX) or (
                        e.name != RUN_JSON and e.name != NOTICES
                        and _looks_like_json_trace(path)):
                    found.append(path)
            except ShimgenError as err:
                unreadable.append((str(path), _why(err, path)))
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
    """The traces at one path. A file must be a trace (one that cannot be read is refused).
    A directory is a run: every trace in it that can be read, and each one that cannot in
    `unreadable` with why (one bad file does not lose the run), and its notices. It must
    hold a trace, readable or not, or run.json (a run whose command made no traced call);
    unless `explicit`, nothing is refused."""
    if path.is_dir():
        src = Source(path, is_run=True)
        _read_run_metadata(src)
        for f in _trace_files(path, src.unreadable):
            try:
                trace = _read_file(f, skip_other_json=True)
            except ShimgenError as e:
                src.unreadable.append((str(f), _why(e, f)))
                continue
            except Exception as e:  # a reader's mistake: this file is left out, not the run
                src.unreadable.append((str(f), "internal error reading it, please report "
                                               f"it: {type(e).__name__}: {e}"))
                continue
            if trace is not None:
                src.processes.append(trace)
        src.notices = read_notices(path / NOTICES)
        if not src.processes and src.run is None and explicit:
            if src.unreadable:
                f, why = src.unreadable[0]
                more = len(src.unreadable) - 1
                raise ShimgenError(f"{path}: no trace in it could be read, and no {RUN_JSON}: "
                                   f"{f}: {why}" + (f" (and {more} more)" if more else ""))
            raise ShimgenError(f"{path}: no traces in it (no *{TRACE_SUFFIX} or shimgen "
                               f"JSON trace in it or in {TRACES}/, and no {RUN_JSON})")
        return src
    if not path.exists():
        raise ShimgenError(f"{path}: no such file or directory")
    return Source(path, is_run=False, processes=[_read_file(path, skip_other_json=False)])


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
                 "errors_known")

    def __init__(self) -> None:
        self.calls = 0
        self.timed_calls = 0  # calls of the processes that timed it
        self.total_ns = 0.0  # over those processes
        self.max_ns: float | None = None
        self.hists: list = []  # (ns_per_tick, hist, max_ns, fine) per process
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
                m.hists.append((p.ns_per_tick, fs.hist, fs.max_ns, fs.fine))
                m.hist_calls += sum(fs.hist)
            if not counted:
                m.errors_known = False
            for code, n in fs.errors.items():
                m.errors[code] = m.errors.get(code, 0) + n
    return out


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
    if by is None:
        functions = merge(processes)
        check_sums(functions, processes)
        return [Group("all", processes, functions, procs)]
    if by not in BY:
        raise ShimgenError(f"--by {by}: one of {', '.join(BY)}")
    split: dict[str, list[Process]] = {}
    for proc in procs:
        p = proc.last
        key = str(p.pid) if by == "pid" else (p.rank if p.rank is not None else "-")
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


def _csv_leaves_out(sources: list[Source], fmt: str) -> None:
    """The CSV has the numbers only: that some files could not be read is said on stderr."""
    n = sum(len(s.unreadable) for s in sources)
    if fmt == "csv" and n:
        import sys

        some, verb, them = (f"{n} trace files", "are", "them") if n > 1 else (
            "1 trace file", "is", "it")
        print(f"shimgen: warning: {some} could not be read and {verb} left out of these "
              f"numbers (the table and --json name {them})", file=sys.stderr)


def report(paths: list[Path], *, by: str | None = None, fmt: str = "text") -> str:
    """What `shimgen report` prints for these paths (cli.py parses the arguments)."""
    from . import report_format

    sources = _sources(paths)
    if len(sources) == 2 and all(s.is_run for s in sources):
        if by is not None:
            raise ShimgenError("report: --by goes with one run, not with two compared")
        from . import report_compare

        out = report_compare.render(sources[0], sources[1], fmt)
        _csv_leaves_out(sources, fmt)
        return out
    processes = [p for s in sources for p in s.processes]
    run = sources[0] if sources[0].is_run else None
    if not processes and run is None:
        raise ShimgenError("report: no traces")
    out = report_format.render(sources, groups(processes, by), by, fmt)
    _csv_leaves_out(sources, fmt)
    return out


def summary_for_run(run_dir: Path) -> str:
    """The report `shimgen run` prints at the end of a run: every process merged."""
    from . import report_format

    src = load_source(run_dir, explicit=False)
    return report_format.render([src], groups(src.processes, None), None, "text")
