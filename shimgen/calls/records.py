"""The call records of SHIMGEN_TRACE=calls read back from trace files (docs/traceformat.md,
"Call records"): each block's ring, its records checked (a record counts only when its
`seq` says it belongs to the slot it is in and to the ring's last turn) and put in order,
each thread's dropped calls (written before the ring's last turn) counted. Raw: decoding is
decode.py's.

Read in bulk, for a million records in a second or two: every ring's slots are read into
one buffer (`data`), the records are named by their slot in it, in order (`order`), and
their words are taken as columns of the buffer (memoryview casts), never one object per
record. `record(slot)` gives one record as the tuple decode.py reads."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from .. import runenv
from ..errors import ShimgenError, left_out_why

RECORD = struct.Struct(f"{runenv.CALLS_RECORD_HEAD}{6 + runenv.CALLS_STACK_ARGS}Q"
                       f"{runenv.CALLS_RECORD_SIZE - runenv.CALLS_CAPTURE_OFF}s")
ENTERED, RETURNED = 1, 2
assert RECORD.size == runenv.CALLS_RECORD_SIZE
# The most calls a ring may say its block's threads wrote: a thread making a call every
# nanosecond would take 292 years to pass it, and every record's place fits a signed 64-bit
# integer (an SQLite INTEGER). A file that says more is damaged or crafted.
HEAD_MAX = (1 << 63) - 1

# A record as read: (seq, idx, state, tid, start, dur, result, 11 argument words, capture).
SEQ, IDX, STATE, TID, START, DUR, RESULT, ARGS, CAPTURE = 0, 1, 2, 3, 4, 5, 6, 7, 18
# The same record as (seq, idx, state, tid, start, dur, body): the body is every byte that
# its decoding reads besides idx and state (the result, the argument words, the capture),
# so that (idx, state, body) says all a decoded call's text depends on (report/calls.py).
HEAD = struct.calcsize(runenv.CALLS_RECORD_HEAD[:-1])  # the bytes before the result
ROW = struct.Struct(f"{runenv.CALLS_RECORD_HEAD[:-1]}{RECORD.size - HEAD}s")
BODY = struct.Struct(f"<{7 + runenv.CALLS_STACK_ARGS}Q"
                     f"{runenv.CALLS_RECORD_SIZE - runenv.CALLS_CAPTURE_OFF}s")
assert HEAD + BODY.size == RECORD.size
_WORDS = RECORD.size // 8
# each column: (memoryview format, its item size, the item of a record it is)
_COLUMNS = {"seq": ("Q", 8, 0), "idx": ("H", 2, 4), "state": ("H", 2, 5), "tid": ("i", 4, 3),
            "start": ("Q", 8, 2), "dur": ("Q", 8, 3), "result": ("Q", 8, 4)}
assert struct.calcsize(runenv.CALLS_RECORD_HEAD) == 40 and HEAD == 32


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
    data: bytes | bytearray = b""  # the slots of every ring read, one after another
    order: list[int] = field(default_factory=list)  # the records kept: slots, by start
    dropped: dict[int, int] = field(default_factory=dict)  # per thread: calls not kept
    ring_records: int = 0
    table_digest: int = 0  # of the capture table the shim recorded with (0: not recorded)
    kernels: dict[int, str] = field(default_factory=dict)  # handle -> name (trace/kernels.py)
    # with GPU time: the GPU track (trace/kernels.py KernelTable.gpu_track)
    gpu_track: list = field(default_factory=list)
    kernels_cut: frozenset = frozenset()  # the handles whose name the trace file cut
    real_offset_ns: int = 0  # CLOCK_REALTIME less CLOCK_MONOTONIC when the file was made

    def column(self, name: str) -> list[int]:
        """One word of every slot (seq, idx, state, tid, start, dur, result), by slot."""
        code, size, item = _COLUMNS[name]
        per = RECORD.size // size
        return memoryview(self.data).cast(code)[item::per].tolist()

    def record(self, slot: int) -> tuple:
        return RECORD.unpack_from(self.data, slot * RECORD.size)

    @property
    def calls(self) -> list[tuple]:
        """Every record kept, in order, as a tuple (one object each: for a few calls)."""
        return [self.record(s) for s in self.order]


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


def _read_into(fd: int, view: memoryview, off: int) -> None:
    """Fill `view` (zeros) from the file at `off`, as far as the file goes: a ring grows in
    the file as it fills, and its slots past the file's end were never written."""
    while len(view):
        n = os.preadv(fd, [view], off)
        if n <= 0:
            return
        view, off = view[n:], off + n


def _ring_size(word: bytes, n: int) -> int:
    """A block's ring size: its ev_mask + 1, lower than the header's `n` where the ring could
    not grow in the file (a full disk) and keeps what it had room for; else `n`."""
    mask = int.from_bytes(word, "little")
    ok = runenv.CALLS_RING_MIN <= mask + 1 < n and not (mask + 1) & mask
    return mask + 1 if ok else n


def _kept(pc: ProcessCalls, first: int, head: int, n: int, nf: int) -> tuple[bool, list[int]]:
    """(whether the ring holds records of its last turn, the slots of those of known
    functions, oldest first); the thread's dropped calls counted. `first`: the ring's first
    slot in pc.data."""
    count = min(head, n)
    lo = head - n if head > n else 0
    slots = range(first, first + count)
    if head > n:  # the oldest slot of a ring that wrapped: in order from there
        at = head & (n - 1)
        slots = [*range(first + at, first + n), *range(first, first + at)]
    words = memoryview(pc.data).cast("Q")
    seqs = words[first * _WORDS:(first + count) * _WORDS:_WORDS].tolist()
    if head > n:
        seqs = seqs[at:] + seqs[:at]
    # the record in each slot must be the one of the ring's last turn: place lo + j + 1
    if seqs == list(range(lo + 1, lo + 1 + count)):
        kept = list(slots)
    else:
        kept = [s for j, (s, q) in enumerate(zip(slots, seqs, strict=True), lo + 1) if q == j]
    # dropped: the calls of earlier turns, whose slots later calls took; a slot of the last
    # turn whose record is not whole (being written as the process died) is no earlier call
    if kept and head > n:
        tid = memoryview(pc.data).cast("i")[kept[0] * (RECORD.size // 4) + 3]
        pc.dropped[tid] = pc.dropped.get(tid, 0) + head - n
    per = RECORD.size // 2
    idx = memoryview(pc.data).cast("H")[first * per + 4:(first + count) * per:per].tolist()
    some = bool(kept)
    if kept and max(idx) >= nf:
        kept = [s for s in kept if idx[s - first] < nf]
    return some, kept


def _rings(pc: ProcessCalls, path: Path, h: dict) -> None:
    """Every block's ring read into pc.data; pc.order the records kept, by start."""
    n, size = h["calls_ring_records"], h["calls_record_size"]
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        heads, sizes = [], []
        for k in range(h["nblocks"]):
            base = h["blocks_off"] + k * h["block_stride"]
            words = os.pread(fd, 16, base + h["off_calls_head"]).ljust(16, b"\0")
            heads.append(int.from_bytes(words[:8], "little"))
            sizes.append(_ring_size(words[8:], n))  # ev_mask follows ev_head (block.h)
        if any(x > HEAD_MAX for x in heads):  # more calls than a thread can make
            raise ShimgenError(f"{path}: its call rings are not ones this shimgen reads (a "
                               f"ring says {max(heads)} calls)")
        buf = bytearray(sum(min(x, r) for x, r in zip(heads, sizes, strict=True)) * size)
        rings, at, view = [], 0, memoryview(buf)
        for k, (head, ring) in enumerate(zip(heads, sizes, strict=True)):
            count = min(head, ring)
            base = h["blocks_off"] + k * h["block_stride"]
            if count:
                _read_into(fd, view[at * size:(at + count) * size], base + h["calls_ring_off"])
                rings.append((at, head, ring))
            at += count
        view.release()
    finally:
        os.close(fd)
    pc.data = buf
    nf = len(pc.names)
    kept = [_kept(pc, first, head, ring, nf) for first, head, ring in rings]
    order = [s for _, k in kept for s in k]
    if sum(some for some, _ in kept) <= 1:  # one ring is in order already
        pc.order = order
        return
    # by (start, tid, seq) as one number: tid, an int32, made not negative
    key = [(a << 96) | ((b + (1 << 31)) << 64) | c for a, b, c in zip(
        pc.column("start"), pc.column("tid"), pc.column("seq"), strict=True)]
    pc.order = sorted(order, key=key.__getitem__)


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
    pc = ProcessCalls(str(path), h["pid"],
                      h["rank"].split(b"\0")[0].decode(errors="replace") or None,
                      h["driver_version"].split(b"\0")[0].decode(errors="replace"),
                      h["ns_per_tick"], h["calib_ticks0"], h["calib_ns0"],
                      h["state"] == runenv.TRACE_STATES["complete"],
                      names=h["names"], ring_records=h["calls_ring_records"],
                      table_digest=h.get("calls_table_digest") or 0,
                      real_offset_ns=h["start_ns"] - h["calib_ns_a"])
    from ..trace import KernelsError, read_kernels

    try:
        table = read_kernels(h)
    except KernelsError as e:
        raise ShimgenError(f"{path}: {e}") from None
    pc.kernels = {k.handle: k.name for k in table.kernels if k.name} if table else {}
    pc.gpu_track = table.gpu_track if table else []
    pc.kernels_cut = frozenset(k.handle for k in table.kernels if k.cut) if table else frozenset()
    _rings(pc, path, h)
    return pc


def load_run(path: Path, unreadable: list | None = None) -> list[ProcessCalls]:
    """The calls of every trace file of a run directory (or of the one file named). Given a
    list `unreadable`, a file of a directory that cannot be read is left out and put there as
    (path, why), as the plain report does; ShimgenError when none could be read."""
    files = trace_files(path)
    if not files:
        raise ShimgenError(f"{path}: no trace files in it")
    if unreadable is None or not path.is_dir():
        return [load(f) for f in files]
    out, bad = [], []
    for f in files:
        try:
            out.append(load(f))
        except Exception as e:  # noqa: BLE001 - one file's fault is the file's, not the run's
            bad.append((str(f), left_out_why(e, f)))
    if not out:
        f, why = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise ShimgenError(f"{path}: no trace in it could be read: {f}: {why}{more}")
    unreadable += bad
    return out
