"""The device memory ledger (runtime/memory/ledger.c, runtime/memory/hooks_memory.c, docs/memory.md)
on a FAKE driver (tests/c/fake_ledger_libcuda.c) whose allocation routes hand out addresses and
handles and keep their own totals: for every route of shimgen/shim/memroutes.py, a program
(tests/c/memledger.c) allocates and frees, and the ledger in its trace file equals the
fake's totals exactly (per device and the host: peak, held at exit, allocations held;
bytes taken per function); `SHIMGEN_LIMIT_MEMORY` refuses the allocation past it before the
fake sees it and answers cuMemGetInfo_v2 and cuDeviceTotalMem_v2 with it; retained and
imported handles; async frees; a forked child's ledger; the numbers a SIGKILL leaves; a
version 3 file still read; `--limit`'s sizes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.errors import ShimgenError
from shimgen.report.memory import memory_json
from shimgen.report.model import groups
from shimgen.runenv import trace_header_size
from shimgen.shim.memroutes import ROUTES
from shimgen.top.main import once
from shimgen.trace.binary import load
from shimgen.trace.memory import HOST
from tests.shimcache import fake_driver_shim

MiB = 1 << 20
# Every allocation route, and every free route, with some left held: device 0, then 1.
EVERY_ROUTE = [
    "ctx:0", "alloc:1000", "alloc:5000", "free:0", "pitch:1000:10", "managed:3000",
    "async:4000", "asyncptsz:4100", "pool:4200", "poolptsz:4300", "freeasync:5",
    "freeasyncptsz:6", "free:7", "create:65536:1:0", "create:8192:2:0", "create:4096:3:0",
    "retain:8", "free:8", "free:11", "array:10:10:32:2", "array3d:4:4:4:16:1",
    "mipmap:16:16:0:1:4:5", "free:14", "free:12", "hostalloc:300", "allochost:700", "free:16",
    "ctx:1", "alloc:777", "create:131072:1:1", "import:1", "free:15", "info", "total:0",
]
NOT_ALLOCATING = {"retain", "import", "free", "freeasync", "release", "arraydestroy",
                  "freehost", "info", "total"}


@pytest.fixture(scope="module")
def fake(probes) -> Path:
    return probes / "libfake_ledger_libcuda.so"


@pytest.fixture(scope="module")
def fake_shim(fake, tmp_path_factory) -> Path:
    return fake_driver_shim(fake)


def run_ops(probes, fake, shim, tmp_path, ops, **extra) -> tuple[str, Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    traces = tmp_path / "traces"
    tmp_path.mkdir(exist_ok=True)
    env.update(LD_PRELOAD=str(shim), SHIMGEN_DRIVER=str(fake), SHIMGEN_TRACE="time",
               SHIMGEN_TRACE_DIR=str(traces), **extra)
    proc = subprocess.run([probes / "memledger", *ops], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode in (0, -9), proc.stdout + proc.stderr
    return proc.stdout, traces


def fake_totals(out: str, who: str = "parent") -> dict:
    line = next(ln for ln in out.splitlines() if ln.startswith(who + " {"))
    return json.loads(line[len(who) + 1:])


def ledger_of(trace) -> dict:
    """The ledger in the fake's shape: per column [peak, held, live]; taken per function."""
    cols = {str(c): [0, 0, 0] for c in range(4)} | {"host": [0, 0, 0]}
    taken: dict[str, int] = {}
    for c, col in trace.memory.columns.items():
        cols["host" if c == HOST else str(c)] = [col.peak, col.at_exit, col.leaked]
        for fn, n in col.taken.items():
            taken[fn] = taken.get(fn, 0) + n
    return {"columns": cols, "taken": taken}


def assert_same(trace, fake: dict) -> None:
    taken = {fn: b for fn, (b, _) in fake["taken"].items() if b}
    assert ledger_of(trace) == {"columns": fake["columns"], "taken": taken}


def one_trace(traces: Path):
    files = sorted(traces.glob("*.shimtrace"))
    assert len(files) == 1, files
    return load(files[0])


def test_every_route_accounted_as_the_fake_counts(probes, fake, fake_shim, tmp_path):
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, EVERY_ROUTE)
    assert " rc 1" not in out and " rc 2" not in out, out
    t = one_trace(traces)
    assert_same(t, fake_totals(out))
    # every route of the table was called, the allocating ones took bytes
    called = set(t.functions)
    assert {r.name for r in ROUTES} <= called, {r.name for r in ROUTES} - called
    taken = ledger_of(t)["taken"]
    assert {r.name for r in ROUTES if r.kind not in NOT_ALLOCATING} == set(taken)
    # a host location is host memory, never device 0; the import is a handle of 0 bytes
    cols = t.memory.columns
    assert cols[HOST].taken["cuMemCreate"] == 8192 + 4096
    assert cols[0].held.get("cuMemCreate", 0) == 0  # the device one released
    assert cols[1].live["cuMemImportFromShareableHandle"] == 1
    assert t.memory.untracked == 0 and t.memory.refused == 0


def test_one_device_is_device_0_without_asking(probes, fake, fake_shim, tmp_path):
    """With one device (the fake's FAKE_LEDGER_DEVICES=1) an allocation is device 0's and no
    cuCtxGetDevice is called for it, with a limit or without; with four, each device route
    asks."""
    ops = ["ctx:0", "alloc:1000", "managed:3000", "free:1", "array:10:10:32:2", "info"]
    for n, asked, limit in (("1", False, ""), ("1", False, "1GiB"), ("4", True, "")):
        out, traces = run_ops(probes, fake, fake_shim, tmp_path / (n + limit), ops,
                              FAKE_LEDGER_DEVICES=n, SHIMGEN_LIMIT_MEMORY=limit)
        want = fake_totals(out)
        assert_same(one_trace(traces), want)
        # (the array: 10 rows of 80 bytes, each padded to the fake's pitch of 512)
        assert want["columns"]["0"][1] == 1000 + 512 * 10 and (want["device_asked"] > 0) == asked


def test_report_json_memory_object(probes, fake, fake_shim, tmp_path):
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, ["ctx:0", "alloc:3000",
                                                             "alloc:5000", "free:0",
                                                             "hostalloc:64"])
    proc = subprocess.run([sys.executable, "-m", "shimgen", "report", "--json",
                           str(next(traces.glob("*.shimtrace")))], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout)["groups"][0]["memory"]
    assert (m["peak_bytes"], m["at_exit_bytes"]) == (8000, 5000)
    assert m["by_function"] == {"cuMemAlloc_v2": 8000}
    assert m["leaked"] == {"count": 1, "bytes": 5000}
    assert m["host"]["at_exit_bytes"] == 64 and m["limit_bytes"] is None
    text = subprocess.run([sys.executable, "-m", "shimgen", "report", str(traces)],
                          capture_output=True, text=True, timeout=60).stdout
    assert "device memory  peak 7.81 KiB, at exit 4.88 KiB, never freed: 1 allocations" in text
    # a process that took no memory: no section, and a memory object of zeros
    _, quiet = run_ops(probes, fake, fake_shim, tmp_path / "q", ["ctx:0", "info"])
    text = subprocess.run([sys.executable, "-m", "shimgen", "report", str(quiet)],
                          capture_output=True, text=True, timeout=60).stdout
    assert "cuMemGetInfo_v2" in text and "device memory" not in text


def test_limit_refuses_before_the_driver_and_answers_with_it(probes, fake, fake_shim,
                                                             tmp_path):
    ops = ["ctx:0", "info", "total:0", "alloc:524288", "alloc:600000", "info", "async:524288",
           "free:0", "create:2097152:1:0", "create:2097152:2:0", "alloc:524288"]
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, ops,
                          SHIMGEN_LIMIT_MEMORY="1MiB")
    rcs = [ln.split(" rc ")[1] for ln in out.splitlines() if " rc " in ln]
    # refused: 600000 past 1 MiB; the device handle of 2 MiB; not the host one (no limit)
    # (the last: the pool of the async allocation keeps 2 MiB reserved, past the limit)
    assert rcs == ["0", "0", "0", "0", "2", "0", "0", "0", "2", "0", "2"], out
    assert f"parent info free {MiB} total {MiB}" in out
    assert f"parent info free {MiB - 524288} total {MiB}" in out
    assert f"parent total {MiB}" in out
    want = fake_totals(out)
    assert want["taken"]["cuMemAlloc_v2"] == [524288, 1]  # the refused ones never came
    assert want["taken"]["cuMemCreate"] == [2097152, 1]
    t = one_trace(traces)
    assert_same(t, want)
    assert (t.memory.limit, t.memory.refused) == (MiB, 3)


def test_retained_and_imported_handles_freed_by_their_last_release(probes, fake, fake_shim,
                                                                  tmp_path):
    ops = ["create:65536:1:2", "retain:0", "retain:0", "import:2", "free:0", "free:1",
           "kill"]
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, ops)
    t = one_trace(traces)
    assert_same(t, fake_totals(out))
    assert t.memory.columns[2].at_exit == 65536  # one reference left
    ops = ops[:-1] + ["free:2", "free:3"]
    out, traces = run_ops(probes, fake, fake_shim, tmp_path / "2", ops)
    t = one_trace(traces)
    assert_same(t, fake_totals(out))
    assert t.memory.columns[2].at_exit == 0 and t.memory.columns[2].leaked == 0


def test_async_frees_and_a_failed_free_keeps_the_entry(probes, fake, fake_shim, tmp_path):
    ops = ["ctx:3", "async:100", "pool:200", "asyncptsz:300", "alloc:400", "freeasync:0",
           "freeasyncptsz:1", "freeasync:2", "freeasync:3", "freeasync:3"]
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, ops)
    assert out.count(" rc 1") == 1  # the second free of the same address: the fake refuses
    t = one_trace(traces)
    assert_same(t, fake_totals(out))
    assert t.memory.columns[3].peak == 1000 and t.memory.columns[3].at_exit == 0


def test_a_forked_child_has_its_own_ledger(probes, fake, fake_shim, tmp_path):
    ops = ["ctx:0", "alloc:1000", "alloc:2000", "fork", "ctx:1", "alloc:300", "free:0"]
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, ops)
    files = [load(p) for p in sorted(traces.glob("*.shimtrace"))]
    assert len(files) == 2, out
    child = next(t for t in files if t.ppid in {f.pid for f in files})
    parent = next(t for t in files if t is not child)
    assert child.ppid == parent.pid and parent.complete
    assert_same(parent, fake_totals(out, "parent"))
    assert_same(child, fake_totals(out, "child"))
    assert 0 not in child.memory.columns  # the parent's allocations are not the child's


def test_a_forked_child_has_its_own_pools(probes, fake, fake_shim, tmp_path):
    """The parent's pools are not the child's: the child's ledger knows only the pool it
    used, and its reservations equal its own fake's."""
    ops = ["ctx:0", "async:3000000", "defaultpool:2", "fork", "ctx:1", "async:100", "sync"]
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, ops)
    files = [load(p) for p in sorted(traces.glob("*.shimtrace"))]
    child = next(t for t in files if t.ppid in {f.pid for f in files})
    parent = next(t for t in files if t is not child)
    assert_reserves(parent, fake_totals(out, "parent"))
    assert_reserves(child, fake_totals(out, "child"))
    assert (parent.memory.pools, child.memory.pools) == (2, 1)
    assert child.memory.columns[1].pool["reserved"] == MiB2 and 0 not in child.memory.columns


def test_forks_while_other_threads_allocate(probes, fake, fake_shim, tmp_path):
    """100 forks while 4 threads allocate and free without pause (a fork may copy the
    ledger's lock held): every child makes its own file, with its own ledger (its 100 bytes
    taken and given back), and none hangs."""
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, ["ctx:0", "forkbusy:100"])
    assert "forkbusy:100 rc 0" in out, out
    files = [load(p) for p in traces.glob("*.shimtrace")]
    parent = next(t for t in files if t.complete)
    children = [t for t in files if t.ppid == parent.pid]
    assert len(children) == 100
    for c in children:
        col = c.memory.columns[0]
        assert (col.taken, col.at_exit, col.leaked, col.peak) == (
            {"cuMemAlloc_v2": 100}, 0, 0, 100), c.path


def test_sigkill_leaves_the_numbers_at_death(probes, fake, fake_shim, tmp_path):
    out, traces = run_ops(probes, fake, fake_shim, tmp_path,
                          ["ctx:0", "alloc:4096", "create:8192:1:0", "alloc:1", "free:2",
                           "hostalloc:10", "kill"])
    t = one_trace(traces)
    assert not t.complete
    assert_same(t, fake_totals(out))
    m = memory_json(groups([t], None)[0])
    assert m["at_exit_bytes"] == 4096 + 8192 and m["leaked"]["count"] == 2
    # `shimgen top` shows the device memory it held at death (the host's pinned not in it)
    top = json.loads(once(traces, True))
    assert [(p["state"], p["device_bytes"]) for p in top["processes"]] == [
        ("died", 4096 + 8192)]
    assert " 12.00 KiB  " in once(traces, False)


def test_threads_racing_keep_the_ledger_exact(probes, fake, fake_shim, tmp_path):
    """8 threads on two devices, 300 allocations each of random sizes and random yields, a
    seventh kept: repeated, the ledger's bytes and allocations held and bytes taken equal the
    fake's (the peak is the order each lock saw, which may differ)."""
    for k in range(3):
        out, traces = run_ops(probes, fake, fake_shim, tmp_path / str(k), ["threads:8:300"])
        assert "threads:8:300 rc 0" in out, out
        want = fake_totals(out)
        got = ledger_of(one_trace(traces))
        assert {c: v[1:] for c, v in got["columns"].items()} == {
            c: v[1:] for c, v in want["columns"].items()}
        assert got["taken"] == {fn: b for fn, (b, _) in want["taken"].items()}
        assert want["columns"]["0"][2] == 4 * 43 and want["columns"]["1"][2] == 4 * 43


def cut_to(path, version: int, dest):
    """The file made an older version: its header cut to that version's, the names moved
    up."""
    data = bytearray(path.read_bytes())
    old_size, size = trace_header_size(version), trace_header_size()
    names_size = int.from_bytes(data[56:64], "little")
    names = bytes(data[size:size + names_size])
    data[8:12] = version.to_bytes(4, "little")
    data[12:16] = old_size.to_bytes(4, "little")
    data[48:56] = old_size.to_bytes(8, "little")
    data[old_size:size + names_size] = names + bytes(size - old_size)
    dest.write_bytes(bytes(data))
    return data


def test_versions_3_and_4_still_read(probes, fake, fake_shim, tmp_path):
    """A version 5 file made version 4, then 3: read, with the same calls; version 4 with
    the same ledger and no reservations, version 3 with no ledger."""
    _, traces = run_ops(probes, fake, fake_shim, tmp_path, ["ctx:0", "alloc:10", "async:7"])
    path = next(traces.glob("*.shimtrace"))
    v5 = load(path)
    cut_to(path, 4, tmp_path / "v4.shimtrace")
    v4 = load(tmp_path / "v4.shimtrace")
    assert v4.memory.columns[0].taken == v5.memory.columns[0].taken == {
        "cuMemAlloc_v2": 10, "cuMemAllocAsync": 7}
    assert v4.memory.columns[0].pool is None and v4.memory.pools is None
    assert v5.memory.columns[0].pool["reserved"] == 2 * MiB
    assert memory_json(groups([v4], None)[0])["reserved"] is None
    data = cut_to(path, 3, tmp_path / "v3.shimtrace")
    v3 = load(tmp_path / "v3.shimtrace")
    assert v3.memory is None and v5.memory is not None
    assert {n: f.calls for n, f in v3.functions.items()} == {
        n: f.calls for n, f in v5.functions.items()}
    data[8:12] = (6).to_bytes(4, "little")  # (6's kernels, a name per slot: replaced by 7's)
    (tmp_path / "v6.shimtrace").write_bytes(bytes(data))
    with pytest.raises(ShimgenError,
                       match="format version 6; this shimgen reads versions 3, 4, 5, 7"):
        load(tmp_path / "v6.shimtrace")


@pytest.mark.parametrize("text, value", [("200MiB", 200 * MiB), ("2GiB", 2 << 30),
                                         ("2G", 2 << 30), ("512K", 512 << 10),
                                         ("1000", 1000), ("1000B", 1000), ("1TB", 1 << 40),
                                         ("0", None), ("2 GiB", None), ("2gib", None),
                                         ("GiB", None), ("1.5GiB", None), ("-1", None),
                                         ("2GiBs", None), ("", None), ("1", 1), ("2Gx", None),
                                         ("2GxB", None)])
def test_sizes(text, value):
    from shimgen.run.limits import parse_size

    assert parse_size(text) == value


# ---- pools, graphs, and the device of a thread's current context --------------------------

def reserve_of(trace) -> dict:
    """The ledger's reservations in the fake's shape: per column [reserved peak, the pools'
    [reserved, high, used, high], the graphs' the same]."""
    out = {str(c): [0, [0] * 4, [0] * 4] for c in range(4)} | {"host": [0, [0] * 4, [0] * 4]}
    for c, col in trace.memory.columns.items():
        out["host" if c == HOST else str(c)] = [col.reserved_peak, list(col.pool.values()),
                                                list(col.graph.values())]
    return out


def assert_reserves(trace, want: dict) -> None:
    assert_same(trace, want)
    assert reserve_of(trace) == want["reserve"]


MiB2 = 2 * MiB
POOLS = [
    "ctx:0", "async:3000000", "async:1000", "freeasync:1", "alloc:5000",
    "defaultpool:1", "poolcreate:1:2", "poolalloc:700000:4", "poolalloc:100:3",
    "freeasync:5", "sync", "poolcreate:1:3", "setpool:3:7", "ctx:3", "async:5000000",
    "threshold:7:4194304", "free:8", "sync", "trim:7:0", "poolalloc:42:7", "pooldestroy:4",
    "ctxsync",
]


def test_pools_reservations_exact(probes, fake, fake_shim, tmp_path):
    """Pools of devices 0 to 3 (default ones, one made by cuMemPoolCreate on device 2 and
    allocated from while device 0 is current, one set current on device 3): after each
    allocation, free, synchronisation, trim and destruction, the ledger's view of what the
    pools reserve and use, the highs, and the most held and reserved at once equal the
    fake's own; the allocation from device 2's pool is device 2's."""
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, POOLS)
    assert " rc 1" not in out and " rc 2" not in out, out
    t = one_trace(traces)
    want = fake_totals(out)
    assert_reserves(t, want)
    cols = t.memory.columns
    assert cols[2].taken == {"cuMemAllocFromPoolAsync": 700000}
    assert cols[0].pool["reserved_high"] == 2 * MiB2 and cols[0].reserved_peak > cols[0].peak
    assert cols[3].pool["reserved"] == MiB2  # the trim kept the 42 bytes' chunk
    assert t.memory.pools == 3  # (device 2's destroyed)
    # the report: the fields of before as they were, the reservations beside them
    m = memory_json(groups([t], None)[0])
    peaks = {c: v[0] for c, v in want["reserve"].items()}
    assert m["reserved_peak_bytes"] == max(peaks.values()) > m["peak_bytes"]
    assert m["peak_bytes"] == max(v[0] for v in want["columns"].values())
    assert m["reserved"]["pools"] == {
        f"{k}_bytes": sum(v[1][i] for v in want["reserve"].values())
        for i, k in enumerate(("reserved", "reserved_high", "used", "used_high"))}
    assert m["reserved"]["pools_known"] == 3 and m["reserved"]["graph_allocations"] == 0
    assert [d["reserved_peak_bytes"] for d in m["devices"]] == [peaks[str(d["device"])]
                                                              for d in m["devices"]]
    from shimgen.report.memory import memory_section
    text = "\n".join(memory_section(groups([t], None)[0]))
    assert "pools: reserved 2.00 MiB at exit (high 6.00 MiB)" in text, text


def test_a_pool_handle_no_known_pool_has_is_the_current_devices(probes, fake, fake_shim,
                                                               tmp_path):
    """An allocation from a pool the shim has not seen (NULL here, which the fake takes as
    the current device's current pool) is the current context's device's: the lookup of
    the known pools never reads past the last one (a zeroed slot there says device 0)."""
    out, traces = run_ops(probes, fake, fake_shim, tmp_path,
                          ["ctx:1", "defaultpool:1", "pool:5000", "ctxsync"])
    assert " rc 1" not in out and " rc 2" not in out, out
    t = one_trace(traces)
    assert_reserves(t, fake_totals(out))
    assert t.memory.columns[1].taken == {"cuMemAllocFromPoolAsync": 5000}


def test_pools_past_the_64_followed_are_said_once_and_left_out(probes, fake, fake_shim,
                                                               tmp_path):
    """67 pools made: the shim follows 64 (the table's size, never a slot past it) and says
    once, at the first it leaves out, that it does not follow the others."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    env.update(LD_PRELOAD=str(fake_shim), SHIMGEN_DRIVER=str(fake), SHIMGEN_TRACE="time",
               SHIMGEN_TRACE_DIR=str(tmp_path / "traces"))
    proc = subprocess.run([probes / "memledger", "ctx:0", *["poolcreate:1:2"] * 67, "ctxsync"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and " rc 2" not in proc.stdout, proc.stdout + proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if "memory pools" in ln]
    assert said == ["shimgen: more than 64 memory pools: the others' reservations are not "
                    "followed"], proc.stderr
    assert one_trace(tmp_path / "traces").memory.pools == 64


def test_a_pool_made_on_a_device_is_not_its_current_pool(probes, fake, fake_shim, tmp_path):
    """A pool made on device 2 (cuMemPoolCreate) is not device 2's current pool: an
    allocation of the stream-ordered route there is the default pool's, which the ledger
    asks the driver for and follows."""
    out, traces = run_ops(probes, fake, fake_shim, tmp_path,
                          ["ctx:2", "poolcreate:1:2", "async:3000000", "ctxsync"])
    assert " rc 1" not in out and " rc 2" not in out, out
    t = one_trace(traces)
    assert_reserves(t, fake_totals(out))
    assert t.memory.pools == 2 and t.memory.columns[2].pool["reserved"] >= 3000000


GRAPHS = [
    "ctx:1", "graph", "memnode:0:3000000:1", "memnode:0:1000:2", "instantiate:0",
    "launch:1", "launch:1", "capture", "async:5000", "freeasync:2", "async:7000",
    "endcapture", "instantiate:4", "upload:5", "launch:5", "alloc:100", "execdestroy:1",
    "graphtrim:1",
    "graphtrim:2",
]


def test_graph_memory_exact(probes, fake, fake_shim, tmp_path):
    """Graph memory nodes added (on devices 1 and 2) and captured (cuMemAllocAsync while the
    stream captures: not an allocation of the route, the graph's), uploaded, launched,
    destroyed and trimmed: the ledger's graph reservation, use and highs equal the fake's,
    and a captured allocation is never counted as held."""
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, GRAPHS)
    assert " rc 1" not in out and " rc 4" not in out, out
    t = one_trace(traces)
    assert_reserves(t, fake_totals(out))
    cols = t.memory.columns
    assert "cuMemAllocAsync" not in cols[1].taken
    assert cols[1].graph["reserved_high"] == 2 * MiB2 and cols[2].graph["used"] == 0
    assert t.memory.graph_allocs == 4


def test_limit_counts_pool_reservations(probes, fake, fake_shim, tmp_path):
    """Under 4 MiB: a pool keeping 4 MiB reserved (its allocation freed, no sync yet) leaves
    no room, so an allocation is refused before the fake sees it; after a synchronisation
    (the pool gives it back) the same allocation is made."""
    ops = ["ctx:0", "info", "async:3000000", "freeasync:0", "alloc:1000", "info", "sync",
           "alloc:1000", "info"]
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, ops,
                          SHIMGEN_LIMIT_MEMORY="4MiB")
    rcs = [ln.split(" rc ")[1] for ln in out.splitlines() if " rc " in ln]
    assert rcs == ["0", "0", "0", "0", "2", "0", "0", "0", "0"], out
    assert f"parent info free 0 total {4 * MiB}" in out
    assert f"parent info free {4 * MiB - 1000} total {4 * MiB}" in out
    t = one_trace(traces)
    assert_reserves(t, fake_totals(out))
    assert t.memory.refused == 1


def test_limit_counts_pool_reservations_with_what_the_process_holds(probes, fake, fake_shim,
                                                                    tmp_path):
    """Under 8 MiB: 5,000,000 bytes held and a pool keeping 2 MiB reserved (its allocation
    freed) leave 1,291,456 bytes: 3,000,000 more are refused (the held bytes and the pool's
    counted together, not one less the other), 1,000,000 made."""
    ops = ["ctx:0", "alloc:5000000", "async:1000000", "freeasync:1", "alloc:3000000",
           "alloc:1000000"]
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, ops,
                          SHIMGEN_LIMIT_MEMORY="8MiB")
    rcs = [ln.split(" rc ")[1] for ln in out.splitlines() if " rc " in ln]
    assert rcs == ["0", "0", "0", "0", "2", "0"], out
    assert one_trace(traces).memory.refused == 1


def test_threads_switching_contexts_keep_devices_exact(probes, fake, fake_shim, tmp_path):
    """8 threads, 1000 random steps each: cuCtxSetCurrent, push, pop or an allocation on the
    current device, kept or freed, with random yields: each device's bytes and allocations
    held and the bytes taken equal the fake's (the ledger's cached device of a thread is
    never stale); 30 runs, each with its own seeds (the process id) and interleaving."""
    for k in range(30):
        out, traces = run_ops(probes, fake, fake_shim, tmp_path / str(k),
                              ["ctxthreads:8:1000"], FAKE_LEDGER_DEVICES="4")
        assert "ctxthreads:8:1000 rc 0" in out, out
        want = fake_totals(out)
        got = ledger_of(one_trace(traces))
        assert {c: v[1:] for c, v in got["columns"].items()} == {
            c: v[1:] for c, v in want["columns"].items()}
        assert got["taken"] == {fn: b for fn, (b, _) in want["taken"].items()}
        assert sum(v[2] for v in want["columns"].values()) > 100


CONTEXT_CHANGES = re.compile(
    r"^cu(Ctx(Create|Destroy|PushCurrent|PopCurrent|SetCurrent|Attach|Detach)"
    r"|DevicePrimaryCtx(Release|Reset)|(?!Green)\w+CtxCreate|GreenCtxDestroy)")
RESERVATION_POINTS = re.compile(
    r"^cu(StreamSynchronize|CtxSynchronize|EventSynchronize|StreamBeginCapture"
    r"|StreamEndCapture|GraphLaunch|GraphUpload|GraphExecDestroy|DeviceGraphMemTrim"
    r"|MemPool(Create|Destroy|TrimTo)|Device(Get|Set|GetDefault)MemPool|GraphAddMemAllocNode)")


def test_every_context_change_and_reservation_point_is_watched(drivers):
    """Every function of the real drivers whose name says it changes a thread's current
    context (any version: a new `_v5` would be caught; a green context is created without
    becoming current), or at which a pool's or graphs' reservation can change, is watched by
    the ledger; and every watch is a function of some
    driver (no misspelling)."""
    from shimgen.driver import read_driver
    from shimgen.shim.hooks import GRAPH_HOOKS
    from shimgen.shim.memroutes import WATCHES

    watched = {w.name: w.kind for w in WATCHES}
    # (cuGraphLaunch: the kernels' hook of it asks the graphs' reservation, installed with
    # the ledger: feature "memory")
    watched |= {name: "graph" for name, feature, _ in GRAPH_HOOKS if feature == "memory"}
    seen: set[str] = set()
    for d in drivers:
        names = set(read_driver(d.path).function_names())
        seen |= names
        ctx = {n for n in names if CONTEXT_CHANGES.match(n)}
        assert ctx and {n for n in ctx if watched.get(n) not in ("context", "ctxdestroy")} == set()
        points = {n for n in names if RESERVATION_POINTS.match(n)}
        assert points and points - set(watched) == set()
    assert set(watched) - seen <= {"cuCtxCreate_v4", "cuCtxSynchronize_v2"}  # (newer drivers)


def test_an_empty_allocation_at_the_limit_is_the_drivers_to_answer(probes, fake, fake_shim,
                                                                  tmp_path):
    """Holding exactly the limit, a further allocation of 0 bytes passes no limit: the driver
    answers it (the fake as without a limit), never the shim's refusal."""
    ops = ["ctx:0", f"alloc:{MiB}", "alloc:0"]
    free, _ = run_ops(probes, fake, fake_shim, tmp_path / "free", ops)
    out, traces = run_ops(probes, fake, fake_shim, tmp_path / "limit", ops,
                          SHIMGEN_LIMIT_MEMORY="1MiB")
    rcs = [ln.split(" rc ")[1] for ln in out.splitlines() if " rc " in ln]
    assert rcs == [ln.split(" rc ")[1] for ln in free.splitlines() if " rc " in ln], out
    assert one_trace(traces).memory.refused == 0
