"""A job now: each process of a run directory (every node's part) or of trace files, whether
it runs, completed or died, and its calls in progress with how long each has lasted. Read by
`shimgen report` (its in-flight section), `shimgen top` and `shimgen run --stall`; only
reads.

A call's age: for a running process on this machine, CLOCK_MONOTONIC now less its start; on
another host, CLOCK_REALTIME now less its start (the hosts' clocks as synchronised as they
are); for a died process, until its node's run ended (run.json's end), else until now.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..errors import ShimgenError
from ..runenv import TRACE_SUFFIX, TRACES
from . import inflight, live

RUNNING, COMPLETE, DIED = "running", "complete", "died"
UNTIL_END, UNTIL_NOW = "until the run ended", "until now"


class Busy:
    """One call in progress of a process."""

    __slots__ = ("tid", "function", "seconds", "start")

    def __init__(self, tid: int, function: str, seconds: float | None, start=None) -> None:
        self.tid, self.function, self.seconds = tid, function, seconds
        self.start = start  # the call's start as read (tells two calls of a thread apart)


class LastLaunch:
    """A stream's last launch and how long ago it was made (None: not known); `cut`: the
    trace file cut its kernel's name."""

    __slots__ = ("stream", "kernel", "ordinal", "seconds", "cut")

    def __init__(self, stream: int, kernel: str | None, ordinal: int,
                 seconds: float | None, cut: bool = False) -> None:
        self.stream, self.kernel, self.ordinal, self.seconds = stream, kernel, ordinal, seconds
        self.cut = cut


class ProcNow:
    """A process as its trace file and its node say now."""

    __slots__ = ("pid", "rank", "host", "state", "calls", "why_unknown", "counts", "path",
                 "until", "key", "device_bytes", "launches", "proc_start", "functions",
                 "boot_id")

    def __init__(self, f: inflight.InFlight, host: str) -> None:
        self.pid, self.rank, self.host, self.path = f.pid, f.rank, host, f.path
        self.proc_start, self.boot_id = f.proc_start, f.boot_id
        self.functions = f.functions  # with counts: function -> (calls, ns or None) so far
        self.state = COMPLETE if f.complete else RUNNING
        self.calls: list[Busy] = []
        self.why_unknown = f.why_unknown
        self.counts = f.counts
        self.device_bytes = f.device_bytes  # device memory held now (at death); None: unknown
        self.until = ""  # a died process's calls: UNTIL_END or UNTIL_NOW
        self.launches: list[LastLaunch] = []  # each stream's last launch, the latest first
        self.key = (f.boot_id, f.pid, f.proc_start) if f.proc_start and f.boot_id else (
            f.path,)

    @property
    def longest(self) -> Busy | None:
        timed = [c for c in self.calls if c.seconds is not None]
        return max(timed, key=lambda c: c.seconds) if timed else (
            self.calls[0] if self.calls else None)


def judge(f: inflight.InFlight, part: live.Part | None, host: str, here: str,
          now_real: int, now_mono: int) -> ProcNow:
    """The process of one file (its last image), its state and calls' ages now."""
    p = ProcNow(f, host)
    if f.complete:
        return p
    same_boot = bool(here) and f.boot_id == here
    if same_boot:
        running = live.alive_here(f.pid, f.proc_start, f.uid)
    else:
        running = part is not None and part.node_running(now_real)
    end = None
    if not running:
        p.state = DIED
        end = part.end_ns(now_real) if part is not None else None
        p.until = UNTIL_END if end is not None else UNTIL_NOW
    def age(c) -> float | None:
        if end is not None:
            secs = (end - c.real_ns) / 1e9 if c.real_ns is not None else None
        elif same_boot and c.mono_ns is not None:
            secs = (now_mono - c.mono_ns) / 1e9
        else:
            secs = (now_real - c.real_ns) / 1e9 if c.real_ns is not None else None
        return None if secs is None else max(secs, 0.0)

    for c in f.calls:
        p.calls.append(Busy(c.tid, c.function, age(c), c.mono_ns))
    p.calls.sort(key=lambda b: -(b.seconds or 0))
    p.launches = sorted((LastLaunch(la.stream, la.kernel, la.ordinal, age(la), la.cut)
                         for la in f.launches),
                        key=lambda la: la.seconds if la.seconds is not None else float("inf"))
    return p


def _trace_files(d: Path) -> list[Path]:
    out = []
    for sub in (d, d / TRACES):
        try:
            names = sorted(os.listdir(sub))
        except OSError:
            continue
        out += [sub / n for n in names if n.endswith(TRACE_SUFFIX) and not n.startswith(".")]
    return out


def _last_images(files: list[tuple[inflight.InFlight, live.Part | None, str]]):
    """One entry per process: the image that ran last (exec keeps pid and start time)."""
    best: dict[tuple, tuple] = {}
    for entry in files:
        f = entry[0]
        key = (f.boot_id, f.pid, f.proc_start) if f.proc_start and f.boot_id else (f.path,)
        old = best.get(key)
        if old is None or (f.start_ns, not f.complete) > (old[0].start_ns, not old[0].complete):
            best[key] = entry
    return list(best.values())


def snapshot(run_dir: Path, *, counts: bool = False,
             only_top: bool = False) -> tuple[list[ProcNow], list[str]]:
    """Every process of a run directory (all its nodes' parts, or with `only_top` the part
    at its top) now, and the files that could not be read (with why)."""
    here = live.boot_id()
    now_real, now_mono = time.time_ns(), time.monotonic_ns()
    read: list[tuple] = []
    problems: list[str] = []
    for part in live.parts(run_dir)[:1 if only_top else None]:
        for path in _trace_files(part.path):
            try:
                read.append((inflight.read(path, counts=counts), part, part.host))
            except ShimgenError as e:
                problems.append(str(e))
    procs = [judge(f, part, host, here, now_real, now_mono)
             for f, part, host in _last_images(read)]
    return procs, problems


def ignored(run_dir: Path) -> list[str]:
    """A line for each time of a run directory's parts that is ignored, being in the future
    (live.Part.ignored)."""
    now_real = time.time_ns()
    return [line for part in live.parts(run_dir) for line in part.ignored(now_real)]
