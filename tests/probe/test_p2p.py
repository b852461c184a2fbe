"""`shimgen probe --p2p` (shimgen/probe/p2p.py, p2p_format.py) on the CPU: CI has no GPU.

- The table and the one-line answers of format_p2p on synthetic data.
- The child process against real Debian libcuda builds (no GPU here): it must answer
  "no GPU" in one line, without and with the shim.

The measurement code against a fake driver is in test_p2p_measure.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.probe import p2p
from shimgen.probe.child import child_env

ROOT = Path(__file__).resolve().parents[2]
P2P_CHILD = [sys.executable, "-m", "shimgen", "probe", "--p2p", "--child"]


def test_cuda_bindings_is_importable():
    """The child needs cuda-python; a test environment without it is broken, not skipped."""
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError as e:
        pytest.fail(f"cuda-bindings is not importable in the test environment ({e}); "
                    "pip install cuda-bindings (shimgen[probe])", pytrace=False)


# ---- format_p2p on synthetic data -----------------------------------------------------------

def _measure(gbps: float, count: int = 10, size: int = 128 << 20, check: str = "ok") -> dict:
    return {"ms": size * count / gbps / 1e6, "gbps": gbps, "check": check}


def synthetic(peer=(390.5, 388.0), bounce=(41.2, 40.9), shim=False) -> dict:
    pairs = []
    for (i, j), pg, bg in zip(((0, 1), (1, 0)), peer, bounce, strict=True):
        pairs.append({"src": i, "dst": j, "can_access_peer": 1,
                      "attributes": {"performance_rank": 0, "access_supported": 1,
                                     "native_atomic_supported": 1,
                                     "cuda_array_access_supported": 1},
                      "peer_enable": 0, "peer_access": True,
                      "peer": _measure(pg), "bounce": _measure(bg)})
    return {"size_bytes": 128 << 20, "count": 10, "cuInit": 0,
            "cuInit_name": "CUDA_SUCCESS (0)", "driver_version": 13000,
            "devices": [{"ordinal": 0, "name": "NVIDIA H200"},
                        {"ordinal": 1, "name": "NVIDIA H200"}],
            "pairs": pairs, "error": None, "shim_mapped": shim,
            "libcuda": "/usr/local/nvidia/lib64/libcuda.so.580.159.04"}


def test_format_p2p_table():
    out = p2p.format_p2p(synthetic())
    lines = out.splitlines()
    assert lines[0].startswith("driver /usr/local/nvidia/lib64/libcuda.so.580.159.04 "
                               "(CUDA 13.0), no shim mapped; 2 GPUs: 0: NVIDIA H200")
    assert "10 copies of 128 MiB" in lines[1]
    assert lines[2].startswith("peer = cuMemcpyPeerAsync; bounce = ")
    head = lines[3].split()
    assert head[0] == "pair" and "GB/s" in head
    row01 = next(ln for ln in lines if ln.startswith("0 -> 1"))
    row10 = next(ln for ln in lines if ln.startswith("1 -> 0"))
    assert row01.split()[3:] == ["yes", "0", "1", "1", "1", "yes", "390.5", "41.2", "9.48x",
                                 "ok"]
    assert "388.0" in row10 and "40.9" in row10
    # columns line up: every row as long as the header, at most
    assert len({len(ln) for ln in lines[3:]}) <= 2


def test_format_p2p_names_a_failed_check_and_an_error():
    d = synthetic()
    d["pairs"][0]["peer"]["check"] = "MISMATCH at byte 0: 0x00000000, want 0xa1000001"
    d["pairs"][1]["bounce"] = {"error": "cuMemcpyHtoDAsync returned error 1"}
    out = p2p.format_p2p(d)
    assert "peer: MISMATCH at byte 0" in out
    assert "bounce: cuMemcpyHtoDAsync returned error 1" in out
    row10 = next(ln for ln in out.splitlines() if ln.startswith("1 -> 0"))
    assert " error " in row10


def test_peer_not_possible_is_shown():
    d = synthetic()
    for p in d["pairs"]:
        p.update(can_access_peer=0, peer_enable=None, peer_access=False)
    row = next(ln for ln in p2p.format_p2p(d).splitlines() if ln.startswith("0 -> 1"))
    assert row.split()[3] == "no" and row.split()[8] == "no"


@pytest.mark.parametrize("data, line", [
    ({"cuInit": None, "error": "cannot load the CUDA driver: not found", "devices": []},
     "no GPU: cannot load the CUDA driver: not found"),
    ({"cuInit": 100, "cuInit_name": "CUDA_ERROR_NO_DEVICE (100)", "devices": []},
     "no GPU: cuInit returned CUDA_ERROR_NO_DEVICE (100)"),
    ({"cuInit": 100, "devices": []}, "no GPU: cuInit returned CUDA_ERROR_NO_DEVICE (100)"),
    ({"cuInit": 0, "devices": [], "error": None}, "no GPU: cuDeviceGetCount found 0 devices"),
    ({"cuInit": 0, "devices": [{"ordinal": 0, "name": "NVIDIA H200"}], "pairs": []},
     "1 GPU (0: NVIDIA H200): no GPU pairs to query or measure"),
])
def test_no_pairs_is_one_line(data, line):
    assert p2p.format_p2p(data) == line


def test_side_by_side_ratios_and_changes():
    plain, shimmed = synthetic(), synthetic(peer=(386.6, 388.0), shim=True)
    shimmed["pairs"][1]["attributes"]["native_atomic_supported"] = 0
    out = p2p.side_by_side(plain, shimmed, ["shimgen: something"])
    lines = out.splitlines()
    assert "without shim" in lines[0] and "with shim" in lines[0]
    mapped = next(ln for ln in lines if ln.startswith("libcudashim.so mapped"))
    assert mapped.split()[-2:] == ["no", "yes"] and "changed" not in mapped
    peer01 = next(ln for ln in lines if ln.startswith("0 -> 1 peer copy GB/s"))
    assert peer01.endswith("ratio 0.990")
    assert next(ln for ln in lines if ln.startswith("1 -> 0 atomics")).endswith("<- changed")
    assert next(ln for ln in lines if ln.startswith("0 -> 1 data check")).split()[-2:] == \
        ["ok", "ok"]
    assert lines[-1] == "(shim said) shimgen: something"


# ---- the child process against real drivers (no GPU here) ------------------------------------

def _child_env(libdir: Path) -> dict[str, str]:
    return child_env(libdir=libdir)


def test_child_reports_no_device_in_one_line(drivers):
    for d in drivers:
        proc = subprocess.run(P2P_CHILD, env=_child_env(d.libdir),
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.strip().splitlines()
        assert len(lines) == 1
        data = json.loads(lines[0])
        assert data["cuInit"] == 100 and data["pairs"] == [] and data["shim_mapped"] is False
        assert Path(data["libcuda"]).resolve() == d.path.resolve()
        assert p2p.format_p2p(data) == "no GPU: cuInit returned CUDA_ERROR_NO_DEVICE (100)"
        table = subprocess.run([*P2P_CHILD, "--table"],
                               env=_child_env(d.libdir), capture_output=True, text=True,
                               timeout=120, cwd=ROOT)
        assert table.stdout == "no GPU: cuInit returned CUDA_ERROR_NO_DEVICE (100)\n"


def test_child_without_any_driver_says_so(tmp_path):
    env = _child_env(tmp_path)  # an empty directory: no libcuda anywhere we point to
    proc = subprocess.run(P2P_CHILD, env=env,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    if data["cuInit"] is not None:  # this machine has a libcuda of its own on the loader path
        pytest.skip("a system libcuda is installed here")
    assert p2p.format_p2p(data).startswith("no GPU: cannot load the CUDA driver: ")


def test_report_p2p_side_by_side_with_the_shim(shims, monkeypatch, tmp_path):
    s = shims[0]
    monkeypatch.setenv("LD_LIBRARY_PATH", str(s.driver.libdir))
    monkeypatch.setenv("SHIMGEN_TRACE", "1")  # passes to the shimmed child only
    out = p2p.report_p2p(s.library, json_out=tmp_path / "p2p.json")
    both = json.loads((tmp_path / "p2p.json").read_text())
    assert both["without_shim"]["shim_mapped"] is False
    assert both["with_shim"]["shim_mapped"] is True and both["shim"] == str(s.library)
    lines = out.splitlines()
    assert "without shim" in lines[0] and "with shim" in lines[0]
    mapped = next(ln for ln in lines if ln.startswith("libcudashim.so mapped"))
    assert mapped.split()[-2:] == ["no", "yes"]
    result = next(ln for ln in lines if ln.startswith("result"))
    assert result.count("no GPU: cuInit returned CUDA_ERROR_NO_DEVICE (100)") == 2
    assert "<- changed" not in out
    assert p2p.report_p2p(None) == "no GPU: cuInit returned CUDA_ERROR_NO_DEVICE (100)"
