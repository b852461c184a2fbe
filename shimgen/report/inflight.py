"""`shimgen report`'s view of what a job is doing now: which processes run and which died
(not only complete or not), and every call in progress, the longest first (trace/job.py
reads them). docs/report.md, "In flight".

`attach` gives each unfinished binary trace its `now` (a job.ProcNow); the rest reads it.
"""

from __future__ import annotations

from pathlib import Path

from ..trace import NOT_FINISHED, job, live
from .kernels import demangle, last_launch_text
from .output import seconds_text, shown

CUT = 300  # characters of a name shown

SHOWN = 20  # calls listed in the text; the rest counted
JOB_RUNNING, JOB_DIED = job.RUNNING, job.DIED


def _part_of(trace_path: str, parts: list) -> object:
    p = Path(trace_path).parent
    for d in (p, p.parent):
        for part in parts:
            if part.path == d:
                return part
    return None


def attach(sources: list) -> None:
    """Reads the calls in progress of every unfinished binary trace, and judges whether its
    process runs (only reads; a file that cannot be read again is left as it was)."""
    import time

    from ..errors import ShimgenError
    from ..trace import inflight

    here = live.boot_id()
    now_real, now_mono = time.time_ns(), time.monotonic_ns()
    for s in sources:
        parts = live.parts(s.path) if s.is_run else []
        s.ignored = [line for part in parts for line in part.ignored(now_real)]
        for t in s.processes:
            if t.complete or t.source != "shimtrace":
                continue
            try:
                f = inflight.read(t.path)
            except ShimgenError:
                continue
            t.now = job.judge(f, _part_of(t.path, parts), t.host, here, now_real, now_mono)
            if t.now.state == job.RUNNING:  # not finished yet: no note of a death
                t.notes = [n for n in t.notes if n != NOT_FINISHED]


def state(proc) -> str:
    """A report.Process's state: complete, running or died."""
    if proc.complete:
        return job.COMPLETE
    now = proc.last.now
    return now.state if now is not None else job.DIED


def died_inside(proc) -> str:
    """"died inside F after N s" of a died process with a call in progress; "" else."""
    now = proc.last.now
    b = now.longest if now is not None else None
    if b is None:
        return ""
    return f"died inside {shown(b.function, CUT)} after {seconds_text(b.seconds)}"


def who_lines(running: list, gone: list, who, listing) -> list[str]:
    """The header's lines naming the running processes (their traces) and the died ones
    (report.Process), each died one with the call it died inside."""
    lines = []
    if running:
        lines.append("running    " + listing([who(t) for t in running]))
    if gone:
        lines.append("died       " + listing([who(p.last) + (
            f" ({died_inside(p)})" if died_inside(p) else "") for p in gone]))
    return lines


def _who(now: job.ProcNow) -> str:
    who = f"pid {now.pid}" if now.rank is None else f"rank {shown(now.rank, CUT)} (pid {now.pid})"
    return who + (f" on {shown(now.host, CUT)}" if now.host else "")


def calls(procs: list) -> list[tuple[job.ProcNow, job.Busy]]:
    """Every call in progress of these processes (running or died), the longest first."""
    out = [(p.last.now, b) for p in procs if state(p) != job.COMPLETE and p.last.now
           for b in p.last.now.calls]
    out.sort(key=lambda pb: -(pb[1].seconds if pb[1].seconds is not None else -1))
    return out


def _unknown(procs: list) -> str:
    whys = {p.last.now.why_unknown for p in procs
            if state(p) != job.COMPLETE and p.last.now and p.last.now.why_unknown}
    return "; ".join(sorted(whys))


def section(procs: list, mangled: bool = False) -> list[str]:
    """The text section `in flight` of a group, when it has a process that did not
    complete: a sentence first (the longest call, and how many others are in none), then
    the calls, longest first, the first SHOWN of them."""
    unfinished = [p for p in procs if state(p) != job.COMPLETE]
    if not unfinished:
        return []
    found = calls(procs)
    why = _unknown(procs)
    if not found:
        launched = [f"{_who(p.last.now)}: {t}" for p in unfinished
                    if p.last.now and (t := last_launch_text(p.last.now, mangled))]
        return ["", "in flight  " + shown(why or "no driver call in progress")
                + (f"; {launched[0]}" if launched else "")]
    now, b = found[0]
    busy = {id(n) for n, _ in found}
    idle = len([p for p in unfinished if id(p.last.now) not in busy])
    verb = "has been" if now.state == job.RUNNING else "was"
    head = (f"in flight  {_who(now)} {verb} inside {shown(b.function, CUT)} for "
            f"{seconds_text(b.seconds)}"
            + (" (until the run ended)" if now.until == job.UNTIL_END else ""))
    launched = last_launch_text(now, mangled)
    if launched:
        head += "; " + launched
    if len(found) > 1:
        head += f"; {len(found) - 1} more call{'s' if len(found) > 2 else ''} in progress"
    if idle:
        ranked = all(p.last.rank is not None for p in unfinished)
        what = ("rank" if ranked else "process") + ("s" if ranked and idle > 1 else
                                                    "es" if idle > 1 else "")
        head += f"; the other {idle} {what} {'are' if idle > 1 else 'is'} in no driver call"
    lines = ["", head, f"  {'seconds':>9}  {'state':<8} {'pid':>8} {'tid':>8}  {'rank':<6} "
             f"{'host':<12} function"]
    for n, c in found[:SHOWN]:
        secs = "?" if c.seconds is None else f"{c.seconds:.1f}"
        rank, host = shown(n.rank or "-", 6), shown(n.host or "-", 12)
        lines.append(f"  {secs:>9}  {n.state:<8} {n.pid:>8} {c.tid:>8}  {rank:<6} "
                     f"{host:<12} {shown(c.function, CUT)}")
    if len(found) > SHOWN:
        lines.append(f"  ... and {len(found) - SHOWN} more")
    if any(n.state == job.DIED for n, _ in found):
        lines.append("  (a died process's calls: until its node's run ended, or until now "
                     "while the run goes on)")
    if why:
        lines.append(f"  ({why} for some processes)")
    return lines


def _last_launch_json(n: job.ProcNow) -> dict | None:
    if not n.launches:
        return None
    la = n.launches[0]
    # (a name the trace file cut is not demangled: its part may read as another name)
    return {"stream": la.stream, "kernel": la.kernel,
            "kernel_demangled": None if la.kernel is None else (
                la.kernel if la.cut else demangle(la.kernel)),
            "kernel_cut": la.cut,
            "ordinal": la.ordinal,
            "seconds": None if la.seconds is None else round(la.seconds, 3)}


def json_fields(procs: list) -> dict:
    """`running` (pids) and `in_flight` of a group's JSON."""
    return {
        "running": [p.last.pid for p in procs if state(p) == job.RUNNING],
        "in_flight": [{"pid": n.pid, "tid": c.tid, "rank": n.rank, "host": n.host or None,
                       "function": c.function,
                       "seconds": None if c.seconds is None else round(c.seconds, 3),
                       "state": n.state, "last_launch": _last_launch_json(n)}
                      for n, c in calls(procs)],
        "in_flight_unknown": _unknown(procs) or None,
    }
