"""`shimgen report --calls RUN`: the call records of SHIMGEN_TRACE=calls, decoded
(shimgen/calls), one line each as ltrace and strace print them, or as JSON records, or a
table of an SQLite file; filtered by function, errors, the last N per thread, pid or rank.
The filters are applied to the raw records, so only the calls shown are decoded; handles
are numbered over every call of a process in order, shown or not. `--first-difference`
(calls_diff.py) compares two runs."""

from __future__ import annotations

import fnmatch
import heapq
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ..calls import DUR, IDX, SEQ, START, STATE, TID
from ..errors import ShimgenError


@dataclass(frozen=True)
class Filters:
    function: str | None = None
    errors: bool = False
    last: int | None = None
    pid: int | None = None
    rank: str | None = None


def _decoders():
    from ..calls import Decoder, description

    try:
        desc, note = description(), None
    except Exception as e:  # noqa: BLE001 - without headers the calls are shown raw
        desc, note = None, f"no prototypes ({str(e).splitlines()[0] if str(e) else e}): " \
                           "arguments are shown as raw registers"
    cache: dict[tuple, object] = {}

    def get(names: list[str]):
        key = tuple(names)
        if key not in cache:
            cache[key] = Decoder(desc, names)
        return cache[key]
    return get, note


class Shown:
    """One process's calls that pass the filters, with what decodes them."""

    def __init__(self, proc, dec, rows: list, zero: int):
        self.proc, self.dec, self.rows = proc, dec, rows
        self.k = proc.ns_per_tick or 0.0
        self.base = proc.calib_ns0 - proc.calib_ticks0 * self.k - zero
        self.handles = _handles(proc, dec)

    def t(self, r) -> float:
        return (self.base + r[START] * self.k) / 1e9

    def line(self, r) -> str:
        dur = ""
        if r[STATE] == 2:
            us = r[DUR] * self.k / 1e3
            dur = f" {us:.0f}us" if us >= 10 else f" {us:.1f}us" if us >= 1 else f" {us:.2f}us"
        t = (self.base + r[START] * self.k) / 1e9
        return f"{t:.6f} [{r[TID]}] {self.dec.text(r, self.handles)}{dur}"

    def record(self, r) -> dict:
        p, dec = self.proc, self.dec
        args, outs = dec.decode(r, self.handles)
        code, rname = dec.result(r)
        return {"pid": p.pid, "rank": p.rank, "tid": r[TID], "seq": r[SEQ],
                "t": round(self.t(r), 9), "function": dec.names[r[IDX]],
                "args": {n: v for n, v, _, _ in args}, "result": code,
                "result_name": rname if code is not None else None,
                "outputs": {n: v for n, v, _, _ in outs},
                "dur_us": round(r[DUR] * self.k / 1e3, 3) if r[STATE] == 2 else None,
                "state": "returned" if r[STATE] == 2 else "entered"}


def _handles(proc, dec) -> dict:
    """Every handle of the process numbered in order of first appearance (all its calls)."""
    handles: dict = {}
    flags = dec.handled
    for r in proc.calls:
        if flags[r[IDX]]:
            dec.decode(r, handles)
    return handles


def _rows(proc, dec, f: Filters) -> list:
    rows = proc.calls
    if f.function:
        wanted = [fnmatch.fnmatchcase(n, f.function) for n in dec.names]
        rows = [r for r in rows if wanted[r[IDX]]]
    if f.errors:
        rows = [r for r in rows if dec.failed(r)]
    if f.last is not None:
        per = defaultdict(list)
        for r in rows:
            per[r[TID]].append(r)
        keep = {id(r) for rs in per.values() for r in rs[-f.last:]}
        rows = [r for r in rows if id(r) in keep]
    return rows


def shown(paths: list[Path], f: Filters):
    """(every process read, [Shown] of those the filters keep, note)."""
    from ..calls import load_run

    procs = [p for path in paths for p in load_run(path)]
    get, note = _decoders()
    zero = min((p.calib_ns0 for p in procs), default=0)
    out = []
    for p in procs:
        if (f.pid is not None and p.pid != f.pid) or (
                f.rank is not None and (p.rank or "") != f.rank):
            continue
        dec = get(p.names)
        out.append(Shown(p, dec, _rows(p, dec, f), zero))
    return procs, out, note


def in_order(groups: list[Shown]):
    """(group, record) of every shown call, in order of start time over the processes."""
    if len(groups) == 1:
        g = groups[0]
        return ((g, r) for r in g.rows)
    return heapq.merge(*([(g, r) for r in g.rows] for g in groups),
                       key=lambda x: x[0].t(x[1]))


def _verdict(procs, groups, total_shown) -> list[str]:
    threads = {(p.pid, r[TID]) for p in procs for r in p.calls}
    lines = [f"calls      {sum(len(p.calls) for p in procs)} recorded in {len(threads)} "
             f"threads of {len(procs)} processes; {total_shown} shown"]
    for p in procs:
        for tid, n in sorted(p.dropped.items()):
            lines.append(f"dropped    pid {p.pid} thread {tid}: {n} earlier calls (the ring "
                         f"keeps the last {p.ring_records} per thread)")
        if not p.complete:
            lines.append(f"note       pid {p.pid} did not finish: its last calls are those "
                         "before it died")
    return lines


def render(paths: list[Path], f: Filters, fmt: str = "text", sqlite: str | None = None) -> str:
    procs, groups, note = shown(paths, f)
    n = sum(len(g.rows) for g in groups)
    if sqlite:
        from .calls_sql import write_sqlite

        write_sqlite(Path(sqlite), (g.record(r) for g, r in in_order(groups)))
    if fmt == "json":
        head = json.dumps({"schema": "shimgen-calls", "note": note, "processes": [
            {"pid": p.pid, "rank": p.rank, "path": p.path, "driver_version": p.driver_version,
             "complete": p.complete, "ring_records": p.ring_records,
             "dropped": {str(t): k for t, k in p.dropped.items()}} for p in procs]})
        body = ",\n".join(json.dumps(g.record(r)) for g, r in in_order(groups))
        return head[:-1] + ', "calls": [\n' + body + "\n]}\n"
    head = _verdict(procs, groups, n) + ([f"note       {note}"] if note else [])
    if sqlite:
        head.append(f"sqlite     {sqlite}: table calls, {n} rows")
    return "\n".join(head + [""] + [g.line(r) for g, r in in_order(groups)]) + "\n"


def check(f: Filters) -> None:
    if f.last is not None and f.last < 1:
        raise ShimgenError("report: --last takes a number from 1")
