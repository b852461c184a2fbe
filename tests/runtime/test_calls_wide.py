"""Outputs wider than 32 bits in calls mode: a device address, a free and a total size the
driver writes are 8 bytes, captured whole (runtime/arch/x86_64/calls.S copies a function's
one 8-byte output itself, runtime/stats/calls.c the others) and decoded whole in the JSON
and in the text (shimgen/calls/decode.py). The real drivers answer these calls with an
error on the CPU, so they run on the FAKE ledger driver (tests/c/fake_ledger_libcuda.c),
whose addresses start at 0x7f0000000000 and whose sizes are tens of GiB."""

from __future__ import annotations

import json
import os
import re

from shimgen.report import calls as report_calls
from tests.faultkit import run
from tests.shimcache import fake_driver_shim

GiB = 1 << 30


def test_outputs_wider_than_32_bits_are_captured_and_shown_whole(probes, tmp_path):
    fake = probes / "libfake_ledger_libcuda.so"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    env.update(LD_PRELOAD=str(fake_driver_shim(fake)), SHIMGEN_DRIVER=str(fake),
               SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR=str(tmp_path / "traces"))
    out = run([probes / "memledger", "ctx:0", "alloc:1000", "free:0", "info", "total:0"],
              env).stdout
    free, total = map(int, re.search(r"^parent info free (\d+) total (\d+)$", out,
                                      re.M).groups())
    device = int(re.search(r"^parent total (\d+)$", out, re.M).group(1))
    assert free > 4 * GiB and total > 4 * GiB and device > 4 * GiB, out
    d = [tmp_path / "traces"]
    calls = json.loads(report_calls.render(d, report_calls.Filters(), "json"))["calls"]
    by = {c["function"]: c for c in calls}
    # the address the driver wrote is the one the program then frees: both whole
    dptr = by["cuMemFree_v2"]["args"]["dptr"]
    assert dptr >> 32 and by["cuMemAlloc_v2"]["outputs"] == {"dptr": dptr}
    assert by["cuMemGetInfo_v2"]["outputs"] == {"free": free, "total": total}
    assert by["cuDeviceTotalMem_v2"]["outputs"] == {"bytes": device}
    text = report_calls.render(d, report_calls.Filters(), "text")
    line = {fn: next(ln for ln in text.splitlines() if f" {fn}(" in ln) for fn in by}
    assert f"= CUDA_SUCCESS {{dptr={dptr:#x}}}" in line["cuMemAlloc_v2"], line
    assert f"= CUDA_SUCCESS {{free={free}, total={total}}}" in line["cuMemGetInfo_v2"], line
    assert f"= CUDA_SUCCESS {{bytes={device}}}" in line["cuDeviceTotalMem_v2"], line
