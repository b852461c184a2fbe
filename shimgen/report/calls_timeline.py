"""The timeline of a run traced with `--trace calls`: each process's calls as Chrome trace
JSON (Perfetto, chrome://tracing), the file the timeline mode writes (`timeline/<pid>.json`
of the run directory), made after the fact from the call records, so that each event's
`args` holds the call's decoded arguments, outputs and result (the values of the `--json`
record). A run with `--gpu-time` adds a GPU track per stream (category `gpu`, a thread
named "GPU: <stream>"): each timed launch still in the trace file's GPU track, at its
context's reference event's host time plus the GPU time from that event to its start
(docs/design.md "GPU time per kernel"), as long as it ran. `shimgen run --trace calls`
writes them when the command has ended (run/summary.py); `timeline_text` is one process's
file.

An event is a complete event ("X": `ts`, `dur`) of category `libcuda`, as the timeline
mode's; a call that had not returned when the process ended is a begin event ("B") that
never ends, as Perfetto shows a slice that did not end. `ts` is microseconds on the clock
of `report --calls` (from the run's earliest trace file), so the processes of one run line
up."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import __version__
from ..calls import RETURNED
from ..runenv import TIMELINE, TRACE_SUFFIX
from ..trace import stream_text
from .calls import Filters, shown, write_pieces
from .kernels import demangle

CAT = "libcuda"
GPU_CAT = "gpu"
GPU_TID = 1 << 30  # the GPU tracks' thread ids: this plus the stream's order of appearance


def _event_parts(g, r: tuple) -> tuple[str, str]:
    """An event's name, category and phase, and its `args`: what a call's raw record alone
    says. Values as the `--json` record has them, addresses as hex text."""
    args, outs = g.dec.decode(r, g.handles)
    code, rname = g.dec.result(r)
    h = g.dec.kernel_handle(r)
    kernel = (g.proc.kernels or {}).get(h) if h is not None else None
    name = demangle(kernel) if kernel else g.dec.names[r[1]]  # a launch: after its kernel
    head = (f'"name": {json.dumps(name)}, "cat": "{CAT}", '
            f'"ph": "{"X" if r[2] == RETURNED else "B"}"')
    more = {"function": g.dec.names[r[1]], "kernel": kernel} if kernel else {}
    return head, json.dumps({"args": {n: t if a else v for n, v, t, a in args},
                             "outputs": {n: t if a else v for n, v, t, a in outs},
                             "result": code, "result_name": rname if code is not None else None,
                             **more})


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
    for _, tid, start, dur, state, (head, args) in g.each(lambda r: _event_parts(g, r)):
        span = f', "dur": {dur * k / 1e3:.3f}' if state == RETURNED else ""
        yield (f'{{{head}, "pid": {pid}, "tid": {tid}, "ts": {(base + start * k) / 1e3:.3f}'
               f'{span}, "args": {args}}}')
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
