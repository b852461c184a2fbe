"""GPU time per kernel in the report (docs/report.md, "GPU time per kernel"): per kernel
name, from each process's timed launches (trace/kernels.py GpuTimes, a version 8 trace of a
run with `--gpu-time`), the GPU ns in all, the mean, the 50th and 99th percentiles and the
share of the group's GPU busy time (the sum over its kernels); the launches not timed, per
kernel and by reason for the group; the sampling. A total, a count, a mean and a maximum are
exact (each launch's time is the driver's cuEventElapsedTime, a float of ms, rounded to the
ns); a percentile is read from the histogram, KGPU_SUB buckets per power of two, within the
bucket's range and never outside the least and most the launches can be
(`bounded_percentiles`): within 25% of the launch it names, exact where a kernel's launches
all took one time."""

from __future__ import annotations

from ..runenv import KGPU_BUCKETS, KGPU_EVERY, KGPU_NOT, KGPU_SUB, KGPU_SUB_SHIFT
from .model import Group, bounded_percentiles

# How the text says each reason a launch was not timed (runenv.KGPU_NOT).
NOT_TEXT = {"sampled": "skipped by the sampling", "capture": "into a stream capture",
            "refused": "events refused by the driver", "pool": "no free event pair",
            "context": "context destroyed first", "unfinished": "still running at exit"}
assert set(NOT_TEXT) == set(KGPU_NOT)


def bucket_range(b: int) -> tuple[int, int]:
    """Bucket b's ns, [lo, hi) (runenv.KGPU_BUCKETS says how a launch is put in one)."""
    if b < KGPU_SUB:
        return b, b + 1
    sh = (b >> KGPU_SUB_SHIFT) - 1
    lo = ((b & (KGPU_SUB - 1)) | KGPU_SUB) << sh
    return lo, lo + (1 << sh)


def add(o: dict, gpu) -> None:
    """One process's GpuTimes of a kernel into its row of report/kernels.py's totals."""
    o["gpu"] = True
    o["gpu_ns"] += gpu.ns
    o["gpu_timed"] += gpu.timed
    o["gpu_max"] = max(o["gpu_max"], gpu.max_ns)
    for b, c in enumerate(gpu.hist):
        if c:
            lo, hi = bucket_range(b)
            # (the last bucket also holds every longer launch: up to the longest)
            o["gpu_segments"].append((lo, max(hi, gpu.max_ns) if b == KGPU_BUCKETS - 1
                                      else hi, c))


def row_fields(o: dict, busy: int) -> dict:
    """A kernel's GPU fields for the JSON (None where GPU time was not on)."""
    if not o["gpu"]:
        return dict.fromkeys(("gpu_total_ns", "gpu_timed", "gpu_not_timed", "gpu_mean_ns",
                              "gpu_p50_ns", "gpu_p99_ns", "gpu_max_ns", "gpu_share"))
    n = o["gpu_timed"]
    p50, p99 = bounded_percentiles(o["gpu_segments"], (0.5, 0.99), n, o["gpu_ns"],
                                   o["gpu_max"]) if n else (None, None)
    return {"gpu_total_ns": o["gpu_ns"], "gpu_timed": n,
            "gpu_not_timed": max(0, o["launches"] - n),
            "gpu_mean_ns": round(o["gpu_ns"] / n) if n else None,
            "gpu_p50_ns": None if p50 is None else round(p50),
            "gpu_p99_ns": None if p99 is None else round(p99),
            "gpu_max_ns": o["gpu_max"] if n else None,
            "gpu_share": o["gpu_ns"] / busy if busy else None}


def summary(g: Group) -> dict | None:
    """The group's GPU time: the sampling of each process (distinct values), the launches not
    timed by reason, the pairs never resolved (a process killed), the busy ns; None when no
    process of the group had it on."""
    tables = [t.kernels for t in g.processes
              if getattr(t, "kernels", None) is not None and t.kernels.gpu_every]
    if not tables:
        return None
    return {"every": sorted({t.gpu_every for t in tables}),
            "not_timed": {r: sum(t.gpu_not.get(r, 0) for t in tables) for r in KGPU_NOT},
            "pending": sum(t.gpu_pending for t in tables)}


def summary_lines(s: dict, busy: int) -> list[str]:
    """The text's lines of the group's GPU time."""
    every = ", ".join(f"1 launch in {n} ({KGPU_EVERY}{n})" if n > 1 else "every launch"
                      for n in s["every"])
    lines = [f"  GPU time   {busy / 1e3:,.1f} us busy in all; timed: {every} "
             "(p50/p99 from a histogram: within 25%)"]
    nots = [f"{NOT_TEXT[r]} {n:,}" for r, n in s["not_timed"].items() if n]
    if nots:
        lines.append("  not timed  " + ", ".join(nots))
    if s["pending"]:
        lines.append(f"  not timed  {s['pending']:,} launches never resolved (the process "
                     "ended without its exit)")
    return lines


def us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e3:.1f}"
