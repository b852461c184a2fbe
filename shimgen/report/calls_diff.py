"""`shimgen report --calls A B --first-difference`: two runs' decoded calls compared thread
by thread (the processes of each run in order of rank, then start; a process's threads in
order of their first call): handles by their numbers, addresses ignored unless asked. For
each pair of threads that part, the first call that differs in function, arguments, outputs
or result, with the calls just before it."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from ..calls import IDX, TID
from .calls import in_order, shown, unreadable_lines
from .output import shown as escaped

CONTEXT = 3  # calls shown before the first difference


def _threads(path: Path, f, unreadable: list) -> list[tuple[str, list]]:
    procs, groups, _ = shown([path], f, unreadable)
    per = defaultdict(list)
    for g, s in in_order(groups):
        r = g.proc.record(s)
        per[(g.proc.pid, r[TID])].append((_key(g, r), g.line(s), g.t(s)))
    order = {p.pid: (p.rank or "", p.calib_ns0) for p in procs}
    keys = sorted(per, key=lambda k: (order[k[0]], per[k][0][2]))
    return [(f"pid {pid} thread {tid}", per[(pid, tid)]) for pid, tid in keys]


def _key(g, r) -> tuple:
    """What is compared (names, values as text, result), and the addresses apart."""
    args, outs = g.dec.decode(r, g.handles)
    return ((g.dec.names[r[IDX]], tuple((n, t) for n, _, t, a in args if not a),
             g.dec.result(r)[1], tuple((n, t) for n, _, t, a in outs if not a)),
            (tuple(t for _, _, t, a in args if a), tuple(t for _, _, t, a in outs if a)))


def _first(a: list, b: list, addresses: bool) -> int | None:
    for i, (ra, rb) in enumerate(zip(a, b, strict=False)):
        ka, kb = ra[0], rb[0]
        if ka[0] != kb[0] or (addresses and ka[1] != kb[1]):
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def first_difference(a: Path, b: Path, f, *, addresses: bool = False,
                     fmt: str = "text") -> tuple[str, bool]:
    """The text (or JSON) and whether the runs part: a pair of threads that part, or one run
    with more threads than the other."""
    ua: list[tuple[str, str]] = []
    ub: list[tuple[str, str]] = []
    ta, tb = _threads(a, f, ua), _threads(b, f, ub)
    found, same = [], 0
    for (na, ca), (nb, cb) in zip(ta, tb, strict=False):
        i = _first(ca, cb, addresses)
        if i is None:
            same += 1
            continue
        found.append({"a": na, "b": nb, "index": i,
                      "before": [line for _, line, _ in ca[max(0, i - CONTEXT):i]],
                      "a_call": ca[i][1] if i < len(ca) else None,
                      "b_call": cb[i][1] if i < len(cb) else None})
    extra = len(ta) - len(tb)
    a, b = escaped(str(a)), escaped(str(b))  # as the text shows them; the JSON names neither
    if fmt == "json":
        return json.dumps({"schema": "shimgen-calls-difference", "same_threads": same,
                           "threads_a": len(ta), "threads_b": len(tb),
                           "differences": found,
                           "unreadable": [{"file": path, "reason": why} for path, why in ua + ub]},
                          indent=1) + "\n", bool(found or extra)
    head = (f"first difference: {len(found)} of {min(len(ta), len(tb))} threads part"
            if found else f"no difference: {same} threads make the same calls")
    out = [head + (" (addresses compared)" if addresses else " (addresses ignored)")]
    out += unreadable_lines(ua + ub)
    if extra:
        out.append(f"threads    {a} has {len(ta)}, {b} has {len(tb)}")
    for d in found:
        out += ["", f"{d['a']} of {a} / {d['b']} of {b}: call {d['index'] + 1}"]
        out += [f"    {line}" for line in d["before"]]
        out.append(f"  A {d['a_call'] or '(no more calls)'}")
        out.append(f"  B {d['b_call'] or '(no more calls)'}")
    return "\n".join(out) + "\n", bool(found or extra)
