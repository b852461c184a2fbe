"""How `shimgen report` prints one run (or merged trace files): the header, the per-function
table (calls, total, mean, p50, p90, p99, max, errors, and injected when there are any), the
errors section, the injected failures (report/inject.py), and the same data (the values
both print: report/facts.py) as JSON (schema `shimgen-report`, docs/report.md) or CSV. Every
string read from a file is shown escaped in the table and in the CSV, exact in the JSON
(report/output.py)."""

from __future__ import annotations

from itertools import islice

# csv and io are imported where they are used (and shlex and the table of CUDA facts in
# facts.py): the plain table of a run with no errors (what `shimgen run` prints) needs none.
from . import inflight
from .budget import budget_json, budget_lines
from .facts import (
    CUT,
    DIED,
    error_rows,
    function_row,
    group_drivers,
    group_notes,
    group_ranks,
    listing,
    missing_line,
    note_kinds,
    note_line,
    run_command,
    run_exit,
    run_outcome,
    short_processes,
    traced_twice,
    who,
)
from .gputime import summary as gpu_summary
from .inject import any_injected, injected_rows, injected_section, rules, rules_line
from .kernels import collectives, kernels_json, kernels_section
from .memory import memory_json, memory_section
from .model import Group, Merged, sorted_functions
from .output import csv_value, dump_json, printable, shown
from .source import NOTICES_MAX_BYTES, Notices, Source

SCHEMA = "shimgen-report"
SCHEMA_VERSION = 1
CSV_COLUMNS = ("by", "group", "function", "calls", "total_ns", "mean_ns", "p50_ns", "p90_ns",
               "p99_ns", "max_ns", "errors", "injected")
UNREADABLE_SHOWN = 20  # unreadable files named in the table before "... and N more"
NOTICES_SHOWN = 10  # kinds of notice shown before "... and N more kinds"
def group_header(g: Group) -> list[str]:
    n = len(g.procs)
    short = short_processes(g)
    untraced = [p for p in g.procs if all(t.no_file for t in p.traces)]
    running = [p.last for p in g.procs if inflight.state(p) == inflight.JOB_RUNNING]
    gone = [p for p in g.procs if inflight.state(p) == inflight.JOB_DIED and p not in untraced]
    died = [p.last for p in gone]
    exact = [p.last for p in gone if p not in short]
    ranks = [shown(r, CUT) for r in group_ranks(g)]
    line = f"processes  {n}" + (f", ranks {listing(ranks)}" if ranks else "")
    line += (f": {n - len(died) - len(untraced) - len(running)} complete"
             + (f", {len(running)} running" if running else "")
             + (f", {len(exact)} died ({DIED})" if exact else ""))
    if len(died) > len(exact):
        line += f", {len(died) - len(exact)} died with calls not in their traces"
    if untraced:
        line += f", {len(untraced)} with no trace (no room on the disk for one)"
    lines = [line]
    lines += inflight.who_lines(running, gone, who, listing)
    if short:
        lines.append(missing_line(short))
    execs = sum(p.execs for p in g.procs)
    if execs:
        lines.append(f"exec       {execs} time{'s' if execs > 1 else ''} a process ran another "
                     "program: each such process counts once, its calls summed over its "
                     "programs")
    drivers = group_drivers(g)
    if not drivers:
        pass  # no trace says which (no room on the disk for one)
    elif len(drivers) == 1:
        lines.append(f"driver     {shown(next(iter(drivers)), CUT)}")
    else:
        lines.append("driver     warning: the processes loaded different drivers: " + ", ".join(
            f"{shown(v, CUT)} ({c} process{'es' if c > 1 else ''})"
            for v, c in sorted(drivers.items())))
    modes = sorted({p.mode for p in g.processes if p.mode})
    if modes:
        lines.append(f"mode       {', '.join(shown(m, CUT) for m in modes)}")
    twice = traced_twice(g)
    if twice:
        lines.append("warning    the same pid has a binary and a JSON trace (the process traced "
                     "both ways: its calls count twice): " + listing(twice))
    untimed = sum(p.untimed_calls for p in g.processes)
    if untimed:
        lines.append(f"untimed    {untimed} calls counted but not timed (shadow stack full, or "
                     "no block for their thread: no room on the disk)")
    unmapped = sum(p.unmapped_proc_addresses for p in g.processes)
    if unmapped:
        lines.append(f"unmapped   {unmapped} cuGetProcAddress answers that are no export "
                     "(passed through)")
    overflow = sum(p.errors_overflow for p in g.processes)
    if overflow:
        lines.append(f"errors     {overflow} non-success returns not counted by code "
                     "(no free error slot)")
    lines += [note_line(*kind) for kind in note_kinds(g)]
    return lines


def _num(value: float | None, scale: float = 1.0, digits: int = 0) -> str:
    return "-" if value is None else f"{value / scale:.{digits}f}"


def function_table(functions: dict[str, Merged], injecting: bool = False) -> list[str]:
    """The table; with a column 'injected' when the run armed rules or a trace has some."""
    inj = injecting or any_injected(functions)
    grand = sum(m.total_ns for m in functions.values() if m.timed)
    head = (f"{'time %':>7} {'total ms':>12} {'calls':>12} {'mean ns':>11} {'p50 ns':>11} "
            f"{'p90 ns':>11} {'p99 ns':>11} {'max ns':>12} {'errors':>8} "
            + (f"{'injected':>8}  " if inj else " ") + "function")
    lines = [head]
    for name, m in sorted_functions(functions):
        r = function_row(name, m)
        share = r["total_ns"] / grand * 100 if r["total_ns"] is not None and grand else None
        lines.append(f"{_num(share, digits=1):>7} {_num(r['total_ns'], 1e6, 3):>12} "
                     f"{r['calls']:>12} {_num(r['mean_ns']):>11} "
                     f"{_num(r['p50_ns']):>11} {_num(r['p90_ns']):>11} {_num(r['p99_ns']):>11} "
                     f"{_num(r['max_ns']):>12} {_num(r['errors']):>8} "
                     + (f"{r['injected']:>8}  " if inj else " ") + shown(name, CUT))
    return lines


def errors_section(functions: dict[str, Merged], short: bool = False) -> list[str]:
    rows = error_rows(functions)
    if not rows:
        known = all(m.errors_known for m in functions.values())
        if short:
            return ["errors: none in these traces (calls are missing from them: see missing)"]
        return ["errors: none" if known and functions else
                "errors: not recorded in these traces (counts mode, or a shim that does not "
                "count them)"]
    names = {r["function"]: shown(r["function"], CUT) for r in rows}
    width = max(len("function"), *map(len, names.values()))
    lines = ["errors (non-success returns):",
             f"{'function':<{width}}  {'code':>5}  {'name':<40} {'count':>12}"]
    for r in rows:
        lines.append(f"{names[r['function']]:<{width}}  {r['code']:>5}  {r['name']:<40} "
                     f"{r['count']:>12}")
    return lines


def no_call_lines(g: Group) -> list[str]:
    """A group none of whose calls returned, in place of an empty table and its errors: what
    became of each process (died inside its first call, still in it, or no call made)."""
    said = []
    for p in g.procs:
        st, inside = inflight.state(p), inflight.died_inside(p)
        said.append(who(p.last) + (f" {inside}, its first call" if st == inflight.JOB_DIED
                                   and inside else " died before its first call returned"
                                   if st == inflight.JOB_DIED else
                                   " is inside its first call" if st == inflight.JOB_RUNNING
                                   else " made no traced call"))
    return ["calls      none returned: " + listing(said),
            "errors: none (no call returned)"]


def unreadable_lines(s: Source) -> list[str]:
    """A line for each file of a run that could not be read, and why (the first
    UNREADABLE_SHOWN of them)."""
    n = len(s.unreadable)
    if not n:
        return []
    lines = [f"unreadable {n} file{'s' if n > 1 else ''} of the run could not be read, left out "
             "of the totals:"]
    for path, why in s.unreadable[:UNREADABLE_SHOWN]:
        lines.append(f"           {shown(path)}: {shown(why, CUT)}")
    if n > UNREADABLE_SHOWN:
        lines.append(f"           ... and {n - UNREADABLE_SHOWN} more (--json lists every one)")
    return lines


def notice_lines(notices: Notices | None) -> list[str]:
    """That the shim said something, how often, and each different thing it said with how
    often (the first NOTICES_SHOWN of them)."""
    if notices is None:
        return []
    if notices.problem:
        return [f"notices    {shown(notices.path)}: not read: {notices.problem}"]
    if not notices.total and not notices.unread:
        return []
    k = len(notices.kinds)
    lines = [f"notices    {notices.total} from the shim in {shown(notices.path)}"
             + (f", {k} different:" if k > 1 else ":")]
    for message, count in islice(notices.kinds.items(), NOTICES_SHOWN):
        lines.append(f"           {count:>5} x {shown(message, CUT)}")
    if k > NOTICES_SHOWN:
        lines.append(f"           ... and {k - NOTICES_SHOWN} more kinds (--json lists every one)")
    if notices.unread:
        lines.append(f"           ... and {notices.unread} bytes more of it, not read (only "
                     f"its first {NOTICES_MAX_BYTES >> 20} MiB is)")
    return lines


def source_header(sources: list[Source], labels: str = "") -> list[str]:
    """The sources' names, then each one's command and what it noted; `labels` (one letter
    per source, "AB" when two runs are compared) names whose command each line is."""
    lines = ["shimgen report: " + " ".join(shown(s.name) for s in sources)]
    for i, s in enumerate(sources):
        if s.is_run and s.run is not None:
            label = labels[i] if i < len(labels) else " "
            lines.append(f"command {label}  {shown(run_command(s) or '(not recorded)')} "
                         f"({shown(run_outcome(s))})")
        if s.run_problem:
            lines.append(f"run        metadata not read: {shown(s.run_problem)}")
        lines += unreadable_lines(s)
        lines += [f"ignored    {shown(line)}" for line in s.ignored]
        lines += rules_line(s)
        lines += budget_lines(s.run) if s.is_run else []
        lines += notice_lines(s.notices)
    return lines


def process_command(g: Group, sources: list[Source]) -> str | None:
    """The command line of a group's process (`--by pid`): from /proc while it runs here,
    else the run's own command for the process `shimgen run` started; None otherwise (a
    trace file does not record it)."""
    from ..trace import command_line

    p = g.procs[0].last
    said = command_line(p.pid, p.proc_start, p.boot_id)
    if said is None:
        said = next((run_command(s) for s in sources
                     if s.is_run and s.run and s.run.get("pid") == p.pid), None)
    return shown(said, CUT) if said else None


def group_title(by: str, g: Group, sources: list[Source], alone: bool) -> str:
    """The heading of one group of `--by`: its rank, pid (with the process's command line,
    or its parent) or host; the processes with no rank said as such."""
    from ..runenv import RANK_VARS

    if by == "kernel":
        return "== the launch functions by kernel =="
    if by == "rank" and g.key == "-":
        return ("== no rank: no process of this run has one (the launcher set none of "
                f"{', '.join(RANK_VARS)}) ==" if alone else
                "== no rank: the processes the launcher gave none ==")
    title = f"== {by} {shown(g.key, CUT)}"
    if by == "pid":
        command = process_command(g, sources)
        ppid = g.procs[0].last.ppid
        title += (f": {command}" if command else
                  f" (child of pid {ppid}; its command line is not recorded)" if ppid else
                  " (its command line is not recorded)")
    return title + " =="


def _text(sources: list[Source], gs: list[Group], by: str | None, mangled: bool) -> str:
    lines = source_header(sources)
    if not any(g.processes for g in gs):
        lines.append("processes  0: no trace could be read" if any(s.unreadable for s in sources)
                     else "processes  0: no process made a traced driver call")
        return "\n".join(lines) + "\n"
    for g in gs:
        lines.append("")
        if by is not None:
            lines.append(group_title(by, g, sources, len(gs) == 1))
        lines += group_header(g)
        lines += inflight.section(g.procs, mangled)
        lines.append("")
        if g.functions:
            lines += function_table(g.functions, any(rules(s) for s in sources))
            lines.append("")
            lines += errors_section(g.functions, bool(short_processes(g)))
        else:
            lines += no_call_lines(g)
        lines += injected_section(g.functions)
        lines += memory_section(g)
        lines += kernels_section(g, mangled)
    return "\n".join(lines) + "\n"


def group_json(g: Group) -> dict:
    gone = [p for p in g.procs if inflight.state(p) == inflight.JOB_DIED]
    now = inflight.json_fields(g.procs)
    return {
        "group": g.key,
        "processes": len(g.procs),
        "complete": len(g.procs) - len(gone) - len(now["running"]),
        "died": [{"pid": p.last.pid, "rank": p.last.rank, "path": p.last.path,
                  "inside": inflight.died_inside(p) or None} for p in gone],
        **now,
        "calls_missing": [{"pid": proc.last.pid, "rank": proc.last.rank,
                           "path": proc.last.path,
                           "calls": sum(t.calls_missing for t in proc.traces),
                           "trace": not all(t.no_file for t in proc.traces)}
                          for proc in short_processes(g)],
        "execs": sum(p.execs for p in g.procs),
        "traces": len(g.processes),
        "ranks": group_ranks(g),
        "driver_versions": group_drivers(g),
        "modes": sorted({p.mode for p in g.processes if p.mode}),
        "untimed_calls": sum(p.untimed_calls for p in g.processes),
        "unmapped_proc_addresses": sum(p.unmapped_proc_addresses for p in g.processes),
        "errors_overflow": sum(p.errors_overflow for p in g.processes),
        "notes": group_notes(g),
        "functions": [function_row(n, m) for n, m in sorted_functions(g.functions)],
        "errors": error_rows(g.functions),
        "injected": injected_rows(g.functions),
        "memory": memory_json(g),
        "kernels": kernels_json(g),
        "gpu_time": gpu_summary(g),
        "collectives": collectives(g),
    }


def source_json(s: Source) -> dict:
    out = {"path": s.name, "run": s.is_run, "inject": rules(s)}
    if s.is_run:
        status, sig, error = run_exit(s)
        run = s.run or {}
        start, end = run.get("start"), run.get("end")
        out.update(budget=budget_json(s.run))
        out.update(command=run_command(s), exit_status=status, signal=sig, error=error,
                   start=start if isinstance(start, str) else None,
                   end=end if isinstance(end, str) else None, ignored=s.ignored)
    return out


def unreadable_json(sources: list[Source]) -> list[dict]:
    return [{"file": path, "reason": why} for s in sources for path, why in s.unreadable]


def notices_json(notices: Notices | None) -> dict | None:
    if notices is None:
        return None
    return {"path": notices.path, "total": notices.total,
            "distinct": [{"message": m, "count": c} for m, c in notices.kinds.items()],
            "unread_bytes": notices.unread, "problem": notices.problem or None}


def render(sources: list[Source], gs: list[Group], by: str | None, fmt: str,
           mangled: bool = False) -> str:
    if fmt == "json":
        runs = [s for s in sources if s.is_run]
        return dump_json({"schema": SCHEMA, "version": SCHEMA_VERSION, "by": by,
                          "sources": [source_json(s) for s in sources],
                          "unreadable": unreadable_json(sources),
                          "notices": notices_json(runs[0].notices) if runs else None,
                          "groups": [group_json(g) for g in gs if g.processes]})
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for g in gs:
            for name, m in sorted_functions(g.functions):
                row = function_row(name, m)
                w.writerow([by or "all", csv_value(g.key)]
                           + [csv_value(row[c]) for c in CSV_COLUMNS[2:]])
        return printable(buf.getvalue())
    return printable(_text(sources, gs, by, mangled))
