"""How `shimgen report` prints one run (or merged trace files): the header, the per-function
table (calls, total, mean, p50, p99, max, errors), the errors section, and the same data as
JSON (schema `shimgen-report`, docs/report.md) or CSV."""

from __future__ import annotations

# csv, io, json, shlex and the table of CUDA facts are imported where they are used: the
# plain table of a run with no errors (what `shimgen run` prints) needs none of them.
from .report import Group, Merged, Source, sorted_functions

SCHEMA = "shimgen-report"
SCHEMA_VERSION = 1
CSV_COLUMNS = ("by", "group", "function", "calls", "total_ns", "mean_ns", "p50_ns", "p99_ns",
               "max_ns", "errors")
DIED = "counts exact up to its last call"
LISTED = 8  # pids or ranks named before "... (N in all)"


def code_name(code: int) -> str:
    from .cuda import RESULTS

    return RESULTS.get(code, "(unknown code)")


def function_row(name: str, m: Merged) -> dict:
    """One function's numbers; None where the traces do not have them."""
    p50, p99 = m.percentiles(0.50, 0.99)
    return {"function": name, "calls": m.calls,
            "total_ns": m.total_ns if m.timed else None, "mean_ns": m.mean_ns,
            "p50_ns": p50, "p99_ns": p99,
            "max_ns": m.max_ns, "errors": m.error_count}


def error_rows(functions: dict[str, Merged]) -> list[dict]:
    """Every (function, code) with non-success returns, most returns first."""
    rows = [{"function": name, "code": code, "name": code_name(code), "count": n}
            for name, m in functions.items() for code, n in m.errors.items() if n]
    return sorted(rows, key=lambda r: (-r["count"], r["function"], r["code"]))


def run_command(src: Source) -> str | None:
    cmd = (src.run or {}).get("command")
    if isinstance(cmd, list) and all(isinstance(c, str) for c in cmd):
        import shlex

        return shlex.join(cmd)
    return cmd if isinstance(cmd, str) else None


def run_exit(src: Source) -> tuple[int | None, str | None, str | None]:
    """(exit status, the signal that ended the command, why it could not start) from
    run.json's `exit`: {"status", "code", "signal", "signal_name"} or {"error", "status"}."""
    end = (src.run or {}).get("exit")
    if not isinstance(end, dict):
        return None, None, None
    status = end.get("status") if type(end.get("status")) is int else None
    sig = end.get("signal_name") or end.get("signal")
    error = end.get("error")
    return status, str(sig) if sig else None, str(error) if error else None


def run_outcome(src: Source) -> str:
    status, sig, error = run_exit(src)
    if error:
        return f"it did not start: {error}" + (f"; exit status {status}" if status else "")
    if sig:
        return f"killed by {sig}" + (f", exit status {status}" if status is not None else "")
    if status is not None:
        return f"exit status {status}"
    return "no exit status recorded (still running, or shimgen run was stopped)"


def _listing(items: list[str]) -> str:
    if len(items) > 2 and all(i.isdigit() for i in items):
        nums = sorted(int(i) for i in items)
        if nums == list(range(nums[0], nums[0] + len(nums))):
            return f"{nums[0]}-{nums[-1]}"
    shown = ", ".join(items[:LISTED])
    return shown + (f", ... ({len(items)} in all)" if len(items) > LISTED else "")


def _ranks(g: Group) -> list[str]:
    return sorted({p.rank for p in g.processes if p.rank is not None},
                  key=lambda r: (0, int(r), "") if r.isdigit() else (1, 0, r))


def _drivers(g: Group) -> dict[str, int]:
    seen: dict[str, int] = {}
    for p in g.processes:
        v = p.driver_version or "unknown"
        seen[v] = seen.get(v, 0) + 1
    return seen


def _traced_twice(g: Group) -> list[str]:
    """Pids with both a binary and a JSON trace: SHIMGEN_TRACE_DIR and SHIMGEN_TRACE_FILE
    both set, so one process's calls are in the group twice."""
    sources: dict[int, set[str]] = {}
    for p in g.processes:
        sources.setdefault(p.pid, set()).add(p.source)
    return [f"pid {pid}" for pid, s in sorted(sources.items()) if len(s) > 1]


def _notes(g: Group) -> dict[str, int]:
    """What the readers could not give, and why: each note with how many processes have it."""
    seen: dict[str, int] = {}
    for p in g.processes:
        for note in p.notes:
            seen[note] = seen.get(note, 0) + 1
    return seen


def group_header(g: Group) -> list[str]:
    n = len(g.processes)
    died = [p for p in g.processes if not p.complete]
    ranks = _ranks(g)
    line = f"processes  {n}" + (f", ranks {_listing(ranks)}" if ranks else "")
    line += f": {n - len(died)} complete" + (f", {len(died)} died ({DIED})" if died else "")
    lines = [line]
    if died:
        lines.append("died       " + _listing(
            [f"pid {p.pid}" + (f" rank {p.rank}" if p.rank is not None else "") for p in died]))
    drivers = _drivers(g)
    if len(drivers) == 1:
        lines.append(f"driver     {next(iter(drivers))}")
    else:
        lines.append("driver     warning: the processes loaded different drivers: " + ", ".join(
            f"{v} ({c} process{'es' if c > 1 else ''})" for v, c in sorted(drivers.items())))
    modes = sorted({p.mode for p in g.processes})
    lines.append(f"mode       {', '.join(modes)}")
    twice = _traced_twice(g)
    if twice:
        lines.append("warning    the same pid has a binary and a JSON trace (the process traced "
                     "both ways: its calls count twice): " + _listing(twice))
    untimed = sum(p.untimed_calls for p in g.processes)
    if untimed:
        lines.append(f"untimed    {untimed} calls counted but not timed (shadow stack full)")
    unmapped = sum(p.unmapped_proc_addresses for p in g.processes)
    if unmapped:
        lines.append(f"unmapped   {unmapped} cuGetProcAddress answers that are no export "
                     "(passed through)")
    overflow = sum(p.errors_overflow for p in g.processes)
    if overflow:
        lines.append(f"errors     {overflow} non-success returns not counted by code "
                     "(no free error slot)")
    for note, n in _notes(g).items():
        lines.append(f"note       {note} ({n} process{'es' if n > 1 else ''})")
    return lines


def _num(value: float | None, scale: float = 1.0, digits: int = 0) -> str:
    return "-" if value is None else f"{value / scale:.{digits}f}"


def function_table(functions: dict[str, Merged]) -> list[str]:
    grand = sum(m.total_ns for m in functions.values() if m.timed)
    head = (f"{'time %':>7} {'total ms':>12} {'calls':>12} {'mean ns':>11} {'p50 ns':>11} "
            f"{'p99 ns':>11} {'max ns':>12} {'errors':>8}  function")
    lines = [head]
    for name, m in sorted_functions(functions):
        r = function_row(name, m)
        share = r["total_ns"] * 100 / grand if r["total_ns"] is not None and grand else None
        lines.append(f"{_num(share, digits=1):>7} {_num(r['total_ns'], 1e6, 3):>12} "
                     f"{r['calls']:>12} {_num(r['mean_ns'], digits=1):>11} "
                     f"{_num(r['p50_ns']):>11} {_num(r['p99_ns']):>11} "
                     f"{_num(r['max_ns']):>12} {_num(r['errors']):>8}  {name}")
    return lines


def errors_section(functions: dict[str, Merged]) -> list[str]:
    rows = error_rows(functions)
    if not rows:
        known = all(m.errors_known for m in functions.values())
        return ["errors: none" if known and functions else
                "errors: not recorded in these traces (counts mode, or a shim that does not "
                "count them)"]
    width = max(len("function"), *(len(r["function"]) for r in rows))
    lines = ["errors (non-success returns):",
             f"{'function':<{width}}  {'code':>5}  {'name':<40} {'count':>12}"]
    for r in rows:
        lines.append(f"{r['function']:<{width}}  {r['code']:>5}  {r['name']:<40} "
                     f"{r['count']:>12}")
    return lines


def source_header(sources: list[Source]) -> list[str]:
    lines = ["shimgen report: " + " ".join(s.name for s in sources)]
    for s in sources:
        if s.is_run and s.run is not None:
            lines.append(f"command    {run_command(s) or '(not recorded)'} ({run_outcome(s)})")
        if s.run_problem:
            lines.append(f"run        metadata not read: {s.run_problem}")
    return lines


def _text(sources: list[Source], gs: list[Group], by: str | None) -> str:
    lines = source_header(sources)
    if not any(g.processes for g in gs):
        lines.append("processes  0: no process made a traced driver call")
        return "\n".join(lines) + "\n"
    for g in gs:
        lines.append("")
        if by is not None:
            lines.append(f"== {by} {g.key} ==")
        lines += group_header(g)
        lines.append("")
        lines += function_table(g.functions)
        lines.append("")
        lines += errors_section(g.functions)
    return "\n".join(lines) + "\n"


def group_json(g: Group) -> dict:
    died = [p for p in g.processes if not p.complete]
    return {
        "group": g.key,
        "processes": len(g.processes),
        "complete": len(g.processes) - len(died),
        "died": [{"pid": p.pid, "rank": p.rank, "path": p.path} for p in died],
        "ranks": _ranks(g),
        "driver_versions": _drivers(g),
        "modes": sorted({p.mode for p in g.processes}),
        "untimed_calls": sum(p.untimed_calls for p in g.processes),
        "unmapped_proc_addresses": sum(p.unmapped_proc_addresses for p in g.processes),
        "errors_overflow": sum(p.errors_overflow for p in g.processes),
        "notes": _notes(g),
        "functions": [function_row(n, m) for n, m in sorted_functions(g.functions)],
        "errors": error_rows(g.functions),
    }


def source_json(s: Source) -> dict:
    out = {"path": s.name, "run": s.is_run}
    if s.is_run:
        status, sig, error = run_exit(s)
        run = s.run or {}
        out.update(command=run_command(s), exit_status=status, signal=sig, error=error,
                   start=run.get("start"), end=run.get("end"))
    return out


def _csv_value(v) -> str:
    if v is None:
        return ""
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def render(sources: list[Source], gs: list[Group], by: str | None, fmt: str) -> str:
    if fmt == "json":
        import json

        return json.dumps({"schema": SCHEMA, "version": SCHEMA_VERSION, "by": by,
                           "sources": [source_json(s) for s in sources],
                           "groups": [group_json(g) for g in gs if g.processes]},
                          indent=1) + "\n"
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for g in gs:
            for name, m in sorted_functions(g.functions):
                row = function_row(name, m)
                w.writerow([by or "all", g.key] + [_csv_value(row[c]) for c in CSV_COLUMNS[2:]])
        return buf.getvalue()
    return _text(sources, gs, by)
