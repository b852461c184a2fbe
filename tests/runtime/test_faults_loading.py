"""Run-time faults of the driver's load and of the settings read with it, on the real Debian
drivers (a slow fake driver only to make the load's window certain): a signal handler that
calls the driver on the thread that is loading it, fork() while another thread loads it,
SHIMGEN_DRIVER naming a shim, SHIMGEN_ATTR_OVERRIDE values outside int, and dlmopen into
another namespace, which the shim does not route (docs/reliability.md, "Loading the driver")."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from shimgen.cuda import CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
from tests.faultkit import (
    clean_env,
    run,
    shim_lines,
)

RUNS = 100  # processes per race: each has one load, so one race, at a random moment
FAKE_VERSION = 12345  # tests/c/fake_slow_load.c


def run_hang_checked(cmd, env, timeout=30) -> subprocess.CompletedProcess:
    try:
        return run(cmd, env, ok=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{cmd[0]} {' '.join(map(str, cmd[1:]))} hung ({timeout} s)", pytrace=False)


# ---- a signal handler that calls the driver during the load, on the loading thread ----

SIGNAL_LINE = re.compile(r"^handler forwarded (\d+) notinit (\d+) bad (\d+) during_load (\d+) "
                         r"main rc (-?\d+) version (-?\d+) after rc (-?\d+)$", re.M)


def signal_runs(probe, env, version: int, runs: int) -> list[tuple[int, ...]]:
    results = []
    for seed in range(runs):
        proc = run_hang_checked([probe, seed, version], env)
        assert proc.returncode == 0, proc.stderr
        m = SIGNAL_LINE.search(proc.stdout)
        assert m, proc.stdout
        fwd, notinit, bad, during, rc, v, after = map(int, m.groups())
        assert bad == 0, f"seed {seed}: a handler's call got neither the driver's answer nor 3"
        assert (rc, v, after) == (0, version, 0), proc.stdout
        results.append((fwd, notinit, during))
    return results


def test_signal_handler_calls_the_driver_during_its_load(shim, probes):
    """SIGALRM every 20 to 219 us (random) while the first call loads the real driver: the
    handler's calls on the loading thread are forwarded, or return CUDA_ERROR_NOT_INITIALIZED
    at once; none waits on the load it interrupted, so no run hangs."""
    assert CUDA_ERROR_NOT_INITIALIZED == 3  # what the probe counts as "notinit"
    results = signal_runs(probes / "loading_signal", shim.env(SHIMGEN_QUIET="1"),
                          shim.cuda_version, RUNS)
    # The window was hit: most runs had handler calls during the load, answered with 3.
    assert sum(1 for _, notinit, _ in results if notinit) >= RUNS // 2, results
    assert sum(fwd for fwd, _, _ in results) > 0  # and calls after the slot was filled


def test_without_the_shim_the_handler_is_always_forwarded(shim, probes):
    results = signal_runs(probes / "loading_signal", shim.env_without_shim(),
                          shim.cuda_version, 10)
    assert all(notinit == 0 for _, notinit, _ in results)


# ---- fork() while another thread loads the driver ----

FORK_LINE = re.compile(r"^forks (\d+) during_load (\d+) children_ok (\d+) load_us (\d+)$", re.M)
CHILD_LINE = re.compile(r"^child (-?\d+) (-?\d+) (-?\d+)$", re.M)


def fork_runs(probes, env, runs: int) -> tuple[int, set[tuple[int, int, int]]]:
    """Runs the fork probe `runs` times; returns how many runs forked during the load, and
    the set of (version rc, version, cuInit rc) the children saw."""
    during_runs, seen = 0, set()
    for seed in range(runs):
        proc = run_hang_checked([probes / "loading_fork", seed], env)
        m = FORK_LINE.search(proc.stdout)
        assert proc.returncode == 0 and m, (f"seed {seed}: a child's first driver calls "
                                            f"failed: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
        forks, during, ok, _ = map(int, m.groups())
        assert ok == forks == len(CHILD_LINE.findall(proc.stdout))
        during_runs += during > 0
        seen |= {tuple(map(int, c)) for c in CHILD_LINE.findall(proc.stdout)}
    return during_runs, seen


def test_fork_while_another_thread_loads_the_real_driver(shims, probes):
    """A thread makes the first call (the load) while the main thread forks from a random
    moment: every child's first driver calls work and give what they give without the shim
    (cuDriverGetVersion, cuInit: no GPU here)."""
    shim = shims[0]
    _, want = fork_runs(probes, shim.env_without_shim(), 3)
    assert len(want) == 1 and next(iter(want))[:2] == (0, shim.cuda_version)
    during_runs, seen = fork_runs(probes, shim.env(SHIMGEN_QUIET="1"), RUNS)
    assert seen == want
    assert during_runs >= 5  # the race was run: some forks began while the load was going on


def test_fork_during_a_slow_load(shims, probes):
    """The same with a fake driver whose load takes 20 ms: every run forks during the load.
    The fork waits for the load, and the child's calls reach the driver."""
    env = shims[0].env(SHIMGEN_QUIET="1",
                       SHIMGEN_DRIVER=str(probes / "libfake_slow_load.so"))
    during_runs, seen = fork_runs(probes, env, RUNS)
    assert during_runs >= RUNS * 9 // 10
    assert seen == {(0, FAKE_VERSION, 0)}


def test_thread_cancelled_during_the_load(shims, probes):
    """A thread cancelled at a random moment of a slow load (fake, 20 ms: its constructor
    sleeps): the load still ends, and the main thread's call that
    follows returns the driver's answer instead of waiting for ever."""
    # Not quiet: glibc defers the cancel while dlopen runs, and the shim's messages about
    # the fake (write, a cancellation point) come right after it.
    env = shims[0].env(SHIMGEN_DRIVER=str(probes / "libfake_slow_load.so"))
    for seed in range(RUNS):
        proc = run_hang_checked([probes / "loading_cancel", seed], env, timeout=20)
        assert proc.returncode == 0 and f"rc 0 version {FAKE_VERSION}" in proc.stdout, \
            proc.stdout + proc.stderr


# ---- SHIMGEN_DRIVER naming a shim ----

@pytest.mark.parametrize("how", ["file", "copy", "symlink", "soname"])
def test_shim_named_as_the_driver_fails_calls_at_once(shims, probes, tmp_path, how):
    """The shim itself, a copy (another inode and build-id), a symlink to it, or the bare
    name libcuda.so.1 (which the loader resolves to the loaded shim): one line says so, and
    every call returns CUDA_ERROR_SHARED_OBJECT_INIT_FAILED instead of jumping in a
    circle."""
    shim = shims[0]
    path = {"file": str(shim.library), "soname": "libcuda.so.1"}.get(how)
    if how == "copy":
        path = str(tmp_path / "copy.so")
        shutil.copyfile(shim.library, path)
    elif how == "symlink":
        path = str(tmp_path / "libcuda.so.1")
        os.symlink(shim.library, path)
    proc = run_hang_checked([probes / "faults_calls", "calls", "3"],
                            shim.env(SHIMGEN_DRIVER=path), timeout=30)
    assert f"rc {CUDA_ERROR_SHARED_OBJECT_INIT_FAILED} " in proc.stdout
    assert shim_lines(proc.stderr) == [
        f"shimgen: cannot load the real CUDA driver {path} (it is a shimgen shim, not the real "
        "driver); every driver call returns CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"]


def test_a_shim_is_never_loaded_as_the_driver(shims, probes, tmp_path):
    """The copy is refused from its file, before it is loaded: its own constructor never
    runs (it would have claimed the trace's file name for this process)."""
    shim = shims[0]
    copy = tmp_path / "copy.so"
    shutil.copyfile(shim.library, copy)
    # the mappings of each file named, by its whole path (never a part of it)
    script = ("import ctypes,os,sys; l=ctypes.CDLL('libcuda.so.1'); v=ctypes.c_int(); "
              "l.cuDriverGetVersion(ctypes.byref(v)); "
              "maps=[ln.rstrip('\\n').split(None, 5)[5:] for ln in open('/proc/self/maps')]; "
              "print(*(maps.count([os.path.realpath(f)]) for f in sys.argv[1:]))")
    proc = run_hang_checked([sys.executable, "-c", script, copy, shim.library],
                            shim.env(SHIMGEN_DRIVER=str(copy), SHIMGEN_QUIET="1"))
    assert proc.returncode == 0, proc.stderr
    copies, shims_mapped = map(int, proc.stdout.split())
    assert copies == 0 and shims_mapped > 0, proc.stdout  # the shim itself is seen


# ---- SHIMGEN_ATTR_OVERRIDE values outside int ----

REFUSED = ["1=2147483648", "1=-2147483649", "1=4294967297", "1=99999999999999999999",
           "1=", "=5", "1=abc", "1=5x", "1=+5", "1= 5", "1=0x10", "x=1", "-1=3", "100001=1",
           "1"]


def override_line(items: str) -> str:
    return (f"shimgen: SHIMGEN_ATTR_OVERRIDE in effect:{items} (values reported to the "
            "program; the driver's state is untouched)")


def refusal_line(item: str) -> str:
    return (f"shimgen: SHIMGEN_ATTR_OVERRIDE: '{item}' is not ATTRIBUTE=VALUE (an attribute "
            "number from 0 to 100000, a value from -2147483648 to 2147483647); ignored")


@pytest.mark.parametrize("item", REFUSED)
def test_attr_override_out_of_range_or_garbage_is_refused(shims, probes, item):
    """On the real driver: each bad item is refused in one line; the good one next to it
    is in effect exactly, and nothing else is announced."""
    proc = run([probes / "faults_calls", "calls", "1"],
               shims[0].env(SHIMGEN_ATTR_OVERRIDE=f"116=1,{item}"))
    assert shim_lines(proc.stderr) == [refusal_line(item), override_line(" 116=1")]


@pytest.mark.parametrize("value", ["2147483647", "-2147483648", "0", "-0"])
def test_attr_override_edges_of_int_are_taken(shims, probes, value):
    proc = run([probes / "faults_calls", "calls", "1"],
               shims[0].env(SHIMGEN_ATTR_OVERRIDE=f"100000={value}"))
    assert shim_lines(proc.stderr) == [override_line(f" 100000={int(value)}")]


def gateprobe_attr1(probes, shim_library, spec: str) -> tuple[list[int], str]:
    env = clean_env()
    env.update(LD_PRELOAD=str(shim_library), SHIMGEN_ATTR_OVERRIDE=spec)
    proc = run([probes / "gateprobe"], env, timeout=60)
    return [int(v) for v in re.findall(r"^dev \d .* attr1 (-?\d+) ", proc.stdout, re.M)], \
        proc.stderr


def test_attr_override_values_reach_the_program_exactly(probes, request):
    """A device is needed to see the value reported (fake driver, attribute 1 is 1024):
    the edges of int are reported as given; a refused value has no effect at all."""
    fake = request.getfixturevalue("fake_shim")
    assert gateprobe_attr1(probes, fake, "1=2147483647")[0] == [2147483647] * 2
    assert gateprobe_attr1(probes, fake, "1=-2147483648")[0] == [-2147483648] * 2
    for bad in ("1=4294967297", "1=2147483648", "1=-2147483649", "1=", "=1024"):
        values, err = gateprobe_attr1(probes, fake, bad)
        assert values == [1024, 1024], bad
        assert "in effect" not in err and err.count("ignored") == 1


# ---- dlmopen into another namespace: not routed, as the docs say ----

DLMOPEN_LINE = re.compile(r"^file (.+) rc (-?\d+) version (-?\d+) calls (\d+)$", re.M)


@pytest.mark.parametrize("ns,name,routed", [
    ("base", "libcuda.so.1", True),
    ("base", "libcuda.so", False),
    ("base", "DRIVER", False),
    ("new", "libcuda.so.1", False),
    ("new", "libcuda.so", False),
    ("new", "DRIVER", False),
])
def test_dlmopen_gives_what_the_docs_say(shims, probes, tmp_path, ns, name, routed):
    """dlmopen(LM_ID_BASE, "libcuda.so.1") finds the shim by its SONAME, as dlopen does;
    every other dlmopen of the driver (another name or the driver's path in the base
    namespace, any name in a new namespace) gives the real driver: its calls work, bypass
    the shim and are not in the trace (docs/design.md, "Every route into the driver")."""
    shim = shims[0]
    if name == "DRIVER":
        name = str(shim.driver.path)
    trace = tmp_path / "trace.json"
    proc = run([probes / "loading_dlmopen", ns, name, "5"],
               shim.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)))
    m = DLMOPEN_LINE.search(proc.stdout)
    assert m and (int(m.group(2)), int(m.group(3))) == (0, shim.cuda_version), proc.stdout
    lands = os.path.realpath(m.group(1))
    if routed:
        assert lands == os.path.realpath(shim.library)
        assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 5}
    else:
        assert lands == os.path.realpath(shim.driver.path)
        assert not trace.exists()  # the shim saw no call, loaded no driver, wrote no trace
