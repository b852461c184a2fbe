"""The arithmetic of the NCCL all-reduce benchmark (benchmarks/allreduce.py), kept apart so that
it is tested on the CPU: sizes and bandwidths, one launch's statistics, the interleaved rounds
aggregated into ratios with their spread, per-rank trace files, and the driver calls made per
all-reduce as the traced launches count them."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

MiB = 1 << 20
# A size decides the bars only when the no-shim launches agree within this fraction of their
# median (max - min): a baseline that swings more than the widest bar (2%) cannot show
# whether a variant is 1% or 2% slower. On 2 x H200 the CPU-bound 1 and 4 MiB all-reduces
# swing by 20 to 60% between launches; 16 MiB to 1 GiB stay within about 1%.
NOISE_LIMIT = 0.02
# variant -> (label, SHIMGEN_TRACE value or None for no tracing, bar: busbw / no shim)
VARIANTS = {
    "direct": ("no shim", None, None),
    "shim": ("shim", None, 0.99),
    "count": ("shim + SHIMGEN_TRACE=1", "1", 0.99),
    "time": ("shim + SHIMGEN_TRACE=time", "time", 0.98),
}


def busbw_factor(n: int) -> float:
    """nccl-tests' all-reduce factor: each rank sends and receives 2(n-1)/n of the data."""
    if n < 1:
        raise ValueError(f"world size must be at least 1, got {n}")
    return 2 * (n - 1) / n


def algbw(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s)."""
    return size_bytes / seconds / 1e9


def busbw(size_bytes: int, seconds: float, n: int) -> float:
    return algbw(size_bytes, seconds) * busbw_factor(n)


def parse_size(text: str) -> int:
    """'1M', '256K', '1G', '1048576' -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 1M, 64M, 1G)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def sizes(min_bytes: int, max_bytes: int, factor: int = 4) -> list[int]:
    """min, min*factor, ... up to max (inclusive), each a multiple of 4 bytes (float32)."""
    if factor < 2 or min_bytes < 4 or min_bytes % 4 or max_bytes < min_bytes:
        raise ValueError(f"bad size range {min_bytes}..{max_bytes} x{factor}")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out


def human(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def iterations(size: int, block_bytes: int = 8 << 30, lo: int = 5, hi: int = 200) -> int:
    """All-reduces per timed block: about block_bytes of data, at least lo, at most hi."""
    return max(lo, min(hi, -(-block_bytes // size)))


def round_order(rnd: int, variants: list[str]) -> list[str]:
    """The launch order of round `rnd`: the variants rotated by one place per round, so that
    over len(variants) rounds each variant takes each position once."""
    k = rnd % len(variants)
    return variants[k:] + variants[:k]


def rank_cpus(allowed: list[int], local: int, nproc: int, k: int) -> list[int]:
    """The CPUs of local rank `local` when each of `nproc` ranks gets `k` of its own: the
    k-th slice of the allowed set; fewer when there are not enough (never an empty set)."""
    if k < 1 or not allowed:
        raise ValueError(f"cannot give {k} CPUs of {allowed} to each rank")
    k = min(k, max(1, len(allowed) // nproc))
    start = (local * k) % len(allowed)
    return allowed[start:start + k]


def launch_stats(ranks: list[dict]) -> dict:
    """One launch's per-rank results -> {size: {seconds, algbw, busbw, blocks}}: the time of
    a block is the slowest rank's; the launch's time is the median of its blocks."""
    if not ranks:
        raise ValueError("no rank results")
    n = ranks[0]["world_size"]
    if len(ranks) != n or sorted(r["rank"] for r in ranks) != list(range(n)):
        raise ValueError(f"expected ranks 0..{n - 1}, got {sorted(r['rank'] for r in ranks)}")
    out = {}
    for key in ranks[0]["sizes"]:
        per_rank = [r["sizes"][key]["block_seconds"] for r in ranks]
        if len({len(b) for b in per_rank}) != 1:
            raise ValueError(f"size {key}: ranks timed different numbers of blocks")
        blocks = [max(col) for col in zip(*per_rank, strict=True)]
        sec = statistics.median(blocks)
        size = int(key)
        out[size] = {"seconds": sec, "algbw": algbw(size, sec), "busbw": busbw(size, sec, n),
                     "blocks": blocks, "iters": ranks[0]["sizes"][key]["iters"]}
        host = [r["sizes"][key].get("host_seconds") for r in ranks]
        if all(host):  # the slowest rank's median time to issue one all-reduce
            out[size]["host_seconds"] = max(statistics.median(h) for h in host)
    return out


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": values}


def aggregate(launches: list[dict]) -> dict:
    """Launches ({variant, round, stats}) -> per size: the median busbw of no shim and of each
    other variant with its spread, the ratio of medians (variant / no shim), the per-round
    paired ratios (median, min, max) and whether the variant's bar is met."""
    by: dict[str, dict[int, dict[int, float]]] = {}
    host: dict[str, dict[int, list[float]]] = {}
    for ln in launches:
        for size, s in ln["stats"].items():
            by.setdefault(ln["variant"], {}).setdefault(int(size), {})[ln["round"]] = s["busbw"]
            if "host_seconds" in s:
                host.setdefault(ln["variant"], {}).setdefault(int(size), []).append(
                    s["host_seconds"])
    out: dict = {}
    for size in sorted(by.get("direct", {})):
        d = by["direct"][size]
        md = statistics.median(d.values())
        row: dict = {"direct": _spread([d[r] for r in sorted(d)])}
        row["direct"]["range"] = (row["direct"]["max"] - row["direct"]["min"]) / md
        row["direct"]["resolved"] = row["direct"]["range"] <= NOISE_LIMIT
        for variant, (_, _, bar) in VARIANTS.items():
            v = by.get(variant, {}).get(size)
            if variant == "direct" or not v:
                continue
            rounds = sorted(set(d) & set(v))
            paired = [v[r] / d[r] for r in rounds]
            ratio = statistics.median(v.values()) / md
            row[variant] = {**_spread([v[r] for r in sorted(v)]), "ratio": ratio,
                            "paired": _spread(paired) if paired else None,
                            "bar": bar, "met": ratio >= bar}
        for variant, v in row.items():
            h = host.get(variant, {}).get(size)
            if h:  # median time to issue one all-reduce on the host, over the launches
                v["host_us"] = statistics.median(h) * 1e6
        out[size] = row
    return out


def all_met(summary: dict) -> bool:
    """Every bar met at every size that can decide it (at least one size must)."""
    rows = [v for row in summary.values() if row["direct"]["resolved"]
            for k, v in row.items() if k != "direct"]
    return bool(rows) and all(v["met"] for v in rows)


def format_table(summary: dict) -> str:
    """One line per size and variant: busbw median [min..max], ratio of medians, paired
    ratios median [min..max], the bar and whether it is met."""
    lines = [f"{'size':>8}  {'variant':<26}{'busbw GB/s':>10}  {'min..max':>17}  "
             f"{'issue us':>8}  {'ratio':>6}  {'paired [min..max]':>24}  {'bar':>4}  met"]
    for size, row in sorted(summary.items()):
        decides = row["direct"]["resolved"]
        for variant, v in row.items():
            label = VARIANTS[variant][0]
            hu = f"{v['host_us']:.1f}" if "host_us" in v else "-"
            line = (f"{human(size):>8}  {label:<26}{v['median']:>10.2f}  "
                    f"{v['min']:>8.2f}..{v['max']:<7.2f}  {hu:>8}")
            if variant == "direct" and not v["resolved"]:
                line += f"  (range {v['range']:.0%} of the median: decides no bar)"
            if variant != "direct":
                p = v["paired"]
                pr = "-" if p is None else (f"{p['median']:.4f} [{p['min']:.4f}.."
                                            f"{p['max']:.4f}]")
                verdict = ("yes" if v["met"] else "NO") if decides else "undecided"
                line += f"  {v['ratio']:>6.4f}  {pr:>24}  {v['bar']:>4}  {verdict}"
            lines.append(line.rstrip())
    lines.append("busbw: median over rounds [min..max]; issue us: median host time to issue "
                 "one all-reduce; ratio = median of the variant / median without the shim; "
                 "paired = per-round ratios, median [min..max]; a size decides the bars when "
                 f"its no-shim range is within {NOISE_LIMIT:.0%} of the median")
    return "\n".join(lines)


def check_traces(trace_dir: Path, ranks: list[dict]) -> dict:
    """Per-rank trace files of one traced launch: one file per rank (matched by the pid in
    the file), N distinct files, named trace.<rank>.json or not; merged call counts."""
    files = sorted(p for p in trace_dir.iterdir() if p.is_file()) if trace_dir.is_dir() else []
    by_pid: dict[int, list[Path]] = {}
    unreadable = []
    contents: dict[Path, dict] = {}
    for f in files:
        try:
            data = json.loads(f.read_text())
            contents[f] = data
            by_pid.setdefault(int(data["pid"]), []).append(f)
        except (OSError, ValueError, KeyError, TypeError):
            unreadable.append(f.name)
    per_rank: dict = {}
    merged: dict[str, int] = {}
    for r in sorted(ranks, key=lambda r: r["rank"]):
        matched = by_pid.get(int(r["pid"]), [])
        entry: dict = {"pid": r["pid"], "files": [f.name for f in matched]}
        if len(matched) == 1:
            data = contents[matched[0]]
            calls = data.get("calls", {})
            entry["calls"] = sum(calls.values())
            entry["functions"] = len(calls)
            entry["cuInit"] = calls.get("cuInit", 0)
            entry["top"] = sorted(calls.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
            if "allreduces" in r:
                entry["allreduces"] = r["allreduces"]
                entry["calls_per_allreduce"] = entry["calls"] / r["allreduces"]
            if "time" in data:
                entry["driver_ns"] = sum(t["total_ns"] for t in data["time"].values())
            for k, v in calls.items():
                merged[k] = merged.get(k, 0) + v
        per_rank[str(r["rank"])] = entry
    n = len(ranks)
    one_each = all(len(e["files"]) == 1 for e in per_rank.values())
    distinct = len({f for e in per_rank.values() for f in e["files"]})
    rank_named = one_each and all(e["files"][0] == f"trace.{rk}.json"
                                  for rk, e in per_rank.items())
    rank_pids = {int(r["pid"]) for r in ranks}
    others = [f.name for pid, fs in by_pid.items() if pid not in rank_pids for f in fs]
    ok = one_each and distinct == n and rank_named
    why = ("" if ok else
           "a rank wrote no trace file" if not all(e["files"] for e in per_rank.values()) else
           "a rank wrote more than one file" if not one_each else
           "files not distinct" if distinct != n else
           "files are per process but not named trace.<rank>.json")
    return {"ok": ok, "why": why, "world_size": n, "files": [f.name for f in files],
            "distinct_rank_files": distinct, "rank_named": rank_named, "per_rank": per_rank,
            "other_files": others, "unreadable": unreadable,
            "merged_calls": dict(sorted(merged.items(), key=lambda kv: (-kv[1], kv[0])))}


def call_budget(traces: dict, summary: dict, per_call_ns: dict[str, float]) -> dict:
    """What tracing can cost per all-reduce: the calls the busiest rank made per all-reduce
    (an upper bound: set-up calls and other threads' calls are included) times the measured
    cost of one traced call, against the time of one all-reduce of each size without the
    shim. Returns {variant: {calls_per_allreduce, per_call_ns, {size: expected ratio}}}."""
    out: dict = {}
    for variant, t in traces.items():
        per = [e["calls_per_allreduce"] for e in t["per_rank"].values()
               if "calls_per_allreduce" in e]
        if not per or variant not in per_call_ns:
            continue
        calls = max(per)
        cost_s = calls * per_call_ns[variant] * 1e-9
        expected = {}
        for size, row in summary.items():
            d = row["direct"]["median"]  # busbw, GB/s
            n = t["world_size"]
            seconds = size * busbw_factor(n) / (d * 1e9)
            expected[size] = seconds / (seconds + cost_s)
        out[variant] = {"calls_per_allreduce": calls, "per_call_ns": per_call_ns[variant],
                        "expected_ratio": expected}
    return out
