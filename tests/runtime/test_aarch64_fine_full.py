"""test_fine_full.py on aarch64 (runtime/arch/aarch64/timing.S), under qemu-user: a thread
whose fine table has no free slot counts its timed calls in their log2 buckets, by their
length, so that every call is in the log2 histogram once. The probe (tracekill.c) and the
FAKE driver (tests/c/fake_libcuda.c) are cross-compiled, as in test_aarch64_timing.py."""

from __future__ import annotations

import mmap
import os
import struct
import subprocess

from shimgen.trace.binary import HEADER_SIZE, load
from tests.report.test_tracefile_reader import header
from tests.runtime.test_aarch64 import QEMU, SYSROOT
from tests.runtime.test_aarch64_timing import _cross, arm  # noqa: F401
from tests.runtime.test_fine_full import ticks

# the probe's two functions and their calls per phase
FUNCTIONS = {"cuDriverGetVersion": 300, "cuInit": 5}


def test_calls_the_fine_table_cannot_hold_are_in_the_log2_histogram_on_aarch64(arm, tmp_path):  # noqa: F811
    """Every slot of the thread's fine table overwritten with another function's key while
    the probe waits: its next calls find no slot, and each is counted in the log2 bucket of
    its length (the start ticks, a counter value far larger, would put each in a bucket whose
    bounds are far above the ticks the calls took)."""
    d = tmp_path / "traces"
    probe = _cross(arm.out, "tracekill")
    guest = {"LD_LIBRARY_PATH": str(arm.fake.parent), "LD_PRELOAD": str(arm.shim),
             "SHIMGEN_TRACE": "time", "SHIMGEN_TRACE_DIR": str(d), "SHIMGEN_QUIET": "1"}
    cmd = [QEMU, "-L", str(SYSROOT)]
    for k, v in guest.items():
        cmd += ["-E", f"{k}={v}"]
    cmd += [str(probe), "libcuda.so.1", "twice", *map(str, FUNCTIONS.values())]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         env={k: v for k, v in os.environ.items()
                              if not k.startswith(("LD_", "SHIMGEN_"))})
    try:
        assert p.stdout.readline() == b"made\n"
        (path,) = d.glob("*.shimtrace")
        with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
            h = header(bytes(m[:HEADER_SIZE]))
            first = {name: ticks(m, h, name) for name in FUNCTIONS}
            # every slot of every block's table another function's (none of this file's)
            foreign = struct.pack("<II", (h["nfuncs"] + 2) * h["fine_hash"] + 1, 1)
            for b in range((len(m) - h["blocks_off"]) // h["block_stride"]):
                off = h["blocks_off"] + b * h["block_stride"] + h["off_fine"]
                m[off:off + 8 * h["fine_slots"]] = foreign * h["fine_slots"]
            m.flush()
        p.stdin.write(b"x")
        p.stdin.flush()
        assert p.stdout.readline() == b"made\n"
        p.stdin.write(b"x")
        p.stdin.close()
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        second = {name: ticks(m, h, name) - first[name] for name in FUNCTIONS}
    t = load(path)
    for name, n in FUNCTIONS.items():
        fs = t.functions[name]
        assert fs.calls == 2 * n, name
        # the first n calls' fine counts were overwritten; the last n found no slot, and
        # each is in the octave of its length: their ticks lie within the buckets' bounds
        assert sum(fs.hist) == n and not fs.fine, name
        low = sum(n << b for b, n in enumerate(fs.hist) if b)
        high = sum(n << (b + 1) for b, n in enumerate(fs.hist))
        assert low <= second[name] < high, (name, low, second[name], high, fs.hist)
