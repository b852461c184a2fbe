"""The first number of `report --calls`'s lines, as `--times` chooses it (seconds since the
run's first process began tracing, since the line before as strace -r gives them, or the
time of day as strace -tt), and the key line above the lines that says what each part of a
line is."""

from __future__ import annotations

# The key printed above the lines: what each part of a line is, the first number as --times
# chose it.
TIMES = {"start": "seconds since the run's first process began tracing",
         "relative": "seconds since the line before (--times relative)",
         "absolute": "the time of day it began, local time (--times absolute)"}


def key_line(times: str) -> str:
    return (f"key        TIME [THREAD] FUNCTION(ARGUMENTS) = RESULT {{OUTPUTS}} DURATION; TIME: "
            f"{TIMES[times]}; THREAD: its thread id; DURATION: none for a call that did not "
            "return")


def retimed(lines, times: str, real_zero_ns: int):
    """The lines (each starting with its seconds since the run's first process, as lines()
    gives them) with the first number `times` asks for."""
    if times == "start":
        yield from lines
        return
    import time

    before = None
    for line in lines:
        t_text, rest = line.split(" ", 1)
        t = float(t_text)
        if times == "relative":
            yield f"{0.0 if before is None else t - before:.6f} {rest}"
            before = t
        else:
            ns = real_zero_ns + round(t * 1e9)
            clock = time.strftime("%H:%M:%S", time.localtime(ns // 1_000_000_000))
            yield f"{clock}.{ns % 1_000_000_000 // 1000:06d} {rest}"
