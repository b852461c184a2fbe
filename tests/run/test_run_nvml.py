"""`shimgen run` preloads the NVML shim (shimgen/run/nvml.py) beside the libcuda shim when a
limit is set: the libnvidia-ml beside the driver (here Debian's real one, linked beside
Debian's libcuda), its shim from the cache; a program that opens libnvidia-ml.so.1 gets the
shim. Without a limit only the libcuda shim is preloaded; without a libnvidia-ml the run
says so once and goes on."""

from __future__ import annotations

import os
import sys

from shimgen.driver.nvml import SEARCH_PATHS
from tests.run.test_run import shimgen_run

# The child: its LD_PRELOAD, then whether the NVML it opens by name is the shim.
CHILD = ("import ctypes, os; print(os.environ.get('LD_PRELOAD', '')); "
         "l = ctypes.CDLL('libnvidia-ml.so.1'); l.nvmlInit_v2(); "
         "maps = open('/proc/self/maps').read(); "
         "print('libnvmlshim.so' in maps, 'libnvidia-ml.so.' in maps)")


def test_run_preloads_the_nvml_shim_beside_the_libcuda_shim_when_a_limit_is_set(
        drivers, nvml_libraries, tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libcuda.so.1").symlink_to(drivers[0].path)
    (lib / "libnvidia-ml.so.1").symlink_to(nvml_libraries[0].path)
    xdg = tmp_path / "xdg"
    proc = shimgen_run(lib / "libcuda.so.1", xdg, "--limit", "memory=1GiB", "-o",
                       str(tmp_path / "r1"), "--", sys.executable, "-c", CHILD)
    assert proc.returncode == 0, proc.stderr
    preload, loaded = proc.stdout.splitlines()
    first, second = preload.split(":")[:2]
    assert first.endswith("/libcudashim.so") and second.endswith("/libnvmlshim.so"), preload
    assert loaded == "True True", proc.stdout  # the shim, and the real library it loaded
    proc = shimgen_run(lib / "libcuda.so.1", xdg, "-o", str(tmp_path / "r2"), "--",
                       sys.executable, "-c", CHILD.split(";")[0] + "; import os; "
                       "print(os.environ.get('LD_PRELOAD', ''))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("/libcudashim.so\n"), proc.stdout
    (lib / "libnvidia-ml.so.1").unlink()
    if any(os.path.isfile(p) for p in SEARCH_PATHS):
        return  # this machine has its own libnvidia-ml: the line below is not said
    proc = shimgen_run(lib / "libcuda.so.1", xdg, "--limit", "memory=1GiB", "-o",
                       str(tmp_path / "r3"), "--", "true")
    assert proc.returncode == 0, proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if "libnvidia-ml.so.1" in ln]
    assert said == ["shimgen: run: no libnvidia-ml.so.1 beside the driver or in NVML's usual "
                    "places: NVML's answers (nvidia-smi) do not show the limit"], proc.stderr


def test_run_preloads_the_nvml_shim_under_a_shared_budget(drivers, nvml_libraries, tmp_path):
    """Any memory limit preloads it: --limit job-memory, and --limit-group alone (the
    group's size fixed by an earlier run), with the books' path for the NVML shim."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libcuda.so.1").symlink_to(drivers[0].path)
    (lib / "libnvidia-ml.so.1").symlink_to(nvml_libraries[0].path)
    xdg, group = tmp_path / "xdg", str(tmp_path / "group")
    child = ("import os; print(os.environ.get('LD_PRELOAD', '')); "
             "print(os.environ.get('SHIMGEN_BUDGET_FILE', ''))")
    runs = (("--limit", "job-memory=1GiB"), ("--limit", "job-memory=1GiB", "--limit-group",
                                              group), ("--limit-group", group))
    for i, args in enumerate(runs):
        proc = shimgen_run(lib / "libcuda.so.1", xdg, *args, "-o", str(tmp_path / f"r{i}"),
                           "--", sys.executable, "-c", child)
        assert proc.returncode == 0, proc.stderr
        preload, books = proc.stdout.splitlines()
        assert preload.split(":")[1].endswith("/libnvmlshim.so"), (args, preload)
        assert books.startswith(group if "--limit-group" in args else str(tmp_path / "r0")), (
            args, books)
