"""A binary trace file's clock: nanoseconds per tick from the pairs of clock readings its
header keeps (docs/traceformat.md, "Times"), read by binary.py and inflight.py."""

from __future__ import annotations

# ns per tick a tick counter can have (20 GHz to 10 MHz: a TSC, or an aarch64 generic
# counter, 1 GHz on Armv8.6 and later, 62.5 MHz under qemu-user, 25 MHz on some older
# cores): anything else is a torn or corrupt pair.
NS_PER_TICK_RANGE = (0.05, 100.0)
# A calibration less exact than this is used, with a note saying how exact it is.
CALIBRATION_NOTE_ABOVE = 0.001


def pair_rate(h: dict, end: str) -> tuple[float, float] | None:
    """ns per tick from pair 0 to pair `end` ("1" or "_a"), and its relative uncertainty
    (the two readings' widths over the span); None when the pair cannot be one."""
    dns = h["calib_ns" + end] - h["calib_ns0"]
    dt = h["calib_ticks" + end] - h["calib_ticks0"]
    if dns <= 0 or dt <= 0:
        return None
    k = dns / dt
    if not NS_PER_TICK_RANGE[0] <= k <= NS_PER_TICK_RANGE[1]:
        return None
    return k, (h["calib_width0"] + h["calib_width" + end]) / dt


def calibration(h: dict) -> tuple[float | None, str]:
    """ns per tick: from pair 0 to pair 1 (the latest, the longest span), unless pair 1 was
    being rewritten when the process died (calib_seq odd) or is no pair; then pair a (made
    with the file, exact to a part in several thousand). docs/traceformat.md."""
    best = pair_rate(h, "1") if h["calib_seq"] % 2 == 0 else None
    a = pair_rate(h, "_a")
    if best is None or (a is not None and a[1] < best[1]):
        best = a
    if best is None:
        return None, "no times: its clock readings are corrupt"
    k, uncertainty = best
    if uncertainty > CALIBRATION_NOTE_ABOVE:
        return k, f"times are exact to {100 * uncertainty:.2g}% only (a short calibration)"
    return k, ""
