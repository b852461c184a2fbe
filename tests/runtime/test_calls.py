"""SHIMGEN_TRACE=calls (runtime/arch/x86_64/calls.S, runtime/stats/calls.c, shimgen/calls, `report
--calls`) against the real Debian drivers on the CPU: 31 calls with known arguments through every
route (dlsym by name and by _v2 name, cuGetProcAddress at 3000 and 3020,
cuGetProcAddress_v2), each argument, output and result given back by `report --calls
--json` in order, a string, a struct, cuLaunchKernel's 11 arguments, a function the headers
do not know (its six registers); the ring's wrap exact (one thread and several at once); a
process SIGKILLed mid-loop keeps its last calls; two runs' first difference; a string longer
than its capture slot, a negative int, an enum value with aliases, an export known only
through its PFN typedefs. The probe is tests/c/callsdecoded.c."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from shimgen.calls import Decoder, description
from shimgen.calls.model import prototype
from shimgen.calls.parse import parse_declarations
from shimgen.report import calls as report_calls
from shimgen.runenv import CALLS_STRING_MAX
from tests.faultkit import run

ROOT = Path(__file__).resolve().parents[2]


def traced(shim, probes, tmp: Path, *args, ring=None) -> Path:
    tmp.mkdir(exist_ok=True)
    d = tmp / "traces"
    env = shim.env(SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR=str(d),
                   **({"SHIMGEN_CALLS_RING": str(ring)} if ring else {}))
    proc = run([probes / "callsdecoded", *args], env)
    (tmp / "stdout").write_text(proc.stdout)
    return d


def records(d: Path) -> dict:
    return json.loads(report_calls.render([d], report_calls.Filters(), "json"))


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shimgen", "report", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_every_route_gives_back_each_argument_output_and_result(shim, probes, tmp_path):
    d = traced(shim, probes, tmp_path, "routes")
    seen = [ln.split() for ln in (tmp_path / "stdout").read_text().splitlines()]
    proc = cli("--calls", "--json", d)
    assert proc.returncode == 0, proc.stderr
    calls = json.loads(proc.stdout)["calls"]
    assert [c["function"] for c in calls] == [s[0] for s in seen]
    assert [c["result"] for c in calls] == [int(s[1]) for s in seen]
    assert len(calls) == 31 and {c["state"] for c in calls} == {"returned"}
    assert {c["tid"] for c in calls} == {c["pid"] for c in calls}
    by = {}
    for c in calls:
        by.setdefault(c["function"], []).append(c)
    launch = by["cuLaunchKernel"][0]["args"]
    assert launch == {"f": "func#1", "gridDimX": 1, "gridDimY": 2, "gridDimZ": 3,
                      "blockDimX": 4, "blockDimY": 5, "blockDimZ": 6, "sharedMemBytes": 7,
                      "hStream": "stream#1", "kernelParams": 0x1110, "extra": 0x2220}
    assert [c["args"]["hStream"] for c in by["cuStreamQuery"]] == ["stream#1", "stream#2"]
    assert by["cuInit"][0]["args"] == {"Flags": 0}
    assert by["cuInit"][0]["result_name"] == "CUDA_ERROR_NO_DEVICE"
    versions = [int(s[2]) for s in seen if s[0] == "cuDriverGetVersion"]
    assert [c["outputs"] for c in by["cuDriverGetVersion"]] == [
        {"driverVersion": v} for v in versions]
    attr = by["cuDeviceGetAttribute"][0]
    assert (attr["args"]["attrib"], attr["args"]["dev"], attr["outputs"]) == (
        "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED", 0, {})
    assert [c["args"]["bytesize"] for c in by["cuMemAlloc"]] == [268435456, 1000]
    assert [c["args"]["bytesize"] for c in by["cuMemAlloc_v2"]] == [4096, 2000]
    assert [(c["args"]["symbol"], c["args"]["cudaVersion"], c["args"]["flags"])
            for c in by["cuGetProcAddress"]] == [("cuMemAlloc", 3000, 0), ("cuMemAlloc", 3020, 0)]
    v2 = by["cuGetProcAddress_v2"][0]
    if "cuGetProcAddress_v2" in description()["functions"]:
        assert (v2["args"]["symbol"], v2["args"]["cudaVersion"], v2["outputs"]) == (
            "cuDriverGetVersion", 12000, {"pfn": "cuDriverGetVersion",
                                          "symbolStatus": "CU_GET_PROC_ADDRESS_SUCCESS"})
    else:  # headers older than it (CUDA 12.2's): its six registers
        assert (v2["args"]["arg2"], v2["args"]["arg3"], v2["outputs"]) == (12000, 0, {})
    assert by["cuGetErrorName"][0]["args"]["error"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert by["cuGetErrorString"][0]["args"]["error"] == "CUDA_ERROR_NO_DEVICE"
    # outputs the driver wrote as pointers: the string each points to, the export each is
    assert by["cuGetErrorName"][0]["outputs"] == {"pStr": "CUDA_ERROR_OUT_OF_MEMORY"}
    assert by["cuGetErrorString"][0]["outputs"] == {
        "pStr": "no CUDA-capable device is detected"}
    assert [c["outputs"] for c in by["cuGetProcAddress"]] == [{"pfn": "cuMemAlloc"},
                                                              {"pfn": "cuMemAlloc_v2"}]
    if "cuGetProcAddress_v2" in description()["functions"]:
        assert v2["outputs"]["pfn"] == "cuDriverGetVersion"
    assert by["cuModuleLoad"][0]["args"]["fname"] == "/nonexistent/kernel.cubin"
    assert by["cuModuleGetFunction"][0]["args"]["name"] == "my_kernel"
    assert by["cuModuleGetFunction"][0]["args"]["hmod"] is None
    copy = by["cuMemcpy2D_v2"][0]["args"]["pCopy"]
    assert {k: copy[k] for k in ("srcXInBytes", "srcY", "srcMemoryType", "srcHost",
                                 "srcPitch", "dstMemoryType", "dstDevice", "WidthInBytes",
                                 "Height")} == {
        "srcXInBytes": 1, "srcY": 2, "srcMemoryType": "CU_MEMORYTYPE_HOST", "srcHost": 0x1000,
        "srcPitch": 64, "dstMemoryType": "CU_MEMORYTYPE_DEVICE", "dstDevice": 0x2000,
        "WidthInBytes": 32, "Height": 4}
    assert by["cuGLInit"][0]["args"] == {f"arg{i}": i + 1 for i in range(6)}
    assert by["cuMemsetD8_v2"][0]["args"] == {"dstDevice": 0x1000, "uc": 0xab, "N": 100}
    assert by["cuMemHostAlloc"][0]["args"]["bytesize"] == 100
    assert by["cuMemHostAlloc"][0]["args"]["Flags"] == 3
    assert by["cuDeviceGetName"][0]["args"]["len"] == 64


def test_text_lines_and_filters(shims, probes, tmp_path):
    d = traced(shims[-1], probes, tmp_path, "routes")
    proc = cli("--calls", d)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("calls      31 recorded in 1 threads of 1 processes")
    import re

    alloc = [ln for ln in lines if " cuMemAlloc_v2(" in ln]
    assert re.fullmatch(r"\d+\.\d{6} \[\d+\] cuMemAlloc_v2\(dptr=0x[0-9a-f]+, "
                        r"bytesize=4096\) = CUDA_ERROR_NOT_INITIALIZED \d+(\.\d+)?us", alloc[0])
    ver = [ln for ln in lines if " cuDriverGetVersion(" in ln][0]
    assert re.search(r"\) = CUDA_SUCCESS \{driverVersion=12\d\d0\} ", ver)
    procs = [ln for ln in lines if " cuGetProcAddress(" in ln]
    assert [ln.split(" = CUDA_SUCCESS ")[1].split("}")[0] for ln in procs] == [
        "{pfn=cuMemAlloc", "{pfn=cuMemAlloc_v2"], procs
    name = [ln for ln in lines if " cuGetErrorName(" in ln][0]
    assert ' = CUDA_SUCCESS {pStr="CUDA_ERROR_OUT_OF_MEMORY"} ' in name, name
    def calls(*args) -> list[str]:  # the call lines: each starts with its time
        return [ln for ln in cli("--calls", *args, d).stdout.splitlines() if ln[:1].isdigit()]

    errs = calls("--errors", "--function", "cuMem*")
    assert errs and all(" cuMem" in ln and "CUDA_SUCCESS" not in ln for ln in errs)
    last = calls("--last", "2")
    assert [ln.split()[2].split("(")[0] for ln in last] == ["cuMemHostAlloc",
                                                            "cuDevicePrimaryCtxRetain"]
    bad = cli("--errors", d)
    assert bad.returncode == 1 and bad.stderr.strip() == (
        "shimgen: error: report: --errors goes with --calls")
    db = tmp_path / "calls.db"
    assert cli("--calls", "--sqlite", db, "--function", "cuMemAlloc*", d).returncode == 0
    import sqlite3

    con = sqlite3.connect(db)
    rows = con.execute("SELECT function, json_extract(args, '$.bytesize') FROM calls "
                       "ORDER BY start_s").fetchall()
    assert rows == [("cuMemAlloc", 268435456), ("cuMemAlloc_v2", 4096), ("cuMemAlloc", 1000),
                    ("cuMemAlloc_v2", 2000)]
    assert os.stat(db).st_mode & 0o077 == 0
    other = tmp_path / "notes.txt"
    other.write_text("mine")
    refused = cli("--calls", "--sqlite", other, d)
    assert refused.returncode == 1 and "not a calls database" in refused.stderr
    assert other.read_text() == "mine"


def test_a_string_longer_than_its_slot_is_cut_and_what_follows_is_whole(shim, probes, tmp_path):
    """A 100-byte name in a 64-byte slot: its first 63 bytes, the slot's last byte its NUL;
    the captures and record after it whole (a negative int, an enum value with aliases)."""
    d = traced(shim, probes, tmp_path, "long")
    calls = records(d)["calls"]
    name = "".join(chr(ord("a") + i % 26) for i in range(100))
    assert [c["function"] for c in calls] == ["cuModuleLoad", "cuDeviceGetAttribute"]
    assert calls[0]["args"]["fname"] == name[:CALLS_STRING_MAX - 1]
    assert (calls[1]["args"]["attrib"], calls[1]["args"]["dev"]) == (
        "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK", -2)


def test_an_enum_value_with_aliases_is_printed_by_its_first_name():
    """cuda.h gives 8 two names, the second deprecated: the first is the one printed."""
    text = ("typedef enum e_enum { E_FIRST = 8, E_DEPRECATED = 8, E_NEXT } e;\n"
            "int f(e x);\n")
    assert parse_declarations(text)["enums"]["e_enum"] == {"8": "E_FIRST", "9": "E_NEXT"}
    assert description()["enums"]["CUdevice_attribute_enum"]["8"] == (
        "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK")


def test_an_export_found_through_its_pfn_typedefs_has_the_newest_prototype():
    """An export the declarations do not name is decoded with the newest
    PFN_<name>_v<version> (and its _ptsz form with the newest of those)."""
    arg = {"k": "int", "size": 4, "signed": False}
    ret = {"k": "enum", "name": "cudaError_enum", "typedef": "CUresult"}
    desc = {"functions": {}, "enums": {}, "structs": {}, "pfn": {
        f"cuFoo{s}_v{v}{p}": {"args": [[f"a{i}", arg] for i in range(n)], "ret": ret}
        for v, n in ((3000, 2), (12000, 3), (4000, 1)) for s, p in (("", ""), ("", "_ptsz"))}}
    assert [a.name for a in prototype(desc, "cuFoo").args] == ["a0", "a1", "a2"]
    assert [a.name for a in prototype(desc, "cuFoo_ptsz").args] == ["a0", "a1", "a2"]
    assert prototype(desc, "cuFoo_v5000") is None


def test_the_ring_keeps_exactly_the_last_calls(shims, probes, tmp_path):
    """3000 calls in a ring of 1024: exactly the last 1024, in order, and 1976 dropped."""
    d = traced(shims[0], probes, tmp_path, "loop", 3000, ring=1024)
    got = records(d)
    devs = [c["args"]["dev"] for c in got["calls"]]
    assert devs == list(range(3000 - 1024, 3000))
    assert {c["args"]["attrib"] for c in got["calls"]} == {"CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z"}
    (p,) = got["processes"]
    assert p["ring_records"] == 1024 and p["dropped"] == {str(p["pid"]): 3000 - 1024}


def test_the_rings_file_grows_as_it_fills(shims, probes, tmp_path):
    """A ring of 65536 records has disk space for its first 1024 when its block is made and
    doubles as it fills: 7 calls leave the block and 1024 records' room, 3000 calls 4096
    records' (the file's last block is short of its stride), every call kept."""
    from shimgen.trace import binary

    for calls, room in ((7, 1024), (3000, 4096)):
        d = traced(shims[0], probes, tmp_path / str(calls), "loop", calls, ring=65536)
        (f,) = d.glob("*.shimtrace")
        h = binary.header(f)
        assert h["calls_ring_records"] == 65536 and h["nblocks"] == 1
        assert f.stat().st_size == h["blocks_off"] + h["calls_ring_off"] + room * 256
        got = records(d)
        assert [c["args"]["dev"] for c in got["calls"]] == list(range(calls))
        assert got["processes"][0]["dropped"] == {}


def test_threads_keep_their_own_last_calls(shims, probes, tmp_path):
    d = traced(shims[1], probes, tmp_path, "threads", 4, 1500, ring=1024)
    got = records(d)
    per: dict[int, list] = {}
    for c in got["calls"]:
        per.setdefault(c["tid"], []).append(c["args"])
    assert len(per) == 4
    assert len({a[0]["attrib"] for a in per.values()}) == 4
    for args in per.values():
        assert [a["dev"] for a in args] == list(range(1500 - 1024, 1500))
        assert {a["attrib"] for a in args} == {args[0]["attrib"]}
    assert sorted(got["processes"][0]["dropped"].values()) == [1500 + 1 - 1024] * 4


def test_sigkill_mid_loop_keeps_the_last_calls(shims, probes, tmp_path):
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    for k in range(4):
        d = tmp_path / f"r{k}"
        env = shims[k % len(shims)].env(SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR=str(d),
                                        SHIMGEN_CALLS_RING="2048")
        p = subprocess.Popen([str(probes / "callsdecoded"), "forever"], env=env,
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0, 0.05))
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        got = records(d)
        calls = got["calls"]
        attribs = [c["args"]["dev"] for c in calls]
        # the ring's 2048, less the oldest when the kill came while a record was being
        # written (its slot is the oldest's, cleared first; the call is not kept)
        assert len(calls) in (2047, 2048), seed
        assert attribs == list(range(attribs[0], attribs[0] + len(calls))), seed
        # "ready" follows the call of i = 10000: a kill at once (a loaded machine) finds it last
        assert attribs[-1] >= 10000, seed
        assert not got["processes"][0]["complete"], seed
        assert all(c["state"] == "returned" for c in calls[:-1]), seed
        dropped = got["processes"][0]["dropped"][str(got["processes"][0]["pid"])]
        # dropped: the calls of earlier turns only (the oldest's slot taken by the call
        # being written is one of them; that call itself is none)
        assert dropped == attribs[0], seed


def test_two_runs_first_difference(shims, probes, tmp_path):
    """535 and 555 answer cuDriverGetVersion differently: the first difference is there,
    with the calls before it; a run against itself has none."""
    a = traced(shims[0], probes, tmp_path / "a", "routes")
    b = traced(shims[-1], probes, tmp_path / "b", "routes")
    proc = cli("--calls", "--first-difference", a, b)
    assert proc.returncode == 1, proc.stderr  # the runs part
    out = proc.stdout.splitlines()
    assert out[0] == "first difference: 1 of 1 threads part (addresses ignored)"
    assert "cuInit(Flags=0) = CUDA_ERROR_NO_DEVICE" in out[-3]
    assert out[-2].startswith("  A ") and "cuDriverGetVersion(" in out[-2]
    assert "{driverVersion=120" in out[-2] and "{driverVersion=120" in out[-1]
    same = cli("--calls", "--first-difference", a, a)
    assert same.returncode == 0, same.stderr
    assert same.stdout.startswith("no difference: 1 threads make the same calls")
    addr = cli("--calls", "--first-difference", "--addresses", a, b)
    assert "(addresses compared)" in addr.stdout.splitlines()[0]


def test_flags_print_as_names_joined():
    names = ["cuEventCreate"]
    dec = Decoder(description(), names)
    assert dec.enum_text("CUevent_flags_enum", 3) == (
        "CU_EVENT_BLOCKING_SYNC|CU_EVENT_DISABLE_TIMING")
    assert dec.enum_text("CUevent_flags_enum", 0) == "CU_EVENT_DEFAULT"
    assert dec.enum_text("CUevent_flags_enum", 0x101) == "CU_EVENT_BLOCKING_SYNC|0x100"


def test_signal_handlers_calling_inside_calls_keep_every_record_whole(shims, probes, tmp_path):
    """A timer's handler calls the driver every 50 us while the main loop calls it (so the
    handler's call lands anywhere in the interrupted call's entry or return): every call of
    both is one whole record, returned, with its result and output, and the counts agree."""
    s = shims[0]
    d = tmp_path / "traces"
    proc = run([probes / "sigcalls", "libcuda.so.1", 20000],
               s.env(SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR=str(d)))
    main, handler = (int(proc.stdout.split()[i]) for i in (1, 3))
    assert handler > 0
    got = records(d)
    calls = got["calls"]
    assert len(calls) == main + handler and got["processes"][0]["dropped"] == {}
    assert {c["function"] for c in calls} == {"cuDriverGetVersion"}
    assert all(c["state"] == "returned" and c["result"] == 0 for c in calls)
    assert {c["outputs"]["driverVersion"] for c in calls} == {s.cuda_version}
    assert sorted(c["seq"] for c in calls) == list(range(1, main + handler + 1))


def test_forked_processes_each_keep_their_own_calls(shims, probes, tmp_path):
    """forkcall: a child forked before the parent's first call (3 calls), the parent (2), a
    child forked after it (5): one file each, each process's own calls only (a forked
    child's rings start empty), merged in time order; --pid keeps one process."""
    d = tmp_path / "traces"
    proc = run([probes / "forkcall"],
               shims[-1].env(SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR=str(d)))
    pids = {ln.split()[1]: int(ln.split()[2]) for ln in proc.stdout.splitlines()}
    got = records(d)
    per: dict[int, int] = {}
    for c in got["calls"]:
        per[c["pid"]] = per.get(c["pid"], 0) + 1
        assert c["tid"] == c["pid"] and c["function"] == "cuDriverGetVersion"
    assert per == {pids["child_before"]: 3, pids["parent"]: 2, pids["child_after"]: 5}
    assert [c["start_s"] for c in got["calls"]] == sorted(c["start_s"] for c in got["calls"])
    one = json.loads(report_calls.render([d], report_calls.Filters(pid=pids["parent"]), "json"))
    assert {c["pid"] for c in one["calls"]} == {pids["parent"]} and len(one["calls"]) == 2
