"""`shimgen report --calls RUN`: the call records of SHIMGEN_TRACE=calls, decoded
(shimgen/calls), one line each as ltrace and strace print them, or as JSON records, or a
table of an SQLite file; filtered by function, errors, the last N per thread, pid or rank.
`--first-difference` (calls_diff.py) compares two runs."""

from __future__ import annotations

import fnmatch
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

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


def decoded(paths: list[Path]):
    """(processes, [(process, record dict, text line)] in order, note) of every call."""
    from ..calls import load_run

    procs = [p for path in paths for p in load_run(path)]
    get, note = _decoders()
    zero = min((p.calib_ns0 for p in procs), default=0)
    out = []
    for p in procs:
        from ..trace import binary

        dec = get(binary.header(p.path)["names"])
        k = p.ns_per_tick or 0.0
        handles: dict = {}
        for c in p.calls:
            out.append((p, *_record(p, c, dec, handles, k, zero)))
    out.sort(key=lambda r: (r[1]["t"], r[1]["tid"], r[1]["seq"]))
    return procs, out, note


def _record(p, c, dec, handles, k, zero):
    args, outs = dec.decode(c, handles)
    code, rname = dec.result(c)
    t = (p.calib_ns0 + (c.start - p.calib_ticks0) * k - zero) / 1e9
    dur_us = c.dur * k / 1e3 if c.state == 2 else None
    rec = {"pid": p.pid, "rank": p.rank, "tid": c.tid, "seq": c.seq, "t": round(t, 9),
           "function": c.name, "args": {n: v for n, v, _, _ in args},
           "result": code, "result_name": rname if code is not None else None,
           "outputs": {n: v for n, v, _, _ in outs},
           "dur_us": None if dur_us is None else round(dur_us, 3),
           "state": "returned" if c.state == 2 else "entered"}
    arg_text = ", ".join(f"{n}={t_}" for n, _, t_, _ in args)
    out_text = (" {" + ", ".join(f"{n}={t_}" for n, _, t_, _ in outs) + "}") if outs else ""
    dur = "" if dur_us is None else f" {dur_us:.0f}us" if dur_us >= 10 else f" {dur_us:.1f}us"
    line = f"{t:.6f} [{c.tid}] {c.name}({arg_text}) = {rname}{out_text}{dur}"
    rec["_key"] = (c.name, tuple((n, t_) for n, _, t_, a in args if not a),
                   rname, tuple((n, t_) for n, _, t_, a in outs if not a))
    rec["_addr"] = (tuple(t_ for _, _, t_, a in args if a), tuple(t_ for _, _, t_, a in outs if a))
    return rec, line


def select(rows, f: Filters):
    out = []
    for p, rec, line in rows:
        if f.pid is not None and rec["pid"] != f.pid:
            continue
        if f.rank is not None and (rec["rank"] or "") != f.rank:
            continue
        if f.function and not fnmatch.fnmatchcase(rec["function"], f.function):
            continue
        if f.errors and not rec["result"]:
            continue
        out.append((p, rec, line))
    if f.last is not None:
        per = defaultdict(list)
        for r in out:
            per[(r[1]["pid"], r[1]["tid"])].append(r)
        keep = {id(r) for rs in per.values() for r in rs[-f.last:]}
        out = [r for r in out if id(r) in keep]
    return out


def _verdict(procs, rows, shown) -> list[str]:
    threads = {(r["pid"], r["tid"]) for _, r, _ in rows}
    lines = [f"calls      {len(rows)} recorded in {len(threads)} threads of "
             f"{len(procs)} processes; {len(shown)} shown"]
    for p in procs:
        for tid, n in sorted(p.dropped.items()):
            lines.append(f"dropped    pid {p.pid} thread {tid}: {n} earlier calls (the ring "
                         f"keeps the last {p.ring_records} per thread)")
        if not p.complete:
            lines.append(f"note       pid {p.pid} did not finish: its last calls are those "
                         "before it died")
    return lines


def render(paths: list[Path], f: Filters, fmt: str = "text", sqlite: str | None = None) -> str:
    procs, rows, note = decoded(paths)
    shown = select(rows, f)
    if sqlite:
        from .calls_sql import write_sqlite

        write_sqlite(Path(sqlite), [r for _, r, _ in shown])
    if fmt == "json":
        clean = [{k: v for k, v in r.items() if not k.startswith("_")} for _, r, _ in shown]
        return json.dumps({"schema": "shimgen-calls", "note": note, "processes": [
            {"pid": p.pid, "rank": p.rank, "path": p.path, "driver_version": p.driver_version,
             "complete": p.complete, "ring_records": p.ring_records,
             "dropped": {str(t): n for t, n in p.dropped.items()}} for p in procs],
            "calls": clean}, indent=1) + "\n"
    head = _verdict(procs, rows, shown) + ([f"note       {note}"] if note else [])
    if sqlite:
        head.append(f"sqlite     {sqlite}: table calls, {len(shown)} rows")
    return "\n".join(head + [""] + [line for _, _, line in shown]) + "\n"


def check(f: Filters) -> None:
    if f.last is not None and f.last < 1:
        raise ShimgenError("report: --last takes a number from 1")

