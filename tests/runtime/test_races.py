"""Races, looped with random timing so that a broken claim or reset fails nearly every run
of the suite, not one run in four: threads racing for the per-thread blocks that exited
threads freed (runtime/stats/stats.c), 64 first calls at once with the threads alive at exit, and
a forked child's timing totals, which must be its own. The C probes are tests/c/race_churn.c,
race_firstcall.c and forktime.c; the seeds are random per run and printed on failure."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from tests.faultkit import clean_env, run, shim_lines, with_other_build_id


def test_threads_race_for_freed_blocks(shims, probes, tmp_path):
    """4 runs of 600 rounds or more of 2 or 3 threads, which leave a spin barrier together
    after random pauses and claim the blocks the previous round's threads freed, each making
    300 counted calls: two threads in one block (a claim that is not atomic) lose counts.
    Every call is counted, exactly, in every run. A round races only when its threads are on
    CPUs at once, which on a loaded machine few are: each run goes on until 400 rounds have
    (or 8 s have passed)."""
    s = shims[0]
    for i in range(4):
        seed = random.randrange(1 << 30)
        trace = tmp_path / f"trace{i}.json"
        proc = run([probes / "race_churn", "libcuda.so.1", "600", "300", str(seed), "400", "8"],
                   s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)))
        m = re.search(r"^threads (\d+) calls (\d+) bad 0$", proc.stdout, re.M)
        assert m, (seed, proc.stdout)
        assert json.loads(trace.read_text())["calls"] == {
            "cuDriverGetVersion": int(m.group(2))}, f"seed {seed}"


def test_sixty_four_first_calls_load_the_driver_once(shims, probes, tmp_path):
    """64 threads make their first call at once, after random spins, in 20 fresh processes
    (the driver's load and each thread's first block, every time), on a driver with another
    build-id, and are still alive at exit. The driver is loaded once: its one line is said
    once; and every call is counted, exactly (the blocks of threads alive at exit are found
    through the list of every block)."""
    s = shims[0]
    lib = tmp_path / "lib"
    lib.mkdir()
    with_other_build_id(s.driver.path, lib / s.driver.path.name)
    for i in range(20):
        seed = random.randrange(1 << 30)
        trace = tmp_path / f"trace{i}.json"
        proc = run([probes / "race_firstcall", "200", str(seed)],
                   s.env(SHIMGEN_DRIVER=str(lib / s.driver.path.name),
                         SHIMGEN_TRACE=random.choice(["1", "time"]),
                         SHIMGEN_TRACE_FILE=str(trace)))
        assert "threads 64 calls 12800 failures 0" in proc.stdout, (seed, proc.stdout)
        lines = shim_lines(proc.stderr)
        assert len(lines) == 1 and lines[0].endswith("forwarding by name, rebuild the shim"), (
            seed, proc.stderr)
        assert json.loads(trace.read_text())["calls"] == {
            "cuDriverGetVersion": 12800}, f"seed {seed}"


def test_forked_child_times_only_its_own_calls(fake_shim, probes, tmp_path):
    """SHIMGEN_TRACE=time, the fake driver: the parent's calls of cuLaunchHostFunc each take
    200 ms (one on a thread that has exited, whose totals are folded into the process's,
    one on the main thread), then it forks. The child's trace shows its own calls only: n
    quick calls of cuLaunchHostFunc and of cuDriverGetVersion, no cuInit, and times no parent
    total or maximum could give."""
    for n in (1, 7):
        trace = tmp_path / f"trace{n}.json"
        env = dict(clean_env(), LD_PRELOAD=str(fake_shim), SHIMGEN_TRACE="time",
                   SHIMGEN_TRACE_FILE=str(trace))
        proc = run([probes / "forktime", "200", str(n)], env)
        m = re.search(r"^child (\d+) rc 0$", proc.stdout, re.M)
        assert m, proc.stdout
        parent = json.loads(trace.read_text())
        assert parent["calls"] == {"cuInit": 2, "cuLaunchHostFunc": 2}
        assert parent["time"]["cuLaunchHostFunc"]["max_ns"] >= 200e6
        assert parent["time"]["cuLaunchHostFunc"]["total_ns"] >= 400e6
        child = json.loads(Path(f"{trace}.{m.group(1)}").read_text())
        assert child["calls"] == {"cuDriverGetVersion": n, "cuLaunchHostFunc": n}
        assert set(child["time"]) == {"cuDriverGetVersion", "cuLaunchHostFunc"}
        for name, t in child["time"].items():
            assert t["calls"] == n, (name, t)
            # below one of the parent's calls (each at least 200 ms): none of them is here
            assert t["total_ns"] < parent["time"]["cuLaunchHostFunc"]["max_ns"], (name, t)
            assert t["total_ns"] <= n * t["max_ns"], (name, t)
            assert t["max_ns"] <= t["total_ns"], (name, t)  # the maximum of its own calls
            assert sum(t["hist"]) == n, (name, t)  # no parent's call in the histograms
