"""What `shimgen top` shows of one snapshot of a job: a table (per process: state, calls
per second, device memory held now (the memory ledger in its trace file), longest call in
progress) or JSON (the report's `running`, `died` and
`in_flight` keys, with the rows)."""

from __future__ import annotations

import time

from ..report import last_launch_text, seconds_text, shown, size_text
from ..trace import job

SCHEMA = "shimgen-top"
SCHEMA_VERSION = 1


def _order(p: job.ProcNow) -> tuple:
    r = p.rank or ""
    number = r.isascii() and r.isdigit()  # ranks by number, then any other rank, then none
    return (r == "", not number, int(r) if number else 0, r, p.host, p.pid)


def _longest(p: job.ProcNow) -> str:
    b = p.longest
    if b is None:
        return p.why_unknown or "-"
    verb = "died inside" if p.state == job.DIED else "inside"
    launched = last_launch_text(p)
    return f"{verb} {b.function} {seconds_text(b.seconds)} (tid {b.tid})" + (
        f"; {launched}" if launched else "")


def _memory(p: job.ProcNow) -> str:
    return "-" if p.device_bytes is None else size_text(p.device_bytes)


def text(run: str, procs: list[job.ProcNow], rates: dict, problems: list[str],
         ignored: list[str] = ()) -> str:
    running = sum(p.state == job.RUNNING for p in procs)
    died = sum(p.state == job.DIED for p in procs)
    busy = sum(len(p.calls) for p in procs if p.state != job.COMPLETE)
    lines = [f"shimgen top: {shown(run)}   {time.strftime('%H:%M:%S')}   "
             f"{len(procs)} process{'es' if len(procs) != 1 else ''}: {running} running, "
             f"{len(procs) - running - died} complete, {died} died; {busy} call"
             f"{'s' if busy != 1 else ''} in flight",
             f"{'pid':>8}  {'rank':<6} {'host':<12} {'state':<8} {'calls/s':>9} "
             f"{'device mem':>11}  longest call in flight"]
    for p in sorted(procs, key=_order):
        rate = rates.get(p.key)
        lines.append(f"{p.pid:>8}  {shown(p.rank or '-', 6):<6} {shown(p.host or '-', 12):<12} "
                     f"{p.state:<8} {'-' if rate is None else f'{rate:.1f}':>9} "
                     f"{_memory(p):>11}  {shown(_longest(p), 120)}")
    if problems:
        lines.append(f"({len(problems)} trace file{'s' if len(problems) > 1 else ''} not "
                     f"read: {shown(problems[0], 200)})")
    lines += [f"(ignored: {shown(line)})" for line in ignored]
    return "\n".join(lines) + "\n"


def as_json(run: str, procs: list[job.ProcNow], rates: dict, problems: list[str],
            ignored: list[str] = ()) -> dict:
    rows = sorted(procs, key=_order)
    flight = sorted(((p, c) for p in rows if p.state != job.COMPLETE for c in p.calls),
                    key=lambda pc: -(pc[1].seconds or 0))
    return {
        "schema": SCHEMA, "version": SCHEMA_VERSION, "run": run, "time_ns": time.time_ns(),
        "running": [p.pid for p in rows if p.state == job.RUNNING],
        "died": [{"pid": p.pid, "rank": p.rank, "path": p.path} for p in rows
                 if p.state == job.DIED],
        "in_flight": [{"pid": p.pid, "tid": c.tid, "rank": p.rank, "host": p.host or None,
                       "function": c.function,
                       "seconds": None if c.seconds is None else round(c.seconds, 3),
                       "state": p.state} for p, c in flight],
        "processes": [{"pid": p.pid, "rank": p.rank, "host": p.host or None, "state": p.state,
                       "calls": p.counts, "calls_per_second": rates.get(p.key),
                       "device_bytes": p.device_bytes,
                       "in_flight_unknown": p.why_unknown or None} for p in rows],
        "unreadable": problems,
        "ignored": list(ignored),
    }
