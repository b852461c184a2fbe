"""The one in-memory shape of a process's trace, produced by every reader (the binary
trace files of `tracefile.py`, the JSON traces the shim writes at exit) and consumed by
`report.py`.

Times are in nanoseconds. A latency histogram has `HIST_BUCKETS` log2 buckets of elapsed
ticks: bucket 0 holds calls of 0 or 1 tick, bucket b >= 1 those of [2**b, 2**(b+1)) ticks;
`ns_per_tick` turns a bucket's edges into nanoseconds.
"""

from __future__ import annotations

HIST_BUCKETS = 64

# Plain classes, not dataclasses: the report is on `shimgen run`'s path, where importing
# dataclasses (and inspect, re, copy with it) would cost more than all of this module.


class FunctionStats:
    __slots__ = ("calls", "total_ns", "max_ns", "hist", "errors")

    def __init__(self, calls: int = 0, total_ns: float | None = None,
                 max_ns: float | None = None, hist: list[int] | None = None,
                 errors: dict[int, int] | None = None) -> None:
        self.calls = calls
        self.total_ns = total_ns  # None: the process was not timed
        self.max_ns = max_ns
        self.hist = hist  # HIST_BUCKETS counts, or None: no histogram
        self.errors = {} if errors is None else errors  # CUresult code -> returns


class ProcessTrace:
    __slots__ = ("path", "source", "pid", "rank", "mode", "complete", "shimgen_version",
                 "driver_path", "driver_version", "driver_build_id", "ns_per_tick",
                 "untimed_calls", "unmapped_proc_addresses", "start_ns", "end_ns", "functions",
                 "ppid", "errors_overflow", "notes")

    def __init__(self, path: str, source: str, pid: int, rank: str | None, mode: str,
                 complete: bool, shimgen_version: str = "", driver_path: str = "",
                 driver_version: str = "", driver_build_id: str = "",
                 ns_per_tick: float | None = None, untimed_calls: int = 0,
                 unmapped_proc_addresses: int = 0, start_ns: int | None = None,
                 end_ns: int | None = None, functions: dict[str, FunctionStats] | None = None,
                 ppid: int | None = None, errors_overflow: int = 0,
                 notes: list[str] | None = None) -> None:
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
        self.ns_per_tick = ns_per_tick  # None: times cannot be given (see tracefile.py)
        self.untimed_calls = untimed_calls
        self.unmapped_proc_addresses = unmapped_proc_addresses
        self.start_ns = start_ns  # CLOCK_REALTIME at the first traced call
        self.end_ns = end_ns  # at exit; None when the process died
        self.functions = {} if functions is None else functions
        self.ppid = ppid  # the parent process, where the reader knows it
        self.errors_overflow = errors_overflow  # non-success returns with no free error slot
        self.notes = [] if notes is None else notes  # what the reader could not give, and why
