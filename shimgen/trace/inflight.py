"""The calls a process has in progress, read from its binary trace file while it runs (or
after it died): each live thread's shadow frames (runtime/tracefile/block.h), which the header of
format version 4 locates (docs/traceformat.md, "Calls in progress").

The reader races the job. The timing entry (runtime/arch/x86_64/timing.S) takes a frame off the free
list, writes its start ticks, and writes the function's index last; the return reads the
frame and gives it back, writing a free-list link over the index. So a frame whose index
word holds a function index was in use by a call of that function when it was read, and its
start is that call's (stores are seen in the order made on x86-64). A frame is read as
index, start, index, start, and taken only when both readings agree; a block only when it
is a live thread's before and after its frames are read, under the same thread id.

`read(path)` gives `InFlight`, or None when the file cannot say (counts mode, or a version
3 file); ShimgenError (one line) when it is no trace file this shimgen reads.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
import struct

from .. import runenv
from ..errors import ShimgenError
from ..runenv import MEM_HOST_COLUMN, MEM_ROUTES
from . import binary
from .blocks import COUNT_WORD, FSTATS_SIZE, FSTATS_WORDS, TOTAL_WORD, blocks_with_data
from .kernels import KernelsError, read_kernels

_Q = struct.Struct("<Q")
# calls mode: where a call record's entry ticks are (its fifth word of runenv's head)
_REC_START = struct.calcsize(runenv.CALLS_RECORD_HEAD[:5])
CALLS_MODE = next(k for k, v in runenv.TRACE_MODES.items() if v == "calls")
_I = struct.Struct("<i")
BLOCK_LIVE = 1
MAX_FRAMES = 4096
# Why calls in progress cannot be read from a file: said instead of an empty list.
NOT_IN_COUNTS = "not known in counts mode"
NOT_IN_VERSION_3 = "not known: a trace file of format version 3"


class Call:
    """One call in progress: its thread, function and start (CLOCK_MONOTONIC and
    CLOCK_REALTIME ns of the process's host, None where the file has no times)."""

    __slots__ = ("tid", "function", "mono_ns", "real_ns")

    def __init__(self, tid: int, function: str, mono_ns: int | None,
                 real_ns: int | None) -> None:
        self.tid, self.function, self.mono_ns, self.real_ns = tid, function, mono_ns, real_ns


class Launch:
    """A stream's last launch (format version 7, runtime/kernels/): the stream, the kernel's
    name ("" unnamed, None no slot; `cut`: the trace file cut it), its ordinal on the stream,
    its start as a Call's."""

    __slots__ = ("stream", "kernel", "ordinal", "mono_ns", "real_ns", "cut")

    def __init__(self, stream: int, kernel: str | None, ordinal: int, mono_ns: int | None,
                 real_ns: int | None, cut: bool = False) -> None:
        self.stream, self.kernel, self.ordinal = stream, kernel, ordinal
        self.mono_ns, self.real_ns, self.cut = mono_ns, real_ns, cut


class InFlight:
    """What a file says of its process now: its identity, state and calls in progress."""

    __slots__ = ("path", "pid", "rank", "boot_id", "proc_start", "complete", "start_ns",
                 "calls", "counts", "why_unknown", "device_bytes", "uid", "launches",
                 "functions")

    def __init__(self, path: str, h: dict) -> None:
        self.path = path
        self.pid = h["pid"]
        self.rank = binary._text(h["rank"], "rank") or None
        self.boot_id = binary._text(h["boot_id"], "boot id")
        self.proc_start = h["proc_start"] or None
        self.complete = h["state"] == binary.COMPLETE
        self.start_ns = h["start_ns"]
        self.calls: list[Call] = []
        self.counts = 0  # calls counted so far, summed over the blocks (for a rate)
        self.why_unknown = ""  # NOT_IN_COUNTS or NOT_IN_VERSION_3: no calls can be read
        self.device_bytes = _device_bytes(h)  # device memory held now (the ledger); None: unknown
        self.uid: int | None = None  # the file's owner: the user its process ran as
        self.launches: list[Launch] = []  # each stream's last launch (version 7)
        # with counts: per function, (calls, ns in them; None without times) so far
        self.functions: dict[str, tuple[int, float | None]] = {}


def _device_bytes(h: dict) -> int | None:
    """The bytes of device memory the process holds now, summed over its devices' columns of
    the ledger in the header (kept there as they change); None for a file without one."""
    held = h.get("mem_held")
    if held is None or h.get("mem_routes") != MEM_ROUTES:
        return None
    return sum(held[:MEM_HOST_COLUMN * MEM_ROUTES]) & (2**64 - 1)


def _check_frames(h: dict) -> None:
    n, size = h["frame_slots"], h["frame_size"]
    if not 0 < n <= MAX_FRAMES or size < 24 or size % 8:
        raise binary.BadTrace(f"its {n} shadow frames of {size} bytes are not the format's")
    for name in ("frame_off_start", "frame_off_idx", "frame_off_ret"):
        if h[name] % 8 or h[name] + 8 > size:
            raise binary.BadTrace(f"its frame field {name} lies outside a {size}-byte frame")
    if h["off_frames"] % 8 or h["off_frames"] + n * size > h["block_size"]:
        raise binary.BadTrace("its shadow frames lie outside a block")


def _clock(h: dict) -> tuple[float, int, int, int] | None:
    """(ns per tick, ticks0, monotonic ns0, realtime - monotonic) or None: no times."""
    k, _ = binary._calibration(h)
    if k is None:
        return None
    return k, h["calib_ticks0"], h["calib_ns0"], h["start_ns"] - h["calib_ns_a"]


def _launches(h: dict, clock) -> list[Launch]:
    """Each stream's last launch, from the kernels' fields of the header (version 7)."""
    try:
        table = read_kernels(h)
    except KernelsError as e:
        raise binary.BadTrace(str(e)) from None
    out = []
    for s in table.streams if table else ():
        mono = real = None
        if clock is not None:
            k, t0, ns0, real_off = clock
            mono = int(ns0 + (s.start_ticks - t0) * k)
            real = mono + real_off
        out.append(Launch(s.stream, s.kernel, s.launches, mono, real, s.cut))
    return out


def _frame(m: mmap.mmap, at: int, h: dict, nf: int) -> tuple[int, int] | None:
    """(index, start ticks) of the frame at `at` when it is in use, read twice alike."""
    i_at, s_at = at + h["frame_off_idx"], at + h["frame_off_start"]
    idx = _Q.unpack_from(m, i_at)[0]
    if idx >= nf:
        return None  # a free frame's link (an address)
    start = _Q.unpack_from(m, s_at)[0]
    if _Q.unpack_from(m, i_at)[0] != idx or _Q.unpack_from(m, s_at)[0] != start:
        return None  # taken or given back meanwhile: it is read again next time
    if idx == 0 and not _Q.unpack_from(m, at + h["frame_off_ret"])[0]:
        return None  # the end of the free list (NULL) in a frame never used
    return idx, start


def _block_calls(m: mmap.mmap, base: int, h: dict, names: list[str], clock,
                 out: list[Call]) -> None:
    st_at, tid_at = base + h["off_state"], base + h["off_tid"]
    state, tid = _I.unpack_from(m, st_at)[0], _I.unpack_from(m, tid_at)[0]
    if state != BLOCK_LIVE or tid <= 0:
        return
    found = []
    for k in range(h["frame_slots"]):
        f = _frame(m, base + h["off_frames"] + k * h["frame_size"], h, len(names))
        if f is not None:
            found.append(f)
    if (_I.unpack_from(m, st_at)[0], _I.unpack_from(m, tid_at)[0]) != (state, tid):
        return  # the thread left its block meanwhile
    if h["mode"] == CALLS_MODE:  # a frame keeps its record's place: the start is there
        found = [(idx, start) for idx, place in found
                 if (start := _record_start(m, base, h, place)) is not None]
    for idx, start in found:
        mono = real = None
        if clock is not None:
            k, t0, ns0, real_off = clock
            mono = int(ns0 + (start - t0) * k)
            real = mono + real_off
        out.append(Call(tid, names[idx], mono, real))


def _record_start(m: mmap.mmap, base: int, h: dict, place: int) -> int | None:
    """Calls mode: the entry ticks in the call record at `place` of the block's ring, None
    while the record is not whole (it is read again next time) or a later turn took it."""
    n, size = h["calls_ring_records"], h["calls_record_size"]
    if not n or n & (n - 1) or size < _REC_START + 8 or \
            h["calls_ring_off"] + n * size > h["block_stride"]:
        return None
    at = base + h["calls_ring_off"] + (place & (n - 1)) * size
    if _Q.unpack_from(m, at)[0] != place + 1:  # its seq: written last
        return None
    start = _Q.unpack_from(m, at + _REC_START)[0]
    return start if _Q.unpack_from(m, at)[0] == place + 1 else None


def _counted(m: mmap.mmap, base: int, h: dict, calls: list[int], ticks: list[int]) -> None:
    """A block's calls and ticks per function, added to `calls` and `ticks` (by index)."""
    nf = h["nfuncs"]
    mv = memoryview(m)
    try:
        fn = mv[base + h["off_fn"]:base + h["off_fn"] + nf * FSTATS_SIZE].cast("Q")
        try:
            for i, (n, t) in enumerate(zip(fn[COUNT_WORD::FSTATS_WORDS],
                                           fn[TOTAL_WORD::FSTATS_WORDS], strict=True)):
                if n:
                    calls[i] += n
                    ticks[i] += t
        finally:
            fn.release()
    finally:
        mv.release()


def _count(m: mmap.mmap, h: dict, blocks: list[int], out: InFlight, names: list) -> None:
    """The calls counted so far, in all and per function (with the ns in them in the time
    modes), over the file's blocks."""
    nf = h["nfuncs"]
    calls, ticks = [0] * nf, [0] * nf
    for b in blocks:
        _counted(m, h["blocks_off"] + b * h["block_stride"], h, calls, ticks)
    out.counts = sum(calls)
    k = binary._calibration(h)[0] if h["mode"] != 1 else None
    out.functions = {names[i].decode("ascii", "replace"): (n, None if k is None else
                                                           ticks[i] * k)
                     for i, n in enumerate(calls) if n}


def _read_mapped(path: str, m: mmap.mmap, fd: int, size: int, counts: bool) -> InFlight:
    if m[:len(binary.MAGIC)] != binary.MAGIC:
        raise binary.BadTrace("no magic: the process died while it made the file, or it is no "
                          "shimgen trace file")
    h, names_raw = binary.checked_header(fd, size)  # (by pread: a header may have holes)
    out = InFlight(path, h)
    out.uid = os.fstat(fd).st_uid
    nblocks = binary.present_blocks(h, size)
    blocks = list(blocks_with_data(fd, h["blocks_off"], h["block_stride"], nblocks))
    if counts:
        _count(m, h, blocks, out, names_raw)
    out.launches = _launches(h, _clock(h))
    if h["mode"] == 1:
        out.why_unknown = NOT_IN_COUNTS
        return out
    if h["off_frames"] is None:
        out.why_unknown = NOT_IN_VERSION_3
        return out
    _check_frames(h)
    names = [n.decode("ascii", "replace") for n in names_raw]
    clock = _clock(h)
    for b in blocks:
        _block_calls(m, h["blocks_off"] + b * h["block_stride"], h, names, clock, out.calls)
    return out


def read(path: str | os.PathLike, *, counts: bool = False) -> InFlight:
    """The calls in progress in the file at `path` (never through a symbolic link; only a
    regular file, opened without blocking); with `counts`, also the calls counted so far.
    Only reads: the file is mapped read-only."""
    name = os.fspath(path)
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise binary.BadTrace("it is a symbolic link, which is not followed") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise binary.BadTrace("it is not a regular file")
            if st.st_size < min(binary.HEADER_SIZES.values()):
                raise binary.BadTrace("it is shorter than a header")
            with mmap.mmap(fd, st.st_size, prot=mmap.PROT_READ) as m:
                return _read_mapped(name, m, fd, st.st_size, counts)
        finally:
            os.close(fd)
    except binary.BadTrace as e:
        raise ShimgenError(f"{name}: {e}") from None
    except OSError as e:
        raise ShimgenError(f"{name}: cannot read the trace file: {e.strerror or e}") from None
