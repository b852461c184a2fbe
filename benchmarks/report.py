"""The performance bars checked against a run, and the table printed on stdout."""

from __future__ import annotations

CHEAP = ("cuDriverGetVersion", "cuCtxGetCurrent")
CALL_BARS = (  # (variant, what, limit in ns added per call)
    ("shim", "forwarding a cheap call, no tracing", 1.0),
    ("count", "the same with call counting (SHIMGEN_TRACE=1)", 5.0),
    ("time", "the same with per-call timing (SHIMGEN_TRACE=time)", 40.0),
)
STARTUP_BAR_MS = 5.0
BUILD_BAR_S = 3.0
GPU_BAR = 1.01


def _worst_call(result: dict, variant: str) -> tuple[float, float | None, str] | None:
    """Largest median added ns over drivers and cheap functions, with the instructions
    added there, and where."""
    worst = None
    for d in result["drivers"]:
        if variant not in d["variants"]:
            continue
        for func in CHEAP:
            e = d["calls"][func]["variants"][variant]
            added = e.get("added_in_process_ns", e["added_ns"])["median"]
            instr = None
            if d.get("instructions"):
                instr = d["instructions"][func][variant]["added"]
            if worst is None or added > worst[0]:
                worst = (added, instr, f"{d['version']} {func}")
    return worst


def bars(result: dict) -> list[dict]:
    out = []
    for variant, what, limit in CALL_BARS:
        worst = _worst_call(result, variant)
        if worst is None:
            reasons = {d["time_mode"]["reason"] for d in result["drivers"]} - {None}
            out.append({"bar": what, "limit": limit, "unit": "ns/call added", "measured": None,
                        "met": None, "detail": "unavailable: " + "; ".join(sorted(reasons))})
            continue
        added, instr, where = worst
        met = added <= limit
        detail = f"worst median (in-process pairs) at {where}"
        if instr is not None:
            detail += f"; {instr:g} instructions added per call (callgrind)"
        if variant == "time":
            floors = [d["clock_floor"]["tsc2_added_ns"]["median"] for d in result["drivers"]
                      if d.get("clock_floor")]
            if floors:
                detail += (f"; two inline rdtsc around a direct call add {max(floors):.2f} ns "
                           f"here (the floor)")
        if variant in ("count", "time"):
            exact = all(d["threads"]["by_variant"][variant].get("exact")
                        for d in result["drivers"])
            detail += f"; counts exact with {result['settings']['threads']} threads: " + (
                "yes" if exact else "NO")
            met = met and exact
        out.append({"bar": what, "limit": limit, "unit": "ns/call added",
                    "measured": added, "met": met, "detail": detail})

    worst_start = max(
        ((d["startup"][p]["added_ms"]["median"], f"{d['version']} start{p}")
         for d in result["drivers"] for p in ("nop", "call")), default=None)
    if worst_start:
        out.append({"bar": "process start-up added by the shim", "limit": STARTUP_BAR_MS,
                    "unit": "ms", "measured": worst_start[0],
                    "met": worst_start[0] <= STARTUP_BAR_MS,
                    "detail": f"worst median at {worst_start[1]}"})
    worst_build = max(
        ((d["build"]["wall_s"]["median"], d["version"], d["build"]["functions"])
         for d in result["drivers"]), default=None)
    if worst_build:
        cpus = result["machine"]["cpus_usable"]
        out.append({"bar": f"shimgen build wall time ({cpus} CPUs)", "limit": BUILD_BAR_S,
                    "unit": "s", "measured": worst_build[0],
                    "met": worst_build[0] <= BUILD_BAR_S,
                    "detail": f"worst median at {worst_build[1]} "
                              f"({worst_build[2]} functions)"})
    out.append(gpu_bar(result.get("gpu_step")))
    return out


def gpu_bar(g: dict | None) -> dict:
    """The PyTorch step bar from --gpu's results: the worst ratio of medians over configs."""
    bar = {"bar": "PyTorch training step on the H200, shim vs none", "limit": GPU_BAR,
           "unit": "ratio", "measured": None, "met": None}
    if g is None:
        return {**bar, "detail": "not measured: run with --gpu on a GPU machine"}
    if "skipped" in g:
        return {**bar, "detail": f"skipped: {g['skipped']}"}
    worst = max(g["configs"].items(), key=lambda kv: kv[1]["ratio_of_medians"])
    ratio = worst[1]["ratio_of_medians"]
    return {**bar, "measured": round(ratio, 4), "met": ratio <= GPU_BAR,
            "detail": f"worst ratio of medians at config {worst[0]}, {g['runs']} interleaved "
                      f"runs of {g['steps']} steps each on {g.get('device')}"}


def _ns(s: dict, digits: int = 2) -> str:
    return f"{s['median']:.{digits}f} [{s['p25']:.{digits}f}..{s['p75']:.{digits}f}]"


def _signed(s: dict, digits: int = 2) -> str:
    return f"{s['median']:+.{digits}f} [{s['p25']:+.{digits}f}..{s['p75']:+.{digits}f}]"


def _count(x: float | None) -> str:
    """Instructions per call: an integer when the count is exact (it should be)."""
    if x is None:
        return ""
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.2f}"


def table(result: dict) -> str:
    st = result["settings"]
    lines = _header_lines(result)
    for d in result["drivers"]:
        lines += _driver_lines(d, st)
    if result.get("gpu_step", {}).get("table"):
        lines += ["", "== PyTorch training step (benchmarks/gpu_step.py) ==",
                  result["gpu_step"]["table"]]
    lines += ["", "== bars =="]
    lines += _bar_lines(result["bars"])
    lines.append(f"\ntook {result.get('seconds', '?')} s")
    return "\n".join(lines)


def _header_lines(result: dict) -> list[str]:
    """The command, the commit, the machine and how calls and instructions were measured."""
    st = result["settings"]
    m = result["machine"]
    lines = [
        f"shimgen benchmark ({'quick' if st['quick'] else 'full'}): {result['command']}",
        f"shimgen {result.get('shimgen_commit') or '(commit unknown)'}; machine: {m['cpu']} "
        f"(family/model {m['cpu_family_model']}, {m['cpu_mhz']} MHz"
        f"{', virtualized' if m['virtualized'] else ''}), {m['cpus_usable']} usable CPUs, "
        f"kernel {m['kernel']}, load {m['loadavg_start'][0]} -> "
        f"{m.get('loadavg_end', ['?'])[0]}",
        f"calls: median [p25..p75] of {st['repeats']} interleaved rounds, each the fastest of "
        f"{st['inner_reps']} x {st['iters']} calls; added and ratio paired with direct"
        + ("" if st.get("pin") is None else f"; on CPU {st['pin']} alone (--pin)"),
    ]
    meth = result["method"]
    lines.append("instructions: " + (
        f"callgrind, exact (perf: {meth['perf_stat_instructions']})"
        if meth["instructions"] else f"unavailable ({meth['instructions_unavailable']})"))
    return lines


def _driver_lines(d: dict, st: dict) -> list[str]:
    """One driver's section: its build, the call table, the clock floor, threads, start-up."""
    b = d["build"]
    lines = [
        "",
        f"== driver {d['version']} ({b['functions']} functions) ==",
        f"shimgen build: {b['wall_s']['median']:.2f} s wall (median of {b['wall_s']['n']})",
    ]
    if not d["time_mode"]["available"]:
        lines.append(f"time variant unavailable: {d['time_mode']['reason']}")
    lines += _call_lines(d)
    fl = d.get("clock_floor")
    if fl:
        lines.append(f"clock floor: two inline rdtsc around a direct {fl['function']} add "
                     f"{_signed(fl['tsc2_added_ns'])} ns, one adds "
                     f"{_signed(fl['tsc1_added_ns'])} (benchmarks/c/clockfloor.c)")
    return lines + _thread_lines(d["threads"], st) + _startup_lines(d["startup"])


def _call_lines(d: dict) -> list[str]:
    """The per-call table: one row per function and variant."""
    hdr = (f"{'function':<24}{'variant':<8}{'ns/call':>22}{'added ns':>24}{'ratio':>8}"
           f"{'added in process':>26}{'instr':>8}{'+instr':>8}")
    lines = [hdr, "-" * len(hdr)]
    for func, c in d["calls"].items():
        label = func + (" (hook)" if c["hooked"] else "")
        for i, v in enumerate(d["variants"]):
            e = c["variants"][v]
            ins = (d["instructions"] or {}).get(func, {}).get(v, {})
            col1 = label if i == 0 else (f"  rc {c['rc']}" if i == 1 else "")
            lines.append(
                f"{col1:<24}{v:<8}{_ns(e['ns_per_call']):>22}"
                f"{_signed(e['added_ns']) if 'added_ns' in e else '':>24}"
                f"{e['ratio']['median'] if 'ratio' in e else 1.0:>8.3f}"
                f"{_signed(e['added_in_process_ns']) if 'added_in_process_ns' in e else '':>26}"
                f"{_count(ins.get('per_call')):>8}{_count(ins.get('added')):>8}")
    return lines


def _thread_lines(t: dict, st: dict) -> list[str]:
    """The threads' run: calls made, wrong results, wall time and the counts of each variant."""
    lines = [f"{st['threads']} threads x {st['thread_calls']} calls of {t['function']}:"]
    for v, e in t["by_variant"].items():
        counted = (f"counted {e['calls_counted']} -> "
                   f"{'exact' if e['exact'] else 'NOT EXACT'}" if "exact" in e else
                   "(not counted)")
        extra = ""
        if e.get("timed_calls") is not None:
            extra = f", timed {e['timed_calls']}, untimed {e.get('untimed_calls')}"
        lines.append(f"  {v:<6} made {e['calls_made']}, wrong results {e['bad_results']}, "
                     f"{e['wall_ns_per_call']:.2f} ns/call (wall, all threads), "
                     f"{counted}{extra}")
    return lines


def _startup_lines(su: dict) -> list[str]:
    """Process start-up without and with the shim."""
    lines = [f"start-up, ms per process (median [p25..p75] of {su['rounds']}):"]
    for p, what in (("nop", "startnop  (no driver call)"),
                    ("call", "startcall (one cuDriverGetVersion)")):
        e = su[p]
        lines.append(f"  {what:<36} direct {_ns(e['direct_ms'], 3)}  "
                     f"shim {_ns(e['shim_ms'], 3)}  added {_signed(e['added_ms'], 3)}")
    return lines


def _bar_lines(bar_list: list[dict]) -> list[str]:
    """One line per bar: met or not, its limit, what was measured and where."""
    lines = []
    for bar in bar_list:
        limit = f"{bar['limit']:g} {bar['unit']}"
        measured = "-" if bar["measured"] is None else f"{bar['measured']:g}"
        met = {True: "met", False: "NOT MET", None: "n/a"}[bar["met"]]
        lines.append(f"  {bar['bar']:<52} {met:<8} limit {limit:<18} measured {measured:<8} "
                     f"{bar['detail']}")
    return lines
