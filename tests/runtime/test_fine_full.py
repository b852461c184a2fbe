"""A thread whose fine table has no free slot: its timed calls are counted in their log2
buckets (the time path's out-of-line path, runtime/arch/x86_64/timing.S), which the binary
reader adds to the fine counts' octaves, so that every call is in the log2 histogram once."""

from __future__ import annotations

import mmap
import struct
import subprocess

from shimgen.runenv import TRACE_FSTATS, TRACE_FSTATS_SIZE
from shimgen.trace.binary import HEADER_SIZE, load
from tests.report.test_tracefile_reader import header

# the probe's two functions and their calls per phase: calls of a few ticks, and longer ones
# (fine buckets from 64 on; a driver without a device takes milliseconds for each)
FUNCTIONS = {"cuDriverGetVersion": 300, "cuInit": 5}


def ticks(m, h: dict, name: str) -> int:
    """The total ticks of a function's timed calls, summed over the file's blocks."""
    names = bytes(m[h["names_off"]:h["names_off"] + h["names_size"]]).split(b"\0")
    at = h["off_fn"] + names.index(name.encode()) * TRACE_FSTATS_SIZE + TRACE_FSTATS["total"]
    return sum(struct.unpack_from("<Q", m, h["blocks_off"] + b * h["block_stride"] + at)[0]
               for b in range((len(m) - h["blocks_off"]) // h["block_stride"]))


def run_with_full_fine_tables(argv: list, env: dict, d, timeout: float):
    """tracekill's "twice" run of FUNCTIONS (argv, env: the probe under a shim tracing time
    into `d`), every slot of every block's fine table overwritten with another function's
    key between its two phases: the trace as read, and each function's ticks of the second
    phase."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
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
        assert p.wait(timeout=timeout) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        second = {name: ticks(m, h, name) - first[name] for name in FUNCTIONS}
    return load(path), second


def check_in_their_log2_buckets(t, second: dict) -> None:
    """Each function's second-phase calls, which found no fine slot, counted in the log2
    histogram alone, each in the octave of its length."""
    for name, n in FUNCTIONS.items():
        fs = t.functions[name]
        assert fs.calls == 2 * n, name
        # the first n calls' fine counts were overwritten; the last n found no slot, and
        # each is in the octave of its length: their ticks lie within the buckets' bounds
        assert sum(fs.hist) == n and not fs.fine, name
        low = sum(n << b for b, n in enumerate(fs.hist) if b)
        high = sum(n << (b + 1) for b, n in enumerate(fs.hist))
        assert low <= second[name] < high, (name, low, second[name], high, fs.hist)


def test_calls_the_fine_table_cannot_hold_are_in_the_log2_histogram(shims, probes, tmp_path):
    d = tmp_path / "traces"
    argv = [str(probes / "tracekill"), "libcuda.so.1", "twice", *map(str, FUNCTIONS.values())]
    t, second = run_with_full_fine_tables(
        argv, shims[0].env(SHIMGEN_TRACE="time", SHIMGEN_TRACE_DIR=str(d)), d, 30)
    check_in_their_log2_buckets(t, second)
    assert max(b for b, n in enumerate(t.functions["cuInit"].hist) if n) >= 6
