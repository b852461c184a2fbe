"""The timing path of an aarch64 shim (runtime/arch/aarch64/timing.S) keeps the promises of
x86-64's (test_timing.py, test_faults_timing.py, test_races.py), under qemu-user: the same
probes, cross-compiled, on the FAKE driver (tests/c/fake_libcuda.c, cross-compiled: its host
callbacks let a call stay open) and on Debian's arm64 libcuda 550.163.01. Arguments,
results and callee-saved registers through a timed call (exactness.c with
regcheck_aarch64.S), ticks at cntfrq_el0's rate, coroutines that end their driver calls in
any order, a signal handler's calls inside timed calls, C++
exceptions and stack walks through a timed call, a forked child's own times, threads racing
their first timed calls and the blocks of exited threads (hundreds of rounds, random
timing). qemu-user delivers a signal between its blocks of translated code only, so the
signal test shows the frames' list and counters right at those points, not between every
two instructions. A focused set runs in the default tier; the rest is in tests/tiers.py."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from shimgen.shim.pipeline import make_shim
from tests.runtime.test_aarch64 import CROSS_CC, ROOT, _tools, arm64_drivers, run_arm64  # noqa: F401
from tests.runtime.test_timing import EXPECTED

CROSS_CXX = "aarch64-linux-gnu-g++"
PROBES = ("coroutines", "sigcalls", "forktime", "unwind", "race_churn", "aarch64_race",
          "cxxthrow", "exactness", "cntfrq")


# Probes that need more than their own source: the aarch64 register check (exactness.c
# calls regcheck_call), or a source of their own (the counter's frequency).
EXTRA = {"exactness": ["tests/c/regcheck_aarch64.S"]}
CNTFRQ = """#include <stdio.h>
int main(void)
{
    unsigned long f;
    __asm__ __volatile__("mrs %0, cntfrq_el0" : "=r"(f));
    printf("%lu\\n", f);
    return 0;
}
"""


def _cross(out: Path, name: str) -> Path:
    if name == "cntfrq":
        src = out / "cntfrq.c"
        src.write_text(CNTFRQ)
    else:
        src = next((ROOT / "tests/c").glob(f"{name}.c*"))
    cc = CROSS_CXX if src.suffix == ".cc" else CROSS_CC
    exe = out / name
    proc = subprocess.run([cc, "-O2", "-pthread", "-o", str(exe), str(src),
                           *(str(ROOT / e) for e in EXTRA.get(name, [])), "-ldl"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    """The fake driver cross-compiled, a shim built for it, and the probes. (The C++ cross
    compiler is asked for first: a skip of these tests names it whatever else is missing.)"""
    if shutil.which(CROSS_CXX) is None:
        pytest.skip(f"needs {CROSS_CXX} (g++-aarch64-linux-gnu)")
    _tools()
    out = tmp_path_factory.mktemp("armtiming")
    fake = out / "fake" / "libcuda.so.1"
    fake.parent.mkdir()
    proc = subprocess.run([CROSS_CC, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-Wall",
                           "-Wextra", "-Werror", "-Wl,-soname,libcuda.so.1", "-Wl,-Bsymbolic",
                           "-o", str(fake), str(ROOT / "tests/c/fake_libcuda.c")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    shim = make_shim(fake, out / "shim", require_real=False).library
    return Arm(fake, shim, out)


class Arm:
    """The fake driver, its shim, and each probe, cross-compiled when first asked for."""

    def __init__(self, fake: Path, shim: Path, out: Path):
        self.fake, self.shim, self.out = fake, shim, out
        self.libdir = SimpleNamespace(libdir=fake.parent)  # as run_arm64 takes a driver

    def __getattr__(self, name: str) -> Path:
        if name not in PROBES:
            raise AttributeError(name)
        exe = _cross(self.out, name)
        setattr(self, name, exe)
        return exe


def traced(arm, probe: Path, tmp_path: Path, mode: str, *args: str, driver=None,
           shim=None, **env: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The probe under qemu-user on libcuda.so.1 with SHIMGEN_TRACE=mode: its result and
    its trace (tmp_path/trace.json; the timeline is tmp_path/timeline.json)."""
    trace = tmp_path / "trace.json"
    proc = run_arm64(probe, driver or arm.libdir, shim or arm.shim, *args, timeout=60,
                     SHIMGEN_TRACE=mode,
                     SHIMGEN_QUIET="1", SHIMGEN_TRACE_FILE=str(trace),
                     SHIMGEN_TIMELINE_FILE=str(tmp_path / "timeline.json"), **env)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(trace.read_text())


def words(line: str) -> dict[str, int]:
    w = line.split()
    return {w[i]: int(w[i + 1]) for i in range(0, len(w) - 1, 2)}


def check_timed(trace: dict, calls: dict[str, int], mode: str, tmp_path: Path) -> None:
    """Every call counted once and timed, no frame lost, each in its function's fine buckets
    (its key and home slot the ones the fold probes); under timeline one event each."""
    assert trace["calls"] == calls
    assert trace["untimed_calls"] == 0
    assert {k: v["calls"] for k, v in trace["time"].items()} == calls
    assert all(sum(v["hist"]) == v["calls"] for v in trace["time"].values()), trace["time"]
    assert all(sum(n for _, n in v["fine"]) == v["calls"] for v in trace["time"].values()), \
        trace["time"]
    if mode == "timeline":
        tl = json.loads((tmp_path / "timeline.json").read_text())
        events = Counter(e["name"] for e in tl["traceEvents"] if e["ph"] == "X")
        assert dict(events) == calls
        assert tl["otherData"]["events_overwritten"] == 0


def coroutine_runs(arm, tmp_path: Path, mode: str, order: str, runs) -> None:
    rng = random.Random(f"{mode}-{order}")
    for k, (coroutines, calls) in enumerate(runs):
        out = tmp_path / f"run{k}"
        out.mkdir()
        seed = str(rng.randrange(1 << 30))
        proc, trace = traced(arm, arm.coroutines, out, mode, "libcuda.so.1", order,
                             str(coroutines), str(calls), seed)
        made = words(proc.stdout)
        assert made["bad"] == 0 and made["host"] == coroutines * calls, (seed, proc.stdout)
        check_timed(trace, {"cuLaunchHostFunc": made["host"],
                            "cuDriverGetVersion": made["version"]}, mode, out)


# ---- the default tier: one of each ----

def test_coroutines_end_timed_calls_in_any_order(arm, tmp_path):
    """ucontext coroutines suspended inside cuLaunchHostFunc, resumed at random: each timed
    call returns to its own caller with the right result, counted and timed once (a frame
    is x19's, never a position)."""
    coroutine_runs(arm, tmp_path, "time", "random", [(2, 300), (8, 100), (40, 20)])


def test_a_signal_handlers_calls_inside_timed_calls(arm, tmp_path):
    """An interval timer's handler calls the driver while the main thread is anywhere in
    its timed calls (at qemu's block boundaries): every result right, every call counted
    and timed, no frame lost."""
    proc, trace = traced(arm, arm.sigcalls, tmp_path, "time", "libcuda.so.1", "300000")
    made = words(proc.stdout)
    assert made["bad"] == 0 and made["handler_bad"] == 0, proc.stdout
    assert made["handler"] >= 20, f"too few signals arrived to test anything: {proc.stdout}"
    check_timed(trace, {"cuDriverGetVersion": made["main"] + made["handler"]}, "time",
                tmp_path)


def test_exceptions_and_stack_walks_cross_a_timed_call(arm, tmp_path):
    """A C++ exception thrown in a host callback reaches the caller's catch through the
    timing stub (its call-frame information: the return address and x19 in the frame), and
    _Unwind_Backtrace from a callback reaches the driver's caller on the slow and the fast
    path; the calls the throws left are counted from their frames at exit."""
    want = "caught 3 version rc 0 value 12345"
    direct = run_arm64(arm.cxxthrow, arm.libdir, None, str(arm.fake))
    assert direct.stdout.strip() == want, direct.stderr  # the probe works without the shim
    proc, trace = traced(arm, arm.cxxthrow, tmp_path, "time", "libcuda.so.1")
    assert proc.stdout.strip() == want
    assert trace["calls"] == {"cuLaunchHostFunc": 3, "cuDriverGetVersion": 1000}
    assert trace["time"]["cuDriverGetVersion"]["calls"] == 1000
    proc, _ = traced(arm, arm.unwind, tmp_path, "time", "libcuda.so.1")
    assert proc.stdout.splitlines() == ["first reached 1", "second reached 1",
                                        "thread reached 1"]


def exact_through_the_shim(arm, tmp_path: Path, mode: str) -> None:
    direct = run_arm64(arm.exactness, arm.libdir, None, str(arm.fake))
    assert direct.stdout.splitlines() == EXPECTED, direct.stderr  # the probe works alone
    proc, trace = traced(arm, arm.exactness, tmp_path, mode, "libcuda.so.1")
    assert proc.stdout.splitlines() == EXPECTED
    assert trace["calls"]["cuFakeEntryRsp"] == 6
    if mode != "1":  # 301 nested calls of cuFakeRecurse: past 128 frames, counted untimed
        assert {k: v["calls"] for k, v in trace["time"].items()} == trace["calls"]
        timed = sum(sum(v["hist"]) for v in trace["time"].values())  # the calls with a length
        assert timed + trace["untimed_calls"] == sum(trace["calls"].values())
        assert trace["untimed_calls"] > 0
    if mode == "time":  # ticks of the virtual counter, calibrated as on x86-64
        hz = int(run_arm64(arm.cntfrq, arm.libdir, None).stdout)
        assert abs(trace["ns_per_tick"] * hz / 1e9 - 1) < 0.01, (trace["ns_per_tick"], hz)


def test_arguments_results_and_callee_saved_registers_through_a_timed_call(arm, tmp_path):
    """tests/c/exactness.c with regcheck_aarch64.S: stack-passed and floating-point
    arguments, a 16-byte struct result, callbacks into the driver, deep recursion, 16
    threads, x19-x28, d8-d15 and sp kept: the same lines as calling the fake driver alone
    (and as on x86-64). Every call counted; those made while all 128 frames were taken (the
    deep recursion) untimed, the rest timed. The trace's ticks are the virtual counter's:
    ns_per_tick is 1e9 / cntfrq_el0, to 1%."""
    exact_through_the_shim(arm, tmp_path, "time")


@pytest.fixture(scope="module")
def real(arm64_drivers, tmp_path_factory):  # noqa: F811
    """Debian's arm64 libcuda 550.163.01 and a shim built for it."""
    driver = next(d for d in arm64_drivers if d.version == "550.163.01")
    out = tmp_path_factory.mktemp("armreal")
    return driver, make_shim(driver.libdir / "libcuda.so.1", out).library


def test_threads_racing_their_first_timed_calls(arm, tmp_path):
    """16 threads released at once after random delays race the driver's load and their
    first timed calls (the C path that gets a thread's block): every call answered, counted
    and timed once. (On Debian's arm64 driver, 150 times, in the second tier.)"""
    race_rounds(arm, arm.libdir, arm.shim, tmp_path, 8)


@pytest.mark.parametrize("mode", ["time", "timeline"])
def test_a_timed_calls_length_is_its_total_maximum_bucket_and_event(arm, tmp_path, mode):
    """Two calls of cuLaunchHostFunc that take 100 ms each (forktime's parent): the total,
    the maximum, each call's fine bucket and (timeline) its event hold the length of the
    call, its end ticks less its start ticks: not the start, the end or their difference
    the wrong way round."""
    from shimgen.trace.model import fine_range

    proc, trace = traced(arm, arm.forktime, tmp_path, mode, "100", "1")
    assert re.search(r"^child \d+ rc 0$", proc.stdout, re.M), proc.stdout
    row, k = trace["time"]["cuLaunchHostFunc"], trace["ns_per_tick"]
    assert row["calls"] == 2 and 2e8 <= row["total_ns"] < 2e10, row
    assert 1e8 <= row["max_ns"] <= row["total_ns"] - 1e8, row
    assert sum(n for _, n in row["fine"]) == 2, row
    lo, hi = (sum(fine_range(f)[j] * n for f, n in row["fine"]) for j in (0, 1))
    ticks = row["total_ns"] / k  # the two calls' buckets hold their lengths
    assert lo <= ticks * (1 + 1e-9) and ticks <= hi * (1 + 1e-9), (row, k)
    assert all(fine_range(f)[0] * k <= row["max_ns"] * (1 + 1e-9) for f, _ in row["fine"]), row
    if mode == "timeline":
        tl = json.loads((tmp_path / "timeline.json").read_text())
        ev = [e for e in tl["traceEvents"] if e["ph"] == "X" and e["name"] == "cuLaunchHostFunc"]
        assert len(ev) == 2 and all(1e5 <= e["dur"] < 1e7 for e in ev), ev
        assert 0 < ev[0]["ts"] and ev[0]["ts"] + ev[0]["dur"] <= ev[1]["ts"] + 0.002, ev


def race_rounds(arm, driver, shim: Path, tmp_path: Path, rounds: int) -> None:
    for k in range(rounds):
        seed = random.randrange(1 << 30)
        mode = random.choice(["time", "timeline"])
        out = tmp_path / f"r{k}"
        out.mkdir()
        proc, trace = traced(arm, arm.aarch64_race, out, mode, "race", str(seed), "16", "40",
                             driver=driver, shim=shim)
        assert proc.stdout == "640\n", (seed, proc.stdout)
        check_timed(trace, {"cuDriverGetVersion": 640}, mode, out)


# ---- the second tier (tests/tiers.py): the rest ----

@pytest.mark.parametrize("order", ["fifo", "lifo", "random"])
@pytest.mark.parametrize("mode", ["time", "timeline"])
def test_coroutines_in_every_order(arm, tmp_path, mode, order):
    coroutine_runs(arm, tmp_path, mode, order, [(2, 1000), (3, 500), (8, 200), (40, 40)])


def test_a_signal_handlers_calls_inside_timeline_calls(arm, tmp_path):
    """As under time, and one event per call in the ring (far more calls than it holds:
    the last 65536 kept)."""
    proc, trace = traced(arm, arm.sigcalls, tmp_path, "timeline", "libcuda.so.1", "300000")
    made = words(proc.stdout)
    assert made["bad"] == 0 and made["handler_bad"] == 0 and made["handler"] >= 20, proc.stdout
    total = made["main"] + made["handler"]
    assert trace["calls"] == {"cuDriverGetVersion": total} and trace["untimed_calls"] == 0
    tl = json.loads((tmp_path / "timeline.json").read_text())
    assert tl["otherData"]["events_kept"] == 65536
    assert tl["otherData"]["events_overwritten"] == total - 65536


def test_exceptions_cross_a_timeline_call(arm, tmp_path):
    proc, trace = traced(arm, arm.cxxthrow, tmp_path, "timeline", "libcuda.so.1")
    assert proc.stdout.strip() == "caught 3 version rc 0 value 12345"
    assert trace["calls"] == {"cuLaunchHostFunc": 3, "cuDriverGetVersion": 1000}
    tl = json.loads((tmp_path / "timeline.json").read_text())
    ev = [e for e in tl["traceEvents"] if e["ph"] == "X"]
    # one thread's calls one after another: each event starts after the one before it ended
    assert len(ev) == 1000 and ev[0]["ts"] > 0, ev[:2]
    assert all(a["ts"] + a["dur"] <= b["ts"] + 0.002
               for a, b in zip(ev, ev[1:], strict=False)), ev[:3]


def test_a_forked_child_times_only_its_own_calls(arm, tmp_path):
    """The parent's calls of cuLaunchHostFunc take 100 ms each (one on a thread that has
    exited), then it forks: the child's trace has its own quick calls only."""
    for n in (1, 7):
        out = tmp_path / f"n{n}"
        out.mkdir()
        proc, parent = traced(arm, arm.forktime, out, "time", "100", str(n))
        m = re.search(r"^child (\d+) rc 0$", proc.stdout, re.M)
        assert m, proc.stdout
        assert parent["calls"] == {"cuInit": 2, "cuLaunchHostFunc": 2}
        assert parent["time"]["cuLaunchHostFunc"]["max_ns"] >= 100e6
        child = json.loads(Path(f"{out / 'trace.json'}.{m.group(1)}").read_text())
        assert child["calls"] == {"cuDriverGetVersion": n, "cuLaunchHostFunc": n}
        assert {k: v["calls"] for k, v in child["time"].items()} == child["calls"]
        assert child["time"]["cuLaunchHostFunc"]["max_ns"] < 100e6


def test_threads_racing_their_first_timed_calls_hundreds_of_times(arm, real, tmp_path):
    """The same on Debian's arm64 libcuda 550.163.01, 150 processes."""
    race_rounds(arm, *real, tmp_path, 150)


def test_threads_race_for_the_blocks_of_exited_threads(arm, tmp_path):
    """Rounds of 2 or 3 threads that make timed calls and exit, released together after
    random pauses, claim the blocks the previous round freed: every call counted and timed
    exactly, in every run."""
    for k in range(3):
        seed = random.randrange(1 << 30)
        out = tmp_path / f"c{k}"
        out.mkdir()
        proc, trace = traced(arm, arm.race_churn, out, "time", "libcuda.so.1", "300", "100",
                             str(seed))
        m = re.search(r"^threads (\d+) calls (\d+) bad 0$", proc.stdout, re.M)
        assert m, (seed, proc.stdout)
        check_timed(trace, {"cuDriverGetVersion": int(m.group(2))}, "time", out)


@pytest.mark.parametrize("mode", ["1", "timeline"])
def test_arguments_results_and_registers_through_every_stub(arm, tmp_path, mode):
    exact_through_the_shim(arm, tmp_path, mode)
