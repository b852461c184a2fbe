"""A driver without cuGetProcAddress_v2 (470.256.02, CUDA 11.4, the Tesla 470 branch) through
the commands a user runs: the CUDA 11 runtime filling its driver table through the shim's
first cuGetProcAddress, `run` (cuInit's CUDA_ERROR_NO_DEVICE and the calls in its report),
`--hook` (a hook reached through the first cuGetProcAddress), `--inject`, `--gates`, `patch`
and `diff`, each saying what this driver does not have: cuGetProcAddress_v2 (CUDA 12.0),
cuMemGetHandleForAddressRange and DMA-BUF attribute 124 (CUDA 11.7). Its build, exports,
routes and cuGetProcAddress grid: tests/runtime/test_shim.py's matrix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.errors import ShimgenError
from shimgen.run.options import check_selection

ROOT = Path(__file__).resolve().parents[2]
V470 = "470.256.02"

# cuInit, the version, and lookups through the first cuGetProcAddress at two versions and
# the per-thread flag, each called through the pointer it got.
PROGRAM = r"""
import ctypes
lib = ctypes.CDLL("libcuda.so.1")
print("init", lib.cuInit(0))
v = ctypes.c_int()
lib.cuDriverGetVersion(ctypes.byref(v))
fn = ctypes.c_void_p()
for version, flags in ((3020, 0), (v.value, 0), (v.value, 2)):
    assert lib.cuGetProcAddress(b"cuDriverGetVersion", ctypes.byref(fn), version, flags) == 0
    ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))(fn.value)(ctypes.byref(v))
print("version", v.value)
"""


@pytest.fixture(scope="module")
def d470(matrix_drivers):
    return next(d for d in matrix_drivers if d.version == V470)


def test_cuda_11_runtime_fills_its_driver_table_through_the_shim(d470, shim_builder, probes,
                                                               tmp_path):
    """libcudart 11.8 (CUDA's minor version compatibility: any 11.x driver) opens libcuda.so.1
    and resolves every driver function through cuGetProcAddress, the only one 470 has: each
    answer is a trampoline of the shim (none unmapped), and cuInit's call is counted."""
    import nvidia.cuda_runtime  # from the test extra: nvidia-cuda-runtime-cu11

    lib = Path(list(nvidia.cuda_runtime.__path__)[0]) / "lib"
    shim = shim_builder(d470)
    trace = tmp_path / "trace.json"
    proc = subprocess.run([str(probes / "cudart_entry"), str(lib / "libcudart.so.11.0")],
                          env=shim.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "cudaDriverGetVersion rc 0 version 11040" in proc.stdout
    got = json.loads(trace.read_text())
    assert got["calls"].get("cuGetProcAddress", 0) > 100, got["calls"]
    assert "cuGetProcAddress_v2" not in got["calls"]
    assert got["calls"].get("cuInit") == 1
    assert got["unmapped_proc_addresses"] == 0


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("xdg")


def shimgen(home: Path, *args: str, libdir: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("SHIMGEN_")}
    env["XDG_CACHE_HOME"] = str(home)
    if libdir is not None:
        env["LD_LIBRARY_PATH"] = str(libdir)
    return subprocess.run([sys.executable, "-m", "shimgen", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def ran(d470, home, tmp_path_factory):
    """`shimgen run` of PROGRAM on 470: (the process, its run directory)."""
    out = tmp_path_factory.mktemp("runs") / "r"
    proc = shimgen(home, "run", "--driver", str(d470.libdir / "libcuda.so.1"), "-o", str(out),
                   "--", sys.executable, "-c", PROGRAM, libdir=d470.libdir)
    assert proc.returncode == 0, proc.stderr
    return proc, out


def test_run_reports_cu_init_no_device_and_every_call(ran):
    proc, out = ran
    assert "init 100\nversion 11040\n" in proc.stdout
    record = json.loads((out / "run.json").read_text())
    assert record["driver"]["version"] == V470
    report = proc.stderr
    assert "driver     470.256.02" in report
    rows = {line.split()[-1]: line.split() for line in report.splitlines()
            if line.split() and line.split()[-1].startswith("cu")}
    assert rows["cuInit"][2] == "1" and rows["cuInit"][-2] == "1"  # one call, one error
    assert rows["cuGetProcAddress"][2] == "3"
    assert rows["cuDriverGetVersion"][2] == "4"  # the direct call and the three looked up
    assert "cuGetProcAddress_v2" not in rows
    (err,) = [x for x in report.splitlines() if x.startswith("cuInit ")]
    assert err.split()[1:] == ["100", "CUDA_ERROR_NO_DEVICE", "1"]
    again = shimgen(out.parent, "report", "--json", str(out))
    assert again.returncode == 0, again.stderr
    (group,) = json.loads(again.stdout)["groups"]
    assert group["driver_versions"] == {V470: 1} and group["unmapped_proc_addresses"] == 0
    got = {f["function"]: (f["calls"], f["errors"]) for f in group["functions"]}
    assert got == {"cuInit": (1, 1), "cuGetProcAddress": (3, 0), "cuDriverGetVersion": (4, 0)}


def test_inject_names_what_the_driver_is_too_old_for(ran, d470, home, tmp_path):
    proc = shimgen(home, "run", "--driver", str(d470.libdir / "libcuda.so.1"), "--inject",
                   "cuMemGetHandleForAddressRange=801", "-o", str(tmp_path / "r"), "--", "true",
                   libdir=d470.libdir)
    assert proc.returncode == 1
    assert proc.stderr == (
        "shimgen: error: --inject 'cuMemGetHandleForAddressRange=801': "
        "cuMemGetHandleForAddressRange matches no function the driver exports (CUDA 11.7 "
        "added it; driver 470.256.02 is CUDA 11.4)\n")
    injected = shimgen(home, "run", "--driver", str(d470.libdir / "libcuda.so.1"), "--inject",
                       "cuInit=999", "-o", str(tmp_path / "i"), "--", sys.executable, "-c",
                       PROGRAM, libdir=d470.libdir)
    assert injected.returncode == 0, injected.stderr
    assert "init 999\n" in injected.stdout


def test_gates_selection_names_the_attribute_the_driver_lacks(d470):
    with pytest.raises(ShimgenError) as e:
        check_selection("-gdr,-dmabuf", ("gdr",), d470.path)
    assert str(e.value) == (
        "--gates '-gdr,-dmabuf': unknown gate 'dmabuf' (this driver's shim has: gdr; driver "
        "470.256.02 is CUDA 11.4: the dmabuf gate's attribute 124, DMA_BUF_SUPPORTED, came "
        "with CUDA 11.7)")
    check_selection("-gdr", ("gdr",), d470.path)


def test_patch_masks_gdr_and_refuses_dmabuf_saying_why(d470, home, tmp_path):
    driver = str(d470.libdir / "libcuda.so.1")
    proc = shimgen(home, "patch", "--driver", driver, "--gates", "dmabuf", "-o",
                   str(tmp_path / "p"))
    assert proc.returncode == 1 and "\n" not in proc.stderr.rstrip("\n")
    assert proc.stderr.endswith("unknown gate 'dmabuf' (this driver has: gdr p2p-mixed; driver "
                                "470.256.02"
                                " is CUDA 11.4: the dmabuf gate's attribute 124, "
                                "DMA_BUF_SUPPORTED, came with CUDA 11.7)\n")
    proc = shimgen(home, "patch", "--driver", driver, "--gates", "gdr", "--mask", "-o",
                   str(tmp_path / "p"))
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "p" / "shimgen-patch.json").read_text())
    assert (manifest["original"]["version"], manifest["direction"]) == (V470, "mask")
    copy = (tmp_path / "p" / f"libcuda.so.{V470}").read_bytes()
    changed = [i for i, (a, b) in enumerate(zip(copy, d470.path.read_bytes(), strict=True))
               if a != b]
    assert changed == [0x2F8AF3, 0x414655]  # `shimgen gates`' mask changes on 470


HOOK = r"""
#include <shimgen/hook.h>
SHIMGEN_HOOK(CUresult, cuDriverGetVersion, (int *v))
{
    CUresult rc = SHIMGEN_REAL(cuDriverGetVersion)(v);
    *v = 4711;
    return rc;
}
"""


def test_a_hook_is_reached_through_the_first_cu_get_proc_address(d470, home, tmp_path):
    hook = tmp_path / "version.c"
    hook.write_text(HOOK)
    proc = shimgen(home, "run", "--driver", str(d470.libdir / "libcuda.so.1"), "--hook",
                   str(hook), "-o", str(tmp_path / "h"), "--", sys.executable, "-c", PROGRAM,
                   libdir=d470.libdir)
    assert proc.returncode == 0, proc.stderr
    assert "version 4711\n" in proc.stdout  # the last call went through a looked-up pointer
    bad = tmp_path / "dmabuf.c"
    bad.write_text("#include <shimgen/hook.h>\nSHIMGEN_HOOK(CUresult, "
                   "cuMemGetHandleForAddressRange, (void *h, CUdeviceptr p, size_t n, int t, "
                   "unsigned long long f))\n{\n    return SHIMGEN_REAL("
                   "cuMemGetHandleForAddressRange)(h, p, n, t, f);\n}\n")
    proc = shimgen(home, "run", "--driver", str(d470.libdir / "libcuda.so.1"), "--hook",
                   str(bad), "-o", str(tmp_path / "b"), "--", "true", libdir=d470.libdir)
    assert proc.returncode == 1
    assert "dmabuf.c:2: cuMemGetHandleForAddressRange is not exported by driver 470.256.02 (" \
        in proc.stderr
    assert "(CUDA 11.7 added it; driver 470.256.02 is CUDA 11.4)" in proc.stderr


def test_diff_against_cuda_12_says_what_470_has_not(d470, matrix_drivers, home):
    new = next(d for d in matrix_drivers if d.version == "535.274.02")
    proc = shimgen(home, "diff", str(d470.libdir / "libcuda.so.1"),
                   str(new.libdir / "libcuda.so.1"))
    assert proc.returncode == 1, proc.stderr
    summary = proc.stdout.splitlines()[:5]
    assert summary[2].endswith("; OLD 470.256.02 (CUDA 11.4) has no cuGetProcAddress_v2 "
                               "(CUDA 12.0): its answers not compared")
    assert summary[3].startswith("  gates     dmabuf: only in NEW (driver 470.256.02 is CUDA "
                                 "11.4: the dmabuf gate's attribute 124, DMA_BUF_SUPPORTED, "
                                 "came with CUDA 11.7); gdr: ")
    js = shimgen(home, "diff", "--json", "--no-gates", str(d470.path), str(new.path))
    got = json.loads(js.stdout)
    assert got["old"]["proc_address_apis"] == ["cuGetProcAddress"]
    assert got["new"]["proc_address_apis"] == ["cuGetProcAddress", "cuGetProcAddress_v2"]
    assert got["proc_address"] and {s["api"] for s in got["proc_address"]} == {
        "cuGetProcAddress"}
    newly = {s["name"] for s in got["proc_address"] if s["kind"] == "new"}
    assert "cuMemGetHandleForAddressRange" in newly
