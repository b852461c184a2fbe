"""What one run's report says, as values both of its views print (report/format.py: the
text and the JSON; report/compare.py: two runs): a function's row and its errors, the run's
command and outcome, a group's ranks, drivers and processes short of calls, and the readers'
notes by kind."""

from __future__ import annotations

from math import isfinite

from ..errors import ShimgenError
from .model import Group, Merged
from .output import shown
from .source import Source

QUANTILES = (0.50, 0.90, 0.99)  # p50, p90, p99
DIED = "counts exact up to its last call"
LISTED = 8  # pids or ranks named before "... (N in all)"
CUT = 300  # characters of a notice or a reason shown
_DIGITS = str.maketrans("0123456789", "#" * 10)




def code_name(code: int) -> str:
    from ..cuda import RESULTS

    return RESULTS.get(code, "(unknown code)")


def function_row(name: str, m: Merged) -> dict:
    """One function's numbers; None where the traces do not have them."""
    p50, p90, p99 = m.percentiles(*QUANTILES)
    for q, v in zip(QUANTILES, (p50, p90, p99), strict=True):
        if v is not None and not isfinite(v):
            raise ShimgenError(f"report: {shown(name, CUT)}: its p{round(q * 100)} is {v}: a "
                               "trace's histogram or ns_per_tick is wrong")
    return {"function": name, "calls": m.calls,
            "total_ns": m.total_ns if m.timed else None, "mean_ns": m.mean_ns,
            "p50_ns": p50, "p90_ns": p90, "p99_ns": p99,
            "max_ns": m.max_ns, "errors": m.error_count, "injected": m.injected_count}


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


def listing(items: list[str]) -> str:
    if len(items) > 2 and all(i.isascii() and i.isdigit() for i in items):
        nums = sorted(int(i) for i in items)
        if nums == list(range(nums[0], nums[0] + len(nums))):
            return f"{nums[0]}-{nums[-1]}"
    shown = ", ".join(items[:LISTED])
    return shown + (f", ... ({len(items)} in all)" if len(items) > LISTED else "")


def group_ranks(g: Group) -> list[str]:
    return sorted({p.rank for p in g.processes if p.rank is not None},
                  key=lambda r: (0, int(r), "") if r.isascii() and r.isdigit() else (1, 0, r))


def group_drivers(g: Group) -> dict[str, int]:
    """Each driver version with how many processes loaded it (a process that exec'd: the
    versions its programs loaded; "unknown" when none of them says)."""
    seen: dict[str, int] = {}
    for proc in g.procs:
        if all(p.no_file for p in proc.traces):
            continue  # no trace: nothing said of its driver
        versions = {p.driver_version for p in proc.traces if p.driver_version} or {"unknown"}
        for v in versions:
            seen[v] = seen.get(v, 0) + 1
    return seen


def traced_twice(g: Group) -> list[str]:
    """Pids with both a binary and a JSON trace: SHIMGEN_TRACE_DIR and SHIMGEN_TRACE_FILE
    both set, so one process's calls are in the group twice."""
    sources: dict[int, set[str]] = {}
    for p in g.processes:
        sources.setdefault(p.pid, set()).add(p.source)
    return [f"pid {pid}" for pid, s in sorted(sources.items()) if len(s) > 1]


def group_notes(g: Group) -> dict[str, int]:
    """What the readers could not give, and why: each note with how many processes have it
    (a process that exec'd: any of its traces)."""
    seen: dict[str, int] = {}
    for proc in g.procs:
        for note in dict.fromkeys(n for p in proc.traces for n in p.notes):
            seen[note] = seen.get(note, 0) + 1
    return seen


def note_kind(note: str) -> str:
    """A note with each of its numbers (a run of digits, with a decimal point or not) as
    "#": notes that differ only in a number are of one kind."""
    kind = note.translate(_DIGITS)
    while "##" in kind:
        kind = kind.replace("##", "#")
    while "#.#" in kind:
        kind = kind.replace("#.#", "#")
    return kind


def note_kinds(g: Group) -> list[tuple[str, int, bool]]:
    """The notes by kind, in the order first seen: (the first one's text, how many processes
    have a note of that kind, whether all of them have that same text)."""
    kinds: dict[str, list] = {}
    for note, n in group_notes(g).items():
        kind = kinds.get(note_kind(note))
        if kind is None:
            kinds[note_kind(note)] = [note, n, True]
        else:
            kind[1] += n
            kind[2] = False
    return [(text, n, same) for text, n, same in kinds.values()]


def note_line(text: str, n: int, same: bool) -> str:
    if same:
        return f"note       {shown(text, CUT)} ({n} process{'es' if n > 1 else ''})"
    more = n - 1
    return (f"note       {shown(text, CUT)} (and {more} more process{'es' if more > 1 else ''} "
            "with the like, their numbers differ)")


def who(p) -> str:
    return f"pid {p.pid}" + (f" rank {shown(p.rank, CUT)}" if p.rank is not None else "")


def short_processes(g: Group) -> list:
    """The processes whose calls are not all in their traces (a full disk), by their last
    trace: never said to have counts exact."""
    return [proc for proc in g.procs if any(t.short for t in proc.traces)]


def missing_line(short: list) -> str:
    said = []
    for proc in short:
        n = sum(t.calls_missing for t in proc.traces)
        what = ("no trace" if any(t.no_file for t in proc.traces) and not n
                else f"{n} calls at least")
        said.append(f"{who(proc.last)} ({what})")
    return ("missing    calls not in the traces (no room on the disk): " + listing(said))
