"""The one in-memory shape of a process's trace, produced by every reader (the binary
trace files of `tracefile.py`, the JSON traces the shim writes at exit) and consumed by
`report.py`.

Times are in nanoseconds. A latency histogram has `HIST_BUCKETS` log2 buckets of elapsed
ticks: bucket 0 holds calls of 0 or 1 tick, bucket b >= 1 those of [2**b, 2**(b+1)) ticks;
`ns_per_tick` turns a bucket's edges into nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HIST_BUCKETS = 64


@dataclass
class FunctionStats:
    calls: int = 0
    total_ns: float | None = None  # None: the process was not timed
    max_ns: float | None = None
    hist: list[int] | None = None  # HIST_BUCKETS counts, or None: no histogram
    errors: dict[int, int] = field(default_factory=dict)  # CUresult code -> returns


@dataclass
class ProcessTrace:
    path: str  # the file it was read from
    source: str  # "shimtrace" (binary, docs/traceformat.md) or "json"
    pid: int
    rank: str | None  # the launcher's rank, None where none was set
    mode: str  # "counts", "time" or "timeline"
    complete: bool  # the process exited normally and finished the file
    shimgen_version: str = ""
    driver_path: str = ""
    driver_version: str = ""  # the loaded driver's
    driver_build_id: str = ""  # the loaded driver's
    ns_per_tick: float | None = None  # None: times cannot be given (see tracefile.py)
    untimed_calls: int = 0
    unmapped_proc_addresses: int = 0
    start_ns: int | None = None  # CLOCK_REALTIME at the first traced call
    end_ns: int | None = None  # at exit; None when the process died
    functions: dict[str, FunctionStats] = field(default_factory=dict)
    # Optional, added at the end (readers that lack them leave the defaults):
    ppid: int | None = None  # the parent process, where the reader knows it
    errors_overflow: int = 0  # non-success returns that found no free error slot
    notes: list[str] = field(default_factory=list)  # what the reader could not give, and why
