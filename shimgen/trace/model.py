"""The one in-memory shape of a process's trace, produced by every reader (the binary
trace files of `trace/binary.py`, the JSON traces the shim writes at exit) and consumed by
`report/main.py`.

Times are in nanoseconds. A latency histogram has `HIST_BUCKETS` log2 buckets of elapsed
ticks: bucket 0 holds calls of 0 or 1 tick, bucket b >= 1 those of [2**b, 2**(b+1)) ticks;
a fine histogram refines it, `FINE_SUB` buckets per power of two (`tick_segments` combines
the two); `ns_per_tick` turns a bucket's edges into nanoseconds.
"""

from __future__ import annotations

from ..runenv import TRACE_FUNCTION_FIELDS

HIST_BUCKETS = 64
# The note of a trace whose process never finished its file: it died, or it exec'd (then
# the report, which sees the image after the exec, drops the note from the one before).
NOT_FINISHED = "the process did not finish the file (it died, was killed, or exec'd)"
# The note of a process that left no trace, only a note that the disk had no room for its
# trace file (runenv.TRACE_NOSPACE_SUFFIX): none of its calls is in the run.
NO_ROOM = ("no room on the disk for its trace file: none of its calls is in the run (a "
           "process that exited printed its own table on its stderr)")
# The fine histogram (runtime/arch/layout.h; a binary trace's header states these, and the
# reader refuses other values): FINE_SUB buckets per power of two of elapsed ticks. Fine
# bucket f is the tick count f itself below FINE_SUB; else, with e = floor(log2(ticks)),
# f = (e - s) * FINE_SUB + (ticks >> (e - s)) for s = log2(FINE_SUB).
FINE_SUB_SHIFT = 6
FINE_SUB = 1 << FINE_SUB_SHIFT
FINE_BUCKETS = (HIST_BUCKETS - FINE_SUB_SHIFT + 1) << FINE_SUB_SHIFT


def fine_bucket(ticks: int) -> int:
    """The fine bucket of a call of `ticks` ticks (as the timing stub computes it)."""
    if ticks < FINE_SUB:
        return ticks
    sh = ticks.bit_length() - 1 - FINE_SUB_SHIFT
    return sh * FINE_SUB + (ticks >> sh)


def fine_range(f: int) -> tuple[int, int]:
    """The ticks [lo, hi) of fine bucket f."""
    if f < FINE_SUB:
        return f, f + 1
    sh = (f >> FINE_SUB_SHIFT) - 1
    lo = ((f & (FINE_SUB - 1)) | FINE_SUB) << sh
    return lo, lo + (1 << sh)


def fine_octave(f: int) -> int:
    """The log2 bucket that holds fine bucket f."""
    return max(fine_range(f)[0].bit_length() - 1, 0)


def log2_range(b: int) -> tuple[int, int]:
    """The ticks [lo, hi) of log2 bucket b: [0, 2) for b = 0, else [2**b, 2**(b+1))."""
    return (0 if b == 0 else 1 << b), 1 << (b + 1)


def tick_segments(hist: list[int], fine: dict[int, int] | None) -> list[tuple[int, int, int]]:
    """A function's calls as (lo, hi, calls) ranges of ticks, in order: per non-empty log2
    bucket, its fine buckets when they hold every call of that bucket, else the log2 bucket
    itself (a fine table that was full, or a count that wrapped). runtime/stats/quantiles.c does the
    same for the shim's own table."""
    by_octave: dict[int, list[tuple[int, int]]] = {}
    for f, n in (fine or {}).items():
        if n:
            by_octave.setdefault(fine_octave(f), []).append((f, n))
    out = []
    for b, calls in enumerate(hist):
        if not calls:
            continue
        fines = by_octave.get(b)
        if fines and sum(n for _, n in fines) == calls:
            out.extend((*fine_range(f), n) for f, n in sorted(fines))
        else:
            out.append((*log2_range(b), calls))
    return out

# Plain classes, not dataclasses: the report is on `shimgen run`'s path, where importing
# dataclasses (and inspect, re, copy with it) would cost more than all of this module.


# A function's fields, runenv.TRACE_FUNCTION_FIELDS' names: `calls`; the words of its blocks
# that are times (`total_ns`, `max_ns`: None when the process was not timed); `hist` (
# HIST_BUCKETS counts, or None: no histogram); `fine` (fine bucket -> calls, a refinement of
# hist, or None). A field the list adds is one more, None until a reader sets it.
FUNCTION_FIELDS = tuple(name for name, _, _ in TRACE_FUNCTION_FIELDS if name)


class FunctionStats:
    """One function of a process: FUNCTION_FIELDS, and `errors` (CUresult code -> returns)
    and `injected` (CUresult code -> failures SHIMGEN_INJECT returned without calling the
    driver, not in `errors`, which are the driver's own)."""

    __slots__ = FUNCTION_FIELDS + ("errors", "injected")

    def __init__(self, calls: int = 0, errors: dict[int, int] | None = None,
                 injected: dict[int, int] | None = None, **fields) -> None:
        for name in FUNCTION_FIELDS:
            setattr(self, name, fields.pop(name, None))
        if fields:
            raise TypeError(f"FunctionStats has no field {', '.join(sorted(fields))}")
        self.calls = calls
        self.errors = {} if errors is None else errors
        self.injected = {} if injected is None else injected


class ProcessTrace:
    __slots__ = ("path", "source", "pid", "rank", "mode", "complete", "shimgen_version",
                 "driver_path", "driver_version", "driver_build_id", "ns_per_tick",
                 "untimed_calls", "unmapped_proc_addresses", "start_ns", "end_ns", "functions",
                 "ppid", "errors_overflow", "notes", "boot_id", "proc_start",
                 "calls_missing", "no_file", "host", "now", "memory", "kernels")

    def __init__(self, path: str, source: str, pid: int, rank: str | None, mode: str,
                 complete: bool, shimgen_version: str = "", driver_path: str = "",
                 driver_version: str = "", driver_build_id: str = "",
                 ns_per_tick: float | None = None, untimed_calls: int = 0,
                 unmapped_proc_addresses: int = 0, start_ns: int | None = None,
                 end_ns: int | None = None, functions: dict[str, FunctionStats] | None = None,
                 ppid: int | None = None, errors_overflow: int = 0,
                 notes: list[str] | None = None, boot_id: str = "",
                 proc_start: int | None = None, calls_missing: int = 0,
                 no_file: bool = False) -> None:
        self.path = path  # the file it was read from
        self.source = source  # "shimtrace" (binary, docs/traceformat.md) or "json"
        self.pid = pid
        self.rank = rank  # the launcher's rank, None where none was set
        self.mode = mode  # "counts", "time" or "timeline"
        self.complete = complete  # the process exited normally and finished the file
        self.shimgen_version = shimgen_version
        self.driver_path = driver_path
        self.driver_version = driver_version  # the loaded driver's
        self.driver_build_id = driver_build_id  # the loaded driver's
        self.ns_per_tick = ns_per_tick  # None: times cannot be given (see trace/binary.py)
        self.memory = None  # trace/memory.py MemoryLedger: a version 4 binary trace file
        self.kernels = None  # trace/kernels.py KernelTable: a version 7 binary trace file
        self.untimed_calls = untimed_calls
        self.unmapped_proc_addresses = unmapped_proc_addresses
        self.start_ns = start_ns  # CLOCK_REALTIME at the first traced call
        self.end_ns = end_ns  # at exit; None when the process died
        self.functions = {} if functions is None else functions
        self.ppid = ppid  # the parent process, where the reader knows it
        self.errors_overflow = errors_overflow  # non-success returns with no free error slot
        self.notes = [] if notes is None else notes  # what the reader could not give, and why
        # The process's identity across exec: the boot it ran in and its start time (in
        # clock ticks since boot, /proc/<pid>/stat field 22), which exec keeps, as it keeps
        # the pid. "" / None where the reader does not know them.
        self.boot_id = boot_id
        self.proc_start = proc_start
        # Calls the process made that its trace does not hold (counted in memory when the
        # disk had no room for a block: at least this many), and whether it left no trace at
        # all, only a note that the disk had no room for one (its calls unknown). Either way
        # its counts are not exact.
        self.calls_missing = calls_missing
        self.no_file = no_file
        self.host = ""  # the node whose part of a run directory held it ("": unknown)
        self.now = None  # trace/job.py's ProcNow of an unfinished trace (report/inflight.py)

    @property
    def short(self) -> bool:
        """Whether some of its calls are not in its trace (a full disk)."""
        return bool(self.calls_missing or self.no_file)
