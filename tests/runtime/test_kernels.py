"""Kernels by name and each stream's last launch (runtime/kernels/, docs/design.md "Kernels
by name and each stream's last launch") on a FAKE driver (tests/c/fake_kernels_libcuda.c)
that keeps its own names and launches: every launch route and every way a handle is made,
named as the fake names them and counted as the fake counts them (a failed launch and a
launch into a capture not counted; the driver never asked a name during a capture); the
report's kernels section demangled and raw, its JSON, `report --calls`; the last kernel of
each stream in a SIGKILLed process's in-flight line; three ranks, one of which launched a
collective once less; names of 1,500 bytes kept whole, one longer than KERN_NAME_MAX and a
flood past the names' arena cut and said so (text, JSON, in-flight line), a name placed past
the arena refused, names made by racing threads each whole."""

from __future__ import annotations

import io
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shimgen.report.kernels import demangle
from shimgen.runenv import KERN_NAME_BYTES, KERN_NAME_MAX
from shimgen.trace import inflight
from shimgen.trace.binary import load
from tests.shimcache import fake_driver_shim

MY = "_Z9my_kernelPfi"  # my_kernel(float*, int)
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
# Every way a handle is made, then every launch route; a failed launch (a grid of 0); an
# unseen handle (enumf) launched first inside a capture of stream 9, where its name may
# not be asked and the launch is not counted, then outside.
EVERY_ROUTE = [
    f"mod:{MY}", f"lib:{NCCL}", "kfunc:1", "enumf:_Z5otherv", "enumk:kern_only",
    "capture:9", "launch:3:9:1:1:2", "endcapture:9",
    "launch:0:0:2:256:3", "launchptsz:0:5:2:128:1", "coop:2:5:4:32:2", "coopptsz:1:5:4:32:1",
    "ex:3:7:1:1:4", "exptsz:4:7:1:1:1", "launch:0:0:0:1:1",
]
RACE_RUNS = 100
HOW = {MY: {"cuModuleGetFunction"}, NCCL: {"cuLibraryGetKernel", "cuKernelGetFunction"},
       "_Z5otherv": {"driver"}, "kern_only": {"driver"}}


@pytest.fixture(scope="module")
def fake(probes) -> Path:
    return probes / "libfake_kernels_libcuda.so"


@pytest.fixture(scope="module")
def kshim(fake) -> Path:
    return fake_driver_shim(fake)


def env_for(fake, kshim, traces: Path, mode: str = "time", **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHIMGEN_", "FAKE_"))}
    env.update(LD_PRELOAD=str(kshim), SHIMGEN_DRIVER=str(fake), SHIMGEN_TRACE=mode,
               SHIMGEN_TRACE_DIR=str(traces), **extra)
    return env


def run_ops(probes, fake, kshim, traces: Path, ops, mode="time", **extra) -> dict:
    proc = subprocess.run([probes / "kernlaunch", *ops], env=env_for(fake, kshim, traces, mode,
                                                                     **extra),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("fake {"))
    return json.loads(line[5:])


def report(*args) -> str:
    proc = subprocess.run([sys.executable, "-m", "shimgen", "report", *map(str, args)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def one_trace(traces: Path):
    files = sorted(traces.glob("*.shimtrace"))
    assert len(files) == 1, files
    return load(files[0])


def by_name(t) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in t.kernels.kernels:
        out[k.name] = out.get(k.name, 0) + k.launches
    return {n: c for n, c in out.items() if c}


def test_every_route_named_and_counted_as_the_fake(probes, fake, kshim, tmp_path):
    got = run_ops(probes, fake, kshim, tmp_path / "t", EVERY_ROUTE)
    assert got["captured"] == 2 and got["asked_in_capture"] == 0, got
    t = one_trace(tmp_path / "t")
    assert by_name(t) == got["launches"] == {MY: 4, NCCL: 3, "_Z5otherv": 4, "kern_only": 1}
    how: dict[str, set] = {}
    for k in t.kernels.kernels:
        how.setdefault(k.name, set()).add(k.source)
    assert how == HOW
    assert t.kernels.asks and not t.kernels.lost and not t.kernels.lost_launches
    # my_kernel: 3 launches of 2 x 256, then 1 of 2 x 128: its last shape, one change
    mine = next(k for k in t.kernels.kernels if k.name == MY)
    assert (mine.grid, mine.block, mine.shapes) == ((2, 1, 1), (128, 1, 1), 1)
    assert mine.ticks > 0
    # each stream's launches and its last kernel (the capture's stream 9 has none)
    streams = {s.stream: (s.launches, s.kernel) for s in t.kernels.streams}
    assert streams == {0: (3, MY), 5: (4, NCCL), 7: (5, "kern_only")}


def test_report_kernels_section_and_json(probes, fake, kshim, tmp_path):
    run_ops(probes, fake, kshim, tmp_path / "t", EVERY_ROUTE)
    text = report(tmp_path / "t")
    section = text[text.index("\nkernels "):]
    assert "kernels    4, 12 launches" in section
    assert "my_kernel(float*, int)" in section and MY not in section
    assert "other()" in section and NCCL in section
    raw = report("--mangled", tmp_path / "t")
    assert MY in raw[raw.index("\nkernels "):]
    g = json.loads(report("--json", tmp_path / "t"))["groups"][0]
    assert not any(k["cut"] for k in g["kernels"])
    ks = {k["name"]: (k["demangled"], k["launches"]) for k in g["kernels"]}
    assert ks == {MY: ("my_kernel(float*, int)", 4), NCCL: (NCCL, 3),
                  "_Z5otherv": ("other()", 4), "kern_only": ("kern_only", 1)}
    assert g["collectives"] == []


def test_calls_report_names_each_launch(probes, fake, kshim, tmp_path):
    run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{MY}", "enumf:_Z5otherv",
                                                 "launch:0:0:2:256:1", "ex:1:7:1:1:1"],
            mode="calls")
    text = report("--calls", "--function", "cuLaunch*", tmp_path / "t")
    assert "cuLaunchKernel(f=my_kernel(float*, int), gridDimX=2," in text
    assert "f=other(), kernelParams=" in text
    raw = report("--calls", "--mangled", "--function", "cuLaunch*", tmp_path / "t")
    assert f"cuLaunchKernel(f={MY}, gridDimX=2," in raw
    calls = json.loads(report("--calls", "--json", "--function", "cuLaunch*",
                              tmp_path / "t"))["calls"]
    assert [(c["kernel"], c["kernel_demangled"]) for c in calls] == [
        (MY, "my_kernel(float*, int)"), ("_Z5otherv", "other()")]
    assert calls[0]["args"]["f"] == "func#1"  # the argument itself stays numbered
    # the timeline of the calls: each launch named after its kernel
    from shimgen.report import calls_timeline
    from shimgen.report.calls import Filters, shown

    _, (g,), _ = shown([tmp_path / "t"], Filters())
    out = io.StringIO()
    calls_timeline.timeline_text(g, out)
    events = [e for e in json.loads(out.getvalue())["traceEvents"] if e["ph"] == "X"]
    launches = [(e["name"], e["args"].get("function")) for e in events
                if e["args"].get("kernel")]
    assert launches == [("my_kernel(float*, int)", "cuLaunchKernel"),
                        ("other()", "cuLaunchKernelEx")]


def test_host_functions_by_symbol(probes, fake, kshim, tmp_path):
    """cuLaunchHostFunc's function named by its symbol; a graph the shim never saw
    instantiated counted as one whose kernel nodes are not known (test_kernels_graphs.py)."""
    got = run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{MY}", "host:4:3", "graph:6:2",
                                                        "launch:0:6:1:1:1"])
    assert got["launches"] == {"host": 3, "graph": 2, MY: 1}
    t = one_trace(tmp_path / "t")
    assert sorted((k.name, k.source, k.launches) for k in t.kernels.kernels) == [
        (MY, "cuModuleGetFunction", 1), ("graph:?", "cuGraphLaunch", 2),
        ("kern_host_cb", "cuLaunchHostFunc", 3)]
    streams = {s.stream: (s.launches, s.kernel) for s in t.kernels.streams}
    assert streams == {4: (3, "kern_host_cb"), 6: (3, MY)}


def long_name(i: int, n: int) -> str:
    """A mangled name of exactly n bytes, the i-th of its kind."""
    head = f"_Z{n - 3 - len(str(n - 3))}"
    return (head + f"k{i}_" + "x" * n)[:n - 1] + "v"


def test_a_long_name_is_kept_whole(probes, fake, kshim, tmp_path):
    """Names of 1,500 bytes, as PyTorch's template kernels have: each route keeps them whole
    (the program's argument, the kernel a function was made of, the driver asked)."""
    mod, lib, drv = (long_name(i, 1500) for i in range(3))
    got = run_ops(probes, fake, kshim, tmp_path / "t", [
        f"mod:{mod}", f"lib:{lib}", "kfunc:1", f"enumf:{drv}", "launch:0:0:1:1:2",
        "launch:2:5:1:1:3", "launch:3:7:1:1:1"])
    assert got["launches"] == {mod: 2, lib: 3, drv: 1}
    t = one_trace(tmp_path / "t")
    assert by_name(t) == got["launches"] and not any(k.cut for k in t.kernels.kernels)
    streams = {s.stream: (s.kernel, s.cut) for s in t.kernels.streams}
    assert streams == {0: (mod, False), 5: (lib, False), 7: (drv, False)}
    assert "(name cut)" not in report(tmp_path / "t")
    g = json.loads(report("--json", tmp_path / "t"))["groups"][0]
    assert sorted((x["name"], x["cut"]) for x in g["kernels"]) == sorted(
        (n, False) for n in (mod, lib, drv))


def test_a_name_longer_than_the_most_kept_is_cut_and_said_so(probes, fake, kshim, tmp_path):
    long = long_name(0, KERN_NAME_MAX + 904)
    got = run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{long}", "launch:0:0:1:1:2"])
    assert got["launches"] == {long: 2}
    (k,) = one_trace(tmp_path / "t").kernels.kernels
    assert k.name == long[:KERN_NAME_MAX] and k.cut and k.launches == 2
    assert "(name cut)" in report(tmp_path / "t")
    g = json.loads(report("--json", tmp_path / "t"))["groups"][0]
    assert [(x["name"], x["cut"]) for x in g["kernels"]] == [(long[:KERN_NAME_MAX], True)]


def test_names_past_the_arena_are_cut_and_said_so(probes, fake, kshim, tmp_path):
    """More names than the file's arena holds: those that fit whole, the one at its end cut
    to what was left, the later ones cut to nothing; each said cut, and the cut one shown as
    it is, not demangled (its part, f064(int, int, ...), is another function's name)."""
    size = 4090  # (the arena's end falls 384 bytes into a name: a part the demangler takes)
    names = [f"_Z4f{i:03}" + "i" * (size - 7) for i in range(KERN_NAME_BYTES // size + 5)]
    whole = KERN_NAME_BYTES // size
    part = names[whole][:KERN_NAME_BYTES - whole * size]
    assert demangle(part).startswith(f"f{whole:03}(int, int")
    last = len(names) - 1
    run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{n}" for n in names] + [
        "launch:0:0:1:1:1", f"launch:{whole}:0:1:1:2", f"launch:{last}:5:1:1:3"])
    t = one_trace(tmp_path / "t")
    assert sorted(k.name for k in t.kernels.kernels if not k.cut) == sorted(names[:whole])
    assert sorted(k.name for k in t.kernels.kernels if k.cut) == [""] * 4 + [part]
    assert by_name(t) == {names[0]: 1, part: 2, "": 3}
    text = report(tmp_path / "t")
    assert text.count("(name cut)") == 2 and "kernels    3, 6 launches" in text
    assert f"({whole - 1} kernels the program got a handle of but never launched" in text
    assert f"f{whole:03}(int" not in text
    g = json.loads(report("--json", tmp_path / "t"))["groups"][0]
    assert sorted((x["launches"], x["cut"]) for x in g["kernels"]) == sorted(
        [(1, False), (2, True), (3, True)] + [(0, False)] * (whole - 1))
    assert next(x["demangled"] for x in g["kernels"] if x["launches"] == 2) == part


def test_names_made_by_racing_threads_are_each_whole(probes, fake, kshim, tmp_path):
    """Threads naming handles at once (let go together, a random spin between two calls,
    many runs): every name whole, none sharing another's bytes of the arena."""
    threads, each, size = 4, 100, 600
    assert threads * each * size <= KERN_NAME_BYTES
    want = sorted(f"_Zt{t}_{i}_".ljust(size, "x") for t in range(threads) for i in range(each))
    for run in range(RACE_RUNS):
        run_ops(probes, fake, kshim, tmp_path / str(run), [f"names:{threads}:{each}:{size}"])
        t = one_trace(tmp_path / str(run))
        assert not any(k.cut for k in t.kernels.kernels) and not t.kernels.lost, run
        assert sorted(k.name for k in t.kernels.kernels) == want, run


def test_a_name_outside_the_arena_is_refused(probes, fake, kshim, tmp_path):
    """A file whose slot says its name lies past the arena: one line, not a name read from
    what follows the header."""
    from shimgen.runenv import KERN_SLOTS, trace_header_layout

    run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{MY}", "launch:0:0:1:1:1"])
    (path,) = (tmp_path / "t").glob("*.shimtrace")
    at = {name: off for name, _, _, off, _ in trace_header_layout()}
    data = bytearray(path.read_bytes())
    handles = struct.unpack_from(f"<{KERN_SLOTS}Q", data, at["kern_handle"])
    slot = next(i for i, h in enumerate(handles) if h)
    word = struct.unpack_from("<Q", data, at["kern_name_at"] + 8 * slot)[0]
    assert word == len(MY)  # the first name: at 0, whole
    struct.pack_into("<Q", data, at["kern_name_at"] + 8 * slot,
                     (KERN_NAME_BYTES - 4) << 32 | len(MY))
    path.write_bytes(bytes(data))
    proc = subprocess.run([sys.executable, "-m", "shimgen", "report", str(tmp_path / "t")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert f"its kernel slot {slot} has a name of {len(MY)} bytes at " in proc.stderr


def test_a_driver_that_gives_no_names(probes, fake, kshim, tmp_path):
    """A handle the kshim never saw made, of a driver that names none (before CUDA 12.3):
    counted under its handle, unnamed, asked once."""
    got = run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{MY}", "enumf:_Z5otherv",
                                                       "launch:0:0:1:1:2", "launch:1:0:1:1:3"],
                  FAKE_KERN_NO_NAMES="1")
    t = one_trace(tmp_path / "t")
    assert got["launches"] == {MY: 2, "_Z5otherv": 3}
    assert sorted((k.name, k.source, k.launches) for k in t.kernels.kernels) == [
        ("", "unnamed", 3), (MY, "cuModuleGetFunction", 2)]
    assert "an unnamed kernel" in report(tmp_path / "t")


def test_a_forked_child_keeps_the_names_and_counts_its_own(probes, fake, kshim, tmp_path):
    run_ops(probes, fake, kshim, tmp_path / "t", [f"mod:{MY}", "launch:0:0:1:1:3", "fork:",
                                                  "launch:0:0:1:1:2"])
    files = sorted(tmp_path.glob("t/*.shimtrace"))
    assert len(files) == 2, files
    a, b = (load(f) for f in files)
    child, parent = (a, b) if a.ppid == b.pid else (b, a)
    assert child.ppid == parent.pid
    assert [(k.name, k.source, k.launches) for k in parent.kernels.kernels] == [
        (MY, "cuModuleGetFunction", 3)]
    assert [(k.name, k.source, k.launches) for k in child.kernels.kernels] == [
        (MY, "cuModuleGetFunction", 2)]
    assert [(s.stream, s.launches) for s in child.kernels.streams] == [(0, 2)]


def test_a_name_is_never_asked_inside_a_capture(probes, fake, kshim, tmp_path):
    """A stream that captures by a route the shim did not see begin (the fake's stream 9, for
    its first 2 launches): cuStreamIsCapturing says so at the launch, and the name is asked
    at the next launch outside it, not there."""
    got = run_ops(probes, fake, kshim, tmp_path / "t", ["enumf:_Z5otherv", "launch:0:9:1:1:2",
                                                        "launch:0:4:1:1:1"],
                  FAKE_KERN_CAPTURING="9:2")
    assert got["captured"] == 2 and got["asked_in_capture"] == 0, got
    t = one_trace(tmp_path / "t")
    assert [(k.name, k.source) for k in t.kernels.kernels] == [("_Z5otherv", "driver")]


def test_sigkilled_process_names_the_kernel_it_waits_for(probes, fake, kshim, tmp_path):
    traces = tmp_path / "t"
    proc = subprocess.Popen(
        [probes / "kernlaunch", f"mod:{MY}", f"lib:{NCCL}", "launch:0:5:2:256:3",
         "launch:1:3:2:256:7", "sync:3"],
        env=env_for(fake, kshim, traces, FAKE_KERN_HANG="1"), stdout=subprocess.PIPE,
        text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        for _ in range(3000):  # until the file shows the call in progress, then the kill
            files = list(traces.glob("*.shimtrace"))
            if files and inflight.read(files[0]).calls:
                break
            time.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    t = one_trace(traces)
    assert not t.complete and by_name(t) == {MY: 3, NCCL: 7}
    text = report(traces)
    line = next(ln for ln in text.splitlines() if ln.startswith("in flight"))
    assert "inside cuStreamSynchronize" in line, line
    assert f"stream 0x3 last ran {NCCL} (#7), launched " in line, line
    g = json.loads(report("--json", traces))["groups"][0]
    last = g["in_flight"][0]["last_launch"]
    assert (last["stream"], last["kernel"], last["ordinal"]) == (3, NCCL, 7)
    assert last["kernel_cut"] is False


def test_sigkilled_process_says_its_last_kernels_name_was_cut(probes, fake, kshim, tmp_path):
    """... a name cut at the arena's end, whose part, f064(int, int, ...), is another
    function's name: the JSON gives it as it is, said cut, never demangled."""
    traces = tmp_path / "t"
    size = 4090  # (as in test_names_past_the_arena_are_cut_and_said_so)
    names = [f"_Z4f{i:03}" + "i" * (size - 7) for i in range(KERN_NAME_BYTES // size + 1)]
    whole = KERN_NAME_BYTES // size
    part = names[whole][:KERN_NAME_BYTES - whole * size]
    assert demangle(part).startswith(f"f{whole:03}(int, int")
    proc = subprocess.Popen(
        [probes / "kernlaunch", *(f"mod:{n}" for n in names), f"launch:{whole}:3:2:256:2",
         "sync:3"],
        env=env_for(fake, kshim, traces, FAKE_KERN_HANG="1"), stdout=subprocess.PIPE,
        text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        for _ in range(3000):  # until the file shows the call in progress, then the kill
            files = list(traces.glob("*.shimtrace"))
            if files and inflight.read(files[0]).calls:
                break
            time.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    line = next(ln for ln in report("--mangled", traces).splitlines()
                if ln.startswith("in flight"))
    assert f"stream 0x3 last ran {part[:40]}" in line and " (name cut) (#2)" in line, line
    last = json.loads(report("--json", traces))["groups"][0]["in_flight"][0]["last_launch"]
    assert last["kernel"] == last["kernel_demangled"] == part
    assert last["kernel_cut"] is True


def test_the_rank_whose_collective_count_differs(probes, fake, kshim, tmp_path):
    traces = tmp_path / "t"
    for rank, n in (("0", 5), ("1", 4), ("2", 5)):
        run_ops(probes, fake, kshim, traces, [f"mod:{MY}", f"lib:{NCCL}", "launch:0:0:1:1:9",
                                             f"launch:1:3:1:1:{n}"], RANK=rank)
    text = report(traces)
    assert f"rank 1 launched {NCCL} 4 times, the other 2 ranks 5" in text
    assert "rank 0 launched" not in text and "rank 2 launched" not in text
    g = json.loads(report("--json", traces))["groups"][0]
    assert g["collectives"] == [{"kernel": NCCL, "rank": "1", "launches": 4, "others": 5,
                                 "other_ranks": 2}]


def test_demangled_by_the_cxx_runtime():
    assert demangle(MY) == "my_kernel(float*, int)"
    assert demangle("_ZN2at6native6kernelIfEEvPT_") == "void at::native::kernel<float>(float*)"
    assert demangle("_Zbogus") == "_Zbogus" and demangle(NCCL) == NCCL
