"""What the report shows of kernels (docs/report.md, "Kernels"): per group, from each
process's kernel table (trace/kernels.py, a version 7 binary trace), the kernels by name
(their handles summed: one per module load and context), each with its launches, the host
time of its launch calls (not known in counts mode), the last grids and blocks seen and the
launches whose shape changed; the collectives whose launches differ across the ranks; each
stream's last launch for the in-flight lines. Names are shown demangled by the C++ runtime's
own demangler (`__cxa_demangle` of libstdc++, through ctypes; a name it refuses, or a machine
without libstdc++, shows as it is), raw with --mangled. A group none of whose traces has a
kernel table shows nothing (`kernels` is null in the JSON). A kernel never launched (a
handle the program got, as libraries get many) is in the JSON with 0 launches; the text
counts those in one line. A host function (cuLaunchHostFunc) is a row of its symbol, said so;
a graph's launches (cuGraphLaunch) are rows by the count of the graph's kernel nodes, with
the kernel nodes they ran summed in one line."""

from __future__ import annotations

import functools

from ..errors import ShimgenError
from ..runenv import KERN_COLLECTIVE, KERN_GRAPH_PREFIX, KERN_LAUNCH_FUNCTIONS
from ..trace import stream_text
from . import gputime
from .model import Group, Merged
from .output import shown

CUT = 300
SHOWN = 40  # kernels listed in the text; the rest counted


@functools.cache
def _cxa():
    """libstdc++'s __cxa_demangle and libc's free, or None. ctypes is loaded here, at the first
    mangled name, never on the way of a run that names no C++ kernel (ctypes.util, asked only
    where libstdc++.so.6 is not found by that name, loads shutil and subprocess)."""
    import ctypes

    def libraries():
        yield "libstdc++.so.6"
        import ctypes.util

        yield ctypes.util.find_library("stdc++")

    for name in libraries():
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            f = lib.__cxa_demangle
        except (OSError, AttributeError):
            continue
        f.restype = ctypes.c_void_p
        f.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                      ctypes.POINTER(ctypes.c_int)]
        libc = ctypes.CDLL(None)
        libc.free.argtypes = [ctypes.c_void_p]
        return f, libc.free
    return None


@functools.cache
def demangle(name: str) -> str:
    """A C++ symbol's name as the C++ runtime demangles it; any other name as it is."""
    if not name.startswith("_Z"):
        return name
    cxa = _cxa()
    if cxa is None:
        return name
    import ctypes

    f, free = cxa
    status = ctypes.c_int(-1)
    p = f(name.encode("utf-8", "replace"), None, None, ctypes.byref(status))
    if not p or status.value != 0:
        return name
    try:
        return ctypes.string_at(p).decode("utf-8", "replace")
    finally:
        free(p)


# What a slot is, by how it was named (trace/kernels.py Kernel.source); "kernel" otherwise.
KINDS = {"cuLaunchHostFunc": "host function", "cuGraphLaunch": "graph"}


def graph_nodes(name: str) -> int | None:
    """A graph's row: its count of kernel nodes (-1: not known); None for any other."""
    if not name.startswith(KERN_GRAPH_PREFIX):
        return None
    n = name[len(KERN_GRAPH_PREFIX):]
    return int(n) if n.isdigit() else -1


def demangled(name: str, raw: bool = False) -> str:
    """A kernel's name demangled, or as it is when `raw` (--mangled, or a name the trace file
    cut: its part may demangle as another name)."""
    return name if raw else demangle(name)


def kernel_text(name: str | None, mangled: bool = False, cut: bool = False) -> str:
    """A kernel as the text names it; `cut`: the trace file cut its name (said so)."""
    if name is None:
        return "a kernel the table had no room for"
    if (n := graph_nodes(name)) is not None:
        return (f"a graph of {n:,} kernel node{'' if n == 1 else 's'}" if n >= 0
                else "a graph whose kernel nodes are not known")
    if not name:
        return ("a kernel whose name the trace file had no room for (name cut)" if cut
                else "an unnamed kernel")
    # (a cut name is shown as it is: a demangler may read its part as another name)
    return shown(name if mangled or cut else demangle(name), CUT) + (" (name cut)" if cut
                                                                      else "")


def row_text(name: str, o: dict, mangled: bool = False) -> str:
    """A row of totals() as the text names it: a host function said so."""
    what = " (host function)" if o["kind"] == "host function" else ""
    return kernel_text(name, mangled, o["cut"]) + what


def _shape(t: tuple) -> str:
    return "x".join(map(str, t))


def totals(g: Group) -> dict[str, dict] | None:
    """Per kernel name: launches, host ns (None when a trace has no times), shapes seen,
    launches whose shape changed; None when no trace of the group has a kernel table."""
    tables = [t for t in g.processes if getattr(t, "kernels", None) is not None]
    if not tables:
        return None
    out: dict[str, dict] = {}
    for t in tables:
        for k in t.kernels.kernels:
            o = out.setdefault(k.name, {"launches": 0, "host_ns": 0.0, "shapes": set(),
                                        "shape_changes": 0, "timed": True, "cut": False,
                                        "kind": KINDS.get(k.source, "kernel"),
                                        "gpu": False, "gpu_ns": 0, "gpu_timed": 0,
                                        "gpu_max": 0, "gpu_segments": []})
            if k.gpu is not None:
                gputime.add(o, k.gpu)
            o["launches"] += k.launches
            o["cut"] = o["cut"] or k.cut
            o["shape_changes"] += k.shapes
            if k.launches and o["kind"] == "kernel":  # (a host function, a graph: none)
                o["shapes"].add((k.grid, k.block))
            if t.ns_per_tick is None:
                o["timed"] = False
            else:
                o["host_ns"] += k.ticks * t.ns_per_tick
    return out


def collectives(g: Group) -> list[dict]:
    """The collectives (a name holding KERN_COLLECTIVE, any case) whose launches differ
    across the group's ranks: each rank whose count is not the most common one."""
    per_rank: dict[str, dict[str, int]] = {}
    for t in g.processes:
        if t.rank is None or getattr(t, "kernels", None) is None:
            continue
        counts = per_rank.setdefault(t.rank, {})
        for k in t.kernels.kernels:
            if KERN_COLLECTIVE in k.name.lower():
                counts[k.name] = counts.get(k.name, 0) + k.launches
    if len(per_rank) < 2:
        return []
    out = []
    for name in sorted({n for c in per_rank.values() for n in c}):
        by_rank = {r: c.get(name, 0) for r, c in per_rank.items()}
        tally: dict[int, int] = {}
        for n in by_rank.values():
            tally[n] = tally.get(n, 0) + 1
        common = max(tally, key=lambda n: (tally[n], n))
        for r, n in sorted(by_rank.items()):
            if n != common:
                out.append({"kernel": name, "rank": r, "launches": n, "others": common,
                            "other_ranks": tally[common]})
    return out


def kernels_json(g: Group) -> list[dict] | None:
    tot = totals(g)
    if tot is None:
        return None
    busy = sum(o["gpu_ns"] for o in tot.values())
    return [{"name": n, "demangled": n if o["cut"] else demangle(n), "launches": o["launches"],
             **gputime.row_fields(o, busy),
             "host_ns": round(o["host_ns"]) if o["timed"] else None,
             "shapes": [{"grid": list(gr), "block": list(bl)} for gr, bl in sorted(o["shapes"])],
             "shape_changes": o["shape_changes"], "cut": o["cut"], "kind": o["kind"],
             "graph_kernel_nodes": _known(graph_nodes(n)) if o["kind"] == "graph" else None}
            for n, o in sorted(tot.items(), key=lambda no: (-no[1]["launches"], no[0]))]


def _known(n: int | None) -> int | None:
    return None if n is None or n < 0 else n


def graphs_line(rows: list) -> str:
    """The graphs' launches and the kernel nodes they ran, "" when none."""
    graphs = [(graph_nodes(n), o["launches"]) for n, o in rows if o["kind"] == "graph"]
    if not graphs:
        return ""
    ran = sum(n * launches for n, launches in graphs if n is not None and n >= 0)
    unknown = sum(launches for n, launches in graphs if n is None or n < 0)
    return (f"  graph launches {sum(la for _, la in graphs):,}: {ran:,} kernel nodes run by "
            "them (their kernels not named)" + (
                f", and {unknown:,} of graphs whose kernel nodes are not known" if unknown
                else ""))


def collective_line(c: dict, mangled: bool = False) -> str:
    return (f"rank {shown(c['rank'], CUT)} launched {kernel_text(c['kernel'], mangled)} "
            f"{c['launches']:,} times, the other {c['other_ranks']} rank"
            f"{'s' if c['other_ranks'] > 1 else ''} {c['others']:,}")


def kernels_section(g: Group, mangled: bool = False) -> list[str]:
    tot = totals(g)
    if not tot:
        return []
    rows = sorted(((n, o) for n, o in tot.items() if o["launches"]),
                  key=lambda no: (-no[1]["launches"], no[0]))
    unlaunched = len(tot) - len(rows)
    launches = sum(o["launches"] for _, o in rows)
    gpu = gputime.summary(g)
    busy = sum(o["gpu_ns"] for _, o in rows)
    gpu_head = (f"{'gpu us':>10}  {'p50 us':>8}  {'p99 us':>8}  {'share':>6}  " if gpu
                else "")
    lines = ["", f"kernels    {len(rows)}, {launches:,} launches (host time: of the launch "
             "calls)", *(gputime.summary_lines(gpu, busy) if gpu else ()),
             f"  {'launches':>10}  {'host us':>10}  {gpu_head}{'grid / block (last)':<24} "
             "kernel"]
    for name, o in rows[:SHOWN]:
        host = f"{o['host_ns'] / 1e3:.1f}" if o["timed"] else "-"
        host = f"{host:>10}"
        shapes = sorted(o["shapes"])
        shape = (f"{_shape(shapes[-1][0])} / {_shape(shapes[-1][1])}" if shapes else "-")
        if o["shape_changes"]:
            shape += f" (+{o['shape_changes']})"
        if gpu:
            f = gputime.row_fields(o, busy)
            share = "-" if f["gpu_share"] is None else f"{100 * f['gpu_share']:.1f}%"
            host += (f"  {gputime.us(f['gpu_total_ns']):>10}  {gputime.us(f['gpu_p50_ns']):>8}"
                     f"  {gputime.us(f['gpu_p99_ns']):>8}  {share:>6}")
        lines.append(f"  {o['launches']:>10,}  {host}  {shape:<24} "
                     f"{row_text(name, o, mangled)}")
    if len(rows) > SHOWN:
        lines.append(f"  ... and {len(rows) - SHOWN} more")
    if graphs := graphs_line(rows):
        lines.append(graphs)
    if unlaunched:
        lines.append(f"  ({unlaunched:,} kernel{'s' if unlaunched > 1 else ''} the program "
                     "got a handle of but never launched: not listed, in the JSON with 0 "
                     "launches)")
    for c in collectives(g):
        lines.append("  " + collective_line(c, mangled))
    return lines


def last_launch_text(p, mangled: bool = False) -> str:
    """A process's (trace/job.py ProcNow) latest launch, for the in-flight lines: "stream
    0x5 last ran NAME (#4812), launched 40.2 s ago"; "" when none is known."""
    if not p.launches:
        return ""
    la = p.launches[0]
    ago = "" if la.seconds is None else f", launched {la.seconds:.1f} s ago"
    return (f"{stream_text(la.stream)} last ran {kernel_text(la.kernel, mangled, la.cut)} "
            f"(#{la.ordinal}){ago}")


def by_kernel(g: Group) -> Group:
    """`--by kernel`: the group with its launch functions' rows (KERN_LAUNCH_FUNCTIONS)
    replaced by a row per kernel launched, named as the kernels section names it: its
    launches and the host time of their launch calls; no percentiles, maximum or errors (a
    refused launch is counted by function only)."""
    none = [t.path for t in g.processes if getattr(t, "kernels", None) is None]
    if none:
        raise ShimgenError(f"report: --by kernel needs every trace's kernels (a binary trace "
                           f"of format 7 or later, traced into a directory); {none[0]} has "
                           "none")
    functions = {n: m for n, m in g.functions.items() if n not in KERN_LAUNCH_FUNCTIONS}
    for name, o in (totals(g) or {}).items():
        if not o["launches"]:
            continue
        m = Merged()
        m.calls = o["launches"]
        m.errors_known = False
        if o["timed"]:
            m.timed_calls, m.total_ns = o["launches"], o["host_ns"]
        functions[f"launches of {row_text(name, o)}"] = m
    return Group(g.key, g.processes, functions, g.procs)
