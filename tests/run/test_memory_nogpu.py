"""`--limit memory` on a machine without a GPU, with a real Debian driver: cuInit fails
(CUDA_ERROR_NO_DEVICE) and the allocation reaches the driver, which fails it; the report
says the limit was never tried (the driver failed before any allocation could be judged),
not only "0 allocations refused". With a working device the line says what was refused
(tests/run/test_memory.py, on the fake ledger driver)."""

from __future__ import annotations

import json
import sys

from tests.run.test_run import shimgen_run

ALLOCATE = ("import ctypes\n"
            "lib = ctypes.CDLL('libcuda.so.1')\n"
            "lib.cuInit(0)\n"
            "lib.cuMemAlloc_v2(ctypes.byref(ctypes.c_uint64()), ctypes.c_size_t(1 << 20))\n")


def test_a_limit_the_driver_never_let_act_is_said_as_untried(drivers, tmp_path):
    driver = drivers[0].libdir / "libcuda.so.1"
    run = tmp_path / "run"
    proc = shimgen_run(driver, tmp_path / "xdg", "--limit", "memory=1MiB", "-o", str(run),
                       "--", sys.executable, "-c", ALLOCATE)
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("  limit ")]
    assert line == ("  limit 1.00 MiB per device: 0 allocations refused; cuInit returned "
                    "CUDA_ERROR_NO_DEVICE: no allocation reached a working device, so none "
                    "was judged (the limit acts on a working device's allocations)"), line
    from shimgen.report.main import report

    memory = json.loads(report([run], fmt="json"))["groups"][0]["memory"]
    assert memory["refused"] == 0 and memory["limit_not_tried"].startswith("cuInit returned ")
