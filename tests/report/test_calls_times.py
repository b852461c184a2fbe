"""`report --calls`: a key line above the lines says what each part of a line is, and
`--times` chooses the first number as strace does: seconds since the run's first process
began tracing (the default), since the line before (`relative`, strace -r), or the time of
day (`absolute`, strace -tt). A real driver without a GPU, in calls mode."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from shimgen.report.calls_times import key_line
from tests.badinput import assert_one_line_error
from tests.faultkit import run

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ("import ctypes, time\n"
           "lib = ctypes.CDLL('libcuda.so.1')\n"
           "v = ctypes.c_int()\n"
           "for _ in range(5):\n"
           "    lib.cuDriverGetVersion(ctypes.byref(v)); time.sleep(0.01)\n"
           "lib.cuInit(0)\n")


@pytest.fixture(scope="module")
def traced(shims, tmp_path_factory) -> tuple[Path, float, float]:
    d = tmp_path_factory.mktemp("callstimes")
    before = time.time()
    run([sys.executable, "-c", PROGRAM],
        shims[-1].env(SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR=str(d / "traces"),
                      SHIMGEN_CALLS_RING="1024"))
    return d, before, time.time()


def report(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shimgen", "report", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def calls(run_dir: Path, *args) -> tuple[list[str], list[str]]:
    """(the lines before the calls, the calls' lines)."""
    proc = report("--calls", *args, run_dir)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    first = next(i for i, ln in enumerate(lines) if "cuDriverGetVersion(" in ln)
    return lines[:first], lines[first:]


def test_the_key_is_above_the_lines_and_says_what_the_first_number_is(traced):
    head, lines = calls(traced[0])
    assert head[-1] == key_line("start") and "seconds since the run's first" in head[-1]
    assert len(lines) == 6 and all(" [" in ln for ln in lines), lines
    head, _ = calls(traced[0], "--times", "relative")
    assert head[-1] == key_line("relative") and "since the line before" in head[-1]


def test_relative_times_are_the_gaps_between_the_lines(traced):
    _, lines = calls(traced[0])
    _, relative = calls(traced[0], "--times", "relative")
    starts = [float(ln.split()[0]) for ln in lines]
    gaps = [float(ln.split()[0]) for ln in relative]
    assert gaps[0] == 0.0 and all(g >= 0.009 for g in gaps[1:5]), gaps  # the sleeps
    for a, b, gap in zip(starts, starts[1:], gaps[1:], strict=False):
        assert abs((b - a) - gap) <= 2e-6, (a, b, gap)
    assert [ln.split(" ", 1)[1] for ln in relative] == [ln.split(" ", 1)[1] for ln in lines]


def test_absolute_times_are_the_time_of_day_of_each_call(traced):
    run_dir, before, after = traced
    _, lines = calls(run_dir, "--times", "absolute")
    _, start = calls(run_dir)
    for line, plain in zip(lines, start, strict=True):
        clock = line.split()[0]
        assert len(clock) == 15 and clock[2] == clock[5] == ":" and clock[8] == ".", clock
        day = time.localtime(before)
        seconds = int(clock[:2]) * 3600 + int(clock[3:5]) * 60 + float(clock[6:])
        then = time.mktime(day[:3] + (0, 0, 0) + day[6:8] + (-1,)) + seconds
        assert before - 1 <= then <= after + 1, (clock, before, after)
        assert line.split(" ", 1)[1] == plain.split(" ", 1)[1]


def test_times_goes_with_lines_only():
    assert_one_line_error(report("--times", "relative", "x"),
                          "report: --times goes with --calls", code=1)
    assert_one_line_error(report("--calls", "--json", "--times", "absolute", "x"),
                          "report: --times chooses the lines' first number", code=1)
