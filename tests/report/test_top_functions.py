"""`shimgen top --functions` and `--pid N` (shimgen/top/functions.py): the hottest driver
functions between two readings, of the job (every process summed) or of one process: calls
per second and share of the time in driver calls, hottest first; a process that began
between the readings counts all its calls; counts mode has no times ('-'). The last test
reads a live run (real driver, no GPU) as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from types import SimpleNamespace

from shimgen.top.functions import rows, text, totals
from tests.run.test_run import ROOT, base_env, run_argv


def proc(pid: int, functions: dict) -> SimpleNamespace:
    return SimpleNamespace(key=("b", pid, 1), pid=pid, functions=functions)


BEFORE = [proc(1, {"cuLaunchKernel": (100, 1000.0), "cuMemcpy": (10, 9000.0)}),
          proc(2, {"cuLaunchKernel": (50, 500.0)})]
AFTER = [proc(1, {"cuLaunchKernel": (300, 3000.0), "cuMemcpy": (12, 15000.0)}),
         proc(2, {"cuLaunchKernel": (150, 1500.0), "cuCtxSynchronize": (1, 100.0)}),
         proc(3, {"cuInit": (1, 900.0)})]  # began between the readings


def test_the_jobs_hottest_functions_over_the_window():
    found = rows(totals(BEFORE), AFTER, 2.0, None)
    by = {r["function"]: r for r in found}
    # the window's ns: cuMemcpy 6000, cuLaunchKernel 2000 + 1000, cuInit 900, cuCtxSync 100
    assert [r["function"] for r in found] == ["cuMemcpy", "cuLaunchKernel", "cuInit",
                                              "cuCtxSynchronize"]
    assert by["cuLaunchKernel"]["calls"] == 300 and by["cuLaunchKernel"][
        "calls_per_second"] == 150.0
    assert by["cuMemcpy"]["time_share"] == 6000 / 10000 and by["cuInit"]["calls"] == 1
    assert abs(sum(r["time_share"] for r in found) - 1) < 1e-12


def test_one_process_and_a_pid_the_run_lacks():
    found = rows(totals(BEFORE), AFTER, 1.0, 2)
    assert [(r["function"], r["calls"]) for r in found] == [("cuLaunchKernel", 100),
                                                            ("cuCtxSynchronize", 1)]
    assert found[0]["time_share"] == 1000 / 1100
    said = text(rows(totals(BEFORE), AFTER, 1.0, 7), AFTER, 7, 1.0)
    assert said[-1] == "hottest functions of pid 7: no process of this run has that pid"


def test_counts_mode_has_calls_and_no_time_share():
    found = rows({}, [proc(4, {"cuInit": (5, None)})], 0.5, None)
    assert found == [{"function": "cuInit", "calls": 5, "calls_per_second": 10.0,
                      "time_share": None}]
    assert text(found, [proc(4, {})], None, 0.5)[-1] == "      10.0       -  cuInit"
    assert rows(None, AFTER, 1.0, None) is None  # no reading before: no window yet


LOOP = ("import ctypes, os, sys, time\n"
        "lib = ctypes.CDLL('libcuda.so.1'); v = ctypes.c_int()\n"
        "end = time.monotonic() + 60\n"
        "while not os.path.exists(sys.argv[1]) and time.monotonic() < end:\n"
        "    for _ in range(50): lib.cuDriverGetVersion(ctypes.byref(v))\n"
        "    lib.cuDeviceGetCount(ctypes.byref(v)); time.sleep(0.002)\n")


def test_top_shows_a_running_jobs_hottest_functions(drivers, tmp_path):
    run, done = tmp_path / "run", tmp_path / "done"
    job = subprocess.Popen(run_argv(drivers[0].libdir / "libcuda.so.1", "-o", str(run), "--",
                                    sys.executable, "-c", LOOP, str(done)),
                           env=base_env(tmp_path / "xdg"), cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list((run / "traces").glob("*.shimtrace")) and time.monotonic() < deadline:
            time.sleep(0.1)

        def top(*args):
            proc = subprocess.run([sys.executable, "-m", "shimgen", "top", "--once", *args,
                                   str(run)], capture_output=True, text=True, cwd=ROOT,
                                  timeout=60)
            assert proc.returncode == 0, proc.stderr
            return proc.stdout

        doc = json.loads(top("--json", "--functions"))
        (pid,) = doc["running"]
        calls = {r["function"]: r["calls"] for r in doc["functions"]["rows"]}
        assert set(calls) == {"cuDriverGetVersion", "cuDeviceGetCount"}, calls
        assert 25 <= calls["cuDriverGetVersion"] / calls["cuDeviceGetCount"] <= 100, calls
        shares = [r["time_share"] for r in doc["functions"]["rows"]]
        assert abs(sum(shares) - 1) < 1e-9, shares
        said = top("--pid", str(pid)).splitlines()
        assert f"hottest functions of pid {pid}, over the last " in "\n".join(said), said
        assert any(ln.endswith("  cuDriverGetVersion") for ln in said), said
    finally:
        done.touch()
        job.communicate(timeout=120)
