"""The NVML shim (libnvidia-ml.so.1, shimgen/shim/nvml.py) in a process: built from Debian's
real libnvidia-ml it exports exactly the real library's functions and forwards them; built
from the fake (tests/c/fake_nvml_libnvidia_ml.c, one device of 80 GiB) it answers memory
info with the limit and keeps no process over it when SHIMGEN_LIMIT_MEMORY is set, and
forwards everything untouched when it is not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.driver import read_image
from shimgen.driver.nvml import MEMORY_V2, SEARCH_PATHS, SONAME
from shimgen.shim.nvml import make_nvml_shim

GIB = 1 << 30
# What the child prints: every answer of the fake's one device, as JSON.
QUERY = """
import ctypes, json, sys
U, Q = ctypes.c_uint, ctypes.c_ulonglong
l = ctypes.CDLL(sys.argv[2] if len(sys.argv) > 2 else "libnvidia-ml.so.1")
class M1(ctypes.Structure): _fields_ = [("total", Q), ("free", Q), ("used", Q)]
class M2(ctypes.Structure):
    _fields_ = [("version", U), ("total", Q), ("reserved", Q), ("free", Q), ("used", Q)]
class P1(ctypes.Structure): _fields_ = [("pid", U), ("used", Q)]
class P2(ctypes.Structure): _fields_ = [("pid", U), ("used", Q), ("gi", U), ("ci", U)]
out = {"init": l.nvmlInit_v2()}
dev = ctypes.c_void_p()
out["handle"] = l.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev))
m = M1()
out["v1"] = [l.nvmlDeviceGetMemoryInfo(dev, ctypes.byref(m)), m.total, m.free, m.used]
m = M2(version=int(sys.argv[1]))
out["v2"] = [l.nvmlDeviceGetMemoryInfo_v2(dev, ctypes.byref(m)), m.total, m.reserved, m.free,
             m.used]
for name, P in (("", P1), ("_v2", P2), ("_v3", P2)):
    n, a = U(8), (P * 8)()
    rc = getattr(l, "nvmlDeviceGetComputeRunningProcesses" + name)(dev, ctypes.byref(n), a)
    out["procs" + name] = [rc] + [[a[i].pid, a[i].used] for i in range(n.value)]
n = U(0)
out["count"] = [l.nvmlDeviceGetCount_v2(ctypes.byref(n)), n.value]
l.nvmlErrorString.restype = ctypes.c_char_p
out["error"] = l.nvmlErrorString(3).decode()
print(json.dumps(out))
"""
PROCS = f"100:{GIB},200:{8 * GIB},300:na"


@pytest.fixture(scope="module")
def fake_shim(probes, tmp_path_factory) -> Path:
    """The NVML shim built from the fake libnvidia-ml (its stub rule skipped)."""
    fake = probes / "libfake_nvml_libnvidia_ml.so"
    return make_nvml_shim(fake, tmp_path_factory.mktemp("nvml"), require_real=False).library


def query(shim: Path, *name: str, **env: str) -> dict:
    """The answers in a child under the shim that opens NVML by `name` (its SONAME)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SHIMGEN_", "FAKE_NVML"))}
    full.update(LD_PRELOAD=str(shim), FAKE_NVML_PROCS=PROCS, **env)
    proc = subprocess.run([sys.executable, "-c", QUERY, str(MEMORY_V2.version), *name],
                          env=full, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_without_a_limit_every_answer_is_the_real_librarys(fake_shim):
    out = query(fake_shim)
    assert out["v1"] == [0, 80 * GIB, 70 * GIB, 10 * GIB]
    assert out["v2"] == [0, 80 * GIB, 1 << 20, 70 * GIB - (1 << 20), 10 * GIB]
    for name in ("procs", "procs_v2", "procs_v3"):
        assert out[name] == [0, [100, GIB], [200, 8 * GIB], [300, 2**64 - 1]], name
    assert out["count"] == [0, 1] and out["error"] == "fake error" and out["init"] == 0


def test_memory_info_answers_the_limit_as_total_and_the_use_within_it(fake_shim):
    out = query(fake_shim, SHIMGEN_LIMIT_MEMORY="16GiB")
    assert out["v1"] == [0, 16 * GIB, 6 * GIB, 10 * GIB]
    assert out["v2"] == [0, 16 * GIB, 0, 6 * GIB, 10 * GIB]
    # a use past the limit is the whole limit, nothing free
    out = query(fake_shim, SHIMGEN_LIMIT_MEMORY=str(2 * GIB))
    assert out["v1"] == [0, 2 * GIB, 0, 2 * GIB]
    assert out["v2"] == [0, 2 * GIB, 0, 0, 2 * GIB]
    assert out["count"] == [0, 1] and out["error"] == "fake error"
    # a limit past the device's 80 GiB is the device's (as cuMemGetInfo answers)
    out = query(fake_shim, SHIMGEN_LIMIT_MEMORY="100GiB")
    assert out["v1"] == [0, 80 * GIB, 70 * GIB, 10 * GIB]


def test_nvml_opened_by_another_name_or_its_path_is_the_shim(fake_shim, probes, tmp_path):
    """nvidia-smi opens "libnvidia-ml.so" and absolute paths: the shim's dlopen opens
    itself for every name of NVML's, so the answers are still the shim's."""
    named = tmp_path / "libnvidia-ml.so.1"
    shutil.copy(probes / "libfake_nvml_libnvidia_ml.so", named)
    for name in (str(named), "libnvidia-ml.so"):
        out = query(fake_shim, name, SHIMGEN_LIMIT_MEMORY="16GiB")
        assert out["v1"] == [0, 16 * GIB, 6 * GIB, 10 * GIB], name
    # another library's name is opened as it is
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    code = "import ctypes; ctypes.CDLL('libm.so.6').cos"
    proc = subprocess.run([sys.executable, "-c", code], env={**env, "LD_PRELOAD": str(fake_shim)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_no_compute_process_is_over_the_limit_in_any_version(fake_shim):
    out = query(fake_shim, SHIMGEN_LIMIT_MEMORY="2GiB")
    for name in ("procs", "procs_v2", "procs_v3"):
        assert out[name] == [0, [100, GIB], [200, 2 * GIB], [300, 2**64 - 1]], name


def test_a_version_mismatch_is_the_real_librarys_answer_untouched(fake_shim):
    code = QUERY.replace("m = M2(version=int(sys.argv[1]))",
                         "m = M2(version=int(sys.argv[1]) + 1, total=123, reserved=7, free=5, "
                         "used=9)")
    assert code != QUERY
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    env.update(LD_PRELOAD=str(fake_shim), SHIMGEN_LIMIT_MEMORY="2GiB")
    proc = subprocess.run([sys.executable, "-c", code, str(MEMORY_V2.version)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert json.loads(proc.stdout)["v2"] == [25, 123, 7, 5, 9]  # as the program left it


def test_the_shim_never_loads_itself_as_the_real_library(probes, tmp_path):
    """The file it was built from replaced by a link to the shim: the shim finds no real
    library (none on this machine) and says so; it never calls itself round."""
    fake = tmp_path / "lib" / "libnvidia-ml.so.1"
    fake.parent.mkdir()
    shutil.copy(probes / "libfake_nvml_libnvidia_ml.so", fake)
    shim = make_nvml_shim(fake, tmp_path / "out", require_real=False).library
    fake.unlink()
    fake.symlink_to(shim)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    code = ("import ctypes; l = ctypes.CDLL('libnvidia-ml.so.1'); "
            "l.nvmlErrorString.restype = ctypes.c_char_p; "
            "print(l.nvmlInit_v2(), l.nvmlErrorString(0).decode())")
    proc = subprocess.run([sys.executable, "-c", code], env={**env, "LD_PRELOAD": str(shim)},
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0, proc.stderr
    installed = [p for p in SEARCH_PATHS if Path(p).is_file()]
    if not installed:  # NVML_ERROR_LIBRARY_NOT_FOUND, and the stand-in's string
        assert proc.stdout.split(None, 1) == ["12", "shimgen: no libnvidia-ml found\n"]


def _symbols(path: Path) -> list[str]:
    return sorted(read_image(path).function_names())


def test_the_shim_of_the_real_nvml_exports_exactly_its_functions_and_forwards(nvml_libraries,
                                                                               tmp_path):
    real = nvml_libraries[0].path
    shim = make_nvml_shim(real, tmp_path).library
    image = read_image(shim)
    assert image.soname == SONAME and not image.data
    assert _symbols(shim) == sorted(_symbols(real) + ["dlopen"])  # its dlopen wrapper
    # every call reaches the real library: the same answers as the real one alone (no GPU)
    code = ("import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); "
            "l.nvmlErrorString.restype = ctypes.c_char_p; "
            "print(l.nvmlInit_v2(), l.nvmlErrorString(9).decode(), "
            "l.nvmlDeviceGetCount_v2(ctypes.byref(ctypes.c_uint())))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    direct = subprocess.run([sys.executable, "-c", code, str(real)], env=env,
                            capture_output=True, text=True, timeout=60)
    shimmed = subprocess.run([sys.executable, "-c", code, SONAME],
                             env={**env, "LD_PRELOAD": str(shim), "SHIMGEN_LIMIT_MEMORY": "1G"},
                             capture_output=True, text=True, timeout=60)
    assert direct.returncode == shimmed.returncode == 0, shimmed.stderr
    assert shimmed.stdout == direct.stdout and direct.stdout.strip()
