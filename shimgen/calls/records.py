"""The call records of SHIMGEN_TRACE=calls read back from trace files (docs/traceformat.md,
"Call records"): each block's ring, its records checked (a record counts only when its
`seq` says it belongs to the slot it is in and to the ring's last turn) and put in order,
each thread's dropped calls (written before the ring's last turn) counted. Raw: decoding is
decode.py's."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from .. import runenv
from ..errors import ShimgenError

RECORD = struct.Struct(f"{runenv.CALLS_RECORD_HEAD}{6 + runenv.CALLS_STACK_ARGS}Q"
                       f"{runenv.CALLS_RECORD_SIZE - runenv.CALLS_CAPTURE_OFF}s")
ENTERED, RETURNED = 1, 2
assert RECORD.size == runenv.CALLS_RECORD_SIZE


# A record as read: (seq, idx, state, tid, start, dur, result, 11 argument words, capture).
SEQ, IDX, STATE, TID, START, DUR, RESULT, ARGS, CAPTURE = 0, 1, 2, 3, 4, 5, 6, 7, 18


@dataclass
class ProcessCalls:
    path: str
    pid: int
    rank: str | None
    driver_version: str
    ns_per_tick: float | None
    calib_ticks0: int
    calib_ns0: int
    complete: bool
    names: list[str] = field(default_factory=list)
    calls: list[tuple] = field(default_factory=list)  # records in order of their start
    dropped: dict[int, int] = field(default_factory=dict)  # per thread: calls not kept
    ring_records: int = 0


def trace_files(path: Path) -> list[Path]:
    """The binary trace files of a run directory (or of its traces/), or the file named."""
    if not path.is_dir():
        return [path]
    out = []
    for d in (path, path / runenv.TRACES):
        if d.is_dir():
            out += sorted(p for p in d.iterdir() if p.name.endswith(runenv.TRACE_SUFFIX)
                          and p.is_file() and not p.is_symlink())
    return out


def _ring(fd: int, base: int, h: dict) -> tuple[int, list[tuple]]:
    n, size = h["calls_ring_records"], h["calls_record_size"]
    head = int.from_bytes(os.pread(fd, 8, base + h["off_calls_head"]), "little")
    want = min(head, n) * size  # a ring that has not wrapped: its first `head` records
    data = os.pread(fd, want, base + h["calls_ring_off"])
    if len(data) < want:
        return head, []
    lo = head - n if head > n else 0
    recs = list(RECORD.iter_unpack(data))
    if head > n:
        at = head & (n - 1)  # the oldest slot of a ring that wrapped: in order from there
        recs = recs[at:] + recs[:at]
    # the record in each slot must be the one of the ring's last turn: place lo + j + 1
    return head, [r for j, r in enumerate(recs, lo + 1) if r[0] == j]


def load(path: Path) -> ProcessCalls:
    """One process's calls; ShimgenError when the file is no trace or has no calls."""
    from ..trace import binary

    h = binary.header(path)
    if not h.get("calls_ring_records"):
        raise ShimgenError(f"{path}: it holds no call records (it was traced in "
                           f"{runenv.TRACE_MODES.get(h['mode'], '?')} mode, not calls)")
    if h["calls_record_size"] != RECORD.size or h["calls_ring_records"] & (
            h["calls_ring_records"] - 1) or h["calls_ring_off"] + RECORD.size * h[
            "calls_ring_records"] > h["block_stride"]:
        raise ShimgenError(f"{path}: its call rings are not ones this shimgen reads")
    names = h["names"]
    pc = ProcessCalls(str(path), h["pid"], h["rank"].split(b"\0")[0].decode() or None,
                      h["driver_version"].split(b"\0")[0].decode(errors="replace"),
                      h["ns_per_tick"], h["calib_ticks0"], h["calib_ns0"],
                      h["state"] == runenv.TRACE_STATES["complete"],
                      ring_records=h["calls_ring_records"])
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    rings = 0
    try:
        for k in range(h["nblocks"]):
            base = h["blocks_off"] + k * h["block_stride"]
            head, kept = _ring(fd, base, h)
            if kept and head > len(kept):
                pc.dropped[kept[0][3]] = pc.dropped.get(kept[0][3], 0) + head - len(kept)
            nf = len(names)
            rings += bool(kept)
            pc.calls.extend(r for r in kept if r[IDX] < nf)
    finally:
        os.close(fd)
    pc.names = names
    if rings > 1:  # one ring is in order already
        pc.calls.sort(key=lambda r: (r[START], r[TID], r[SEQ]))
    return pc


def load_run(path: Path) -> list[ProcessCalls]:
    files = trace_files(path)
    if not files:
        raise ShimgenError(f"{path}: no trace files in it")
    out = []
    for f in files:
        out.append(load(f))
    return out
