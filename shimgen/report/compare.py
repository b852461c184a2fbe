"""`shimgen report A B` with two run directories: each run's processes merged, then calls,
total time and errors of A and B side by side, what changed most first (the order is
`change_order`, docs/report.md), functions and error codes that are new in B or gone from
it marked. Text, JSON (schema `shimgen-report-compare`) or CSV; a string read from a file is
escaped in the text and the CSV, exact in the JSON (report/output.py)."""

from __future__ import annotations

import csv
import io

from .facts import DIED, code_name
from .format import (
    notices_json,
    source_header,
    source_json,
    unreadable_json,
)
from .inject import compare_rows, compare_section
from .model import Merged, check_sums, merge, processes_of
from .output import csv_value, dump_json, printable, shown
from .source import Source

SCHEMA = "shimgen-report-compare"
SCHEMA_VERSION = 1
ORDER = ("by the absolute change in errors, then in calls, then in total time, largest "
         "first; then by name")
CSV_COLUMNS = ("function", "status", "calls_a", "calls_b", "total_ns_a", "total_ns_b",
               "errors_a", "errors_b", "injected_a", "injected_b")
NEW, GONE = "new", "gone"


def _status(a, b) -> str:
    return NEW if a is None else GONE if b is None else ""


def _delta(a, b) -> float:
    return abs((b or 0) - (a or 0))


def function_rows(fa: dict[str, Merged], fb: dict[str, Merged]) -> list[dict]:
    rows = []
    for name in set(fa) | set(fb):
        a, b = fa.get(name), fb.get(name)
        rows.append({
            "function": name, "status": _status(a, b),
            "calls_a": a.calls if a else 0, "calls_b": b.calls if b else 0,
            "total_ns_a": a.total_ns if a and a.timed else None,
            "total_ns_b": b.total_ns if b and b.timed else None,
            "errors_a": a.error_count if a else 0, "errors_b": b.error_count if b else 0,
            "injected_a": a.injected_count if a else 0,
            "injected_b": b.injected_count if b else 0,
        })
    return sorted(rows, key=change_order)


def change_order(row: dict) -> tuple:
    """What changed most first: errors, then calls, then total time (absolute changes)."""
    return (-_delta(row["errors_a"], row["errors_b"]), -_delta(row["calls_a"], row["calls_b"]),
            -_delta(row["total_ns_a"], row["total_ns_b"]), row["function"])


def _knows(fs: dict[str, Merged], function: str) -> bool:
    """Whether a run knows the error returns of `function`: every process that called it
    counted them (a counts-mode run does not); one that never called it, when all of the
    run's functions were counted."""
    m = fs.get(function)
    return m.errors_known if m is not None else all(x.errors_known for x in fs.values())


def error_rows(fa: dict[str, Merged], fb: dict[str, Merged]) -> list[dict]:
    """Each (function, code) either run returned; a count is None where that run cannot know
    it (it recorded no errors: counts mode), and then nothing is new or gone."""
    def codes(fs: dict[str, Merged]) -> dict[tuple[str, int], int]:
        return {(n, c): k for n, m in fs.items() for c, k in m.errors.items() if k}

    def count(cs: dict, fs: dict[str, Merged], f: str, c: int) -> int | None:
        return cs.get((f, c), 0) if _knows(fs, f) else None

    ca, cb = codes(fa), codes(fb)
    rows = []
    for f, c in set(ca) | set(cb):
        a, b = count(ca, fa, f, c), count(cb, fb, f, c)
        rows.append({"function": f, "code": c, "name": code_name(c),
                     "status": "" if a is None or b is None else _status(ca.get((f, c)),
                                                                          cb.get((f, c))),
                     "count_a": a, "count_b": b})
    return sorted(rows, key=lambda r: (-_delta(r["count_a"], r["count_b"]), r["function"],
                                       r["code"]))


def _change(a: int | None, b: int | None, width: int) -> str:
    return f"{'-':>{width}}" if a is None or b is None else f"{b - a:>+{width}}"


MODES = {"counts": "counts (calls only: no times, no errors)", "time": "time",
         "timeline": "timeline"}


def _num(v, scale: float = 1.0, digits: int = 0) -> str:
    return "-" if v is None else f"{v / scale:.{digits}f}"


def _side(label: str, s: Source) -> str:
    procs = processes_of(s.processes)
    n = len(procs)
    short = sum(any(t.short for t in p.traces) for p in procs)
    died = sum(not p.complete and not any(t.short for t in p.traces) for p in procs)
    versions = sorted({shown(p.driver_version or "unknown") for p in s.processes
                       if not p.no_file})
    modes = sorted({p.mode for p in s.processes if not p.no_file})
    return (f"{label}  {shown(s.name)}: {n} process{'' if n == 1 else 'es'}"
            + (f" ({died} died: {DIED})" if died else "")
            + (f" ({short} with calls not in their traces: no room on the disk)"
               if short else "")
            + (f", driver {', '.join(versions)}" if versions else "")
            + (f", mode {', '.join(MODES.get(m, shown(m)) for m in modes)}" if modes else ""))


def _text(a: Source, b: Source, frows: list[dict], erows: list[dict],
          irows: list[dict]) -> str:
    lines = source_header([a, b], "AB")
    lines += [_side("A", a), _side("B", b), "", f"sorted {ORDER}", ""]
    lines.append(f"{'calls A':>12} {'calls B':>12} {'change':>12} {'total ms A':>12} "
                 f"{'total ms B':>12} {'errors A':>9} {'errors B':>9}  function")
    for r in frows:
        mark = f"  ({r['status']} in B)" if r["status"] == NEW else (
            f"  ({r['status']} from B)" if r["status"] else "")
        lines.append(f"{r['calls_a']:>12} {r['calls_b']:>12} "
                     f"{r['calls_b'] - r['calls_a']:>+12} {_num(r['total_ns_a'], 1e6, 3):>12} "
                     f"{_num(r['total_ns_b'], 1e6, 3):>12} {_num(r['errors_a']):>9} "
                     f"{_num(r['errors_b']):>9}  {shown(r['function'])}{mark}")
    lines.append("")
    if not erows:
        lines.append("errors: none in either run")
    else:
        width = max(len("function"), *(len(shown(r["function"])) for r in erows))
        lines.append("errors (non-success returns), largest change first:")
        lines.append(f"{'function':<{width}}  {'code':>5}  {'name':<40} {'A':>10} {'B':>10} "
                     f"{'change':>10}")
        for r in erows:
            mark = f"  ({r['status']})" if r["status"] else ""
            lines.append(f"{shown(r['function']):<{width}}  {r['code']:>5}  {r['name']:<40} "
                         f"{_num(r['count_a']):>10} {_num(r['count_b']):>10} "
                         f"{_change(r['count_a'], r['count_b'], 10)}{mark}")
    lines += compare_section(irows)
    return "\n".join(lines) + "\n"


def render(a: Source, b: Source, fmt: str) -> str:
    fa, fb = merge(a.processes), merge(b.processes)
    check_sums(fa, a.processes)
    check_sums(fb, b.processes)
    frows, erows, irows = function_rows(fa, fb), error_rows(fa, fb), compare_rows(fa, fb)
    if fmt == "json":
        side = [dict(source_json(s), processes=len(processes_of(s.processes)),
                     unreadable=unreadable_json([s]), notices=notices_json(s.notices))
                for s in (a, b)]
        return dump_json({"schema": SCHEMA, "version": SCHEMA_VERSION, "a": side[0],
                          "b": side[1], "order": ORDER, "functions": frows, "errors": erows,
                          "injected": irows})
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for r in frows:
            # the numbers as they are; the name (and status) escaped, "" for none
            w.writerow([r[c] if isinstance(r[c], (int, float)) else csv_value(r[c])
                        for c in CSV_COLUMNS])
        return printable(buf.getvalue())
    return printable(_text(a, b, frows, erows, irows))
