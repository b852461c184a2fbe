"""The NCCL all-reduce benchmark (benchmarks/allreduce.py, allreduce_launch.py,
allreduce_stats.py) on the CPU (CI has no GPU): busbw, the per-launch statistics, the
rotation of variants over rounds, the aggregation into ratios with their spread, the
trace-file check, the calls per all-reduce and what they can cost, and the driver loop with
its launches faked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import allreduce
from benchmarks import allreduce_stats as st

ROOT = Path(__file__).resolve().parents[2]


def test_busbw_factor_and_units():
    assert st.busbw_factor(1) == 0
    assert st.busbw_factor(2) == 1
    assert st.busbw_factor(4) == 1.5
    assert st.busbw_factor(8) == 1.75
    assert st.algbw(1 << 30, 0.01) == pytest.approx(107.374182, rel=1e-6)
    assert st.busbw(1 << 30, 0.01, 8) == pytest.approx(107.374182 * 1.75, rel=1e-6)
    with pytest.raises(ValueError):
        st.busbw_factor(0)


def test_sizes_and_parsing():
    assert st.parse_size("1M") == 1 << 20
    assert st.parse_size("1G") == 1 << 30
    assert st.parse_size("256KiB") == 256 << 10
    assert st.parse_size("4096") == 4096
    with pytest.raises(ValueError):
        st.parse_size("1.5G")
    four = st.sizes(1 << 20, 1 << 30, 4)
    assert [s >> 20 for s in four] == [1, 4, 16, 64, 256, 1024]
    assert len(st.sizes(1 << 20, 1 << 30, 2)) == 11
    assert st.human(1 << 30) == "1 GiB" and st.human(64 << 20) == "64 MiB"
    with pytest.raises(ValueError):
        st.sizes(1 << 20, 1 << 10, 4)


def test_iterations_are_bounded():
    assert st.iterations(1 << 30) == 8
    assert st.iterations(1 << 20) == 200
    assert st.iterations(8 << 30) == 5
    total = sum(st.iterations(s) for s in st.sizes(1 << 20, 1 << 30, 4))
    assert total < 1000


def test_round_order_puts_each_variant_in_each_place():
    vs = ["direct", "shim", "count", "time"]
    orders = [st.round_order(r, vs) for r in range(4)]
    assert orders[0] == vs and orders[1] == ["shim", "count", "time", "direct"]
    for place in range(4):
        assert sorted(o[place] for o in orders) == sorted(vs)
    assert st.round_order(4, vs) == vs


def _rank(rank: int, n: int, blocks: dict[int, list[float]], pid: int = 0,
          allreduces: int | None = None) -> dict:
    r = {"rank": rank, "world_size": n, "pid": pid or 1000 + rank,
         "sizes": {str(s): {"iters": 10, "block_seconds": b} for s, b in blocks.items()}}
    if allreduces is not None:
        r["allreduces"] = allreduces
    return r


def test_launch_stats_takes_slowest_rank_then_median_block():
    size = 1 << 30
    ranks = [_rank(0, 2, {size: [0.010, 0.012, 0.011]}),
             _rank(1, 2, {size: [0.011, 0.010, 0.013]})]
    s = st.launch_stats(ranks)[size]
    assert s["blocks"] == [0.011, 0.012, 0.013]
    assert s["seconds"] == 0.012
    assert s["busbw"] == pytest.approx(size / 0.012 / 1e9)
    assert s["algbw"] == s["busbw"]  # n = 2
    with pytest.raises(ValueError):
        st.launch_stats(ranks[:1])  # a rank is missing
    with pytest.raises(ValueError):
        st.launch_stats([ranks[0], _rank(1, 2, {size: [0.01]})])


def test_rank_cpus_gives_each_rank_its_own_slice():
    allowed = list(range(32))
    assert st.rank_cpus(allowed, 0, 2, 4) == [0, 1, 2, 3]
    assert st.rank_cpus(allowed, 1, 2, 4) == [4, 5, 6, 7]
    assert st.rank_cpus([3, 5, 9], 1, 2, 4) == [5]  # not enough: one each
    assert st.rank_cpus([3], 1, 2, 4) == [3]  # never empty
    with pytest.raises(ValueError):
        st.rank_cpus(allowed, 0, 2, 0)


def test_launch_stats_host_time_is_the_slowest_ranks_median():
    size = 1 << 20
    ranks = [_rank(0, 2, {size: [0.01, 0.01, 0.01]}), _rank(1, 2, {size: [0.01, 0.01, 0.01]})]
    ranks[0]["sizes"][str(size)]["host_seconds"] = [1e-5, 3e-5, 2e-5]
    ranks[1]["sizes"][str(size)]["host_seconds"] = [4e-5, 1e-5, 5e-5]
    assert st.launch_stats(ranks)[size]["host_seconds"] == 4e-5
    del ranks[1]["sizes"][str(size)]["host_seconds"]
    assert "host_seconds" not in st.launch_stats(ranks)[size]
    launches = [{"variant": v, "round": rnd, "stats": {size: {"busbw": 1.0, "host_seconds": h}}}
                for rnd, (v, h) in enumerate([("direct", 2e-5), ("direct", 4e-5),
                                              ("direct", 3e-5), ("time", 5e-5)])]
    out = st.aggregate(launches)[size]
    assert out["direct"]["host_us"] == pytest.approx(30) and out["time"]["host_us"] == 50
    line = st.format_table({size: out}).splitlines()[1]
    assert line.split()[6] == "30.0"  # 1 MiB, no shim, busbw, range, issue us


def _launch(variant: str, rnd: int, busbw: dict[int, float]) -> dict:
    return {"variant": variant, "round": rnd,
            "stats": {s: {"busbw": b} for s, b in busbw.items()}}


def test_aggregate_medians_ratios_spread_and_bars():
    a, b = 1 << 20, 1 << 30
    launches = []
    rows = [((10, 100), (10, 99.5), (9.8, 99.2), (9.9, 98.5)),
            ((12, 101), (9, 100.0), (12.1, 100.5), (11.0, 99.0)),
            ((11, 99), (9.5, 98.0), (10.9, 99.0), (10.9, 97.6))]
    for rnd, (d, s, c, t) in enumerate(rows):
        launches += [_launch("direct", rnd, {a: d[0], b: d[1]}),
                     _launch("shim", rnd, {a: s[0], b: s[1]}),
                     _launch("count", rnd, {a: c[0], b: c[1]}),
                     _launch("time", rnd, {a: t[0], b: t[1]})]
    out = st.aggregate(launches)
    assert out[b]["direct"]["median"] == 100 and out[b]["shim"]["median"] == 99.5
    assert out[b]["shim"]["ratio"] == pytest.approx(0.995) and out[b]["shim"]["met"] is True
    assert out[b]["shim"]["paired"]["median"] == pytest.approx(100 / 101)
    assert out[b]["shim"]["paired"]["min"] == pytest.approx(98 / 99)
    assert out[b]["shim"]["paired"]["max"] == pytest.approx(0.995)
    assert out[a]["shim"]["ratio"] == pytest.approx(9.5 / 11) and out[a]["shim"]["met"] is False
    assert out[a]["direct"]["runs"] == [10, 12, 11]
    assert out[a]["direct"]["min"] == 10 and out[a]["direct"]["max"] == 12
    # counting: 99.2 / 100 = 0.992 >= 0.99; timing: 98.5 / 100 = 0.985 >= 0.98
    assert out[b]["count"]["ratio"] == pytest.approx(0.992) and out[b]["count"]["met"]
    assert out[b]["count"]["bar"] == 0.99 and out[b]["time"]["bar"] == 0.98
    assert out[b]["time"]["ratio"] == pytest.approx(0.985) and out[b]["time"]["met"]
    assert out[a]["time"]["ratio"] == pytest.approx(10.9 / 11) and out[a]["time"]["met"]
    # 1 MiB: the no-shim launches range over 10..12 (18% of 11): that size decides no bar;
    # 1 GiB: 99..101, 2% of 100, decides them
    assert out[a]["direct"]["resolved"] is False and out[b]["direct"]["resolved"] is True
    assert out[a]["direct"]["range"] == pytest.approx(2 / 11)
    assert st.all_met(out) and st.all_met({b: out[b]})
    assert not st.all_met({a: out[a]})  # no size decides: nothing is met
    missed = {b: {**out[b], "count": {**out[b]["count"], "met": False}}}
    assert not st.all_met({a: out[a], **missed})
    table = st.format_table(out).splitlines()
    assert table[0].split()[:3] == ["size", "variant", "busbw"]
    shim_a = next(ln for ln in table if ln.startswith("   1 MiB  shim "))
    assert shim_a.split()[-1] == "undecided" and "0.8636" in shim_a
    assert shim_a.split()[5] == "-"
    direct_a = next(ln for ln in table if ln.startswith("   1 MiB  no shim "))
    assert "(range 18% of the median: decides no bar)" in direct_a
    time_b = next(ln for ln in table if ln.startswith("   1 GiB  shim + SHIMGEN_TRACE=time"))
    assert time_b.split()[-2:] == ["0.98", "yes"] and "0.9850" in time_b


def test_aggregate_just_below_a_bar_is_not_met():
    size = 1 << 20
    launches = [_launch("direct", 0, {size: 100.0}), _launch("time", 0, {size: 97.99}),
                _launch("count", 0, {size: 98.99})]
    out = st.aggregate(launches)[size]
    assert out["time"]["met"] is False and out["count"]["met"] is False
    launches = [_launch("direct", 0, {size: 100.0}), _launch("time", 0, {size: 98.0})]
    assert st.aggregate(launches)[size]["time"]["met"] is True


def _trace(path: Path, pid: int, calls: dict[str, int], time_ns: dict | None = None) -> None:
    data: dict = {"pid": pid, "calls": calls}
    if time_ns is not None:
        data["time"] = {k: {"calls": calls[k], "total_ns": v} for k, v in time_ns.items()}
    path.write_text(json.dumps(data))


def test_trace_files_one_per_rank_named_by_rank(tmp_path):
    ranks = [_rank(0, 2, {}, pid=11, allreduces=40), _rank(1, 2, {}, pid=12, allreduces=40)]
    _trace(tmp_path / "trace.0.json", 11, {"cuInit": 1, "cuLaunchKernel": 40},
           {"cuInit": 1000.0, "cuLaunchKernel": 2000.0})
    _trace(tmp_path / "trace.1.json", 12, {"cuInit": 1, "cuLaunchKernel": 38})
    _trace(tmp_path / "trace.%r.json", 10, {"cuInit": 1})  # e.g. the launcher, not a rank
    t = st.check_traces(tmp_path, ranks)
    assert t["ok"] and t["rank_named"] and t["distinct_rank_files"] == 2
    assert t["other_files"] == ["trace.%r.json"]
    assert t["merged_calls"] == {"cuLaunchKernel": 78, "cuInit": 2}
    assert t["per_rank"]["1"]["calls"] == 39 and t["per_rank"]["0"]["top"][0] == \
        ("cuLaunchKernel", 40)
    assert t["per_rank"]["0"]["calls_per_allreduce"] == pytest.approx(41 / 40)
    assert t["per_rank"]["0"]["driver_ns"] == 3000.0 and "driver_ns" not in t["per_rank"]["1"]


def test_trace_files_per_pid_but_not_by_rank(tmp_path):
    ranks = [_rank(0, 2, {}, pid=11), _rank(1, 2, {}, pid=12)]
    _trace(tmp_path / "trace.%r.json.11", 11, {"cuInit": 1})
    _trace(tmp_path / "trace.%r.json.12", 12, {"cuInit": 1})
    t = st.check_traces(tmp_path, ranks)
    assert not t["ok"] and t["distinct_rank_files"] == 2 and not t["rank_named"]
    assert t["why"] == "files are per process but not named trace.<rank>.json"


def test_trace_file_clobbered(tmp_path):
    ranks = [_rank(0, 2, {}, pid=11), _rank(1, 2, {}, pid=12)]
    _trace(tmp_path / "trace.json", 12, {"cuInit": 1})  # rank 1 overwrote rank 0's file
    t = st.check_traces(tmp_path, ranks)
    assert not t["ok"] and t["why"] == "a rank wrote no trace file"
    assert st.check_traces(tmp_path / "missing", ranks)["ok"] is False


def test_call_budget_is_calls_times_cost_against_the_allreduce_time():
    # 1 MiB at 50 GB/s busbw on 2 ranks: 2^20 * 1 / 50e9 s = 20.97 us per all-reduce
    size = 1 << 20
    summary = {size: {"direct": {"median": 50.0}}}
    traces = {"count": {"world_size": 2, "per_rank": {
        "0": {"calls_per_allreduce": 10.0}, "1": {"calls_per_allreduce": 12.0}}}}
    b = st.call_budget(traces, summary, {"count": 2.0})["count"]
    assert b["calls_per_allreduce"] == 12.0  # the busiest rank
    sec = size / 50e9
    assert b["expected_ratio"][size] == pytest.approx(sec / (sec + 24e-9))
    assert st.call_budget(traces, summary, {"time": 40.0}) == {}


def test_child_env_keeps_multicast_off_and_tracing_only_when_asked(monkeypatch):
    monkeypatch.setenv("SHIMGEN_TRACE", "time")
    monkeypatch.setenv("LD_PRELOAD", "/elsewhere.so")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    plain = allreduce.child_env(None)
    assert "LD_PRELOAD" not in plain and "SHIMGEN_TRACE" not in plain
    shim = allreduce.child_env(Path("/x/libcudashim.so"))
    traced = allreduce.child_env(Path("/x/libcudashim.so"), "time", "/t/trace.%r.json")
    for env in (plain, shim, traced):
        assert env["NCCL_NVLS_ENABLE"] == "0"
        assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert shim["LD_PRELOAD"] == "/x/libcudashim.so" and "SHIMGEN_TRACE" not in shim
    assert traced["SHIMGEN_TRACE"] == "time"
    assert traced["SHIMGEN_TRACE_FILE"] == "/t/trace.%r.json"


def test_benchmark_skips_cleanly_without_gpus(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.allreduce", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("allreduce: skipped: ")
    assert "skipped" in json.loads(out.read_text())


def test_bad_variants_are_one_error_line(tmp_path):
    for bad in ("shim,count", "direct", "direct,bogus", "direct,shim,shim"):
        proc = subprocess.run([sys.executable, "-m", "benchmarks.allreduce", "--variants", bad],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "--variants" in proc.stderr.splitlines()[-1], bad


SLOW = {"direct": 1.0, "shim": 1.004, "count": 1.006, "time": 1.015}


def test_driver_interleaves_aggregates_and_checks_traces(tmp_path, monkeypatch, capsys):
    """main() with the launches faked: the order of launches, the traces of the traced
    variants, the JSON (rewritten after every round) and the table."""
    shim = tmp_path / "libcudashim.so"
    shim.write_bytes(b"")
    order = []
    saved_rounds = []

    def fake_launch(variant, shim_path, nproc, out, size_list, reps, warmup, timeout,
                    pin=0):
        assert pin == 3
        order.append((variant, out.name))
        assert shim_path == shim.resolve() and nproc == 2 and reps == 3
        if (tmp_path / "r.json").exists():
            saved_rounds.append(json.loads((tmp_path / "r.json").read_text())["rounds"])
        ranks = []
        for r in range(nproc):
            pid = 500 + 10 * len(order) + r
            ranks.append({"rank": r, "world_size": nproc, "pid": pid, "device": "Fake",
                          "torch": "0", "cuda": "0", "nccl": "0", "allreduces": 100,
                          "sizes": {str(s): {"iters": 5, "block_seconds":
                                             [s / 100e9 * SLOW[variant]] * reps}
                                    for s in size_list}})
            if variant in ("count", "time"):
                (out / "trace").mkdir(parents=True, exist_ok=True)
                (out / "trace" / f"trace.{r}.json").write_text(
                    json.dumps({"pid": pid, "calls": {"cuInit": 1, "cuEventRecord": 299}}))
        return ranks

    monkeypatch.setattr(allreduce, "why_skip", lambda nproc: (None, 2))
    monkeypatch.setattr(allreduce, "launch", fake_launch)
    out = tmp_path / "r.json"
    rc = allreduce.main(["--shim", str(shim), "--reps", "3", "--work", str(tmp_path / "work"),
                         "--json", str(out), "--max-size", "16M", "--pin", "3"])
    assert rc == 0
    vs = ["direct", "shim", "count", "time"]
    assert order == [(v, f"{v}-{rnd}") for rnd in range(5) for v in vs[rnd % 4:] + vs[:rnd % 4]]
    assert 1 in saved_rounds and 4 in saved_rounds  # the JSON was written after each round
    r = json.loads(out.read_text())
    assert r["rounds"] == 5 and r["world_size"] == 2
    assert r["sizes"] == [1 << 20, 4 << 20, 16 << 20]
    for s in r["summary"].values():
        assert s["shim"]["ratio"] == pytest.approx(1 / 1.004) and s["shim"]["met"] is True
        assert s["count"]["ratio"] == pytest.approx(1 / 1.006) and s["count"]["met"] is True
        assert s["time"]["ratio"] == pytest.approx(1 / 1.015) and s["time"]["met"] is True
        assert s["direct"]["median"] == pytest.approx(100)
        assert len(s["time"]["runs"]) == 5
    assert r["met"] is True
    assert r["traces"]["count"]["ok"] and r["traces"]["count"]["launches"] == 5
    assert r["traces"]["time"]["first"]["merged_calls"] == {"cuEventRecord": 598, "cuInit": 2}
    assert r["call_budget"]["count"]["calls_per_allreduce"] == pytest.approx(3.0)
    text = capsys.readouterr().out
    assert "met at every size" in text
    assert "traces (shim + SHIMGEN_TRACE=1): ok in 5 launches" in text
    assert "3.00 calls per all-reduce" in text


def test_driver_reports_a_missed_bar(tmp_path, monkeypatch, capsys):
    shim = tmp_path / "libcudashim.so"
    shim.write_bytes(b"")

    def fake_launch(variant, shim_path, nproc, out, size_list, reps, warmup, timeout,
                    pin=0):
        slow = 1.03 if variant == "count" else 1.0  # counting 3% slower: misses 0.99
        return [{"rank": r, "world_size": 2, "pid": 700 + r, "device": "Fake", "torch": "0",
                 "cuda": "0", "nccl": "0",
                 "sizes": {str(s): {"iters": 5, "block_seconds": [s / 100e9 * slow]}
                           for s in size_list}} for r in range(2)]

    monkeypatch.setattr(allreduce, "why_skip", lambda nproc: (None, 2))
    monkeypatch.setattr(allreduce, "launch", fake_launch)
    out = tmp_path / "r.json"
    allreduce.main(["--shim", str(shim), "--reps", "1", "--variants", "direct,count",
                    "--work", str(tmp_path / "w"), "--json", str(out), "--max-size", "1M"])
    r = json.loads(out.read_text())
    assert r["met"] is False and r["summary"][str(1 << 20)]["count"]["met"] is False
    assert "NOT met at every size" in capsys.readouterr().out
