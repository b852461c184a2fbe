"""User hooks (shimgen/shim/userhooks.py, docs/hooks.md): a hook on cuDriverGetVersion reached by
every route into the real drivers, direct, dlsym and every cuGetProcAddress answer; the
refusals (names the driver lacks, the cuGetProcAddress hooks, files that do not compile), each
naming the user's file and line with nothing installed; the cache of `shimgen run` keyed by
the hook's contents; counting and time mode on a hooked function; the chain through shimgen's
own hook; shimgen/hook.h with and without cuda.h; the examples memlimit.c and launchlog.c on
a FAKE driver (tests/c/fake_mem_libcuda.c) and memlimit.c as a unit."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.errors import ShimgenError
from shimgen.runenv import SHIM_MANIFEST
from shimgen.shim.pipeline import make_shim
from shimgen.shim.render import hook_header
from tests.run.test_run import _record, shimgen_run
from tests.runtime.test_shim import ROUTES, grid_versions, parse_routes, run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "hooks"
DELTA = 7  # what the test hook adds to the driver's version

VERSION_HOOK = f"""#include <shimgen/hook.h>

SHIMGEN_HOOK(CUresult, cuDriverGetVersion, (int *version))
{{
    CUresult rc = SHIMGEN_REAL(cuDriverGetVersion)(version);
    if (rc == CUDA_SUCCESS)
        *version += {DELTA};
    return rc;
}}
"""


def shimgen(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shimgen", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def version_hook(tmp_path_factory) -> Path:
    return write(tmp_path_factory.mktemp("hooks") / "version.c", VERSION_HOOK)


@pytest.fixture(scope="module")
def hooked(shims, version_hook, tmp_path_factory) -> dict[str, tuple]:
    """Per real driver: (its plain shim, the version-hooked shim's library, build output)."""
    out = tmp_path_factory.mktemp("hooked")
    built = {}
    for s in shims:
        proc = shimgen("build", "--driver", s.driver.libdir / "libcuda.so.1", "-o",
                       out / s.driver.version, "--hook", version_hook)
        assert proc.returncode == 0, proc.stderr
        (lib,) = (out / s.driver.version).glob("cudashim-*-hooks/libcudashim.so")
        built[s.driver.version] = (s, lib, proc.stdout)
    return built


def under(shim, lib: Path, **extra: str) -> dict[str, str]:
    env = shim.env(**extra)
    env["LD_PRELOAD"] = str(lib)
    return env


# ---- every route -----------------------------------------------------------------------

PROC_GRID = r"""
import ctypes, sys
lib = ctypes.CDLL("libcuda.so.1")
want = int(sys.argv[1])
fn_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))
seen = bad = 0
for version in map(int, sys.argv[2:]):
    for flags in (0, 1, 2):
        for v2 in (False, True):
            p, st = ctypes.c_void_p(), ctypes.c_int(-1)
            rc = (lib.cuGetProcAddress_v2("cuDriverGetVersion".encode(), ctypes.byref(p),
                                          version, ctypes.c_uint64(flags), ctypes.byref(st))
                  if v2 else lib.cuGetProcAddress("cuDriverGetVersion".encode(),
                                                  ctypes.byref(p), version,
                                                  ctypes.c_uint64(flags)))
            if rc != 0 or not p.value:
                continue
            got = ctypes.c_int()
            seen += 1
            if fn_t(p.value)(ctypes.byref(got)) != 0 or got.value != want:
                bad += 1
                print("wrong", version, flags, v2, got.value)
print("seen", seen, "bad", bad)
"""


def test_hook_reached_by_every_route(hooked, probes, shim, tmp_path):
    plain, lib, _ = hooked[shim.driver.version]
    want = plain.cuda_version + DELTA
    alias = tmp_path / "libdriver-alias.so"
    alias.symlink_to(plain.driver.path)
    trace = tmp_path / "t.json"
    out = run([probes / "routes", plain.driver.path, alias],
              under(plain, lib, SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace))).stdout
    routes = parse_routes(out)
    assert sorted(routes) == sorted(ROUTES)
    assert {name: (rc, v) for name, (rc, v, _) in routes.items()} == \
        {name: (0, want) for name in ROUTES}
    # counted once per call, the hook's call of SHIMGEN_REAL not again
    assert json.loads(trace.read_text())["calls"]["cuDriverGetVersion"] == len(ROUTES) + 1
    linked = parse_routes(run([probes / "route_linked"], under(plain, lib)).stdout)["linked"]
    assert linked[:2] == (0, want)
    versions = [str(v) for v in grid_versions(plain.cuda_version)]
    grid = run([sys.executable, "-c", PROC_GRID, str(want), *versions], under(plain, lib)).stdout
    seen, bad = map(int, re.search(r"seen (\d+) bad (\d+)", grid).groups())
    assert bad == 0 and seen > len(versions), grid


def test_cuda_runtime_reaches_the_hook(hooked, probes, shim):
    import nvidia.cuda_runtime

    plain, lib, _ = hooked[shim.driver.version]
    cudart = next(Path(list(nvidia.cuda_runtime.__path__)[0]).glob("lib/libcudart.so.12"))
    out = run([probes / "cudart_entry", cudart], under(plain, lib)).stdout
    assert f"cudaDriverGetVersion rc 0 version {plain.cuda_version + DELTA}" in out


@pytest.mark.parametrize("mode", ["1", "time"])
def test_counting_and_time_on_a_hooked_function(hooked, probes, shim, tmp_path, mode):
    plain, lib, _ = hooked[shim.driver.version]
    trace = tmp_path / "t.json"
    run([probes / "race", "3", plain.cuda_version + DELTA],
        under(plain, lib, SHIMGEN_TRACE=mode, SHIMGEN_TRACE_FILE=str(trace)))
    got = json.loads(trace.read_text())
    assert got["calls"]["cuDriverGetVersion"] == 64 * 3
    if mode == "time":
        fn = got["time"]["cuDriverGetVersion"]
        assert fn["calls"] == 64 * 3 and fn["total_ns"] > 0


def test_summary_names_hooks_and_other_variants(drivers, tmp_path):
    driver = drivers[-1].libdir / "libcuda.so.1"
    proc = shimgen("build", "--driver", driver, "-o", tmp_path, "--hook",
                   EXAMPLES / "memlimit.c", "--hook", EXAMPLES / "launchlog.c")
    assert proc.returncode == 0, proc.stderr
    lines = {m.group(1): m.group(2) for m in
             re.finditer(r"^user hook  (\w+) from \S+(.*)$", proc.stdout, re.M)}
    assert set(lines) == {"cuMemAlloc_v2", "cuMemAllocAsync", "cuMemAllocPitch_v2",
                          "cuMemAllocManaged", "cuMemCreate", "cuMemFree_v2", "cuMemFreeAsync",
                          "cuMemRelease", "cuMemGetInfo_v2", "cuLaunchKernel",
                          "cuLaunchKernel_ptsz"}
    assert "not hooked: cuMemAlloc " in lines["cuMemAlloc_v2"]
    assert "cuMemAllocAsync_ptsz" in lines["cuMemAllocAsync"]
    (manifest,) = tmp_path.glob(f"cudashim-*-hooks/{SHIM_MANIFEST}")
    recorded = json.loads(manifest.read_text())
    assert [h["file"] for h in recorded["user_hooks"]] == \
        [str(EXAMPLES / "memlimit.c"), str(EXAMPLES / "launchlog.c")]
    cmd = shlex.split(recorded["shimgen_command"])
    assert cmd[-4:] == ["--hook", str(EXAMPLES / "memlimit.c"), "--hook",
                        str(EXAMPLES / "launchlog.c")]


# ---- a hook in front of a function the loaded driver lacks -------------------------------

FAKING_HOOK = """#include <string.h>
#include <shimgen/hook.h>

static int at_load = -1;

SHIMGEN_HOOK(CUresult, cuDriverGetVersion, (int *version))
{
    *version = 100000 + at_load;
    return CUDA_SUCCESS;
}

/* Before the driver is loaded (the shim's own slots not yet filled): SHIMGEN_REAL goes
 * through the export's slot, which loads it. */
__attribute__((constructor)) static void ask_at_load(void)
{
    int v = -1;
    if (SHIMGEN_REAL(cuDriverGetVersion)(&v) == CUDA_SUCCESS)
        at_load = v;
}

SHIMGEN_HOOK(CUresult, cuModuleGetFunctionCount, (unsigned int *count, CUmodule mod))
{
    (void)mod;
    *count = 42;
    return CUDA_SUCCESS;
}

SHIMGEN_HOOK(CUresult, cuInit, (unsigned int flags))
{
    char longer[3001];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\\0';
    shimgen_hook_say("%s", longer);
    return SHIMGEN_REAL(cuInit)(flags);
}
"""

FAKED_CMD = r"""
import ctypes, sys
lib = ctypes.CDLL("libcuda.so.1")
v, n = ctypes.c_int(-1), ctypes.c_uint(7)
print("version", lib.cuDriverGetVersion(ctypes.byref(v)), v.value)
print("count", lib.cuModuleGetFunctionCount(ctypes.byref(n), None), n.value)
if sys.argv[1:] == ["init"]:
    print("init", lib.cuInit(0))
"""


@pytest.fixture(scope="module")
def faking(drivers, tmp_path_factory) -> Path:
    """A shim built for 555 with FAKING_HOOK."""
    new = next(d for d in drivers if d.version == "555.58.02")
    out = tmp_path_factory.mktemp("faking")
    hook = write(out / "faking.c", FAKING_HOOK)
    return make_shim(new.libdir / "libcuda.so.1", out / "out", user_hooks=(str(hook),)).library


def _faked(shim, lib: Path, driver: str, *args: str) -> subprocess.CompletedProcess:
    env = under(shim, lib, SHIMGEN_DRIVER=driver)
    proc = subprocess.run([sys.executable, "-c", FAKED_CMD, *args], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_a_hook_of_a_function_the_loaded_driver_lacks_never_runs(shims, faking, tmp_path):
    """A shim built for 555 with hooks that fake success, run on 535, which lacks
    cuModuleGetFunctionCount: that call fails as it does without the hook (801, its output
    untouched); the hook of a function 535 has still runs. With no driver loaded at all,
    neither hook runs: every call fails as without hooks (303). A hook's constructor that
    calls SHIMGEN_REAL before the driver is loaded reaches the driver (and loads it)."""
    old, new = (next(s for s in shims if s.driver.version == v)
                for v in ("535.261.03", "555.58.02"))

    def answers(shim, driver: str) -> list[str]:
        return _faked(shim, faking, driver).stdout.splitlines()

    assert answers(new, str(new.driver.path)) == \
        [f"version 0 {100000 + new.cuda_version}", "count 0 42"]
    assert answers(old, str(old.driver.path)) == \
        [f"version 0 {100000 + old.cuda_version}", "count 801 7"]
    assert answers(old, str(tmp_path / "no-driver.so")) == ["version 303 -1", "count 303 7"]


def test_a_hooks_notice_is_one_line_cut_to_its_size(shims, faking):
    """shimgen_hook_say with 3000 characters: one notice line, cut to the 1023 bytes of a
    notice (its newline included)."""
    new = next(s for s in shims if s.driver.version == "555.58.02")
    proc = _faked(new, faking, str(new.driver.path), "init")
    assert proc.stdout.splitlines()[-1] == "init 100", proc.stdout  # no device here
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("shimgen: hook: ")]
    assert said == ["shimgen: hook: " + "x" * 1007], proc.stderr


# ---- refusals --------------------------------------------------------------------------

REFUSED = {
    "unexported": ("SHIMGEN_HOOK(CUresult, cuNoSuchFunction, (int *v))\n"
                   "{\n    return SHIMGEN_REAL(cuNoSuchFunction)(v);\n}\n",
                   r":3: cuNoSuchFunction is not exported by driver 535\.261\.03 "
                   r"\(`shimgen exports` lists them\)$"),
    "declared_unexported": ("SHIMGEN_DECLARE(CUresult, cuNoSuchFunction, (int *v));\n"
                            "SHIMGEN_HOOK(CUresult, cuInit, (unsigned f))\n"
                            "{\n    return SHIMGEN_REAL(cuInit)(f);\n}\n",
                            r":3: cuNoSuchFunction is not exported by driver 535\.261\.03 "
                            r"\(`shimgen exports` lists them\)$"),
    "procaddr": ("SHIMGEN_HOOK(CUresult, cuGetProcAddress, (const char *s, void **p, int v, "
                 "unsigned long long f))\n{\n    return SHIMGEN_REAL(cuGetProcAddress)(s, p, v, "
                 "f);\n}\n", r":3:1: error: .*cuGetProcAddress is hooked by shimgen itself"),
    "procaddr_v2": ("SHIMGEN_HOOK(CUresult, cuGetProcAddress_v2, (const char *s, void **p, "
                    "int v, unsigned long long f, int *st))\n{\n    (void)s; (void)p; (void)v; "
                    "(void)f; (void)st;\n    return CUDA_SUCCESS;\n}\n",
                    r":3:1: error: .*cuGetProcAddress_v2 is hooked by shimgen itself"),
    "syntax": ("SHIMGEN_HOOK(CUresult, cuInit, (unsigned f))\n{\n"
               "    return no_such_thing + SHIMGEN_REAL(cuInit)(f);\n}\n",
               r":5:12: error: .*no_such_thing"),
    "no_hook": ("static int x;\n", r"defines no hook"),
    # the symbols written without SHIMGEN_HOOK and SHIMGEN_REAL (no exports.h check at the
    # line): the names are checked again from the object's symbols
    "raw_unexported": ("int shimgen_user_hook_cuNoSuchFunction(void);\n"
                       "int shimgen_user_hook_cuNoSuchFunction(void)\n{\n    return 0;\n}\n",
                       r"cuNoSuchFunction is not a function driver .* exports"),
    "raw_real_unexported": ("int shimgen_real_cuNoSuchFunction(void);\n"
                            "int shimgen_user_hook_cuInit(void);\n"
                            "int shimgen_user_hook_cuInit(void)\n{\n"
                            "    return shimgen_real_cuNoSuchFunction();\n}\n",
                            r"cuNoSuchFunction is not a function driver .* exports"),
    "raw_procaddr": ("int shimgen_user_hook_cuGetProcAddress(void);\n"
                     "int shimgen_user_hook_cuGetProcAddress(void)\n{\n    return 0;\n}\n",
                     r"cuGetProcAddress is hooked by shimgen itself"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_with_the_users_file_and_line(drivers, tmp_path, case):
    body, needle = REFUSED[case]
    hook = write(tmp_path / f"{case}.c", "#include <shimgen/hook.h>\n\n" + body)
    out = tmp_path / "out"
    proc = shimgen("build", "--driver", drivers[0].libdir / "libcuda.so.1", "-o", out,
                   "--hook", hook)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(("shimgen: error: hook file ",
                                                    f"shimgen: error: {hook}:")), proc.stderr
    where = re.escape(str(hook)) if needle.startswith(":") else ""
    assert re.search(where + needle, lines[0]), lines[0]
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize("case", ["empty", "not-c", "twice", "directory", "fifo"])
def test_hook_paths_refused_in_one_line_before_any_work(drivers, version_hook, tmp_path, case):
    """What --hook names: a C file (FILE.c), each once, a regular file (a FIFO is never
    waited on); otherwise one line and nothing built."""
    header = tmp_path / "version.h"
    header.write_text(VERSION_HOOK)
    (tmp_path / "dir.c").mkdir()
    os.mkfifo(tmp_path / "fifo.c")
    given, words = {
        "empty": (["--hook", ""], "--hook: empty path"),
        "not-c": (["--hook", header], f"hook file {header}: not a C file (FILE.c)"),
        "twice": (["--hook", version_hook, "--hook", version_hook],
                  f"hook file {version_hook} is given twice"),
        "directory": (["--hook", tmp_path / "dir.c"],
                      f"hook file {tmp_path / 'dir.c'}: a directory, not a regular file"),
        "fifo": (["--hook", tmp_path / "fifo.c"],
                 f"hook file {tmp_path / 'fifo.c'}: a FIFO, not a regular file"),
    }[case]
    out = tmp_path / "out"
    proc = shimgen("build", "--driver", drivers[0].libdir / "libcuda.so.1", "-o", out, *given)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert proc.stderr.splitlines() == [f"shimgen: error: {words}"], proc.stderr
    assert not out.exists() or list(out.iterdir()) == []


def test_one_hook_per_function(drivers, version_hook, tmp_path):
    again = write(tmp_path / "again.c", VERSION_HOOK)
    with pytest.raises(ShimgenError, match=r"cuDriverGetVersion is hooked in .*version\.c too"):
        make_shim(drivers[0].libdir / "libcuda.so.1", tmp_path / "out",
                  user_hooks=(str(version_hook), str(again)))
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


# ---- hook.h ----------------------------------------------------------------------------

def test_hook_header_is_the_rendering_and_works_after_cuda_h(hooked, tmp_path):
    printed = shimgen("hook-header")
    assert printed.returncode == 0 and printed.stdout == hook_header()
    for _, lib, _ in hooked.values():
        assert (lib.parent / "src/include/shimgen/hook.h").read_text() == hook_header()
    inc = tmp_path / "inc" / "shimgen"
    inc.mkdir(parents=True)
    (inc / "hook.h").write_text(hook_header())
    import nvidia.cuda_runtime

    cuda_inc = Path(list(nvidia.cuda_runtime.__path__)[0]) / "include"
    for first in ("", "#include <cuda.h>\n"):
        src = write(tmp_path / "h.c", first + (EXAMPLES / "memlimit.c").read_text())
        cc = shlex.split(os.environ.get("CC", "cc"))
        proc = subprocess.run([*cc, "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-c", "-I",
                               tmp_path / "inc", "-I", cuda_inc, src, "-o", tmp_path / "h.o"],
                              capture_output=True, text=True)
        assert proc.returncode == 0, (first, proc.stderr)


# ---- shimgen run: the cache keyed by the hook's contents -------------------------------

VERSION_CMD = ("import ctypes; v = ctypes.c_int(); "
               "ctypes.CDLL('libcuda.so.1').cuDriverGetVersion(ctypes.byref(v)); print(v.value)")


def test_run_rebuilds_when_the_hook_file_changes(drivers, tmp_path):
    driver = drivers[0].libdir / "libcuda.so.1"
    cache = tmp_path / "xdg"
    hook = write(tmp_path / "v.c", VERSION_HOOK)
    seen = []
    for i, text in enumerate([VERSION_HOOK, VERSION_HOOK, VERSION_HOOK.replace(
            f"+= {DELTA}", "+= 1000")]):
        hook.write_text(text)
        proc = shimgen_run(driver, cache, "--hook", str(hook), "-o", str(tmp_path / f"r{i}"),
                           "--", sys.executable, "-c", VERSION_CMD)
        assert proc.returncode == 0, proc.stderr
        rec = _record(tmp_path / f"r{i}")
        seen.append((int(proc.stdout), rec["shim"]["how"], rec["shim"]["cache_entry"]))
        assert rec["hooks"] == [str(hook)]
    real = seen[0][0] - DELTA
    assert [(v - real, how) for v, how, _ in seen] == [(DELTA, "built"), (DELTA, "cached"),
                                                       (1000, "built")]
    assert seen[0][2] == seen[1][2] != seen[2][2]
    plain = shimgen_run(driver, cache, "-o", str(tmp_path / "plain"), "--", sys.executable,
                        "-c", VERSION_CMD)
    assert int(plain.stdout) == real and "-hooks-" not in _record(tmp_path / "plain")[
        "shim"]["cache_entry"]


# ---- on the fake driver: the chain, memlimit.c, launchlog.c -----------------------------

@pytest.fixture(scope="module")
def fake(probes) -> Path:
    return probes / "libfake_mem_libcuda.so"


def fake_env(fake: Path, lib: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    env.update(LD_PRELOAD=str(lib), SHIMGEN_DRIVER=str(fake), **extra)
    return env


@pytest.fixture(scope="module")
def examples_shim(fake, tmp_path_factory) -> Path:
    return make_shim(fake, tmp_path_factory.mktemp("ex"), require_real=False,
                     user_hooks=(str(EXAMPLES / "memlimit.c"),
                                 str(EXAMPLES / "launchlog.c"))).library


G = 1 << 30
MEM_OPS = ["info", "alloc:1536M", "info", "alloc:1G", "free:0", "info", "async:1G",
           "managed:512M", "info", "create:512M", "alloc:1", "info", "release:4", "freeasync:2",
           "free:3", "free:5", "info", "pitch:1000:1000", "info", "free:6", "churn:8:500:1M",
           "info"]


@pytest.mark.parametrize("route", ["dlsym", "procaddr"])
def test_memlimit_accounts_and_refuses(fake, examples_shim, probes, route, tmp_path):
    out = run([probes / "hookmem", route, *MEM_OPS],
              fake_env(fake, examples_shim, SHIMGEN_MEMLIMIT="2GiB")).stdout
    info = [(int(f), int(t)) for f, t in re.findall(r"^info rc 0 free (\d+) total (\d+)$", out,
                                                    re.M)]
    rcs = [int(r) for r in re.findall(r"^alloc #\d+ rc (\d+)$", out, re.M)]
    frees = [int(r) for r in re.findall(r"^free #\d+ rc (\d+)$", out, re.M)]
    # 1.5G; 1G more refused; freed: 1G + 512M + 512M (handle) fill it; 1 byte more refused
    assert rcs == [0, 2, 0, 0, 0, 2, 0], out
    assert frees == [0, 0, 0, 0, 1, 0], out  # the free of a refused one: the driver's answer
    pitch = 1024 * 1000  # the fake pads rows to 512 bytes
    assert info == [(2 * G, 2 * G), (G // 2, 2 * G), (2 * G, 2 * G), (G // 2, 2 * G),
                    (0, 2 * G), (2 * G, 2 * G), (2 * G - pitch, 2 * G), (2 * G, 2 * G)], out
    # Without the limit: untouched, the fake's own answers.
    free = run([probes / "hookmem", route, "info", "alloc:3G"], fake_env(fake, examples_shim))
    assert "info rc 0 free 85899345920 total 103079215104" in free.stdout
    assert "alloc #0 rc 0" in free.stdout
    # Never more free than the device really has.
    low = run([probes / "hookmem", route, "info"],
              fake_env(fake, examples_shim, SHIMGEN_MEMLIMIT="2G", FAKE_MEM_FREE="1000"))
    assert "info rc 0 free 1000 total 2147483648" in low.stdout


def test_memlimit_table_as_a_unit(tmp_path):
    """memlimit.c with a 16-slot table: eight allocations whose addresses all want the last
    slot (so the chain wraps round), freed every other one, then the rest found past the
    holes; the limit, frees twice, a refused free, cuMemGetInfo_v2's answers."""
    inc = tmp_path / "inc" / "shimgen"
    inc.mkdir(parents=True)
    (inc / "hook.h").write_text(hook_header())
    mask = (1 << 64) - 1

    def home(k: int) -> int:
        return (((k * 0x9E3779B97F4A7C15) & mask) >> 48) % 16

    start = 0x7F0000000000
    addrs = [k for k in range(start, start + (1 << 21) * 5000, 1 << 21) if home(k) == 15][:8]
    assert len(addrs) == 8
    exe = tmp_path / "unit"
    cc = shlex.split(os.environ.get("CC", "cc"))
    proc = subprocess.run([*cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror",
                           "-DSLOTS=16", "-I", tmp_path / "inc", EXAMPLES / "memlimit.c",
                           ROOT / "tests/c/memlimit_unit.c", "-o", exe, "-lpthread"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    env = dict(os.environ, SHIMGEN_MEMLIMIT="1GiB")
    got = subprocess.run([exe, str(G), *map(hex, addrs)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert got.returncode == 0 and re.search(r"^ok \d+$", got.stdout, re.M), got.stdout
    bad = subprocess.run([exe, str(G), *map(hex, addrs)], capture_output=True, text=True,
                         env=dict(env, SHIMGEN_MEMLIMIT="2x"), timeout=60)
    assert "SHIMGEN_MEMLIMIT=2x is not a size" in bad.stdout


def test_launchlog_notices(fake, examples_shim, probes, tmp_path):
    notices = tmp_path / "notices.log"
    env = fake_env(fake, examples_shim, SHIMGEN_NOTICE_FILE=str(notices),
                   SHIMGEN_LAUNCHLOG_MAX="2")
    out = run([probes / "hookmem", "procaddr", "launch:2:3:4:5:6:7", "launch:8:1:1:32:1:1",
               "launch", "launch"], env).stdout
    assert out.count("launch rc ") == 4 and "launch rc 234" in out  # the fake's own answer
    lines = [ln.split("] ", 1)[1] for ln in notices.read_text().splitlines()]
    assert lines == [
        "shimgen: hook: launchlog: cuLaunchKernel #1 grid 2x3x4 block 5x6x7 shared 0 bytes",
        "shimgen: hook: launchlog: cuLaunchKernel #2 grid 8x1x1 block 32x1x1 shared 0 bytes",
        "shimgen: hook: launchlog: more than 2 launches; the rest are not logged "
        "(SHIMGEN_LAUNCHLOG_MAX=0 logs every one)",
    ]


CHAIN_HOOK = """#include <shimgen/hook.h>

SHIMGEN_HOOK(CUresult, cuDeviceGetAttribute, (int *value, int attribute, CUdevice dev))
{
    CUresult rc = SHIMGEN_REAL(cuDeviceGetAttribute)(value, attribute, dev);
    if (rc == CUDA_SUCCESS && attribute == 1)
        *value += 1;
    return rc;
}
"""

ATTR_CMD = ("import ctypes; v = ctypes.c_int(); l = ctypes.CDLL('libcuda.so.1'); "
            "print(l.cuDeviceGetAttribute(ctypes.byref(v), 1, 0), v.value)")


def test_chain_keeps_shimgens_own_hook(fake, tmp_path):
    """A user hook on cuDeviceGetAttribute, which shimgen hooks itself (attribute overrides):
    SHIMGEN_REAL reaches shimgen's hook, so the override still applies under the user's."""
    hook = write(tmp_path / "attr.c", CHAIN_HOOK)
    lib = make_shim(fake, tmp_path / "out", require_real=False,
                    user_hooks=(str(hook),)).library
    plain = subprocess.run([sys.executable, "-c", ATTR_CMD], env=fake_env(fake, lib),
                           capture_output=True, text=True, timeout=60)
    assert plain.stdout.split() == ["0", "1025"], plain.stderr  # the fake's 1024, plus one
    forced = subprocess.run([sys.executable, "-c", ATTR_CMD],
                            env=fake_env(fake, lib, SHIMGEN_ATTR_OVERRIDE="1=77"),
                            capture_output=True, text=True, timeout=60)
    assert forced.stdout.split() == ["0", "78"], forced.stderr
