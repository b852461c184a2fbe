"""Faults at run time (issue 5): the shim under a program that meets a changed, older or newer
driver, a second shim or another interposer, fork and exec, dlclose, threads that exit, exits
from signal handlers, hostile trace paths, and set-user-ID programs. CPU only: real Debian
drivers (the `drivers` and `shims` fixtures) and the fake driver that the tests build
(tests/c/fake_libcuda.c). The probes are tests/c/faults_*.c.

The gate-writing
rules (nothing written without SHIMGEN_GATES and an exact identity match) are tested in
tests/test_gate_runtime.py; a driver that is gone at run time in tests/test_shim.py
(test_missing_driver_at_run_time_fails_calls_not_process, and
test_driver_upgrade_after_build_loads_the_new_driver for the file replaced by an upgrade)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from shimgen.build import build
from shimgen.cuda import CUDA_ERROR_NOT_SUPPORTED
from shimgen.cuda import CUDA_ERROR_SHARED_OBJECT_INIT_FAILED as NO_DRIVER
from shimgen.driver import read_driver
from shimgen.model import build_model

ROOT = Path(__file__).resolve().parent.parent
NEW_IN_555 = "cuLibraryGetKernelCount"  # (unsigned *count, CUlibrary lib); not in 535


# ---- helpers ----

def shim_for(shims, version: str):
    return next(s for s in shims if s.driver.version == version)


def run(cmd, env, *, ok=True, timeout=120, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True,
                          timeout=timeout, **kw)
    if ok:
        assert proc.returncode == 0, f"{cmd[0]} exited {proc.returncode}: {proc.stderr[-3000:]}"
    return proc


def shim_lines(stderr: str) -> list[str]:
    """The shim's own messages (not its trace table)."""
    return [ln for ln in stderr.splitlines() if ln.startswith("shimgen: ")]


def trace_tables(stderr: str) -> list[dict[str, int]]:
    """Every `SHIMGEN_TRACE` table on stderr, as {function: calls}."""
    tables = []
    header = r"^shimgen trace \(pid \d+, libcuda [^)]*\): .*$"
    for block in re.split(header, stderr, flags=re.M)[1:]:
        rows = {}
        for m in re.finditer(r"^\s+(\d+)\s+(cu\w+)$", block, re.M):
            rows[m.group(2)] = int(m.group(1))
        tables.append(rows)
    return tables


def with_other_build_id(src: Path, dst: Path) -> str:
    """Writes to `dst` a copy of the driver `src` that differs in one byte of its GNU
    build-id, and returns the new build-id."""
    data = bytearray(src.read_bytes())
    bid = bytes.fromhex(read_driver(src, require_real=False).build_id)
    at = data.find(bid)
    assert at > 0
    data[at] ^= 0xFF
    tmp = dst.with_name(dst.name + ".new")
    tmp.write_bytes(bytes(data))
    os.replace(tmp, dst)  # as a package upgrade does: a new file under the same name
    return read_driver(dst, require_real=False).build_id


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("SHIMGEN_", "LD_", "FAKE_"))}


def no_dac_prefix() -> list[str] | None:
    """Run as root without CAP_DAC_OVERRIDE, so the kernel checks permissions as for a user."""
    if not shutil.which("setpriv"):
        return None
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]
    probe = subprocess.run([*prefix, "true"], capture_output=True)
    return prefix if probe.returncode == 0 else None


# ---- fixtures ----

@pytest.fixture(scope="module")
def fake_shim(probes, tmp_path_factory) -> Path:
    """A shim for the fake driver (tests/c/fake_libcuda.c), built through the Python API as in
    tests/test_timing.py: `shimgen build` refuses the fake, a stub by design."""
    fake = probes / "libfake_libcuda_for_tests.so"
    img = read_driver(fake, require_real=False)
    return build(build_model(img, ["shimgen", "build", "--driver", str(fake)]),
                 tmp_path_factory.mktemp("fakeshim")).library


@pytest.fixture(scope="module")
def second_shim(drivers, tmp_path_factory) -> Path:
    """Another shim for the first driver, in another place (as a second tool would ship it)."""
    out = tmp_path_factory.mktemp("second")
    proc = subprocess.run([sys.executable, "-m", "shimgen", "build", "--driver",
                           str(drivers[0].libdir / "libcuda.so.1"), "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return next(out.glob("cudashim-*/libcudashim.so"))


@pytest.fixture(scope="module")
def interposer(tmp_path_factory) -> Path:
    """tests/c/faults_interposer.c as a shared library, built with the C compiler."""
    out = tmp_path_factory.mktemp("interposer") / "libfaults_interposer.so"
    cc = shlex.split(os.environ.get("CC", "cc"))
    proc = subprocess.run([*cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o",
                           str(out), str(ROOT / "tests/c/faults_interposer.c"), "-ldl"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


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
        shim_lib = next(out.glob("cudashim-*/libcudashim.so"))
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
ROUTE_COUNTS = {"cuDriverGetVersion": 10, "cuGetProcAddress_v2": 3, "cuGetProcAddress": 1}


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
    right. With one SHIMGEN_TRACE_FILE both write the same name, one after the other (atexit
    handlers run in turn), so the file is one whole trace."""
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
    assert json.loads(trace.read_text())["calls"] == ROUTE_COUNTS
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_two_shims_do_not_blame_the_driver(shims, second_shim, probes):
    s = shims[0]
    env = s.env()
    env["LD_PRELOAD"] = f"{s.library}:{second_shim}"
    proc = run([probes / "faults_calls", "calls", "3"], env, timeout=60)
    assert f"version {s.cuda_version}" in proc.stdout
    assert "build-id" not in proc.stderr and "rebuild" not in proc.stderr, proc.stderr
    assert len(shim_lines(proc.stderr)) <= 1


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


# ---- processes: fork, exec, dlclose, threads, signals ----

@pytest.mark.parametrize("mode", ["1", "time"])
def test_fork_and_exec_children_write_their_own_trace(shims, probes, tmp_path, mode):
    """The parent calls, then 8 children run at once: 4 forked (they call and exit), 4 forked
    and exec'd (a new program under the inherited LD_PRELOAD). Each process writes its own
    whole file: the parent the plain name, each child <name>.<pid>; nothing else is
    written. (Fork alone: tests/test_shim.py test_calls_in_forked_children.)"""
    s = shims[0]
    out_dir = tmp_path / "traces"
    out_dir.mkdir()
    trace = out_dir / "trace.json"
    proc = run([probes / "faults_calls", "forkexec", "8", "5"],
               s.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_FILE=str(trace)))
    parent = int(re.search(r"^pid parent (\d+) calls 5 rc 0 ", proc.stdout, re.M).group(1))
    children = {int(m.group(1)): (m.group(2), int(m.group(3))) for m in
                re.finditer(r"^child (\d+) (forked|exec) (\d+)$", proc.stdout, re.M)}
    assert sorted(k for k, _ in children.values()) == ["exec"] * 4 + ["forked"] * 4
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        ["trace.json"] + [f"trace.json.{pid}" for pid in children])
    data = json.loads(trace.read_text())
    assert (data["pid"], data["calls"]) == (parent, {"cuDriverGetVersion": 5})
    for pid, (_, n) in children.items():
        child = json.loads(Path(f"{trace}.{pid}").read_text())
        assert (child["pid"], child["calls"]) == (pid, {"cuDriverGetVersion": n})
        if mode == "time":
            assert child["time"]["cuDriverGetVersion"]["calls"] == n
    assert shim_lines(proc.stderr) == []


def test_wrapper_process_keeps_the_plain_trace_name(shims, probes, tmp_path):
    """Decided behaviour (docs/multigpu.md, README): the first process of a job that loads the
    shim owns the plain SHIMGEN_TRACE_FILE name, even a wrapper (sh -c, timeout, a launcher)
    that never calls the driver and so writes nothing; the program it starts writes
    <name>.<pid>. Letting every exec'd program claim the plain name would make sibling
    workers of one launcher overwrite each other. Use %p or %r under launchers."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    run(["/bin/sh", "-c", '"$0" calls 3; status=$?; exit $status', probes / "faults_calls"],
        s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)))
    assert not trace.exists()
    written = list(tmp_path.glob("trace.json.*"))
    assert len(written) == 1
    assert json.loads(written[0].read_text())["calls"] == {"cuDriverGetVersion": 3}
    pattern = tmp_path / "t.%p.json"
    run(["/bin/sh", "-c", '"$0" calls 2; status=$?; exit $status', probes / "faults_calls"],
        s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(pattern)))
    per_pid = list(tmp_path.glob("t.*.json"))
    assert len(per_pid) == 1
    assert json.loads(per_pid[0].read_text())["calls"] == {"cuDriverGetVersion": 2}


@pytest.mark.parametrize("mode", ["1", "time"])
@pytest.mark.parametrize("thread", [False, True], ids=["main", "thread-after-close"])
def test_dlclose_and_reopen_many_times(shims, probes, tmp_path, mode, thread):
    """300 cycles of dlopen, call, dlclose, by three names (libcuda.so.1, libcuda.so and the
    absolute path of the real driver, all the preloaded shim). With a thread that calls and
    only exits after the dlclose. Every call works; the totals are exact."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    names = ["libcuda.so.1", "libcuda.so", str(s.driver.path)]
    proc = run([probes / "faults_reopen", "300", *(["thread"] if thread else []), *names],
               s.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_FILE=str(trace)))
    calls = 900 * (2 if thread else 1)
    assert f"cycles 300 opens 900 calls {calls} failures 0" in proc.stdout
    assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": calls}


@pytest.mark.parametrize("mode", ["1", "time"])
def test_dlclose_of_a_shim_loaded_without_preload(shims, probes, tmp_path, mode):
    s = shims[0]
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libcuda.so.1").symlink_to(s.library)
    trace = tmp_path / "trace.json"
    env = dict(clean_env(), LD_LIBRARY_PATH=str(lib), SHIMGEN_TRACE=mode,
               SHIMGEN_TRACE_FILE=str(trace))
    proc = run([probes / "faults_reopen", "50", "thread", "libcuda.so.1"], env, ok=False)
    assert proc.returncode == 0, proc.stderr
    assert "cycles 50 opens 50 calls 100 failures 0" in proc.stdout
    assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 100}


@pytest.mark.parametrize("mode", ["1", "time"])
def test_threads_exit_while_tracing(shim, probes, tmp_path, mode):
    """20 waves of 24 threads that call and exit (return, pthread_exit, detached) while the
    main thread keeps calling: every call is counted, exactly."""
    trace = tmp_path / "trace.json"
    proc = run([probes / "faults_threads", "libcuda.so.1", "20", "24", "200"],
               shim.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_FILE=str(trace)))
    m = re.search(r"^threads 480 thread_calls 96000 main_calls (\d+) host_funcs 0 bad 0$",
                  proc.stdout, re.M)
    assert m, proc.stdout
    data = json.loads(trace.read_text())
    assert data["calls"] == {"cuDriverGetVersion": 96000 + int(m.group(1))}
    if mode == "time":
        assert data["untimed_calls"] == 0
        assert data["time"]["cuDriverGetVersion"]["calls"] == 96000 + int(m.group(1))


@pytest.mark.parametrize("mode", ["1", "time"])
def test_thread_exits_inside_a_driver_call(fake_shim, probes, tmp_path, mode):
    """Fake driver: each thread ends inside cuLaunchHostFunc, whose host function calls
    pthread_exit; under SHIMGEN_TRACE=time that call never returns through the shim. No
    crash; every call is counted (the calls that never returned are counted, not timed)."""
    trace = tmp_path / "trace.json"
    env = dict(clean_env(), LD_PRELOAD=str(fake_shim), SHIMGEN_TRACE=mode,
               SHIMGEN_TRACE_FILE=str(trace))
    proc = run([probes / "faults_threads", "libcuda.so.1", "10", "16", "100", "callback-exit"],
               env)
    m = re.search(r"^threads 160 thread_calls 16000 main_calls (\d+) host_funcs 160 bad 0$",
                  proc.stdout, re.M)
    assert m, proc.stdout
    data = json.loads(trace.read_text())
    assert data["calls"] == {"cuDriverGetVersion": 16000 + int(m.group(1)),
                             "cuLaunchHostFunc": 160}
    if mode == "time":
        assert data["time"]["cuLaunchHostFunc"]["calls"] == 160


def run_to_signal(probe: Path, how: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Start faults_sigexit, wait for "ready", send SIGTERM when `how` asks for it, and wait
    for the end. Every wait has a time limit: a hang fails the test."""
    proc = subprocess.Popen([str(probe), how, "20000"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the probe never got ready"
        line = proc.stdout.readline()
        assert line.startswith("ready 20000 bad 0"), line
        if how in ("term", "nohandler"):
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, line + out, err


@pytest.mark.parametrize("mode", ["1", "time"])
@pytest.mark.parametrize("how", ["alarm", "term"])
def test_exit_from_a_signal_handler_writes_a_whole_trace(shims, probes, tmp_path, how, mode):
    """exit() in a SIGALRM or SIGTERM handler while four threads and the interrupted main
    thread are calling the driver. Defined behaviour: exit() runs the atexit handler, so the
    trace is written, whole: valid JSON with a snapshot of the counts (at least the calls made
    before the signal; threads still calling may add some while it is written). Nothing
    hangs. Ten runs each."""
    s = shims[0]
    for i in range(10):
        trace = tmp_path / f"trace{i}.json"
        rc, _, err = run_to_signal(probes / "faults_sigexit", how,
                                   s.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_FILE=str(trace)))
        assert rc == 7, err
        data = json.loads(trace.read_text())
        assert list(data["calls"]) == ["cuDriverGetVersion"]
        assert data["calls"]["cuDriverGetVersion"] >= 20000
        if mode == "time":
            assert data["time"]["cuDriverGetVersion"]["calls"] >= 20000
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"trace{i}.json" for i in range(10)]


def test_killed_by_a_signal_writes_no_trace(shims, probes, tmp_path):
    """SIGTERM with its default action: no atexit handler runs, so there is no trace file,
    not even a partial one."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    rc, _, err = run_to_signal(probes / "faults_sigexit", "nohandler",
                               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)))
    assert rc == -signal.SIGTERM
    assert list(tmp_path.iterdir()) == [] and err == ""


@pytest.mark.parametrize("to_file", [True, False], ids=["file", "stderr"])
def test_underscore_exit_writes_no_trace(shims, probes, tmp_path, to_file):
    """_exit() runs no atexit handler: no trace, by design. The same holds for a process
    killed by SIGKILL, and for the calls a process made before it called exec."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    env = s.env(SHIMGEN_TRACE="1", **({"SHIMGEN_TRACE_FILE": str(trace)} if to_file else {}))
    rc, _, err = run_to_signal(probes / "faults_sigexit", "_exit", env)
    assert rc == 7
    assert list(tmp_path.iterdir()) == [] and err == ""


def test_environment_is_read_once_when_the_shim_loads(shims, probes, tmp_path):
    """The program changes SHIMGEN_DRIVER, SHIMGEN_TRACE, SHIMGEN_TRACE_FILE and
    SHIMGEN_QUIET in its own environment before its first driver call: nothing changes. The
    shim read them once, when it was loaded, and never reads them again."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    proc = run([probes / "faults_calls", "setenv", "7"],
               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)))
    assert re.search(rf"^pid main \d+ calls 7 rc 0 version {s.cuda_version}$", proc.stdout,
                     re.M)
    assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 7}


# ---- trace files ----

@pytest.mark.parametrize("target", ["existing", "dangling"])
def test_trace_file_symlink_is_not_followed(shims, probes, tmp_path, target):
    """SHIMGEN_TRACE_FILE names a symlink: it is not followed (O_NOFOLLOW). The file it
    points to is not touched (or not created), and one line says why there is no trace."""
    s = shims[0]
    victim = tmp_path / "victim.txt"
    if target == "existing":
        victim.write_text("not a trace\n")
        before = victim.stat()
    link = tmp_path / "trace.json"
    link.symlink_to(victim)
    proc = run([probes / "faults_calls", "calls", "3"],
               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(link)))
    assert shim_lines(proc.stderr) == [
        f"shimgen: cannot write trace file {link}: Too many levels of symbolic links"]
    assert link.is_symlink()
    if target == "existing":
        assert victim.read_text() == "not a trace\n"
        assert victim.stat().st_mtime_ns == before.st_mtime_ns
    else:
        assert not victim.exists()


def test_trace_file_in_a_directory_the_user_cannot_write(shims, probes, tmp_path):
    """A directory the user cannot write (root without CAP_DAC_OVERRIDE, as a user is): one
    line per process, the calls work, nothing is created."""
    prefix = no_dac_prefix()
    if prefix is None:
        pytest.skip("cannot drop CAP_DAC_OVERRIDE here (no setpriv, or not allowed)")
    s = shims[0]
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    trace = ro / "trace.json"
    proc = run([*prefix, probes / "faults_calls", "forkexec", "2", "3"],
               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)))
    lines = shim_lines(proc.stderr)
    assert len(lines) == 3, proc.stderr  # the parent and its two children
    for ln in lines:
        assert re.fullmatch(rf"shimgen: cannot write trace file {re.escape(str(trace))}"
                            r"(\.\d+)?: Permission denied", ln), ln
    assert list(ro.iterdir()) == []


def test_trace_file_is_created_0644_by_the_user(shims, probes, tmp_path):
    """Created with mode 0644 (also under umask 0: never group- or world-writable), as a
    regular file owned by the process's user."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    run([probes / "faults_calls", "calls", "3"],
        s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)), umask=0)
    st = trace.lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644
    assert st.st_uid == os.geteuid()


def test_child_trace_does_not_clobber_an_existing_file(shims, probes, tmp_path):
    s = shims[0]
    trace = tmp_path / "trace.json"
    proc = run([probes / "faults_calls", "pidfile", "3"],
               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)))
    child = re.search(r"^child (\d+) precious$", proc.stdout, re.M).group(1)
    assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 3}
    assert Path(f"{trace}.{child}").read_text() == "precious\n"
    lines = shim_lines(proc.stderr)
    assert len(lines) == 1 and f"{trace}.{child}" in lines[0], proc.stderr


def test_trace_file_fifo_without_reader_does_not_hang(shims, probes, tmp_path):
    s = shims[0]
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    proc = run([probes / "faults_calls", "calls", "3"],
               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(fifo)), timeout=10)
    lines = shim_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"shimgen: cannot write trace file {fifo}")


@pytest.mark.parametrize("mode", ["1", "time"])
def test_trace_size_is_bounded_by_the_number_of_functions(shim, probes, tmp_path, mode):
    """Every exported function called, 1 and 1000 times each (the driver is missing, so each
    is the shim's failure stub). The JSON trace has one line per called function (two with
    time) plus a fixed frame of at most 16 lines: N + 10 lines with SHIMGEN_TRACE=1 and
    2N + 13 with time today (N = exported functions, 600 to 643 here). More calls only make
    the numbers longer. The stderr table has N + 2 lines. The failing driver is reported
    once, not per call."""
    names = read_driver(shim.driver.path).function_names()
    n = len(names)
    gone = str(tmp_path / "gone" / "libcuda.so.1")
    size = {}
    for reps in (1, 1000):
        trace = tmp_path / f"trace{reps}.json"
        proc = run([probes / "faults_calls", "all", reps, str(NO_DRIVER)],
                   shim.env(SHIMGEN_DRIVER=gone, SHIMGEN_TRACE=mode,
                            SHIMGEN_TRACE_FILE=str(trace)), input="\n".join(names) + "\n")
        assert f"all functions {n} calls {n * reps} expected {n * reps}" in proc.stdout
        assert len(shim_lines(proc.stderr)) == 1  # cannot load the real CUDA driver
        text = trace.read_text()
        data = json.loads(text)
        assert data["calls"] == dict.fromkeys(names, reps)
        lines = text.splitlines()
        per_function = [ln for ln in lines if re.match(r'    "cu\w+": [{\d]', ln)]
        assert len(per_function) == (n if mode == "1" else 2 * n)  # calls (and time) blocks
        assert len(lines) - len(per_function) <= 16  # the fixed frame: 10 lines (13 with time)
        size[reps] = len(text)
    if mode == "1":
        assert size[1000] - size[1] == 3 * n  # "1" became "1000" on each line
        proc = run([probes / "faults_calls", "all", "1", str(NO_DRIVER)],
                   shim.env(SHIMGEN_DRIVER=gone, SHIMGEN_TRACE=mode),
                   input="\n".join(names) + "\n")
        assert len(proc.stderr.splitlines()) == 1 + n + 2
        assert trace_tables(proc.stderr) == [dict.fromkeys(names, 1)]


# ---- security properties (docs/security.md) ----

def test_files_on_disk_are_never_modified(shims, probes, tmp_path):
    """The driver and the shim files are byte for byte the same, with the same mtime and
    mode, after runs that write gate bytes in the driver's memory (fake driver, SHIMGEN_GATES)
    and that trace every route of a real driver."""
    from test_gate_runtime import fake_plan

    fake = probes / "libfake_libcuda_for_tests.so"
    img = read_driver(fake, require_real=False)
    gate_lib = build(build_model(img, ["shimgen", "build", "--driver", str(fake), "--gates",
                                       "PLAN"], gates=fake_plan(fake)), tmp_path).library
    s = shims[0]
    files = [fake, gate_lib, s.driver.path, s.library]

    def state():
        return {f: (sha256(f), f.stat().st_mtime_ns, f.stat().st_mode) for f in files}

    before = state()
    proc = run([probes / "gateprobe"], dict(clean_env(), LD_PRELOAD=str(gate_lib),
                                             SHIMGEN_GATES="gdr,dmabuf", SHIMGEN_TRACE="time"))
    assert "SHIMGEN_GATES=gdr,dmabuf in effect" in proc.stderr
    assert re.search(r"^dev 0 .* byte40 0x78 byte44 0x0c$", proc.stdout, re.M)  # written
    run([probes / "routes", s.driver.path], s.env(SHIMGEN_TRACE="time"))
    assert state() == before


# Library calls that could change a file, memory protection, another process, or start a
# program. The shim imports none of them; open() is its only way to open a file (for the
# trace, with O_NOFOLLOW), so that one call is all there is to review.
FORBIDDEN_IMPORTS = {
    "unlink", "unlinkat", "rename", "renameat", "renameat2", "remove", "truncate",
    "truncate64", "ftruncate", "ftruncate64", "chmod", "fchmod", "fchmodat", "chown", "fchown",
    "lchown", "fchownat", "link", "linkat", "symlink", "symlinkat", "mkdir", "mkdirat",
    "rmdir", "pwrite", "pwrite64", "pwritev", "pwritev2", "mprotect", "pkey_mprotect", "mmap",
    "mmap64", "mremap", "ptrace", "process_vm_writev", "system", "popen", "execve", "execv",
    "execvp", "execvpe", "execl", "execlp", "execle", "fexecve", "fork", "vfork",
    "posix_spawn", "posix_spawnp", "clone", "dlmopen", "syscall", "socket", "connect",
}


def imported_functions(lib: Path) -> set[str]:
    from elftools.elf.elffile import ELFFile

    with open(lib, "rb") as fh:
        dynsym = ELFFile(fh).get_section_by_name(".dynsym")
        return {sym.name.split("@")[0] for sym in dynsym.iter_symbols()
                if sym.name and sym["st_shndx"] == "SHN_UNDEF"}


def test_shim_imports_nothing_that_changes_files_or_memory_protection(shims, probes, tmp_path):
    from test_gate_runtime import fake_plan

    fake = probes / "libfake_libcuda_for_tests.so"
    img = read_driver(fake, require_real=False)
    gate_lib = build(build_model(img, ["shimgen"], gates=fake_plan(fake)), tmp_path).library
    for lib in [s.library for s in shims] + [gate_lib]:
        imports = imported_functions(lib)
        assert "write" in imports and "open64" in imports | {"open"}  # the check sees imports
        assert imports & FORBIDDEN_IMPORTS == set(), lib
        opens = {name for name in imports if "open" in name}
        assert opens <= {"open", "open64", "fdopen", "dlopen"}, (lib, opens)


@pytest.fixture(scope="module")
def setuid_probe(probes):
    """faults_setuid copied set-user-ID root, run as uid 65534 through setpriv: ruid 65534,
    euid 0, AT_SECURE set by the kernel. The copy and its directory belong to a group no
    one has (mode 4750 and 0750), so no other user of the machine can run it while it
    exists; the test's process gets that group from setpriv."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to make and run a set-user-ID program")
    import grp

    def unused(gid: int) -> bool:
        try:
            grp.getgrgid(gid)
        except KeyError:
            return True
        return False

    gid = next(g for g in range(64900, 65500) if unused(g))
    where = Path(tempfile.mkdtemp(prefix="shimgen-setuid-", dir="/tmp"))
    try:
        os.chown(where, 0, gid)
        where.chmod(0o750)
        exe = where / "faults_setuid"
        shutil.copyfile(probes / "faults_setuid", exe)
        os.chown(exe, 0, gid)
        exe.chmod(0o4750)
        yield ["setpriv", "--reuid=65534", f"--regid={gid}", "--clear-groups", str(exe)]
    finally:
        shutil.rmtree(where, ignore_errors=True)


def as_nobody(setuid_cmd: list[str], lib: Path, env: dict[str, str]) -> dict[str, int]:
    proc = run([*setuid_cmd, lib], env, timeout=60)
    m = re.search(r"^ruid (\d+) euid (\d+) secure (\d+) preloaded (\d) rc (-?\d+) version (\d+)$",
                  proc.stdout, re.M)
    assert m, proc.stdout + proc.stderr
    got = dict(zip(["ruid", "euid", "secure", "preloaded", "rc", "version"],
                   map(int, m.groups()), strict=True))
    if (got["ruid"], got["euid"], got["secure"]) != (65534, 0, 1):
        pytest.skip(f"set-user-ID does not take effect here (nosuid, no_new_privs?): {got}")
    return got


def test_setuid_program_does_not_load_a_preloaded_shim(shims, probes, setuid_probe, tmp_path):
    """glibc ignores LD_PRELOAD entries with a '/' in a set-user-ID program (AT_SECURE), and
    loads a bare name only from the system directories, and only if that file is set-user-ID
    itself: a user's LD_PRELOAD cannot bring the shim into a privileged program. The same
    environment does preload it into an ordinary copy of the program (the control)."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    env = s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace))
    got = as_nobody(setuid_probe, s.driver.path, env)
    assert (got["preloaded"], got["rc"], got["version"]) == (0, 0, s.cuda_version)
    assert not trace.exists()
    control = run([probes / "faults_setuid", s.driver.path], env).stdout
    assert " preloaded 1 rc 0 " in control
    assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 1}



def test_setuid_program_ignores_shimgen_trace_file(shims, setuid_probe, tmp_path):
    """A set-user-ID root program that loads the shim itself (dlopen by path, which glibc
    allows): SHIMGEN_TRACE_FILE from the user must not make it write a file as root in a
    directory only root may write."""
    s = shims[0]
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o700)
    trace = root_only / "trace.json"
    got = as_nobody(setuid_probe, s.library,
                    dict(clean_env(), SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)))
    assert (got["rc"], got["version"]) == (0, s.cuda_version)
    assert not trace.exists()


def test_setuid_program_ignores_shimgen_driver(shims, probes, setuid_probe):
    """The same program: SHIMGEN_DRIVER from the user must not choose the library that is
    loaded (and run) as root. Here it names the fake driver, whose cuDriverGetVersion says
    12345; the shim must load the driver it was built for."""
    s = shims[0]
    got = as_nobody(setuid_probe, s.library,
                    dict(clean_env(),
                         SHIMGEN_DRIVER=str(probes / "libfake_libcuda_for_tests.so")))
    assert (got["rc"], got["version"]) == (0, s.cuda_version)
