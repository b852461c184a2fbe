"""Exactness of forwarding and of the trace modes, against a FAKE libcuda built by the tests
(tests/c/fake_libcuda.c): stack-passed and floating-point arguments, a struct returned in
rax:rdx, callbacks that call the driver again, recursion deeper than the shadow stack, a
private entry point from cuGetProcAddress, and 16 threads."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from shimgen.build import build
from shimgen.exports import read_driver
from shimgen.model import build_model

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def fake_shim(probes, tmp_path_factory) -> tuple[Path, Path]:
    """The fake is refused by `shimgen build` (it is a stub by design), so the tests build
    its shim through the Python API with the stub rule off."""
    fake = probes / "libfake_libcuda_for_tests.so"
    img = read_driver(fake, require_real=False)
    result = build(build_model(img, ["shimgen", "build", "--driver", str(fake)]),
                   tmp_path_factory.mktemp("fakeshim"))
    return fake, result.library


EXPECTED = [
    "registers main 0 thread 0",
    "launch rc 91645 out 9285189427964291645",
    "mixed -49.458333333333329",
    "pair 369d0369d0369cd fedcba9876543210",
    "host callbacks 5 versions 5",
    "recurse rc 0 sum 3703500",
    "private rc 0 value 777 status 0",
    "threads 16 calls 320000 bad 0",
]


def run_exactness(probes: Path, env: dict[str, str], lib: str) -> list[str]:
    proc = subprocess.run([str(probes / "exactness"), lib], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("SHIMGEN_", "LD_"))}


def test_direct_call_results(probes, fake_shim):
    fake, _ = fake_shim
    assert run_exactness(probes, clean_env(), str(fake)) == EXPECTED


@pytest.mark.parametrize("mode", ["", "1", "time"])
def test_shim_preserves_arguments_and_results(probes, fake_shim, tmp_path, mode):
    _, shim = fake_shim
    trace = tmp_path / "trace.json"
    env = dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_TRACE=mode,
               SHIMGEN_TRACE_FILE=str(trace))
    assert run_exactness(probes, env, "libcuda.so.1") == EXPECTED
    if not mode:
        assert not trace.exists()
        return
    data = json.loads(trace.read_text())
    # 320000 thread calls + 5 from host callbacks + 300 from recursion callbacks.
    assert data["calls"]["cuDriverGetVersion"] == 320305
    assert data["calls"]["cuFakeRecurse"] == 301
    assert data["calls"]["cuLaunchHostFunc"] == 5
    assert data["calls"]["cuLaunchKernel"] == 1
    assert data["unmapped_proc_addresses"] == 1  # the fake's private entry point
    if mode == "time":
        t = data["time"]
        assert set(t) == set(data["calls"])
        for name, row in t.items():
            assert row["calls"] == data["calls"][name]
            assert row["max_ns"] <= row["total_ns"]
            assert row["total_ns"] > 0
        # Recursion 301 deep: frames past the shadow stack's 128 are counted, not timed.
        assert data["untimed_calls"] > 0
        # The outermost recursing call contains 300 nested timed calls.
        assert t["cuFakeRecurse"]["max_ns"] > t["cuFakeReturnPair"]["max_ns"]
    else:
        assert "time" not in data


def test_time_table_on_stderr(probes, fake_shim):
    _, shim = fake_shim
    env = dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_TRACE="time")
    proc = subprocess.run([str(probes / "exactness"), "libcuda.so.1"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert "total ms" in proc.stderr and "mean ns" in proc.stderr and "max ns" in proc.stderr
    assert "cuLaunchKernel" in proc.stderr


def test_unknown_trace_mode_warns_once_and_forwards(probes, fake_shim):
    _, shim = fake_shim
    env = dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_TRACE="bogus")
    proc = subprocess.run([str(probes / "exactness"), "libcuda.so.1"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines() == EXPECTED
    assert proc.stderr.count("'bogus' is not a known mode") == 1


@pytest.mark.parametrize("mode", ["1", "time"])
def test_calls_from_a_signal_handler_inside_a_timed_call(probes, fake_shim, tmp_path, mode):
    """A signal handler that calls the driver while the interrupted thread is anywhere in a
    counting or timing stub: every result right, every call counted, and in `time` every
    call timed, with no shadow frame left behind."""
    _, shim = fake_shim
    trace = tmp_path / "trace.json"
    env = dict(clean_env(), LD_PRELOAD=str(shim), SHIMGEN_TRACE=mode,
               SHIMGEN_TRACE_FILE=str(trace))
    proc = subprocess.run([str(probes / "sigcalls"), "libcuda.so.1", "4000000"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    words = proc.stdout.split()
    made = {words[i]: int(words[i + 1]) for i in range(0, len(words) - 1, 2)}
    assert made["bad"] == 0 and made["handler_bad"] == 0, proc.stdout
    assert made["handler"] >= 20, f"too few signals arrived to test anything: {proc.stdout}"
    data = json.loads(trace.read_text())
    assert data["calls"]["cuDriverGetVersion"] == made["main"] + made["handler"]
    if mode == "time":
        assert data["untimed_calls"] == 0
        assert data["time"]["cuDriverGetVersion"]["calls"] == made["main"] + made["handler"]
