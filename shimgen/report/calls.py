"""`shimgen report --calls RUN`: the call records of SHIMGEN_TRACE=calls, decoded
(shimgen/calls), one line each as ltrace and strace print them, or as JSON records, or a
table of an SQLite file; filtered by function, errors, the last N per thread, pid or rank.
The filters are applied to the raw records, so only the calls shown are decoded; handles
are numbered over every call of a process in order, shown or not. `--first-difference`
(calls_diff.py) compares two runs.

Fast for a million records: the records are read as columns of one buffer (records.py);
a call's decoded text, JSON or table row is a function of its raw bytes (function, state,
result, argument words, capture) once the process's handles are numbered (_handles, a
first pass), so each is made once per distinct record and kept (`Shown.memo`); the time,
thread and duration of each line are put around it; the output is written in large
chunks. `line` and `record` decode one record at a time, the plain way (the first
difference, and the test that the two agree)."""

from __future__ import annotations

import fnmatch
import heapq
import json
from dataclasses import dataclass
from itertools import chain, islice
from operator import itemgetter
from pathlib import Path

from ..calls import BODY, NAMED, RETURNED, ROW
from ..errors import ShimgenError
from .calls_decoders import decoders, other_headers_note
from .calls_times import key_line, retimed
from .kernels import demangled
from .output import shown as escaped

MEMO_MAX = 1 << 16  # distinct records kept decoded per process (then the memo starts anew)
CHUNK = 1 << 14  # lines written at a time


@dataclass(frozen=True)
class Filters:
    function: str | None = None
    errors: bool = False
    last: int | None = None
    pid: int | None = None
    rank: str | None = None
    mangled: bool = False  # kernels' names as the trace file has them, not demangled


def _dur_text(us: float) -> str:
    return f" {us:.0f}us" if us >= 10 else f" {us:.1f}us" if us >= 1 else f" {us:.2f}us"


class Shown:
    """One process's calls that pass the filters (`rows`: their slots), with what decodes
    them."""

    def __init__(self, proc, dec, rows: list, zero: int, mangled: bool = False):
        self.proc, self.dec, self.rows = proc, dec, rows
        self.k = proc.ns_per_tick or 0.0
        self.base = proc.calib_ns0 - proc.calib_ticks0 * self.k - zero
        self.handles = _handles(proc, dec)
        names, cut = proc.kernels or {}, proc.kernels_cut
        self.handles[NAMED] = {h: demangled(n, mangled or h in cut) for h, n in names.items()}
        self.start = proc.column("start")

    def t(self, s: int) -> float:
        return (self.base + self.start[s] * self.k) / 1e9

    # ---- one record at a time ---------------------------------------------------------------
    def line(self, s: int) -> str:
        return self._line(self.proc.record(s))

    def record(self, s: int) -> dict:
        return self.record_of(self.proc.record(s))

    def _line(self, r: tuple) -> str:
        dur = _dur_text(r[5] * self.k / 1e3) if r[2] == RETURNED else ""
        t = (self.base + r[4] * self.k) / 1e9
        return f"{t:.6f} [{r[3]}] {escaped(self.dec.text(r, self.handles))}{dur}"

    def record_of(self, r: tuple) -> dict:
        p, dec = self.proc, self.dec
        args, outs = dec.decode(r, self.handles)
        code, rname = dec.result(r)
        return {"pid": p.pid, "rank": p.rank, "tid": r[3], "seq": r[0],
                "start_s": (t := round((self.base + r[4] * self.k) / 1e9, 9)), "t": t,
                "function": dec.names[r[1]],
                "args": {n: v for n, v, _, _ in args}, "result": code,
                "result_name": rname if code is not None else None,
                "outputs": {n: v for n, v, _, _ in outs}, **self._kernel(r),
                "dur_us": round(r[5] * self.k / 1e3, 3) if r[2] == RETURNED else None,
                "state": "returned" if r[2] == RETURNED else "entered"}

    def _kernel(self, r: tuple) -> dict:
        """A record of a function given a CUfunction or CUkernel: that kernel's name
        (`kernel`, None when the table has none) and demangled; {} for the others."""
        h = self.dec.kernel_handle(r)
        if h is None:
            return {}
        name, cut = (self.proc.kernels or {}).get(h), h in self.proc.kernels_cut
        return {"kernel": name, "kernel_demangled": None if name is None else demangled(name, cut)}

    # ---- every row, each distinct record decoded once ---------------------------------------
    def _unpacked(self):
        """Every row as ROW unpacks it: each run of consecutive slots unpacked at once."""
        rows, size = self.rows, ROW.size
        if not rows:
            return iter(())
        j = rows.index(min(rows))  # where a ring that wrapped starts again from its slot 0
        if rows[:j] == list(range(rows[0], rows[0] + j)) and rows[j:] == list(
                range(rows[j], rows[j] + len(rows) - j)):
            cuts = [j] if j else []
        else:
            cuts = [j for j, (a, b) in enumerate(zip(rows, rows[1:], strict=False), 1)
                    if b != a + 1]
        view = memoryview(self.proc.data)
        return chain.from_iterable(
            ROW.iter_unpack(view[rows[lo] * size:(rows[lo] + hi - lo) * size])
            for lo, hi in zip([0, *cuts], [*cuts, len(rows)], strict=True))

    @staticmethod
    def _made(memo: dict, key: tuple, make, row: tuple):
        """make(the record as a tuple), kept in memo under its raw bytes (key). A memo that
        fills (MEMO_MAX) starts anew, once; when it fills a second time, the records mostly
        differ and it is given up (None in it: each record is made, nothing kept)."""
        r = row[:6] + BODY.unpack(row[6])
        if None in memo:
            return make(r)
        if len(memo) >= MEMO_MAX:
            full = memo.get(0, 0) + 1
            memo.clear()
            memo[0 if full < 2 else None] = full
        made = make(r)
        if None not in memo:
            memo[key] = made
        return made

    def each(self, make):
        """(seq, tid, start, dur, state, made) of every row: made = make(the record as a
        tuple), once per distinct raw record (function, state, body)."""
        memo: dict = {}
        miss = self._made
        for row in self._unpacked():
            seq, idx, state, tid, start, dur, body = row
            made = memo.get((idx, state, body)) or miss(memo, (idx, state, body), make, row)
            yield seq, tid, start, dur, state, made

    def lines(self):
        """Each row's line, as line() gives it."""
        dec, handles, base, k = self.dec, self.handles, self.base, self.k
        memo: dict = {}
        durs: dict = {-1: ""}  # -1: a call that had not returned
        texters: dict = {}
        miss, texter, unpack = self._made, dec.texter, BODY.unpack

        def text(r):  # escaped: a name or string from the trace is printed as one line
            return escaped(texter(r[1])(r, handles))
        for row in self._unpacked():
            _, idx, state, tid, start, dur, body = row
            if None in memo:  # given up: the records mostly differ (_made)
                f = texters.get(idx) or texters.setdefault(idx, texter(idx))
                t = escaped(f(row[:6] + unpack(body), handles))
            else:
                t = memo.get((idx, state, body)) or miss(memo, (idx, state, body), text, row)
            d = durs.get(dur if state == RETURNED else -1)
            if d is None:
                d = durs[dur] = _dur_text(dur * k / 1e3)
            yield f"{(base + start * k) / 1e9:.6f} [{tid}] {t}{d}"

    def _json_middle(self, r: tuple) -> str:
        """What a record's JSON takes from its raw bytes alone."""
        d = self.record_of(r)
        return json.dumps({n: d[n] for n in ("function", "args", "result", "result_name",
                                             "outputs", "kernel", "kernel_demangled")
                           if n in d})[1:-1]

    def _table_middle(self, r: tuple) -> tuple:
        """What a record's table row takes from its raw bytes alone."""
        from .calls_sql import signed64  # (the text report imports no sqlite3)

        d = self.record_of(r)
        return (d["function"], json.dumps(d["args"]), signed64(d["result"]), d["result_name"],
                json.dumps(d["outputs"]), d["state"])

    def json_lines(self):
        """Each row's record as json.dumps(record()) gives it."""
        base, k, miss = self.base, self.k, self._made
        head = f'{{"pid": {self.proc.pid}, "rank": {json.dumps(self.proc.rank)}, "tid": '
        memo: dict = {}
        tails: dict = {}
        for row in self._unpacked():
            seq, idx, state, tid, start, dur, body = row
            mid = memo.get((idx, state, body)) or miss(memo, (idx, state, body),
                                                        self._json_middle, row)
            tail = tails.get((dur, state))
            if tail is None:
                tail = tails[(dur, state)] = (
                    f'{round(dur * k / 1e3, 3)!r}, "state": "returned"}}'
                    if state == RETURNED else 'null, "state": "entered"}')
            t = _seconds_json((base + start * k) / 1e9)
            yield f'{head}{tid}, "seq": {seq}, "start_s": {t}, "t": {t}, {mid}, "dur_us": {tail}'

    def table_rows(self):
        """Each row as a row of the table `calls` (calls_sql.COLUMNS)."""
        base, k, pid, rank, miss = self.base, self.k, self.proc.pid, self.proc.rank, self._made
        memo: dict = {}
        durs: dict = {-1: None}  # -1: a call that had not returned
        for row in self._unpacked():
            seq, idx, state, tid, start, dur, body = row
            made = memo.get((idx, state, body)) or miss(memo, (idx, state, body),
                                                         self._table_middle, row)
            d = dur if state == RETURNED else -1
            if d not in durs:
                durs[d] = round(dur * k / 1e3, 3)
            yield (pid, rank, tid, seq, round((base + start * k) / 1e9, 9), durs[d]) + made


def _seconds_json(t: float) -> str:
    """repr(round(t, 9)), as json.dumps writes it, made faster: for 1e-4 <= t < 1e6 the
    nine decimals, correctly rounded as round() rounds them, have at most 15 significant
    digits, so they are the shortest text of round(t, 9) once the zeros at the end go."""
    if 1e-4 <= t < 1e6:
        text = f"{t:.9f}".rstrip("0")
        return text + "0" if text[-1] == "." else text
    return repr(round(t, 9))


def _handles(proc, dec) -> dict:
    """Every handle of the process numbered in order of first appearance (all its calls):
    each distinct raw record of a function that has handles decoded once, in order (a
    record seen before numbers nothing new)."""
    handles: dict = {}
    flags = dec.handled
    if not any(flags):
        return handles
    seen: set = set()
    data, unpack, size, idx = proc.data, ROW.unpack_from, ROW.size, proc.column("idx")
    for s in proc.order:
        if flags[idx[s]]:
            _, i, state, _, _, _, body = unpack(data, s * size)
            key = (i, state, body)
            if key not in seen:
                seen.add(key)
                dec.decode(proc.record(s), handles)
    return handles


def _rows(proc, dec, f: Filters) -> list:
    rows = proc.order
    if f.function or f.errors:
        idx = proc.column("idx")
    if f.function:
        wanted = [fnmatch.fnmatchcase(n, f.function) for n in dec.names]
        rows = [s for s in rows if wanted[idx[s]]]
    if f.errors:
        state, result, results = proc.column("state"), proc.column("result"), dec.results
        rows = [s for s in rows if state[s] == RETURNED and results[idx[s]]
                and result[s] & 0xFFFFFFFF]
    if f.last is not None:
        tid = proc.column("tid")
        per: dict = {}
        for s in rows:
            per.setdefault(tid[s], []).append(s)
        keep = {s for ss in per.values() for s in ss[-f.last:]}
        rows = [s for s in rows if s in keep]
    return rows


def shown(paths: list[Path], f: Filters, unreadable: list | None = None):
    """(every process read, [Shown] of those the filters keep, note). Given a list
    `unreadable`, a run's file that cannot be read is left out and put there as (path, why)
    (calls/records.py load_run); otherwise it is refused."""
    from ..calls import load_run

    procs = [p for path in paths for p in load_run(path, unreadable)]
    get, note = decoders()
    zero = min((p.calib_ns0 for p in procs), default=0)
    out, other = [], []
    for p in procs:
        if (f.pid is not None and p.pid != f.pid) or (
                f.rank is not None and (p.rank or "") != f.rank):
            continue
        dec, raw = get(p.names, p.table_digest)
        if raw:
            other.append(p.pid)
        out.append(Shown(p, dec, _rows(p, dec, f), zero, f.mangled))
    if other:
        note = "; ".join(n for n in (note, other_headers_note(other)) if n)
    return procs, out, note


def in_order(groups: list[Shown]):
    """(group, slot) of every shown call, in order of start time over the processes."""
    if len(groups) == 1:
        g = groups[0]
        return ((g, s) for s in g.rows)
    return heapq.merge(*([(g, s) for s in g.rows] for g in groups),
                       key=lambda x: x[0].t(x[1]))


def merged(groups: list[Shown], made: list[list]):
    """The items made for each group's rows (made[i][j] of groups[i].rows[j]), in the
    order of in_order()."""
    if len(groups) == 1:
        return made[0]
    return map(itemgetter(1), heapq.merge(
        *(zip(map(g.t, g.rows), m, strict=True) for g, m in zip(groups, made, strict=True)),
        key=itemgetter(0)))


def _verdict(procs, groups, total_shown) -> list[str]:
    threads = set()
    for p in procs:
        tid = p.column("tid")
        threads |= {(p.pid, t) for t in {tid[s] for s in p.order}}
    lines = [f"calls      {sum(len(p.order) for p in procs)} recorded in {len(threads)} "
             f"threads of {len(procs)} processes; {total_shown} shown"]
    for p in procs:
        for tid, n in sorted(p.dropped.items()):
            lines.append(f"dropped    pid {p.pid} thread {tid}: {n} earlier calls (the ring "
                         f"keeps the last {p.ring_records} per thread)")
        if not p.complete:
            lines.append(f"note       pid {p.pid} did not finish: its last calls are those "
                         "before it died")
    return lines


def unreadable_lines(unreadable: list[tuple[str, str]]) -> list[str]:
    """One escaped line for each file of a run that could not be read: left out, and why."""
    return [f"unreadable {escaped(path)}: left out, it could not be read: {escaped(why)}"
            for path, why in unreadable]


def write_pieces(out, head: str, pieces, sep: str, tail: str, lead: str = "") -> None:
    """head, the pieces joined by sep (lead before the first), tail: written in chunks of
    CHUNK pieces."""
    out.write(head)
    pieces = iter(pieces)
    while chunk := list(islice(pieces, CHUNK)):
        out.write(lead + sep.join(chunk))
        lead = sep
    out.write(tail)


def render(paths: list[Path], f: Filters, fmt: str = "text", sqlite: str | None = None,
           out=None, times: str = "start") -> str | None:
    """The report, written to `out` (a text file) or returned when out is None."""
    if out is None:
        import io

        buf = io.StringIO()
        render(paths, f, fmt, sqlite, buf, times)
        return buf.getvalue()
    unreadable: list[tuple[str, str]] = []
    procs, groups, note = shown(paths, f, unreadable)
    n = sum(len(g.rows) for g in groups)
    if sqlite:
        from .calls_sql import write_sqlite

        write_sqlite(Path(sqlite), merged(groups, [g.table_rows() for g in groups]))
    if fmt == "json":  # printed with --sqlite too: --json asks for it
        head = json.dumps({"schema": "shimgen-calls", "note": note, "processes": [
            {"pid": p.pid, "rank": p.rank, "path": p.path, "driver_version": p.driver_version,
             "complete": p.complete, "ring_records": p.ring_records,
             "dropped": {str(t): k for t, k in p.dropped.items()}} for p in procs],
            "unreadable": [{"file": path, "reason": why} for path, why in unreadable]})
        write_pieces(out, head[:-1] + ', "calls": [\n', merged(groups, [g.json_lines()
                                                                  for g in groups]),
               ",\n", "\n]}\n")
        return None
    head = (_verdict(procs, groups, n) + unreadable_lines(unreadable)
            + ([f"note       {escaped(note)}"] if note else []))
    if sqlite:  # an export is quiet: the summary and where the rows went, not the lines
        head.append(f"sqlite     {escaped(sqlite)}: table calls, {n} rows (the lines: the same "
                    "command without --sqlite)")
        out.write("\n".join(head + [""]))
        return None
    first = min(procs, key=lambda p: p.calib_ns0, default=None)
    real_zero = first.calib_ns0 + first.real_offset_ns if first is not None else 0
    head += ["", key_line(times)] if n else [""]  # the key right above the lines
    write_pieces(out, "\n".join(head), retimed(merged(groups, [g.lines() for g in groups]),
                                               times, real_zero), "\n", "\n", lead="\n")
    return None


def check(f: Filters) -> None:
    if f.last is not None and f.last < 1:
        raise ShimgenError("report: --last takes a number from 1")

