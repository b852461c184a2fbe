"""Exactness of forwarding and of the trace modes, against a FAKE libcuda built by the tests
(tests/c/fake_libcuda.c): stack-passed and floating-point arguments, a struct returned in
rax:rdx, callbacks that call the driver again, recursion deeper than the shadow stack, a
private entry point from cuGetProcAddress, and 16 threads."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.gpu.check_timeline import EPS_US, nesting_violations
from tests.shimcache import fake_driver_shim

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def fake_shim(probes, tmp_path_factory) -> tuple[Path, Path]:
    """The fake is refused by `shimgen build` (it is a stub by design), so the tests build
    its shim through the Python API with the stub rule off."""
    fake = probes / "libfake_libcuda_for_tests.so"
    return fake, fake_driver_shim(fake)


EXPECTED = [
    "registers main 0 thread 0",
    "launch rc 91645 out 9285189427964291645",
    "mixed -49.458333333333329",
    "pair 369d0369d0369cd fedcba9876543210",
    "host callbacks 5 versions 5",
    "recurse rc 0 sum 3703500",
    "private rc 0 value 777 status 0",
    "threads 16 calls 320000 bad 0",
]


def run_exactness(probes: Path, env: dict[str, str], lib: str) -> list[str]:
    proc = subprocess.run([str(probes / "exactness"), lib], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("SHIMGEN_", "LD_"))}


def run_traced(probe: Path, shim: Path, tmp_path: Path, mode: str, *args: str,
               **extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Run a probe on libcuda.so.1 under the shim with SHIMGEN_TRACE=mode: its result, and
    the trace file (tmp_path/trace.json; the timeline goes to tmp_path/timeline.json)."""
    trace = tmp_path / "trace.json"
    env = dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_TRACE=mode,
               SHIMGEN_TRACE_FILE=str(trace),
               SHIMGEN_TIMELINE_FILE=str(tmp_path / "timeline.json"), **extra)
    proc = subprocess.run([str(probe), "libcuda.so.1", *args], env=env, capture_output=True,
                          text=True, timeout=120)
    return proc, trace


def test_direct_call_results(probes, fake_shim):
    fake, _ = fake_shim
    assert run_exactness(probes, clean_env(), str(fake)) == EXPECTED


@pytest.mark.parametrize("mode", ["", "1", "time", "inject"])
def test_shim_preserves_arguments_and_results(probes, fake_shim, tmp_path, mode):
    """Every argument and result through the stubs of each trace mode; `inject`: every
    function that returns a CUresult behind its inject stub (armed, never firing), whose
    decision is a C call between the caller and the function."""
    _, shim = fake_shim
    trace = tmp_path / "trace.json"
    env = dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_TRACE_FILE=str(trace))
    if mode == "inject":
        env["SHIMGEN_INJECT"] = "cu*=2,nth=9223372036854775807"
    else:
        env["SHIMGEN_TRACE"] = mode
    if mode == "inject":
        proc = subprocess.run([str(probes / "exactness"), "libcuda.so.1"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and proc.stdout.splitlines() == EXPECTED, proc.stderr
        assert "SHIMGEN_INJECT armed: 'cu*=2,nth=9223372036854775807' on " in proc.stderr
        return
    assert run_exactness(probes, env, "libcuda.so.1") == EXPECTED
    if not mode:
        assert not trace.exists()
        return
    data = json.loads(trace.read_text())
    # 320000 thread calls + 5 from host callbacks + 300 from recursion callbacks.
    assert data["calls"]["cuDriverGetVersion"] == 320305
    assert data["calls"]["cuFakeRecurse"] == 301
    assert data["calls"]["cuLaunchHostFunc"] == 5
    assert data["calls"]["cuLaunchKernel"] == 1
    assert data["unmapped_proc_addresses"] == 1  # the fake's private entry point
    if mode == "time":
        t = data["time"]
        assert set(t) == set(data["calls"])
        for name, row in t.items():
            assert row["calls"] == data["calls"][name]
            assert 0 <= row["max_ns"] <= row["total_ns"]
        # A call or two of a function that returns at once can take less than one tick of a
        # virtual machine's TSC; 320305 calls cannot.
        assert t["cuDriverGetVersion"]["total_ns"] > 0
        # Recursion 301 deep: frames past the shadow stack's 128 are counted, not timed.
        assert data["untimed_calls"] > 0
        # The outermost recursing call contains 300 nested timed calls.
        assert t["cuFakeRecurse"]["max_ns"] > t["cuFakeReturnPair"]["max_ns"]
    else:
        assert "time" not in data


def test_time_table_on_stderr(probes, fake_shim):
    _, shim = fake_shim
    env = dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_TRACE="time")
    proc = subprocess.run([str(probes / "exactness"), "libcuda.so.1"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert "total ms" in proc.stderr and "mean ns" in proc.stderr and "max ns" in proc.stderr
    assert "cuLaunchKernel" in proc.stderr


def test_unknown_trace_mode_warns_once_and_forwards(probes, fake_shim):
    _, shim = fake_shim
    env = dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_TRACE="bogus")
    proc = subprocess.run([str(probes / "exactness"), "libcuda.so.1"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines() == EXPECTED
    assert proc.stderr.count("'bogus' is not a known mode") == 1


@pytest.mark.parametrize("mode", ["1", "time", "timeline"])
def test_calls_from_a_signal_handler_inside_a_timed_call(probes, fake_shim, tmp_path, mode):
    """A signal handler that calls the driver while the interrupted thread is anywhere in a
    counting or timing stub: every result right, every call counted, and in `time` every
    call timed, with no shadow frame left behind."""
    _, shim = fake_shim
    proc, trace = run_traced(probes / "sigcalls", shim, tmp_path, mode, "4000000")
    assert proc.returncode == 0, proc.stderr
    words = proc.stdout.split()
    made = {words[i]: int(words[i + 1]) for i in range(0, len(words) - 1, 2)}
    assert made["bad"] == 0 and made["handler_bad"] == 0, proc.stdout
    assert made["handler"] >= 20, f"too few signals arrived to test anything: {proc.stdout}"
    data = json.loads(trace.read_text())
    assert data["calls"]["cuDriverGetVersion"] == made["main"] + made["handler"]
    if mode in ("time", "timeline"):
        assert data["untimed_calls"] == 0
        assert data["time"]["cuDriverGetVersion"]["calls"] == made["main"] + made["handler"]
    if mode == "timeline":
        # One thread, far more calls than its ring holds: the ring keeps the last 65536.
        tl = json.loads((tmp_path / "timeline.json").read_text())
        events = [e for e in tl["traceEvents"] if e["ph"] == "X"]
        assert len(events) == tl["otherData"]["events_kept"] == 65536
        assert tl["otherData"]["events_overwritten"] == made["main"] + made["handler"] - 65536
        assert {e["name"] for e in events} == {"cuDriverGetVersion"}


def timeline_events(path: Path) -> tuple[dict, list[dict]]:
    data = json.loads(path.read_text())
    return data, [e for e in data["traceEvents"] if e["ph"] == "X"]


def test_timeline_records_every_timed_call_on_its_thread(probes, fake_shim, tmp_path):
    """SHIMGEN_TRACE=timeline: results unchanged; a Chrome/Perfetto trace with one complete
    event per timed call, on the thread that made it (threads that exited included), and
    calls made from callbacks nested inside the driver call that ran the callback."""
    _, shim = fake_shim
    trace = tmp_path / "trace.json"
    env = dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_TRACE="timeline",
               SHIMGEN_TRACE_FILE=str(trace), SHIMGEN_TIMELINE_FILE=str(tmp_path / "tl.%p.json"))
    proc = subprocess.run([str(probes / "exactness"), "libcuda.so.1"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == EXPECTED
    files = list(tmp_path.glob("tl.*.json"))
    assert len(files) == 1 and files[0].name == f"tl.{files[0].stem.split('.')[1]}.json"
    summary = json.loads(trace.read_text())
    data, events = timeline_events(files[0])
    assert f"timeline of {len(events)} calls written to {files[0]}" in proc.stderr

    timed = sum(summary["calls"].values()) - summary["untimed_calls"]
    assert len(events) == timed == data["otherData"]["events_kept"]
    assert data["otherData"]["events_overwritten"] == 0
    names = Counter(e["name"] for e in events)
    for name, calls in summary["calls"].items():
        if name not in ("cuFakeRecurse", "cuDriverGetVersion"):  # the untimed ones are these
            assert names[name] == calls, name
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events)

    by_tid: dict[int, list[dict]] = {}
    for e in events:
        by_tid.setdefault(e["tid"], []).append(e)
    # main, the register-check thread and 16 workers (which exited before the output)
    assert len(by_tid) == 18
    workers = [t for t, ev in by_tid.items()
               if Counter(x["name"] for x in ev) == {"cuDriverGetVersion": 20000}]
    assert len(workers) == 16
    main = max(by_tid.values(), key=lambda ev: sum(e["name"] == "cuFakeRecurse" for e in ev))
    # Recursion through callbacks: nested cuFakeRecurse events, as deep as the shadow stack.
    bad, deepest = nesting_violations(main, "cuFakeRecurse")
    assert bad == 0 and deepest >= 120
    # Host callbacks call cuDriverGetVersion inside cuLaunchHostFunc.
    hosts = [e for e in main if e["name"] == "cuLaunchHostFunc"]
    inner = [v for v in main if v["name"] == "cuDriverGetVersion" and any(
        h["ts"] <= v["ts"] and v["ts"] + v["dur"] <= h["ts"] + h["dur"] + EPS_US for h in hosts)]
    assert len(hosts) == 5 and len(inner) == 5


def test_timeline_ring_size_and_default_file(probes, fake_shim, tmp_path):
    """SHIMGEN_TIMELINE_EVENTS bounds each thread's ring (rounded up to a power of two; a
    bad value is said once and the default used); without SHIMGEN_TIMELINE_FILE the
    timeline goes to shimgen-timeline.<pid>.json in the working directory."""
    _, shim = fake_shim
    env = dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_TRACE="timeline",
               SHIMGEN_TIMELINE_EVENTS="1500", SHIMGEN_QUIET="1")
    proc = subprocess.run([str(probes / "sigcalls"), "libcuda.so.1", "5000"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    files = list(tmp_path.glob("shimgen-timeline.*.json"))
    assert len(files) == 1
    data, events = timeline_events(files[0])
    assert data["otherData"]["events_per_thread"] == 2048
    assert len(events) == 2048
    made = 5001 + int(proc.stdout.split()[3])
    assert data["otherData"]["events_overwritten"] == made - 2048
    # Oldest first: events are recorded as calls end, so the ends rise through the ring,
    # except where a signal handler's call ended inside the call it interrupted.
    ends = [e["ts"] + e["dur"] for e in events]
    inversions = sum(1 for a, b in zip(ends[:-1], ends[1:], strict=True) if b < a - EPS_US)
    assert inversions <= int(proc.stdout.split()[3])

    env["SHIMGEN_TIMELINE_EVENTS"] = "12"
    env.pop("SHIMGEN_QUIET")
    proc = subprocess.run([str(probes / "sigcalls"), "libcuda.so.1", "100"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert proc.stderr.count("SHIMGEN_TIMELINE_EVENTS=12 is not a number from 1024") == 1


def test_timeline_accounts_for_every_call_of_threads_that_overflowed_and_exited(
        probes, fake_shim, tmp_path):
    """16 workers make 20000 calls each into rings of 1024 and exit before the output: each
    keeps its last 1024 events, and kept + overwritten = every timed call."""
    _, shim = fake_shim
    proc, trace = run_traced(probes / "exactness", shim, tmp_path, "timeline",
                             SHIMGEN_TIMELINE_EVENTS="1024")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(trace.read_text())
    data, events = timeline_events(tmp_path / "timeline.json")
    other = data["otherData"]
    timed = sum(summary["calls"].values()) - summary["untimed_calls"]
    assert other["events_kept"] + other["events_overwritten"] == timed
    assert other["events_of_exited_threads_dropped"] == 0
    assert other["threads"] == 18 and other["exited_threads_kept"] == 17
    per_tid = Counter(e["tid"] for e in events)
    assert sorted(per_tid.values())[-16:] == [1024] * 16
    assert len(events) == other["events_kept"]


@pytest.mark.parametrize("mode", ["1", "time", "timeline"])
def test_a_call_still_in_progress_at_exit_is_counted(probes, fake_shim, tmp_path, mode):
    """exit() from a host callback ends the process inside cuLaunchHostFunc. Timed calls
    are counted when they return, so that one is counted from its shadow frame."""
    _, shim = fake_shim
    proc, trace = run_traced(probes / "exitcall", shim, tmp_path, mode)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "callback version rc 0"
    data = json.loads(trace.read_text())
    assert data["calls"] == {"cuDriverGetVersion": 1, "cuLaunchHostFunc": 1}
    if mode != "1":
        assert data["time"]["cuLaunchHostFunc"]["calls"] == 1
        assert data["time"]["cuDriverGetVersion"]["total_ns"] > 0


@pytest.mark.parametrize("mode", ["", "1", "time", "timeline"])
def test_stack_walks_cross_the_shim(probes, fake_shim, tmp_path, mode):
    """_Unwind_Backtrace from a callback inside a driver call reaches the caller of the
    driver in every mode: through the timing stub, on the slow path (the process's and a
    thread's first call) and on the fast path. The stubs carry call-frame information."""
    fake, shim = fake_shim
    direct = subprocess.run([str(probes / "unwind"), str(fake)], env=clean_env(),
                            capture_output=True, text=True, timeout=60)
    want = ["first reached 1", "second reached 1", "thread reached 1"]
    assert direct.stdout.splitlines() == want  # the probe works without the shim
    proc, _ = run_traced(probes / "unwind", shim, tmp_path, mode)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == want


@pytest.mark.parametrize("mode", ["", "1", "time", "timeline"])
def test_cxx_exceptions_pass_through_a_driver_call(probes, fake_shim, tmp_path, mode):
    """A C++ exception thrown in a host callback reaches the caller's catch through the
    shim, in every mode. Under time, each throw leaves its shadow frame taken (nothing
    runs the stub's return): the calls are still counted, from those frames, at exit."""
    fake, shim = fake_shim
    want = "caught 3 version rc 0 value 12345"
    direct = subprocess.run([str(probes / "cxxthrow"), str(fake)], env=clean_env(),
                            capture_output=True, text=True, timeout=60)
    assert direct.stdout.strip() == want, direct.stderr
    proc, trace = run_traced(probes / "cxxthrow", shim, tmp_path, mode)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == want
    if mode:
        data = json.loads(trace.read_text())
        assert data["calls"] == {"cuLaunchHostFunc": 3, "cuDriverGetVersion": 1000}


@pytest.mark.parametrize("mode", ["1", "time", "timeline"])
def test_fork_while_another_thread_is_inside_a_driver_call(probes, fake_shim, tmp_path, mode):
    """The child of a fork reports its own calls only: not the call that another thread of
    the parent had in progress at the fork (that thread does not exist in the child)."""
    _, shim = fake_shim
    env = dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_TRACE=mode,
               SHIMGEN_TRACE_FILE=str(tmp_path / "trace.%p.json"),
               SHIMGEN_TIMELINE_FILE=str(tmp_path / "timeline.%p.json"))
    proc = subprocess.run([str(probes / "forkinflight"), "libcuda.so.1"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    pids = dict(line.split() for line in proc.stdout.splitlines())
    child = json.loads((tmp_path / f"trace.{pids['child']}.json").read_text())
    parent = json.loads((tmp_path / f"trace.{pids['parent']}.json").read_text())
    assert child["calls"] == {"cuDriverGetVersion": 1}
    assert parent["calls"] == {"cuLaunchHostFunc": 1}
