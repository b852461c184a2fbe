"""What the report shows of fault injection (SHIMGEN_INJECT, `shimgen run --inject`): the
rules a run armed (run.json's "inject"), and the failures they returned, per function and
code, apart from the driver's own errors (the readers keep them apart: tracemodel's
`FunctionStats.injected`). Used by report/format.py (one run) and report/compare.py (two)."""

from __future__ import annotations

from .model import Merged
from .output import shown
from .source import Source

CUT = 300
TITLE = "injected failures (returned by SHIMGEN_INJECT without calling the driver):"


def code_name(code: int) -> str:
    from ..cuda import RESULTS

    return RESULTS.get(code, "(unknown code)")


def rules(src: Source) -> list[str]:
    """The rules run.json records (none for trace files, or a run without --inject)."""
    got = (src.run or {}).get("inject") if src.is_run else None
    return [r for r in got if isinstance(r, str)] if isinstance(got, list) else []


def rules_line(src: Source) -> list[str]:
    armed = rules(src)
    return [f"inject     {shown('; '.join(armed), CUT)} (failures on purpose; their count is "
            "the injected column, not errors)"] if armed else []


def any_injected(functions: dict[str, Merged]) -> bool:
    return any(m.injected_count for m in functions.values())


def injected_rows(functions: dict[str, Merged]) -> list[dict]:
    """Every (function, code) that injected failures, most first."""
    rows = [{"function": name, "code": code, "name": code_name(code), "count": n}
            for name, m in functions.items() for code, n in m.injected.items() if n]
    return sorted(rows, key=lambda r: (-r["count"], r["function"], r["code"]))


def injected_section(functions: dict[str, Merged]) -> list[str]:
    rows = injected_rows(functions)
    if not rows:
        return []
    names = {r["function"]: shown(r["function"], CUT) for r in rows}
    width = max(len("function"), *map(len, names.values()))
    lines = ["", TITLE, f"{'function':<{width}}  {'code':>5}  {'name':<40} {'count':>12}"]
    for r in rows:
        lines.append(f"{names[r['function']]:<{width}}  {r['code']:>5}  {r['name']:<40} "
                     f"{r['count']:>12}")
    return lines


def compare_rows(fa: dict[str, Merged], fb: dict[str, Merged]) -> list[dict]:
    """Each (function, code) injected in A or B, with both counts, largest change first."""
    def codes(fs: dict[str, Merged]) -> dict[tuple[str, int], int]:
        return {(n, c): k for n, m in fs.items() for c, k in m.injected.items() if k}

    ca, cb = codes(fa), codes(fb)
    rows = [{"function": f, "code": c, "name": code_name(c), "count_a": ca.get((f, c), 0),
             "count_b": cb.get((f, c), 0)} for f, c in set(ca) | set(cb)]
    return sorted(rows, key=lambda r: (-abs(r["count_b"] - r["count_a"]), r["function"],
                                       r["code"]))


def compare_section(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    width = max(len("function"), *(len(shown(r["function"])) for r in rows))
    lines = ["", TITLE, f"{'function':<{width}}  {'code':>5}  {'name':<40} {'A':>10} {'B':>10} "
             f"{'change':>10}"]
    for r in rows:
        lines.append(f"{shown(r['function']):<{width}}  {r['code']:>5}  {r['name']:<40} "
                     f"{r['count_a']:>10} {r['count_b']:>10} {r['count_b'] - r['count_a']:>+10}")
    return lines
