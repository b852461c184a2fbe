"""SHIMGEN_GATES says what it is: "armed" when the loaded driver is the one analysed (the
bits are written once cuInit succeeds), and, when cuInit fails (a real driver without a
GPU: CUDA_ERROR_NO_DEVICE), once more that nothing was applied."""

from __future__ import annotations

import subprocess
import sys

from tests.run.test_run import ROOT, base_env, run_argv


def test_armed_and_then_nothing_applied_when_cuinit_fails(drivers, tmp_path):
    out = tmp_path / "run"
    calls = ("import ctypes; c = ctypes.CDLL('libcuda.so.1'); c.cuInit(0); c.cuInit(0); "
             "c.cuDeviceGet(ctypes.byref(ctypes.c_int()), 0)")
    proc = subprocess.run(run_argv(drivers[0].path, "--gates", "gdr", "-o", str(out), "--",
                                   sys.executable, "-c", calls),
                          env=base_env(tmp_path / "xdg"), cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    notices = (out / "notices.log").read_text()
    assert notices.count("shimgen: SHIMGEN_GATES=gdr armed on ") == 1, notices
    assert "in effect" not in notices
    assert notices.count("shimgen: SHIMGEN_GATES=gdr armed, but cuInit returned 100: nothing "
                         "applied (the gates are written once cuInit succeeds)") == 1, notices
