"""The GPU scripts' checker (tests/gpu/compare_counts.py) on synthetic traces, on the CPU:
a wrong ABI variant fails the strict comparison that tests/gpu/run_validation.sh uses, an
unmapped cuGetProcAddress answer fails the run, a process without a shim trace fails,
and a missing CUPTI file is never a pass. Plus `bash -n` of every GPU shell script."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.gpu.compare_counts import main

GPU = Path(__file__).resolve().parents[1] / "gpu"


def write(path: Path, pid: int, calls: dict[str, int], unmapped: int | None = None) -> str:
    data: dict = {"pid": pid, "calls": calls}
    if unmapped is not None:
        data["unmapped_proc_addresses"] = unmapped
    path.write_text(json.dumps(data))
    return str(path)


def compare(tmp_path: Path, shim: dict, cupti: dict | None, *extra: str,
            unmapped: int = 0) -> tuple[int, dict]:
    s = write(tmp_path / "shim.json", 7, shim, unmapped)
    c = write(tmp_path / "cupti.json", 7, cupti) if cupti is not None else str(
        tmp_path / "none.json")
    out = tmp_path / "result.json"
    rc = main(["--shim", s, "--cupti", c, "--json-out", str(out), *extra])
    return rc, (json.loads(out.read_text()) if out.exists() else {})


def test_exact_counts_pass(tmp_path):
    rc, r = compare(tmp_path, {"cuInit": 1, "cuMemAlloc_v2": 3}, {"cuInit": 1,
                                                                 "cuMemAlloc_v2": 2}, "--strict")
    assert rc == 0 and r["ok"] and r["family"] == []


def test_wrong_variant_fails_only_when_strict(tmp_path):
    """The shim counted cuMemAlloc where CUPTI saw cuMemAlloc_v2: a family match, which the
    strict comparison (the one the GPU script runs) fails."""
    shim, cupti = {"cuInit": 1, "cuMemAlloc": 2}, {"cuInit": 1, "cuMemAlloc_v2": 2}
    rc, r = compare(tmp_path, shim, cupti)
    assert rc == 0 and r["family"] == ["cuMemAlloc_v2"]
    rc, r = compare(tmp_path, shim, cupti, "--strict")
    assert rc == 1 and r["failures"] == [{"function": "cuMemAlloc_v2", "cupti": 2, "shim": 2,
                                          "mode": "family"}]


def test_fewer_calls_in_the_shim_fail(tmp_path):
    rc, r = compare(tmp_path, {"cuInit": 1, "cuDeviceGetCount": 1},
                    {"cuInit": 1, "cuDeviceGetCount": 6}, "--strict")
    assert rc == 1 and [f["function"] for f in r["failures"]] == ["cuDeviceGetCount"]


def test_unmapped_answers_fail(tmp_path):
    rc, r = compare(tmp_path, {"cuInit": 1}, {"cuInit": 1}, "--strict", unmapped=2)
    assert rc == 1 and r["unmapped_proc_addresses"] == 2 and not r["ok"]
    rc, _ = compare(tmp_path, {"cuInit": 1}, {"cuInit": 1}, "--strict", "--allow-unmapped",
                    unmapped=2)
    assert rc == 0


def test_a_process_without_a_shim_trace_fails(tmp_path):
    s = write(tmp_path / "shim.json", 7, {"cuInit": 1})
    c1 = write(tmp_path / "c1.json", 7, {"cuInit": 1})
    c2 = write(tmp_path / "c2.json", 8, {"cuInit": 1})
    assert main(["--shim", s, "--cupti", c1, c2, "--strict"]) == 1


def test_no_cupti_file_is_never_a_pass(tmp_path):
    rc, _ = compare(tmp_path, {"cuInit": 1}, None, "--strict")
    assert rc == 2  # the shim saw cuInit, so CUPTI should have counted
    rc, _ = compare(tmp_path, {"cuDriverGetVersion": 1}, None, "--strict")
    assert rc == 3  # not applicable: run_validation.sh fails on it too


@pytest.mark.parametrize("script", sorted(p.name for p in GPU.glob("*.sh")))
def test_gpu_scripts_parse(script):
    proc = subprocess.run(["bash", "-n", str(GPU / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_run_validation_is_strict():
    """The GPU script runs the strict comparison, fails a comparison that could not run,
    and compares the shim with nm -D of the real driver."""
    text = (GPU / "run_validation.sh").read_text()
    calls = [ln for ln in text.splitlines()
             if "compare_counts.py" in ln and not ln.lstrip().startswith("#")]
    assert len(calls) == 2 and all("--strict" in ln for ln in calls), calls
    assert "--allow-unmapped" not in text and "n/a" not in text
    assert 'defined_functions "$DRIVER"' in text
