"""What the report shows of device memory (docs/memory.md): per group, from each process's
ledger (trace/memory.py, a version 4 binary trace), the peak and at-exit device memory per
device and by allocation function, the allocations never freed, pinned host memory apart,
and the limit the run had. A group none of whose traces has a ledger shows nothing (its
`memory` is null in the JSON).

The numbers of a group: `peak_bytes` is the most one process held at once on one device
(the largest peak of any process and device); `peak_together_bytes` what the processes
held together at one moment, bounded by their times (a ledger keeps a process's peak, not
when it came): at least `peak_bytes`, at most the peaks of the processes that ran at once,
summed (a process that died or still runs taken to hold on to the end); `at_exit_bytes`
what the group's processes still held at exit or death, summed; `by_function` the bytes
each allocation function took, summed; `leaked` the allocations still held at exit or
death, and their bytes. A process that exec'd has a ledger per image: its peak is the
largest, and what each image held when it exec'd is counted as held (the exec gave it back
to the driver, not the program).

Pools and graphs (format version 5): `reserved_peak_bytes` is the most one process held and
had reserved at once on one device (what its pools and graphs reserved beyond their
allocations included); `reserved` the pools' and the graphs' reserved and used bytes at
exit and their highs (the driver's own numbers, as the ledger last asked them), summed over
devices and processes. Both are null when no trace of the group is version 5."""

from __future__ import annotations

from ..runenv import MEM_RESERVE_FIELDS
from ..trace import HOST
from .facts import CUT
from .model import Group
from .output import shown

UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
PROCESS_LINES = 16  # processes given their own line under the device memory (then a count)


def size_text(n: int) -> str:
    """Bytes in the largest unit that keeps the number at or above 1, to 2 decimals."""
    v, u = float(n), 0
    while v >= 1024 and u < len(UNITS) - 1:
        v, u = v / 1024, u + 1
    return f"{n} B" if u == 0 else f"{v:.2f} {UNITS[u]}"


def _add(into: dict, what: dict) -> None:
    for k, v in what.items():
        into[k] = into.get(k, 0) + v


def _column_totals(g: Group) -> dict:
    """Per column (device ordinal or HOST): peak (the largest of one process), at exit,
    taken and held by function, allocations held, summed over the group's traces."""
    out: dict = {}
    for t in g.processes:
        for c, col in (t.memory.columns.items() if t.memory else ()):
            o = out.setdefault(c, {"peak": 0, "taken": {}, "held": {}, "live": {},
                                   "reserved_peak": 0, "pool": None, "graph": None})
            o["peak"] = max(o["peak"], col.peak)
            o["reserved_peak"] = max(o["reserved_peak"], col.reserved_peak)
            for kind in ("pool", "graph"):
                if getattr(col, kind) is not None:
                    o[kind] = o[kind] or dict.fromkeys(MEM_RESERVE_FIELDS, 0)
                    _add(o[kind], getattr(col, kind))
            _add(o["taken"], col.taken)
            _add(o["held"], col.held)
            _add(o["live"], col.live)
    return out


def _spans(g: Group) -> list[tuple[float, float, object]]:
    """(from, until, ledger) of each traced image that has a ledger: from its first traced
    call (the start of time where unknown) until its exit, the next image's start (an
    exec), or the end of time (a process that died or still runs: when it let go is not
    known)."""
    out = []
    for proc in g.procs:
        for i, t in enumerate(proc.traces):
            if t.memory is None:
                continue
            nxt = proc.traces[i + 1].start_ns if i + 1 < len(proc.traces) else None
            until = nxt if nxt is not None else t.end_ns if t.end_ns is not None else INF
            out.append((t.start_ns if t.start_ns is not None else -INF, until, t.memory))
    return out


INF = float("inf")


def together(spans: list[tuple[float, float, int]]) -> int:
    """The most that images held at one moment, at most: over every moment one began, the
    peaks of the images running then, summed (each image's own peak, whenever it came)."""
    return max((sum(n for s, u, n in spans if s <= start < u or s == start)
                for start, _, _ in spans), default=0)


def together_json(g: Group, column: int | str | None) -> dict:
    """What the group's processes held together at one moment, on one column (None: every
    device): `at_least` the most one image held (one process alone), `at_most` the peaks of
    the images that ran at once, summed; the two are equal where that is exact."""
    spans = [(s, u, m.columns[column].peak if column in m.columns else 0) if column is not None
             else (s, u, sum(col.peak for c, col in m.columns.items() if c != HOST))
             for s, u, m in _spans(g)]
    low = max((col.peak for _, _, m in _spans(g) for c, col in m.columns.items()
               if (c == column if column is not None else c != HOST)), default=0)
    return {"at_least": low, "at_most": max(together(spans), low)}


def _peak_text(p: dict) -> str:
    """A peak held together: exact, or between its bounds."""
    if p["at_least"] == p["at_most"]:
        return f"peak {size_text(p['at_most'])}"
    return (f"peak {size_text(p['at_least'])} to {size_text(p['at_most'])} together (at least "
            "one process's own peak; at most the peaks of those that ran at once, summed)")


def _column_json(c: int | str, o: dict) -> dict:
    head = {"device": c} if c != HOST else {}
    return {**head, "peak_bytes": o["peak"], "at_exit_bytes": sum(o["held"].values()),
            "by_function": dict(sorted(o["taken"].items())),
            "at_exit_by_function": dict(sorted(o["held"].items())),
            "leaked": {"count": sum(o["live"].values()), "bytes": sum(o["held"].values())},
            "reserved_peak_bytes": o["reserved_peak"] if o["pool"] is not None else None,
            "pools": _reserve_json(o["pool"]), "graphs": _reserve_json(o["graph"])}


def _reserve_json(r: dict | None) -> dict | None:
    return {f"{k}_bytes": v for k, v in r.items()} if r is not None else None


def _reserved_json(devices: list[dict], ledgers: list) -> dict | None:
    """The group's pools and graphs, summed over devices (None: no version 5 trace)."""
    if not any(t.memory.pools is not None for t in ledgers):
        return None
    out = {}
    for kind in ("pools", "graphs"):
        total = dict.fromkeys((f"{k}_bytes" for k in MEM_RESERVE_FIELDS), 0)
        for d in devices:
            _add(total, d[kind] or {})
        out[kind] = total
    out["pools_known"] = sum(t.memory.pools or 0 for t in ledgers)
    out["graph_allocations"] = sum(t.memory.graph_allocs or 0 for t in ledgers)
    return out


def memory_json(g: Group) -> dict | None:
    """A group's `memory` object, or None when no trace of it has a ledger."""
    ledgers = [t for t in g.processes if t.memory is not None]
    if not ledgers:
        return None
    cols = _column_totals(g)
    devices = [{**_column_json(c, o), "peak_together_bytes": together_json(g, c)}
               for c, o in sorted((c, o) for c, o in cols.items() if c != HOST)]
    by_function: dict = {}
    for d in devices:
        _add(by_function, d["by_function"])
    limits = sorted({t.memory.limit for t in ledgers if t.memory.limit})
    return {
        "peak_bytes": max((d["peak_bytes"] for d in devices), default=0),
        "peak_together_bytes": together_json(g, None),
        "at_exit_bytes": sum(d["at_exit_bytes"] for d in devices),
        "by_function": dict(sorted(by_function.items())),
        "leaked": {"count": sum(d["leaked"]["count"] for d in devices),
                   "bytes": sum(d["leaked"]["bytes"] for d in devices)},
        "devices": devices,
        "host": _column_json(HOST, cols[HOST]) if HOST in cols else None,
        "limit_bytes": limits[-1] if limits else None,
        "refused": sum(t.memory.refused for t in ledgers),
        "limit_not_tried": _limit_not_tried(g, devices, limits,
                                            sum(t.memory.refused for t in ledgers)),
        "untracked": sum(t.memory.untracked for t in ledgers),
        "processes": [_process_json(t) for t in ledgers],
        "reserved_peak_bytes": max((d["reserved_peak_bytes"] or 0 for d in devices),
                                   default=0) if any(t.memory.pools is not None
                                                     for t in ledgers) else None,
        "reserved": _reserved_json(devices, ledgers),
    }


def _limit_not_tried(g: Group, devices: list[dict], limits: list, refused: int) -> str | None:
    """Why a limit was never tried: the driver failed (cuInit, or the allocations) and no
    allocation reached a working device, so none was judged; None when one was (or no
    limit)."""
    from .facts import error_rows

    if not limits or refused or any(sum(d["by_function"].values()) for d in devices):
        return None
    rows = error_rows(g.functions)
    first = next((r for r in rows if r["function"] == "cuInit"), rows[0] if rows else None)
    if first is None:
        return None
    return (f"{first['function']} returned {first['name']}: no allocation reached a working "
            "device, so none was judged (the limit acts on a working device's allocations)")


def _process_json(t) -> dict:
    cols = {c: col for c, col in t.memory.columns.items() if c != HOST}
    return {"pid": t.pid, "rank": t.rank, "path": t.path, "complete": t.complete,
            "peak_bytes": max((c.peak for c in cols.values()), default=0),
            "at_exit_bytes": sum(c.at_exit for c in cols.values()),
            "leaked": {"count": sum(c.leaked for c in cols.values()),
                       "bytes": sum(c.at_exit for c in cols.values())},
            "reserved_peak_bytes": max((c.reserved_peak for c in cols.values()), default=0)}


def _process_lines(procs: list[dict]) -> list[str]:
    """Each process's own device memory, where the group has more than one."""
    if len(procs) < 2:
        return []
    lines = [f"  pid {p['pid']}" + (f" (rank {shown(p['rank'], CUT)})" if p["rank"] else "")
             + f": own peak {size_text(p['peak_bytes'])}, at exit "
             f"{size_text(p['at_exit_bytes'])}" for p in procs[:PROCESS_LINES]]
    if len(procs) > PROCESS_LINES:
        lines.append(f"  ... and {len(procs) - PROCESS_LINES} more processes (--json lists "
                     "every one)")
    return lines


def _function_lines(o: dict) -> list[str]:
    lines = []
    for name in sorted(o["taken"], key=lambda n: (-o["taken"][n], n)):
        held, live = o["held"].get(name, 0), o["live"].get(name, 0)
        rest = f"   held at exit {size_text(held)} ({live} never freed)" if live else ""
        lines.append(f"    {name:<32} took {size_text(o['taken'][name])}{rest}")
    return lines


def _reserve_lines(o: dict) -> list[str]:
    """What a device's pools and graphs reserved and used, when they did."""
    lines = []
    if o["reserved_peak"] > o["peak"]:
        lines.append(f"    with pools' and graphs' reservations: peak "
                     f"{size_text(o['reserved_peak'])}")
    for kind, name in (("pool", "pools"), ("graph", "graphs")):
        r = o[kind]
        if r and any(r.values()):
            lines.append(f"    {name}: reserved {size_text(r['reserved'])} at exit (high "
                         f"{size_text(r['reserved_high'])}), used {size_text(r['used'])} "
                         f"(high {size_text(r['used_high'])})")
    return lines


def memory_section(g: Group) -> list[str]:
    """The text: one line for the group, then each device and the host, by function."""
    m = memory_json(g)
    if m is None or not (m["devices"] or m["host"] or m["limit_bytes"] or m["untracked"]):
        return []  # (no process took memory: nothing to say)
    cols = _column_totals(g)
    leaked = m["leaked"]
    lines = ["", f"device memory  {_peak_text(m['peak_together_bytes'])}, at exit "
             f"{size_text(m['at_exit_bytes'])}, never freed: {leaked['count']} allocations"
             f" ({size_text(leaked['bytes'])})"]
    for d in m["devices"]:
        o = cols[d["device"]]
        lines.append(f"  device {d['device']}: {_peak_text(d['peak_together_bytes'])}, at exit "
                     f"{size_text(sum(o['held'].values()))}")
        lines += _function_lines(o) + _reserve_lines(o)
    lines += _process_lines(m["processes"])
    if HOST in cols:
        o = cols[HOST]
        lines.append(f"  pinned host memory: peak {size_text(o['peak'])}, at exit "
                     f"{size_text(sum(o['held'].values()))}")
        lines += _function_lines(o)
    if m["limit_bytes"]:
        lines.append(f"  limit {size_text(m['limit_bytes'])} per device: {m['refused']} "
                     f"allocations refused" + (f"; {m['limit_not_tried']}"
                                               if m["limit_not_tried"] else ""))
    if m["untracked"]:
        lines.append(f"  {m['untracked']} allocations not followed (docs/memory.md)")
    return lines
