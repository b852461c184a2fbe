"""Faults at run time, the driver side: the shim under a program that meets a changed, older
or newer driver, a second shim for the same driver, or another interposer. CPU only: real
Debian drivers and the fake driver (tests/c/fake_libcuda.c); the probes are
tests/c/faults_*.c. A driver that is gone at run time is tested in tests/runtime/test_shim.py."""


import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.cuda import CUDA_ERROR_NOT_SUPPORTED
from shimgen.driver.library import read_driver
from shimgen.runenv import SHIM_LIBRARY
from tests.faultkit import (
    NEW_IN_555,
    ROOT,
    clean_env,
    run,
    shim_for,
    shim_lines,
    trace_tables,
    with_other_build_id,
)

# ---- the driver changed, older or newer than the shim ----


@pytest.mark.parametrize("how", ["replaced-in-place", "SHIMGEN_DRIVER"])
def test_changed_driver_forwards_by_name_and_says_so_once(shims, probes, tmp_path, how):
    """A driver with another build-id (an upgrade): every call is forwarded by name, the
    program runs as before, and the shim says once that it should be rebuilt."""
    s = shims[0]
    lib = tmp_path / "lib"
    lib.mkdir()
    path = lib / s.driver.path.name
    shutil.copyfile(s.driver.path, path)
    old = read_driver(path).build_id
    if how == "replaced-in-place":
        # A shim built for the file at this path; then a package upgrade replaces the file.
        out = tmp_path / "out"
        proc = subprocess.run([sys.executable, "-m", "shimgen", "build", "--driver", str(path),
                               "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        shim_lib = next(out.glob(f"cudashim-*/{SHIM_LIBRARY}"))
        extra = {}
    else:
        shim_lib = s.library
        extra = {"SHIMGEN_DRIVER": str(path)}
    new = with_other_build_id(path, path)
    assert new != old
    trace = tmp_path / "trace.json"
    env = dict(clean_env(), LD_PRELOAD=str(shim_lib), LD_LIBRARY_PATH=str(lib),
               SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace), **extra)
    proc = run([probes / "race", "50", s.cuda_version], env)
    assert "threads 64 calls 3200 failures 0" in proc.stdout
    lines = shim_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert f"has build-id {new}, the shim was built for {old}" in lines[0]
    assert lines[0].endswith("forwarding by name, rebuild the shim")
    assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 3200}


def test_trace_names_the_driver_that_was_loaded(shims, probes, tmp_path):
    s535, s555 = shim_for(shims, "535.261.03"), shim_for(shims, "555.58.02")
    trace = tmp_path / "trace.json"
    run([probes / "faults_calls", "calls", "3"],
        s535.env(SHIMGEN_DRIVER=str(s555.driver.path), SHIMGEN_TRACE="1",
                 SHIMGEN_TRACE_FILE=str(trace)))
    data = json.loads(trace.read_text())
    assert data["driver"] == str(s555.driver.path)
    assert data["calls"] == {"cuDriverGetVersion": 3}
    assert data.get("loaded_build_id") == read_driver(s555.driver.path).build_id


def newfn_lines(out: str) -> dict[str, str]:
    """faults_newfn's output, by its first word."""
    return {ln.split(" ", 1)[0]: ln for ln in out.splitlines()}


def test_driver_older_than_shim(shims, probes):
    """A shim built for 555 on the 535 driver: the 43 functions 535 lacks return
    CUDA_ERROR_NOT_SUPPORTED (801) without reaching any driver; cuGetProcAddress gives the
    driver's own answer; everything else works. The shim says so in two lines, each once:
    the build-id line and the count of missing functions."""
    s535, s555 = shim_for(shims, "535.261.03"), shim_for(shims, "555.58.02")
    new_names = set(read_driver(s555.driver.path).function_names())
    missing = sorted(new_names - set(read_driver(s535.driver.path).function_names()))
    assert NEW_IN_555 in missing and len(missing) == 43
    env = s555.env(SHIMGEN_DRIVER=str(s535.driver.path))
    args = [probes / "faults_newfn", NEW_IN_555, s555.cuda_version]
    via = run(args, env)
    real = newfn_lines(run(args, s535.env_without_shim()).stdout)
    got = newfn_lines(via.stdout)
    assert got["dlsym"] == f"dlsym {NEW_IN_555} found rc {CUDA_ERROR_NOT_SUPPORTED}"
    assert real["dlsym"] == f"dlsym {NEW_IN_555} null rc -1"
    # cuGetProcAddress_v2 is the 535 driver's own answer: symbol not found (status 1).
    assert got["proc"] == real["proc"] == f"proc {NEW_IN_555} rc 0 status 1 lib null call -1"
    assert got["version"] == real["version"] == f"version rc 0 version {s535.cuda_version}"
    lines = shim_lines(via.stderr)
    assert len(lines) == 2, via.stderr
    assert "has build-id" in lines[0] and "rebuild the shim" in lines[0]
    assert (f"lacks {len(missing)} of the shim's {len(new_names)} functions (they return "
            "CUDA_ERROR_NOT_SUPPORTED)") in lines[1]
    # Every function the old driver lacks, called with no arguments: all 801, no crash.
    allrun = run([probes / "faults_calls", "all", "3", str(CUDA_ERROR_NOT_SUPPORTED)], env,
                 input="\n".join(missing))
    assert "all functions 43 calls 129 expected 129" in allrun.stdout
    assert len(shim_lines(allrun.stderr)) == 2


def test_driver_newer_than_shim(shims, probes, tmp_path):
    """A shim built for 535 on the 555 driver: a function the shim does not know still
    reaches the driver through cuGetProcAddress. The answer is passed through unmapped
    (counted as unmapped_proc_addresses; calls through it are not counted), the call gives
    the driver's own result and the program goes on. dlsym on libcuda.so.1 does not find the
    function: the old shim does not export it (rebuild). The shim says once to rebuild it."""
    s535, s555 = shim_for(shims, "535.261.03"), shim_for(shims, "555.58.02")
    trace = tmp_path / "trace.json"
    env = s535.env(SHIMGEN_DRIVER=str(s555.driver.path), SHIMGEN_TRACE="1",
                   SHIMGEN_TRACE_FILE=str(trace))
    args = [probes / "faults_newfn", NEW_IN_555, s555.cuda_version]
    via = run(args, env)
    got = newfn_lines(via.stdout)
    real = newfn_lines(run(args, s555.env_without_shim()).stdout)
    assert got["dlsym"] == f"dlsym {NEW_IN_555} null rc -1"
    m = re.fullmatch(rf"proc {NEW_IN_555} rc 0 status 0 lib (\S+) call (-?\d+)", got["proc"])
    r = re.fullmatch(rf"proc {NEW_IN_555} rc 0 status 0 lib (\S+) call (-?\d+)", real["proc"])
    assert m and r, (got, real)
    assert Path(m.group(1)).resolve() == s555.driver.path.resolve()  # the driver itself
    assert m.group(2) == r.group(2)  # the driver's own result
    # A function the shim knows is still handed out as the shim's trampoline.
    known = got["known"].split(" lib ", 1)[1]
    assert Path(known).resolve() == s535.library.resolve()
    assert got["version"] == f"version rc 0 version {s555.cuda_version}"
    data = json.loads(trace.read_text())
    assert data["unmapped_proc_addresses"] == 1
    assert data["calls"] == {"cuGetProcAddress_v2": 2, "cuDriverGetVersion": 1}
    lines = shim_lines(via.stderr)
    assert len(lines) == 1 and lines[0].endswith("rebuild the shim"), via.stderr


# ---- two shims, or the shim with another interposer ----

ROUTE_NAMES = [
    "dlopen_libcuda.so.1", "dlopen_libcuda.so", "dlopen_absolute", "dlsym_default",
    "dlsym_next", "after_version_query", "cuGetProcAddress", "cuGetProcAddress_v2",
    "cuGetProcAddress_self",
]
# routes.c: one call of each entry point per route, and 8 ABI-variant lookups through each
ROUTE_COUNTS = {"cuDriverGetVersion": 10, "cuGetProcAddress_v2": 3 + 8, "cuGetProcAddress": 1 + 8}


def route_libs(out: str) -> dict[str, Path]:
    """routes probe output: route -> the file its cuDriverGetVersion lives in; every route
    must have returned CUDA_SUCCESS."""
    found = {}
    for m in re.finditer(r"^route (\S+) rc (-?\d+) version (\d+) lib (.*)$", out, re.M):
        assert m.group(2) == "0", m.group(0)
        found[m.group(1)] = (Path(m.group(4)).resolve(), int(m.group(3)))
    assert sorted(found) == sorted(ROUTE_NAMES)
    return found


@pytest.mark.parametrize("order", ["shims-fixture-first", "second-first"])
def test_two_shims_for_one_driver(shims, second_shim, probes, tmp_path, order):
    """LD_PRELOAD=A:B, two shims for one driver. Defined behaviour: A, the first, gets every
    route. A loads the driver through B's dlopen wrapper, which hands it B, so A's calls go
    on through B to the driver: both count every call, nothing recurses, results are
    right. With one SHIMGEN_TRACE_FILE both write it, one after the other (ELF destructors
    run in turn), each a whole trace: the first takes the plain name, which the job then
    has, so the second writes <name>.<pid>."""
    s = shims[0]
    a, b = (s.library, second_shim) if order == "shims-fixture-first" else (second_shim,
                                                                           s.library)
    env = s.env(SHIMGEN_TRACE="1")
    env["LD_PRELOAD"] = f"{a}:{b}"
    proc = run([probes / "routes", s.driver.path], env, timeout=60)
    for name, (lib, version) in route_libs(proc.stdout).items():
        assert lib == a.resolve(), name
        assert version == s.cuda_version, name
    assert trace_tables(proc.stderr) == [ROUTE_COUNTS, ROUTE_COUNTS]
    trace = tmp_path / "trace.json"
    env.update(SHIMGEN_TRACE_FILE=str(trace))
    proc = run([probes / "routes", s.driver.path], env, timeout=60)
    first = json.loads(trace.read_text())
    assert first["calls"] == ROUTE_COUNTS
    second = tmp_path / f"trace.json.{first['pid']}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json", second.name]
    assert json.loads(second.read_text())["calls"] == ROUTE_COUNTS


def test_two_shims_do_not_blame_the_driver(shims, second_shim, probes):
    s = shims[0]
    env = s.env()
    env["LD_PRELOAD"] = f"{s.library}:{second_shim}"
    proc = run([probes / "faults_calls", "calls", "3"], env, timeout=60)
    assert f"version {s.cuda_version}" in proc.stdout
    assert "build-id" not in proc.stderr and "rebuild" not in proc.stderr, proc.stderr
    assert shim_lines(proc.stderr) == [
        f"shimgen: another shim ({second_shim.resolve()}) is preloaded after this one; calls "
        "go through both"], proc.stderr


@pytest.mark.parametrize("order", ["interposer-first", "shim-first"])
def test_shim_with_another_interposer(shims, interposer, probes, tmp_path, order):
    """Another LD_PRELOAD library that wraps cuDriverGetVersion and dlopen with RTLD_NEXT.
    interposer-first: the symbol routes (dlsym RTLD_DEFAULT/RTLD_NEXT) reach the interposer,
    which forwards to the shim; the handle routes reach the shim directly; the interposer sees
    the program's dlopen names, not the shim's own load of the driver.
    shim-first: every route reaches the shim, the interposer's cuDriverGetVersion is never
    called, and its dlopen sees what the shim passes on: the shim's own path for each libcuda
    name, then the real driver when the shim loads it. Either way every call is traced once."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    env = s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace))
    first, second = (interposer, s.library) if order == "interposer-first" else (s.library,
                                                                                 interposer)
    env["LD_PRELOAD"] = f"{first}:{second}"
    proc = run([probes / "routes", s.driver.path], env, timeout=60)
    where = {}
    for name, (lib, version) in route_libs(proc.stdout).items():
        assert version == s.cuda_version, name
        where[name] = ("interposer" if lib == interposer.resolve() else
                       "shim" if lib == s.library.resolve() else str(lib))
    opened = re.findall(r"^interposer dlopen (.*)$", proc.stderr, re.M)
    summary = re.findall(r"^interposer cuDriverGetVersion (\d+) dlopen (\d+)$", proc.stderr, re.M)
    if order == "interposer-first":
        assert where == {r: "interposer" if r in ("dlsym_default", "dlsym_next") else "shim"
                         for r in ROUTE_NAMES}
        assert opened == ["libcuda.so.1", "libcuda.so", str(s.driver.path)]
        assert summary == [("2", "3")]
    else:
        assert where == {r: "shim" for r in ROUTE_NAMES}
        assert [Path(p).resolve() for p in opened] == [s.library.resolve()] * 3 + [
            s.driver.path.resolve()]
        assert summary == [("0", "4")]
    assert json.loads(trace.read_text())["calls"] == ROUTE_COUNTS
    assert shim_lines(proc.stderr) == []

