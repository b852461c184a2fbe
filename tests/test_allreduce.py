"""The all-reduce benchmark's arithmetic (benchmarks/allreduce.py), on the CPU: busbw, the
per-launch statistics, the aggregation over rounds, the child environment, the trace-file
check, and the driver with its launches faked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import allreduce

ROOT = Path(__file__).resolve().parent.parent


# ---- benchmarks/allreduce.py: arithmetic and aggregation ---------------------------------------

def test_busbw_factor_and_units():
    assert allreduce.busbw_factor(1) == 0
    assert allreduce.busbw_factor(2) == 1
    assert allreduce.busbw_factor(4) == 1.5
    assert allreduce.busbw_factor(8) == 1.75
    assert allreduce.algbw(1 << 30, 0.01) == pytest.approx(107.374182, rel=1e-6)
    assert allreduce.busbw(1 << 30, 0.01, 8) == pytest.approx(107.374182 * 1.75, rel=1e-6)
    with pytest.raises(ValueError):
        allreduce.busbw_factor(0)


def test_sizes_and_parsing():
    assert allreduce.parse_size("1M") == 1 << 20
    assert allreduce.parse_size("1G") == 1 << 30
    assert allreduce.parse_size("256KiB") == 256 << 10
    assert allreduce.parse_size("4096") == 4096
    with pytest.raises(ValueError):
        allreduce.parse_size("1.5G")
    four = allreduce.sizes(1 << 20, 1 << 30, 4)
    assert [s >> 20 for s in four] == [1, 4, 16, 64, 256, 1024]
    assert len(allreduce.sizes(1 << 20, 1 << 30, 2)) == 11
    assert allreduce.human(1 << 30) == "1 GiB" and allreduce.human(64 << 20) == "64 MiB"
    with pytest.raises(ValueError):
        allreduce.sizes(1 << 20, 1 << 10, 4)


def test_iterations_are_bounded():
    assert allreduce.iterations(1 << 30) == 8
    assert allreduce.iterations(1 << 20) == 200
    assert allreduce.iterations(8 << 30) == 5
    total = sum(allreduce.iterations(s) for s in allreduce.sizes(1 << 20, 1 << 30, 4))
    assert total < 1000


def _rank(rank: int, n: int, blocks: dict[int, list[float]], pid: int = 0) -> dict:
    return {"rank": rank, "world_size": n, "pid": pid or 1000 + rank,
            "sizes": {str(s): {"iters": 10, "block_seconds": b} for s, b in blocks.items()}}


def test_launch_stats_takes_slowest_rank_then_median_block():
    size = 1 << 30
    ranks = [_rank(0, 2, {size: [0.010, 0.012, 0.011]}),
             _rank(1, 2, {size: [0.011, 0.010, 0.013]})]
    st = allreduce.launch_stats(ranks)[size]
    assert st["blocks"] == [0.011, 0.012, 0.013]
    assert st["seconds"] == 0.012
    assert st["busbw"] == pytest.approx(size / 0.012 / 1e9)
    assert st["algbw"] == st["busbw"]  # n = 2
    with pytest.raises(ValueError):
        allreduce.launch_stats(ranks[:1])  # a rank is missing
    with pytest.raises(ValueError):
        allreduce.launch_stats([ranks[0], _rank(1, 2, {size: [0.01]})])


def _launch(variant: str, rnd: int, busbw: dict[int, float]) -> dict:
    return {"variant": variant, "round": rnd,
            "stats": {s: {"busbw": b} for s, b in busbw.items()}}


def test_aggregate_medians_ratio_and_bar():
    a, b = 1 << 20, 1 << 30
    launches = []
    for rnd, (d, s) in enumerate([((10, 100), (10, 99.5)), ((12, 101), (9, 100.0)),
                                  ((11, 99), (9.5, 98.0))]):
        launches += [_launch("direct", rnd, {a: d[0], b: d[1]}),
                     _launch("shim", rnd, {a: s[0], b: s[1]})]
    launches.append(_launch("trace", 0, {a: 8.0, b: 95.0}))
    out = allreduce.aggregate(launches)
    assert out[b]["busbw_direct"]["median"] == 100 and out[b]["busbw_shim"]["median"] == 99.5
    assert out[b]["ratio"] == pytest.approx(0.995) and out[b]["met"] is True
    assert out[b]["median_paired_ratio"] == pytest.approx(100 / 101)
    assert out[a]["ratio"] == pytest.approx(9.5 / 11) and out[a]["met"] is False
    assert out[a]["busbw_direct"]["runs"] == [10, 12, 11]
    assert out[b]["busbw_trace"] == 95.0 and out[b]["ratio_trace"] == pytest.approx(0.95)
    table = allreduce.format_table(out)
    lines = table.splitlines()
    assert lines[0].split()[:2] == ["size", "busbw"] and "traced" in lines[0]
    assert lines[1].split()[:2] == ["1", "MiB"] and " NO " in lines[1]
    assert lines[2].split()[:7] == ["1", "GiB", "100.00", "99.50", "0.9950", "0.9901", "0.99"]
    assert "yes" in lines[2]


def test_child_env_keeps_multicast_off_and_tracing_only_when_asked(monkeypatch):
    monkeypatch.setenv("SHIMGEN_TRACE", "time")
    monkeypatch.setenv("LD_PRELOAD", "/elsewhere.so")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    plain = allreduce.child_env(None)
    assert "LD_PRELOAD" not in plain and "SHIMGEN_TRACE" not in plain
    shim = allreduce.child_env(Path("/x/libcudashim.so"))
    traced = allreduce.child_env(Path("/x/libcudashim.so"), "/t/trace.%r.json")
    for env in (plain, shim, traced):
        assert env["NCCL_NVLS_ENABLE"] == "0"
        assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert shim["LD_PRELOAD"] == "/x/libcudashim.so" and "SHIMGEN_TRACE" not in shim
    assert traced["SHIMGEN_TRACE"] == "1"
    assert traced["SHIMGEN_TRACE_FILE"] == "/t/trace.%r.json"


def _trace(path: Path, pid: int, calls: dict[str, int]) -> None:
    path.write_text(json.dumps({"pid": pid, "calls": calls}))


def test_trace_files_one_per_rank_named_by_rank(tmp_path):
    ranks = [_rank(0, 2, {}, pid=11), _rank(1, 2, {}, pid=12)]
    _trace(tmp_path / "trace.0.json", 11, {"cuInit": 1, "cuLaunchKernel": 40})
    _trace(tmp_path / "trace.1.json", 12, {"cuInit": 1, "cuLaunchKernel": 38})
    _trace(tmp_path / "trace.%r.json", 10, {"cuInit": 1})  # e.g. the launcher, not a rank
    t = allreduce.check_traces(tmp_path, ranks)
    assert t["ok"] and t["rank_named"] and t["distinct_rank_files"] == 2
    assert t["other_files"] == ["trace.%r.json"]
    assert t["merged_calls"] == {"cuLaunchKernel": 78, "cuInit": 2}
    assert t["per_rank"]["1"]["calls"] == 39 and t["per_rank"]["0"]["top"][0] == \
        ("cuLaunchKernel", 40)


def test_trace_files_per_pid_but_not_by_rank(tmp_path):
    ranks = [_rank(0, 2, {}, pid=11), _rank(1, 2, {}, pid=12)]
    _trace(tmp_path / "trace.%r.json.11", 11, {"cuInit": 1})
    _trace(tmp_path / "trace.%r.json.12", 12, {"cuInit": 1})
    t = allreduce.check_traces(tmp_path, ranks)
    assert not t["ok"] and t["distinct_rank_files"] == 2 and not t["rank_named"]
    assert t["why"] == "files are per process but not named trace.<rank>.json"


def test_trace_file_clobbered(tmp_path):
    ranks = [_rank(0, 2, {}, pid=11), _rank(1, 2, {}, pid=12)]
    _trace(tmp_path / "trace.json", 12, {"cuInit": 1})  # rank 1 overwrote rank 0's file
    t = allreduce.check_traces(tmp_path, ranks)
    assert not t["ok"] and t["why"] == "a rank wrote no trace file"
    assert allreduce.check_traces(tmp_path / "missing", ranks)["ok"] is False


def test_benchmark_skips_cleanly_without_gpus(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.allreduce", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("allreduce: skipped: ")
    assert "skipped" in json.loads(out.read_text())


def test_driver_interleaves_aggregates_and_checks_traces(tmp_path, monkeypatch, capsys):
    """main() with the launches faked: the order of launches, the JSON and the table."""
    shim = tmp_path / "libcudashim.so"
    shim.write_bytes(b"")
    order = []

    def fake_launch(variant, shim_path, nproc, out, size_list, reps, warmup, timeout,
                    trace_file=None):
        order.append((variant, out.name, trace_file is not None))
        assert shim_path == shim.resolve() and nproc == 2 and reps == 3
        slow = {"direct": 1.0, "shim": 1.004, "trace": 1.02}[variant]
        ranks = []
        for r in range(nproc):
            pid = 500 + 10 * len(order) + r
            ranks.append({"rank": r, "world_size": nproc, "pid": pid, "device": "Fake",
                          "torch": "0", "cuda": "0", "nccl": "0",
                          "sizes": {str(s): {"iters": 5, "block_seconds":
                                             [s / 100e9 * slow] * reps} for s in size_list}})
            if trace_file:
                path = Path(trace_file.replace("%r", str(r)))
                path.write_text(json.dumps({"pid": pid, "calls": {"cuInit": 1}}))
        return ranks

    monkeypatch.setattr(allreduce, "why_skip", lambda nproc: (None, 2))
    monkeypatch.setattr(allreduce, "launch", fake_launch)
    out = tmp_path / "r.json"
    rc = allreduce.main(["--shim", str(shim), "--reps", "3", "--trace", "--work",
                         str(tmp_path / "work"), "--json", str(out), "--max-size", "16M"])
    assert rc == 0
    assert order == [("direct", "direct-0", False), ("shim", "shim-0", False),
                     ("shim", "shim-1", False), ("direct", "direct-1", False),
                     ("direct", "direct-2", False), ("shim", "shim-2", False),
                     ("trace", "trace-0", True)]
    r = json.loads(out.read_text())
    assert r["rounds"] == 3 and r["world_size"] == 2 and r["sizes"] == [1 << 20, 4 << 20,
                                                                         16 << 20]
    for s in r["summary"].values():
        assert s["ratio"] == pytest.approx(1 / 1.004) and s["met"] is True
        assert s["busbw_direct"]["median"] == pytest.approx(100)
        assert s["ratio_trace"] == pytest.approx(1 / 1.02)
    assert r["met"] is True and r["traces"]["ok"] is True
    assert r["traces"]["merged_calls"] == {"cuInit": 2}
    text = capsys.readouterr().out
    assert "bar 0.99: met at every size" in text
    assert "traces: ok; 2 distinct files for 2 ranks: trace.0.json, trace.1.json" in text
