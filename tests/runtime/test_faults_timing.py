"""Run-time faults of the timing path and of the per-thread memory: coroutines that switch
stacks inside driver calls (calls that end in any order on one thread), signal handlers
that call the driver during a thread's first traced calls, and threads that leave a timed
call by longjmp or a C++ exception and then exit. Probes in tests/c/ (coroutines.c,
sigfirstcall.c, longjmpexit.cc); the coroutine and longjmp cases need a host callback, so
they run on the FAKE driver (tests/c/fake_libcuda.c); the signal cases run on the real
Debian drivers."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from tests.faultkit import clean_env, run

MODES = ["1", "time", "timeline"]


def traced_env(shim_lib: Path, tmp_path: Path, mode: str, **extra: str) -> dict[str, str]:
    return dict(clean_env(), LD_PRELOAD=str(shim_lib), SHIMGEN_TRACE=mode, SHIMGEN_QUIET="1",
                SHIMGEN_TRACE_FILE=str(tmp_path / "trace.%p.json"),
                SHIMGEN_TIMELINE_FILE=str(tmp_path / "timeline.%p.json"), **extra)


def words(line: str) -> dict[str, int]:
    w = line.split()
    return {w[i]: int(w[i + 1]) for i in range(0, len(w) - 1, 2)}


def only(tmp_path: Path, pattern: str) -> dict:
    files = list(tmp_path.glob(pattern))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def check_timed(trace: dict, calls: dict[str, int], mode: str, tmp_path: Path) -> None:
    """Every call counted once; under time and timeline every one timed, with no frame
    lost; under timeline one event per call."""
    assert trace["calls"] == calls
    if mode == "1":
        return
    assert trace["untimed_calls"] == 0
    assert {k: v["calls"] for k, v in trace["time"].items()} == calls
    if mode == "timeline":
        tl = only(tmp_path, "timeline.*.json")
        events = Counter(e["name"] for e in tl["traceEvents"] if e["ph"] == "X")
        assert dict(events) == calls
        assert tl["otherData"]["events_overwritten"] == 0


# ---- coroutines: calls that end in any order on one thread ----

@pytest.mark.parametrize("order", ["fifo", "lifo", "random"])
@pytest.mark.parametrize("mode", MODES)
def test_coroutines_suspended_inside_driver_calls(probes, fake_shim, tmp_path, mode,  # noqa: F811
                                                  order):
    """Coroutines (ucontext, a stack each) suspend inside cuLaunchHostFunc, from its host
    callback, and are resumed first-in first-out, last-in first-out or at random: the
    driver calls of one thread end in any order. Each must return to its own caller, with
    the right result, and be counted and timed exactly once; no frame may be lost.
    (The timing path used to free frames by position, as a stack: FIFO resumption
    jumped to address 0.)"""
    rng = random.Random(f"{mode}-{order}")
    for run_no, (coroutines, calls) in enumerate([(2, 2000), (3, 1000), (8, 400), (40, 60)]):
        out = tmp_path / f"run{run_no}"
        out.mkdir()
        seed = str(rng.randrange(1 << 30))
        proc = run([probes / "coroutines", "libcuda.so.1", order, coroutines, calls, seed],
                   traced_env(fake_shim, out, mode), timeout=120)
        made = words(proc.stdout)
        assert made["bad"] == 0 and made["host"] == coroutines * calls, proc.stdout
        check_timed(only(out, "trace.*.json"),
                    {"cuLaunchHostFunc": made["host"], "cuDriverGetVersion": made["version"]},
                    mode, out)


# ---- signal handlers that call the driver during a thread's first traced calls ----

@pytest.mark.parametrize("mode", MODES)
def test_signal_handler_calls_during_new_threads_first_calls(probes, shim, tmp_path, mode):
    """300 new threads, each kept alive so that it needs a new per-thread block, are sent
    SIGUSR1 from a random moment around their first call; the handler calls the driver.
    No hang (the slow path of a first call takes no lock and calls no malloc: the old one
    took the block lock and calloc and hung here in every mode), and every call made by a
    thread or a handler is counted once."""
    seed = str(random.randrange(1 << 30))
    proc = run([probes / "sigfirstcall", "libcuda.so.1", "threads", "300", seed],
               shim.env(**traced_env(shim.library, tmp_path, mode)), timeout=90)
    made = words(proc.stdout)
    assert made["bad"] == 0, proc.stdout
    assert made["handler"] >= 100, f"too few signals arrived to test anything: {proc.stdout}"
    check_timed(only(tmp_path, "trace.*.json"),
                {"cuDriverGetVersion": made["calls"] + made["handler"]}, mode, tmp_path)


@pytest.mark.parametrize("mode", MODES)
def test_signal_handler_calls_during_main_threads_first_call(probes, shim, tmp_path, mode):
    """100 forked processes: in each, another thread loads the driver (and stays), then the
    main thread makes its first traced calls while SIGUSR1 arrives from a random moment
    around them; the handler calls the driver. No child hangs (alarm after 20 s), and each
    child's own trace holds exactly the calls it and its handler made."""
    seed = str(random.randrange(1 << 30))
    proc = run([probes / "sigfirstcall", "libcuda.so.1", "main", "100", seed],
               shim.env(**traced_env(shim.library, tmp_path, mode)), timeout=120)
    lines = proc.stdout.splitlines()
    assert lines[-1] == "children 100 failed 0", proc.stdout[-2000:]
    children = [ln.split() for ln in lines if ln.startswith("child ")]
    assert len(children) == 100
    for line in children:
        made = words(" ".join(line[2:]))
        assert made["bad"] == 0, line
        trace = json.loads((tmp_path / f"trace.{line[1]}.json").read_text())
        calls = {"cuDriverGetVersion": made["calls"] + made["handler"]}
        assert trace["calls"] == calls
        if mode != "1":
            assert trace["untimed_calls"] == 0
            assert trace["time"]["cuDriverGetVersion"]["calls"] == sum(calls.values())
    assert len(list(tmp_path.glob("trace.*.json"))) == 100


# ---- threads that leave a timed call by longjmp or an exception, then exit ----

# Growth of the resident set allowed between the first tenth of the threads and the end.
# A thread's block is folded and reused when it exits, however its calls ended, so after
# the warm-up nothing grows but the timeline's copies of exited threads' events (2 events
# and about 50 bytes of bookkeeping per thread: about 1.5 MiB for 18,000 threads) and the
# allocator's and thread-stack caches' noise. Keeping every such thread's block costs 4.5
# KiB (time) to 8.5 KiB (timeline) of resident memory per thread: 80 to 150 MiB here.
RSS_GROWTH_BOUND_KB = 16 * 1024
THREADS = 20000


@pytest.mark.parametrize("how", ["longjmp", "throw"])
@pytest.mark.parametrize("mode", MODES)
def test_threads_that_leave_a_timed_call_and_exit_are_reclaimed(probes, fake_shim,  # noqa: F811
                                                                tmp_path, mode, how):
    """20,000 threads (4 at a time) each make one call, then leave cuLaunchHostFunc by
    longjmp or by a C++ exception from its host callback, and exit. The resident set stays
    bounded, and every call is counted once: the call left by longjmp or throw is counted
    (not timed) when its thread exits, from its frame."""
    proc = run([probes / "longjmpexit", "libcuda.so.1", how, THREADS, 4],
               traced_env(fake_shim, tmp_path, mode), timeout=300)
    made = words(proc.stdout)
    assert made["bad"] == 0 and made["host"] == THREADS, proc.stdout
    growth = made["rss_end_kb"] - made["rss_warm_kb"]
    assert growth <= RSS_GROWTH_BOUND_KB, f"resident set grew by {growth} KiB: {proc.stdout}"
    trace = only(tmp_path, "trace.*.json")
    calls = {"cuLaunchHostFunc": THREADS, "cuDriverGetVersion": made["version"]}
    assert trace["calls"] == calls
    if mode != "1":
        # Abandoned calls are counted but not timed; no thread ran out of frames.
        assert trace["untimed_calls"] == 0
        assert {k: v["calls"] for k, v in trace["time"].items()} == calls
    if mode == "timeline":
        tl = only(tmp_path, "timeline.*.json")
        # Every returned call has its event; the abandoned ones have none.
        kept = tl["otherData"]["events_kept"] + tl["otherData"]["events_of_exited_threads_dropped"]
        assert kept == made["version"]
