"""What the report shows of a run's shared memory budget (docs/memory.md, "One budget for
many processes"): the books run.json names (`budget.books`: the run directory's own, or the
group's), read as they are now (trace/budget.py): the budget per device, each device's
peak (the most the processes of the budget held together), each process's part (its peak
and what it held last, per device) and every refusal kept with the process it hit (the
last 64; the count of all of them). A group's books are the group's: other runs of the
group are in them too. Nothing when the run had no shared budget; one line when its books
cannot be read."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ShimgenError
from .memory import size_text
from .output import shown

PROCESS_LINES = 16


def _books_path(run: dict | None) -> str | None:
    b = (run or {}).get("budget")
    return b.get("books") if isinstance(b, dict) and isinstance(b.get("books"), str) else None


def budget_json(run: dict | None) -> dict | None:
    """The run's `budget` object; None without one. `problem`: why its books were not read."""
    path = _books_path(run)
    if path is None:
        return None
    group = run["budget"].get("group")
    out = {"books": path, "group": group if isinstance(group, str) else None}
    from ..trace import budget

    if not os.path.lexists(path):
        return {**out, "problem": "no books: no process of it loaded the driver"}
    try:
        b = budget.load(Path(path))
    except ShimgenError as e:
        return {**out, "problem": str(e)}
    keys = [d.key for d in b.devices]

    def dev(i: int) -> str:
        return keys[i] if i < len(keys) else f"entry {i}"
    return {**out, "problem": None, "limit_bytes": b.limit, "refused": b.refused,
            "devices": [{"device": d.key, "peak_bytes": d.peak, "used_bytes": d.used}
                        for d in b.devices],
            "processes": [{"pid": s.pid, "refused": s.refused,
                           "peak_bytes": {dev(i): n for i, n in s.peak.items()},
                           "held_bytes": {dev(i): n for i, n in s.bytes.items()}}
                          for s in b.slots],
            "refusals": [{"pid": r.pid, "device": dev(r.device), "size_bytes": r.size,
                          "used_bytes": r.used} for r in b.refusals]}


def budget_lines(run: dict | None) -> list[str]:
    m = budget_json(run)
    if m is None:
        return []
    whose = f"group {shown(m['group'])}" if m["group"] else "this run's processes together"
    if m["problem"]:
        return [f"budget     {whose}: {shown(m['problem'])}"]
    lines = [f"budget     {size_text(m['limit_bytes'])} per device for {whose}: "
             f"{m['refused']} allocations refused"]
    for d in m["devices"]:
        lines.append(f"  {d['device']}: peak {size_text(d['peak_bytes'])} together")
    for p in m["processes"][:PROCESS_LINES]:
        parts = ", ".join(f"{k} peak {size_text(n)}, last {size_text(p['held_bytes'].get(k, 0))}"
                          for k, n in p["peak_bytes"].items()) or "nothing held"
        lines.append(f"  pid {p['pid']}: {parts}"
                     + (f"; {p['refused']} refused" if p["refused"] else ""))
    if len(m["processes"]) > PROCESS_LINES:
        lines.append(f"  ... and {len(m['processes']) - PROCESS_LINES} more processes "
                     "(--json lists every one)")
    for r in m["refusals"]:
        lines.append(f"  refused: pid {r['pid']} asked {size_text(r['size_bytes'])} on "
                     f"{r['device']}, the budget holding {size_text(r['used_bytes'])}")
    if m["refused"] > len(m["refusals"]):
        lines.append(f"  (the last {len(m['refusals'])} refusals of {m['refused']} shown)")
    return lines
