"""Summaries of repeated measurements: median and spread, never a mean alone."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def summary(values: Sequence[float], digits: int = 3) -> dict:
    """Median, quartiles (p25, p75), min, max and count of `values`, rounded."""
    vals = sorted(float(v) for v in values)
    if not vals:
        return {"n": 0}
    if len(vals) >= 2:
        p25, _, p75 = statistics.quantiles(vals, n=4, method="inclusive")
    else:
        p25 = p75 = vals[0]
    return {
        "median": round(statistics.median(vals), digits),
        "p25": round(p25, digits),
        "p75": round(p75, digits),
        "min": round(vals[0], digits),
        "max": round(vals[-1], digits),
        "n": len(vals),
    }


def finite(s: dict) -> bool:
    return s.get("n", 0) > 0 and all(
        math.isfinite(s[k]) for k in ("median", "p25", "p75", "min", "max")
    )
