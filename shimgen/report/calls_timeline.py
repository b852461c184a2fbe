"""The timeline of a run traced with `--trace calls`: each process's calls as Chrome trace
JSON (Perfetto, chrome://tracing), the file the timeline mode writes (`timeline/<pid>.json`
of the run directory), made after the fact from the call records, so that each event's
`args` holds the call's decoded arguments, outputs and result (the values of the `--json`
record). A run with `--gpu-time` adds a GPU track per stream (category `gpu`, a thread
named "GPU: <stream>", tid GPU_TID + its order): each timed launch still in the trace file's
GPU track, at its context's reference event's host time plus the GPU time from that event to
its start (docs/design.md "GPU time per kernel"), as long as it ran. `shimgen run --trace calls`
writes them when the command has ended (run/summary.py); `timeline_text` is one process's
file.

An event is a complete event ("X": `ts`, `dur`) of category `libcuda`, as the timeline
mode's; a call that had not returned when the process ended is a begin event ("B") that
never ends, as Perfetto shows a slice that did not end. `ts` is microseconds on the clock
of `report --calls` (from the run's earliest trace file), so the processes of one run line
up. A launch (runenv.KERN_LAUNCH_FUNCTIONS) is named after its kernel and shown twice: its
call on its thread's track, and an instant event ("i") when the call began on its stream's
track, one per stream (`stream#N` as `report --calls` numbers it, or the null stream) after
the threads' (tid STREAM_TID + its number, past any thread id of Linux), its args naming the
thread: the order of a stream's launches, whichever threads made them (a span there would
be the host's launch call, not the kernel's run on the GPU, and two threads' calls could
overlap on one track)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import __version__
from ..calls import NAMED, RETURNED
from ..runenv import KERN_LAUNCH_FUNCTIONS, TIMELINE, TRACE_SUFFIX
from ..trace import stream_text
from .calls import Filters, shown, write_pieces
from .kernels import demangle

CAT = "libcuda"
GPU_CAT = "gpu"
GPU_TID = 1 << 29  # the GPU tracks' thread ids: this plus the stream's order of appearance
STREAM_TID = 1 << 30  # a stream's track: this + its number (Linux's thread ids are < 2**22)


def _stream(args: list) -> str | None:
    """A launch's stream as the decoded arguments name it (its own or its config's)."""
    for n, v, _, _ in args:
        if n == "hStream":
            return v or "the null stream"
        if n == "config" and isinstance(v, dict) and "hStream" in v:
            return v["hStream"] or "the null stream"
    return None


def _event_parts(g, r: tuple) -> tuple[str, str, tuple | None]:
    """An event's name, category and phase, its `args`: what a call's raw record alone
    says (values as the `--json` record has them, addresses as hex text); a launch's stream
    and its event's name."""
    args, outs = g.dec.decode(r, g.handles)
    code, rname = g.dec.result(r)
    h = g.dec.kernel_handle(r)
    kernel = (g.proc.kernels or {}).get(h) if h is not None else None
    # a launch: after its kernel, as report --calls names it (demangled unless --mangled)
    name = (g.handles[NAMED].get(h) or demangle(kernel)) if kernel else g.dec.names[r[1]]
    head = (f'"name": {json.dumps(name)}, "cat": "{CAT}", '
            f'"ph": "{"X" if r[2] == RETURNED else "B"}"')
    more = {"function": g.dec.names[r[1]], "kernel": kernel} if kernel else {}
    return head, json.dumps({"args": {n: t if a else v for n, v, t, a in args},
                             "outputs": {n: t if a else v for n, v, t, a in outs},
                             "result": code, "result_name": rname if code is not None else None,
                             **more}), ((_stream(args), json.dumps(name)) if g.dec.names[r[1]]
                                        in KERN_LAUNCH_FUNCTIONS else None)


def _events(g):
    """The process's name, each thread's name, then every call, in order."""
    p = g.proc
    pid = p.pid
    yield json.dumps({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {
        "name": f"shimgen: libcuda {p.driver_version} (pid {pid}) calls"}})
    kept: dict[int, int] = {}
    tid_of = p.column("tid")
    for s in g.rows:
        kept[tid_of[s]] = kept.get(tid_of[s], 0) + 1
    for tid, n in kept.items():
        yield json.dumps({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {
            "name": f"thread {tid}", "calls_recorded": n + p.dropped.get(tid, 0),
            "calls_kept": n}})
    base, k = g.base, g.k
    streams: dict[str, int] = {}
    for _, tid, start, dur, state, (head, args, launch) in g.each(lambda r: _event_parts(g, r)):
        span = f', "dur": {dur * k / 1e3:.3f}' if state == RETURNED else ""
        ts = f'"ts": {(base + start * k) / 1e3:.3f}'
        yield f'{{{head}, "pid": {pid}, "tid": {tid}, {ts}{span}, "args": {args}}}'
        if launch is None or launch[0] is None:
            continue
        stream, name = launch
        s = streams.get(stream)
        if s is None:
            s = streams[stream] = STREAM_TID + len(streams)
            yield json.dumps({"name": "thread_name", "ph": "M", "pid": pid, "tid": s,
                              "args": {"name": f"{stream} (launches)"}})
            yield json.dumps({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": s,
                              "args": {"sort_index": s}})
        yield (f'{{"name": {name}, "cat": "{CAT}", "ph": "i", "s": "t", "pid": {pid}, '
               f'"tid": {s}, {ts}, "args": {{"thread": {tid}, "stream": {json.dumps(stream)}, '
               f'"call": {args}}}}}')
    yield from _gpu_events(g)


def _gpu_events(g):
    """The GPU track: a thread per stream, each timed launch as long as it ran on the GPU."""
    p, base, k = g.proc, g.base, g.k
    tids: dict[int, int] = {}
    for stream, handle, ref, start, ns in p.gpu_track:
        if stream not in tids:
            tids[stream] = GPU_TID + len(tids)
            yield json.dumps({"name": "thread_name", "ph": "M", "pid": p.pid,
                              "tid": tids[stream],
                              "args": {"name": f"GPU: {stream_text(stream)}"}})
        kernel = (p.kernels or {}).get(handle)
        yield json.dumps({"name": demangle(kernel) if kernel else "an unnamed kernel",
                          "cat": GPU_CAT, "ph": "X", "pid": p.pid, "tid": tids[stream],
                          "ts": round((base + ref * k + start) / 1e3, 3),
                          "dur": round(ns / 1e3, 3), "args": {"kernel": kernel, "gpu_ns": ns}})


def timeline_text(g, out) -> int:
    """One process's calls (a report/calls.py Shown) as Chrome trace JSON, written to `out`;
    the calls in it."""
    p = g.proc
    other = {"shimgen": __version__, "source": "calls", "driver_version": p.driver_version,
             "pid": p.pid, "rank": p.rank, "complete": p.complete,
             "calls_per_thread": p.ring_records, "calls_kept": len(g.rows),
             "calls_dropped": sum(p.dropped.values())}
    head = ('{"displayTimeUnit": "ns",\n"otherData": ' + json.dumps(other)
            + ',\n"traceEvents": [\n  ')
    write_pieces(out, head, _events(g), ",\n  ", "\n]}\n")
    return len(g.rows)


def write_run(run_dir: Path, dir_fd: int) -> tuple[int, int]:
    """Every process of the run's traces as `timeline/<name>.json` of the run directory
    (`dir_fd`, its descriptor; the name is the trace file's, `<pid>`), each written whole;
    (files, calls)."""
    from ..files import replacing

    _, groups, _ = shown([run_dir], Filters())
    tfd = os.open(TIMELINE, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                  dir_fd=dir_fd)
    files = calls = 0
    try:
        for g in groups:
            name = Path(g.proc.path).name.removesuffix(TRACE_SUFFIX) + ".json"
            with replacing(name, dir_fd=tfd, sync=False) as fh:
                calls += timeline_text(g, fh)
            files += 1
    finally:
        os.close(tfd)
    return files, calls
