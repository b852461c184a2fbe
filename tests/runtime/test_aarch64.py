"""Drivers for aarch64 (Grace Hopper, Grace Blackwell, GB10), without their hardware: the
arm64 builds of Debian's libcuda1 read as the x86-64 ones are, and a shim cross-built for
one and run under qemu-user (an aarch64 program, tests/c/aarch64_probe.c, cross-compiled
here) forwards, counts, times, injects faults and runs the user's hooks; gates say they are
x86-64 only, for now. The timing path's reliability tests are test_aarch64_timing.py. CI
installs qemu-user, gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu and libc6-dev-arm64-cross."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from devtools.driverfetch import ARM64_DRIVERS, DRIVERS, DriverFetchError, fetch
from shimgen.driver import read_driver
from shimgen.driver.library import _constant_return_aarch64

ROOT = Path(__file__).resolve().parents[2]
SYSROOT = Path("/usr/aarch64-linux-gnu")
CROSS_CC = "aarch64-linux-gnu-gcc"
QEMU = "qemu-aarch64"
THE_ONE_MORE = {"cuEventCreateFromEGLSync"}  # the arm64 builds export it, x86-64's do not


@pytest.fixture(scope="module")
def arm64_drivers():
    try:
        return fetch(ARM64_DRIVERS)
    except DriverFetchError as e:
        pytest.fail(f"cannot fetch Debian's arm64 libcuda packages: {e}", pytrace=False)


def _tools() -> None:
    missing = [t for t in (CROSS_CC, QEMU) if shutil.which(t) is None]
    if missing or not SYSROOT.is_dir():
        pytest.skip(f"needs {', '.join(missing) or SYSROOT} (qemu-user, gcc-aarch64-linux-gnu, "
                    "libc6-dev-arm64-cross)")


def shimgen(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shimgen", *args], capture_output=True,
                          text=True, timeout=300, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def arm64_shim(arm64_drivers, tmp_path_factory):
    """The 550.163.01 arm64 driver, a shim cross-built for it, and the probe."""
    _tools()
    driver = next(d for d in arm64_drivers if d.version == "550.163.01")
    out = tmp_path_factory.mktemp("arm64")
    proc = shimgen("build", "--driver", str(driver.libdir / "libcuda.so.1"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    shim = next(out.glob("cudashim-*/libcudashim.so"))
    probe = out / "aarch64_probe"
    subprocess.run([CROSS_CC, "-O2", "-o", str(probe), str(ROOT / "tests/c/aarch64_probe.c"),
                    "-ldl"], check=True, capture_output=True)
    return driver, shim, probe


def run_arm64(probe: Path, driver, shim: Path | None, *args: str, stdin: str = "",
              timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """The probe under qemu-user: the driver's directory on the library path, the shim
    preloaded when given."""
    guest = {"LD_LIBRARY_PATH": str(driver.libdir), **env}
    if shim is not None:
        guest["LD_PRELOAD"] = str(shim)
    cmd = [QEMU, "-L", str(SYSROOT)]
    for k, v in guest.items():
        cmd += ["-E", f"{k}={v}"]
    return subprocess.run(cmd + [str(probe), *args], capture_output=True, text=True,
                          input=stdin, timeout=timeout,
                          env={k: v for k, v in os.environ.items() if not k.startswith(
                              ("LD_", "SHIMGEN_"))})


def test_every_arm64_build_exports_the_x86_64_functions_and_one_more(arm64_drivers):
    x86 = {d.version: d for d in DRIVERS if d.package == "libcuda1"}
    for d in arm64_drivers:
        ours = {f.name for f in read_driver(d.libdir / "libcuda.so.1").functions}
        theirs = {f.name for f in read_driver(next(
            f for f in fetch([x86[d.version]])).libdir / "libcuda.so.1").functions}
        assert ours - theirs == THE_ONE_MORE and not theirs - ours, d.version
        assert read_driver(d.path).arch == "aarch64"


def test_the_stub_rule_reads_aarch64_code():
    """`mov w0, #34; ret` (with -O0's frame too) is a link-time stub's cuInit; anything
    else is not a constant return."""
    mov34, ret = (0x52800000 | 34 << 5).to_bytes(4, "little"), bytes.fromhex("c0035fd6")
    frame = bytes.fromhex("ff4300d1") + bytes.fromhex("e00f00b9")  # sub sp; str w0, [sp, 12]
    assert _constant_return_aarch64(mov34 + ret, 0x1000) == 34
    assert _constant_return_aarch64(frame + mov34 + bytes.fromhex("ff430091") + ret, 0) == 34
    bl = bytes.fromhex("00000094")  # bl: a call, not a constant
    assert _constant_return_aarch64(bl + mov34 + ret, 0) is None


def test_the_shim_forwards_every_route_and_counts_under_qemu(arm64_shim, tmp_path):
    driver, shim, probe = arm64_shim
    trace = tmp_path / "trace.json"
    plain = run_arm64(probe, driver, None, str(shim))
    shimmed = run_arm64(probe, driver, shim, str(shim), SHIMGEN_TRACE="1",
                        SHIMGEN_TRACE_FILE=str(trace))
    assert plain.returncode == 0 and shimmed.returncode == 0, shimmed.stderr
    assert plain.stdout.splitlines() == ["version 0 12040", "init 100", "procaddr 0 0",
                                         "through 0 12040"]
    assert shimmed.stdout.splitlines() == ["version 0 12040", "init 100", "procaddr 0 1",
                                           "through 0 12040"]
    calls = json.loads(trace.read_text())["calls"]
    assert calls == {"cuDriverGetVersion": 2, "cuInit": 1, "cuGetProcAddress": 1}


def test_the_proc_address_grid_is_the_drivers_under_the_shim(arm64_shim):
    """Every export at four CUDA versions: the same result and the same null-ness of the
    answer with the shim as without (0 differences)."""
    driver, shim, probe = arm64_shim
    names = "\n".join(f.name for f in read_driver(driver.path).functions)
    plain = run_arm64(probe, driver, None, "grid", stdin=names)
    shimmed = run_arm64(probe, driver, shim, "grid", stdin=names)
    assert plain.returncode == 0 and shimmed.returncode == 0, shimmed.stderr
    rows = plain.stdout.splitlines()
    assert len(rows) == 4 * 637 and sum(r.endswith(" 0 1") for r in rows) > 1000
    assert shimmed.stdout.splitlines() == rows


def test_faults_are_injected_into_timed_calls(arm64_shim, tmp_path):
    """SHIMGEN_TRACE=time with a fault rule: the injected code is the caller's, every call
    is counted and timed (no notice: the timing path is there), and the injected failure
    is kept apart from the driver's errors."""
    driver, shim, probe = arm64_shim
    trace = tmp_path / "trace.json"
    proc = run_arm64(probe, driver, shim, str(shim), SHIMGEN_INJECT="cuInit=999",
                     SHIMGEN_TRACE="time", SHIMGEN_TRACE_FILE=str(trace))
    assert proc.returncode == 0, proc.stderr
    assert "init 999" in proc.stdout.splitlines()
    assert "x86-64" not in proc.stderr and "counts calls" not in proc.stderr, proc.stderr
    data = json.loads(trace.read_text())
    assert data["injected"] == {"cuInit": {"999": 1}} and data["calls"]["cuInit"] == 1
    assert {k: v["calls"] for k, v in data["time"].items()} == data["calls"]
    assert data["untimed_calls"] == 0 and data["errors"] == {}


def test_what_is_x86_64_only_says_so_in_one_line(arm64_drivers, tmp_path):
    lib = str(next(d for d in arm64_drivers if d.version == "550.163.01").libdir
              / "libcuda.so.1")
    for args, said in ((["gates", "--driver", lib], "is built for aarch64: the gate analysis "
                        "reads x86-64 code only, for now"),
                       (["build", "--driver", lib, "--gate-profile", "auto", "-o",
                         str(tmp_path / "g")], "gates are built for x86-64 drivers only")):
        proc = shimgen(*args)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert said in proc.stderr, proc.stderr


EARLY_HOOK = """#include <shimgen/hook.h>
SHIMGEN_DECLARE(CUresult, cuDriverGetVersion, (int *v));
static int early; /* asked from a constructor, before the driver is loaded */
__attribute__((constructor)) static void at_load(void)
{
    SHIMGEN_REAL(cuDriverGetVersion)(&early);
}
SHIMGEN_HOOK(CUresult, cuDriverGetVersion, (int *v))
{
    CUresult rc = SHIMGEN_REAL(cuDriverGetVersion)(v);
    *v = early + 1;
    return rc;
}
"""


def test_a_user_hook_is_cross_compiled_and_reached_by_every_route(arm64_shim, tmp_path):
    """A hook file built into an aarch64 shim (compiled alone by the cross compiler, then
    with the shim): its constructor's SHIMGEN_REAL loads the driver (the real version), and
    the hook answers one more, called by name and through cuGetProcAddress."""
    driver, _, probe = arm64_shim
    hook = tmp_path / "early.c"
    hook.write_text(EARLY_HOOK)
    proc = shimgen("build", "--driver", str(driver.libdir / "libcuda.so.1"), "--hook",
                   str(hook), "-o", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    shim = next((tmp_path / "o").glob("cudashim-*-hooks/libcudashim.so"))
    out = run_arm64(probe, driver, shim, str(shim))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["version 0 12041", "init 100", "procaddr 0 1",
                                       "through 0 12041"]


def test_a_missing_cross_compiler_is_one_line_naming_the_packages(arm64_drivers, tmp_path):
    lib = str(next(d for d in arm64_drivers if d.version == "550.163.01").libdir
              / "libcuda.so.1")
    env = dict(os.environ, PATH=str(tmp_path))  # no aarch64-linux-gnu-gcc on it
    proc = shimgen("build", "--driver", lib, "-o", str(tmp_path / "o"), env=env)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.endswith("with aarch64-linux-gnu-gcc, which is not installed (Debian: "
                                "apt install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)\n")
    assert not list((tmp_path / "o").glob("cudashim-*"))


def test_the_entry_code_adds_two_instructions_and_ten_to_count(arm64_shim, shims):
    """Counted in the built shims' disassembly (benchmarks/entrycode.py): a forwarded call
    runs 2 instructions of the shim on aarch64 (ldr, br) and 1 on x86-64 (jmp); a counted
    one 10 and 7; a timed one 71 on aarch64 (its entry to the blr, its return path to the
    ret), and on x86-64 its entry to the call and return path to the ret
    (docs/performance.md, "aarch64")."""
    from benchmarks.entrycode import entry_code

    arm = entry_code(arm64_shim[1])
    x86 = entry_code(shims[0].library)
    assert [len(arm["passthrough"]), len(arm["counting"])] == [2, 10], arm
    assert [len(x86["passthrough"]), len(x86["counting"])] == [1, 7], x86
    assert arm["counting"][-1] == "br x16" and x86["counting"][-1].startswith("jmp")
    assert "cbz" not in " ".join(arm["counting"])  # no test: the nursery's targets
    assert len(arm["time"]) == 71 and arm["time"][-1] == "ret", arm["time"]
    assert arm["time"].count("mrs x10, cntvct_el0") == 2 and "blr x16" in arm["time"]
    assert x86["time"][-1] == "ret" and x86["time"].count("rdtsc") == 2, x86["time"]
    assert any(i.startswith("call") for i in x86["time"]), x86["time"]


def test_run_of_an_aarch64_program_reports_its_calls(arm64_shim, tmp_path):
    """`shimgen run` of the probe under qemu-user: the shim (cached) preloaded in the
    guest, its calls timed (run's default), and the report naming them and cuInit's
    CUDA_ERROR_NO_DEVICE (100: no GPU under qemu), an error return of the timing path."""
    driver, _, probe = arm64_shim
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "SHIMGEN_"))}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    proc = shimgen("run", "--driver", str(driver.libdir / "libcuda.so.1"), "-o",
                   str(tmp_path / "r"), "--", QEMU, "-L", str(SYSROOT), str(probe), env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == ["version 0 12040", "init 100"]
    assert "; mode time; run directory" in proc.stderr, proc.stderr
    # the shim given to the emulated program alone: qemu itself (x86-64) is not asked to
    # preload it, and its loader says no ERROR
    assert "ERROR:" not in proc.stderr and "ld.so" not in proc.stderr, proc.stderr
    said = json.loads((tmp_path / "r" / "run.json").read_text())["environment"]
    assert "LD_PRELOAD" not in said and said["QEMU_SET_ENV"] == (
        f"LD_PRELOAD={json.loads((tmp_path / 'r' / 'run.json').read_text())['shim']['path']}")
    lines = proc.stderr.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["time", "%"])
    rows = {w[-1]: (w[2], w[-2]) for w in (line.split() for line in lines[head + 1:head + 4])}
    assert rows == {"cuInit": ("1", "1"), "cuGetProcAddress": ("1", "0"),
                    "cuDriverGetVersion": ("2", "0")}, proc.stderr
    errors = lines[lines.index("errors (non-success returns):") + 2].split()
    assert errors == ["cuInit", "100", "CUDA_ERROR_NO_DEVICE", "1"], proc.stderr


@pytest.mark.parametrize("version", ["535.261.03", "550.163.01", "555.58.02"])
def test_diff_of_the_x86_64_and_arm64_builds_is_the_one_export(arm64_drivers, version):
    """The cuGetProcAddress grid of each arm64 build (its querier cross-compiled, run under
    qemu-user) against the x86-64 build of the same version: every name answers alike but
    the one export only arm64 has."""
    _tools()
    x86 = next(d for d in DRIVERS if d.package == "libcuda1" and d.version == version)
    old = fetch([x86])[0].libdir / "libcuda.so.1"
    new = next(d for d in arm64_drivers if d.version == version).libdir / "libcuda.so.1"
    proc = shimgen("diff", "--json", "--no-gates", str(old), str(new))
    assert proc.returncode == 1, proc.stderr  # different: the one export
    data = json.loads(proc.stdout)
    assert data["exports"]["added"] == sorted(THE_ONE_MORE) and not data["exports"]["removed"]
    assert {s["name"] for s in data["proc_address"]} == THE_ONE_MORE


@pytest.fixture(scope="module")
def racer(arm64_shim):
    out = arm64_shim[2].parent / "aarch64_race"
    subprocess.run([CROSS_CC, "-O2", "-pthread", "-o", str(out),
                    str(ROOT / "tests/c/aarch64_race.c"), "-ldl"], check=True,
                   capture_output=True)
    return out


def test_threads_racing_the_first_calls_are_each_counted_once(arm64_shim, racer, tmp_path):
    """100 processes under qemu-user, each with 16 threads released at once after random
    delays (0 to 200 us, a seed per process), racing the driver's load and their first
    counted call: every call answers, and the trace counts every one, once."""
    driver, shim, _ = arm64_shim
    for seed in range(100):
        trace = tmp_path / f"t{seed}.json"
        proc = run_arm64(racer, driver, shim, "race", str(seed), "16", "50",
                         SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace))
        assert proc.returncode == 0 and proc.stdout == "800\n", (seed, proc.stdout,
                                                                proc.stderr)
        assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 800}, seed


def test_a_shim_opened_by_dlopen_counts_every_thread(arm64_shim, racer, tmp_path):
    """The shim installed as libcuda.so.1 and opened by the program's dlopen, not
    preloaded: its TLS pointer's first value (the nursery, relocated in the TLS image
    before any thread gets a copy) leads each thread's first counted call to its block."""
    driver, shim, _ = arm64_shim
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(shim, lib / "libcuda.so.1")
    for mode in ("1", "time"):
        trace = tmp_path / f"{mode}.json"
        proc = run_arm64(racer, SimpleNamespace(libdir=lib), None, "race", "7", "8", "20",
                         SHIMGEN_DRIVER=str(driver.libdir / "libcuda.so.1"),
                         SHIMGEN_TRACE=mode, SHIMGEN_TRACE_FILE=str(trace))
        assert proc.returncode == 0 and proc.stdout == "160\n", proc.stderr
        assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 160}


def test_a_forked_child_counts_only_its_own_calls(arm64_shim, racer, tmp_path):
    driver, shim, _ = arm64_shim
    trace = tmp_path / "trace.json"
    proc = run_arm64(racer, driver, shim, "fork", "5", SHIMGEN_TRACE="1",
                     SHIMGEN_TRACE_FILE=str(trace))
    assert proc.returncode == 0, proc.stderr
    pid, status = proc.stdout.split()[1:]
    assert status == "0"
    assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 10}
    child = json.loads(Path(f"{trace}.{pid}").read_text())
    assert child["calls"] == {"cuDriverGetVersion": 5}


def test_threads_calling_while_the_exit_folds_their_blocks_go_on(arm64_shim, racer):
    """At exit the blocks are folded and cleared while other threads still call: a counted
    call branches through the target kept in its thread's block, which the clearing must
    leave in place (a zeroed one is a jump to address 0). 20 runs of 4 threads."""
    driver, shim, _ = arm64_shim
    for _ in range(20):
        proc = run_arm64(racer, driver, shim, "exit", "4", SHIMGEN_TRACE="1")
        assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])


@pytest.mark.parametrize("mode", ["1", "time"])
def test_a_forked_child_with_a_trace_file_counts_its_own_calls(arm64_shim, racer, tmp_path,
                                                               mode):
    """SHIMGEN_TRACE_DIR (as `shimgen run` sets it): the child's blocks move onto its own
    file, their counters (and, on aarch64, the targets a counted call branches through)
    from zero; the child's calls work and are its file's, the parent's are the parent's."""
    from shimgen.trace import binary

    driver, shim, _ = arm64_shim
    tdir = tmp_path / "t"
    tdir.mkdir(mode=0o700)
    proc = run_arm64(racer, driver, shim, "fork", "5", SHIMGEN_TRACE=mode,
                     SHIMGEN_TRACE_DIR=str(tdir))
    assert proc.returncode == 0, proc.stderr
    pid, status = proc.stdout.split()[1:]
    assert status == "0", proc.stderr
    files = {p.stem: binary.load(p) for p in tdir.glob("*.shimtrace")}
    child = files.pop(pid)
    assert {k: f.calls for k, f in child.functions.items() if f.calls} == {
        "cuDriverGetVersion": 5}
    (parent,) = files.values()
    assert parent.functions["cuDriverGetVersion"].calls == 10
