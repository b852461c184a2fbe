"""The reader of the binary trace file that the shim writes with SHIMGEN_TRACE_DIR
(docs/traceformat.md; the shim's side is runtime/tracefile/tracefile.c and
runtime/tracefile/header.c).

`load(path)` checks everything before it trusts it: the magic, the format version, the
byte order, every size and offset (inside the header, inside a block, inside the file),
the names table and the number of blocks. A corrupt, truncated or foreign file is refused
with a `ShimgenError` of one line that names the file and what is wrong. The blocks of a
process are summed (trace/blocks.py) into one `tracemodel.ProcessTrace`.

It must be fast (a report reads a thousand files): the file is mapped, not read, and only
what is needed is looked at (the call counts of each block, then the times, histograms and
error slots of the functions that have calls). Importing it is cheap: no pyelftools.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
import struct

from ..errors import ShimgenError
from ..runenv import (
    CALLS_RECORD_SIZE,
    CALLS_RING_MIN,
    TRACE_BYTE_ORDER,
    TRACE_FINE_STEP_FIRST,
    TRACE_MAGIC,
    TRACE_MODES,
    TRACE_STATES,
    TRACE_SUFFIX,
    TRACE_VERSION,
    TRACE_VERSIONS_READ,
    trace_header_layout,
)
from .blocks import ERRSLOT_SIZE, FSTATS_SIZE, TOTALLED, BadTrace, sum_blocks
from .clock import calibration as _calibration
from .kernels import KernelsError, read_kernels
from .memory import LedgerError, read_ledger
from .model import (
    FINE_BUCKETS,
    FINE_SUB_SHIFT,
    HIST_BUCKETS,
    NOT_FINISHED,
    FunctionStats,
    ProcessTrace,
)

MAGIC = TRACE_MAGIC
COUNTED = next(j for j, (_, fold, _, _) in enumerate(TOTALLED) if fold == "calls")
VERSION = TRACE_VERSION
BYTE_ORDER = TRACE_BYTE_ORDER
SUFFIX = TRACE_SUFFIX
MODES = TRACE_MODES
RUNNING, COMPLETE = TRACE_STATES["running"], TRACE_STATES["complete"]
PATH_MAX = 4096
MAX_NAME = 256  # an exported name's bytes, its NUL included (the driver's are under 64)

# The header (runtime/tracefile/header.h), from the one list of its fields, little-endian:
# of each version read (3 is 4 without the fields from TRACE_HEADER_V4_FIRST on), its struct
# and fields.
# (A field's values: one, or `count` for an array of numbers; text is one value.)
_HEADERS = {v: (struct.Struct("<" + "".join(code for *_, code in trace_header_layout(v))),
                [(name, 1 if ctype == "char" else count)
                 for name, ctype, count, _, _ in trace_header_layout(v)])
            for v in TRACE_VERSIONS_READ}
HEADER_SIZE = _HEADERS[VERSION][0].size
MIN_HEADER_SIZE = min(st.size for st, _ in _HEADERS.values())
HEADER_SIZES = {v: st.size for v, (st, _) in _HEADERS.items()}
_HEADER_MAX = max(HEADER_SIZES.values())
def _text(raw: bytes, what: str) -> str:
    if b"\0" not in raw:
        raise BadTrace(f"its {what} is not terminated")
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _header(m: bytes, version: int) -> dict:
    """The header's fields by name (an array field as a tuple) in `version`'s layout."""
    st, fields = _HEADERS[version]
    values, out = st.unpack_from(m, 0), {}
    at = 0
    for name, n in fields:
        out[name] = values[at] if n == 1 else values[at:at + n]
        at += n
    return out


def _check_header(h: dict, size: int) -> None:
    hsize = _HEADERS[h["version"]][0].size
    if h["byte_order"] != BYTE_ORDER:
        raise BadTrace("it was written with another byte order")
    if h["header_size"] != hsize:
        raise BadTrace(f"its header is {h['header_size']} bytes, version {h['version']} has "
                   f"{hsize}")
    nf, page, bs, stride = h["nfuncs"], h["page_size"], h["block_size"], h["block_stride"]
    if not 0 < nf < 1 << 16:
        raise BadTrace(f"it has {nf} functions")
    if page < 4096 or page & (page - 1):
        raise BadTrace(f"its page size {page} is not a power of two from 4096")
    if not 0 < bs <= stride or stride % page or stride > 1 << 32:
        raise BadTrace(f"its block size {bs} and stride {stride} do not fit its pages")
    if h["names_off"] != hsize or h["names_size"] < 2 * nf:
        raise BadTrace("its names table is not where the header ends")
    if h["names_size"] > nf * MAX_NAME:
        raise BadTrace(f"its names table is {h['names_size']} bytes, more than {nf} names of at "
                   f"most {MAX_NAME - 1} bytes")
    boff = h["blocks_off"]
    if boff % page or boff < h["names_off"] + h["names_size"]:
        raise BadTrace(f"its blocks start at {boff}, not a page after the names")
    if h["fstats_size"] != FSTATS_SIZE or h["errslot_size"] != ERRSLOT_SIZE:
        raise BadTrace("its per-function or error slot size is not the format's")
    if h["hist_buckets"] != HIST_BUCKETS or h["off_count"] != 0:
        raise BadTrace(f"it has {h['hist_buckets']} histogram buckets, not {HIST_BUCKETS}")
    for name, end in (("fn", h["off_fn"] + nf * FSTATS_SIZE), ("untimed", h["off_untimed"] + 8),
                      ("err_overflow", h["off_err_overflow"] + 8),
                      ("err", h["off_err"] + h["err_slots"] * ERRSLOT_SIZE),
                      ("hist", h["off_hist"] + nf * HIST_BUCKETS * 8),
                      ("tid", h["off_tid"] + 4), ("state", h["off_state"] + 4)):
        off = h["off_" + name]
        if off % (4 if name in ("tid", "state") else 8) or end > bs:
            raise BadTrace(f"its block field {name} at {off} lies outside a {bs}-byte block")
    fs, fb = h["fine_slots"], h["fine_bits"]
    if (not 0 < fs <= 1 << 24 or fs & (fs - 1) or h["fine_sub_shift"] != FINE_SUB_SHIFT
            or not FINE_BUCKETS <= 1 << fb <= 1 << 16 or not 0 < h["fine_probes"] <= fs
            or h["off_fine"] % 8 or h["off_fine"] + fs * 8 > bs
            or h["version"] >= TRACE_FINE_STEP_FIRST  # the keys' step: above every bucket
            and not 1 << fb <= h["fine_hash"] <= ((1 << 32) - (1 << fb)) // (nf + 1)):
        raise BadTrace("its fine histogram table is not one this shimgen reads")
    if h["mode"] not in MODES:
        raise BadTrace(f"its trace mode {h['mode']} is unknown")
    if h["state"] not in (RUNNING, COMPLETE):
        raise BadTrace(f"its state {h['state']} is unknown")
    if size < boff:
        raise BadTrace(f"it is truncated: {size} bytes, its blocks start at {boff}")
    n = (size - boff) // stride
    if _ring_grown_to(h, size - boff - n * stride):
        n += 1  # the last block's ring of calls, which grows as it fills (traceformat.md)
    elif (size - boff) % stride and not h["blocks_mapped"] <= n < h["blocks_reserved"]:
        # (a part of a block beyond the whole ones is a block the shim could not add, on a
        # full disk: it reserved it, never mapped it, and it is not read)
        raise BadTrace(f"it is truncated: {size - boff} bytes of blocks is not a whole number of "
                   f"{stride}-byte blocks")
    if not h["blocks_mapped"] <= n <= h["blocks_reserved"]:
        raise BadTrace(f"it is truncated or corrupt: it holds {n} blocks, its header says "
                   f"{h['blocks_mapped']} to {h['blocks_reserved']}")
    if h["state"] == COMPLETE and (not h["end_ns"] or h["end_ns"] < h["start_ns"]):
        raise BadTrace("it is marked complete without an end time")


def read_header(m: bytes, size: int) -> dict:
    """The header of a file that has the magic, from its first bytes (read by `pread`:
    checked_header), checked (BadTrace when it is not one this reader reads); a version 3
    file's without the frame fields (None). `size`: the file's."""
    version = struct.unpack_from("<I", m, len(MAGIC))[0]
    if version not in TRACE_VERSIONS_READ:
        raise BadTrace(f"it has format version {version}; this shimgen reads versions "
                   f"{', '.join(map(str, TRACE_VERSIONS_READ))}")
    if size < HEADER_SIZES[version]:
        raise BadTrace(f"it is truncated: {size} bytes, less than its header")
    h = _header(m, version)
    if version != VERSION:  # the fields it lacks
        h.update(dict.fromkeys(name for name, _ in _HEADERS[VERSION][1] if name not in h))
    _check_header(h, size)
    return h


def _names(m: mmap.mmap, h: dict) -> list[bytes]:
    raw = m[h["names_off"]:h["names_off"] + h["names_size"]]
    names = raw.split(b"\0")
    if names[-1] != b"" or len(names) != h["nfuncs"] + 1 or not all(names[:-1]):
        raise BadTrace(f"its names table does not hold {h['nfuncs']} names")
    return names[:-1]


def load(path: str | os.PathLike, *, follow: bool = True) -> ProcessTrace:
    """The trace of one process from its binary trace file; ShimgenError (one line) when the
    file cannot be read or is not a complete, consistent trace file. Only a regular file is
    read, opened without blocking (a FIFO never stalls the reader); with follow=False (a
    file found in a run directory) not through a symbolic link either."""
    name = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        try:
            fd = os.open(name, flags)
        except OSError as e:
            if e.errno == errno.ELOOP and not follow:
                raise BadTrace("it is a symbolic link, which is not followed in a run") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise BadTrace("it is a directory, not a trace file" if stat.S_ISDIR(st.st_mode)
                       else "it is not a regular file")
        with open(fd, "rb") as f:
            size = st.st_size
            _whole_header(f, size)
            with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                return _parse(name, m, f.fileno(), size)
    except BadTrace as e:
        raise ShimgenError(f"{name}: {e}") from None
    except OSError as e:
        raise ShimgenError(f"{name}: cannot read the trace file: {e.strerror or e}") from None


def _ring_grown_to(h: dict, rest: int) -> bool:
    """Whether a last block of `rest` bytes (less than a stride) is one whose ring of calls
    has not grown to its size: it ends where the ring's disk space does, after its first
    runenv.CALLS_RING_MIN records or a doubling of them (docs/traceformat.md)."""
    n, off = h.get("calls_ring_records") or 0, h.get("calls_ring_off") or 0
    q, r = divmod(rest - off, CALLS_RECORD_SIZE) if rest > off else (0, 1)
    return bool(n) and not r and min(CALLS_RING_MIN, n) <= q < n and not q & (q - 1)


def present_blocks(h: dict, size: int) -> int:
    """The blocks a file of `size` bytes holds: whole strides, and in calls mode a last block
    whose ring of calls has not grown to its stride yet."""
    boff, stride = h["blocks_off"], h["block_stride"]
    n = max(size - boff, 0) // stride
    if _ring_grown_to(h, size - boff - n * stride):
        n += 1
    return min(n, h["blocks_reserved"])


def _parse(name: str, m: mmap.mmap, fd: int, size: int) -> ProcessTrace:
    if m[:len(MAGIC)] == bytes(len(MAGIC)):
        raise BadTrace("no magic: the process died while it made the file")
    if m[:len(MAGIC)] != MAGIC:
        raise BadTrace("it is not a shimgen trace file (wrong magic)")
    h, names = checked_header(fd, size)
    nblocks = present_blocks(h, size)
    functions, untimed, overflow = sum_blocks(m, fd, h, nblocks)
    complete = h["state"] == COMPLETE
    notes = []
    k = None
    if h["mode"] != 1:
        k, why = _calibration(h)
        if why:
            notes.append(why)
    if h["calls_missing"]:
        notes.append(missing_note(h["calls_missing"], complete))
    if not complete:
        notes.append(NOT_FINISHED)
    _check_possible(functions, names, 0 if complete else nblocks)
    stats = {}
    for i, (words, hist, errs, fine, inj) in functions.items():
        fs = FunctionStats(hist=hist, errors=errs, fine=fine, injected=inj)
        for (_, _, unit, field), v in zip(TOTALLED, words, strict=True):
            if unit != "ticks":
                setattr(fs, field, v)
            elif k is not None:  # a time, in ns
                setattr(fs, field, v * k)
        stats[names[i].decode("ascii", "replace")] = fs
    rank = _text(h["rank"], "rank")
    trace = ProcessTrace(
        path=name, source="shimtrace", pid=h["pid"], rank=rank or None,
        mode=MODES[h["mode"]], complete=complete,
        shimgen_version=_text(h["shimgen_version"], "shimgen version"),
        driver_path=_text(h["driver_path"], "driver path"),
        driver_version=_text(h["driver_version"], "driver version"),
        driver_build_id=_text(h["driver_build_id"], "driver build-id"),
        ns_per_tick=k, untimed_calls=untimed,
        unmapped_proc_addresses=h["unmapped_proc_addresses"],
        start_ns=h["start_ns"] or None, end_ns=h["end_ns"] if complete else None,
        functions=stats, ppid=h["ppid"], errors_overflow=overflow, notes=notes,
        boot_id=_text(h["boot_id"], "boot id"), proc_start=h["proc_start"] or None,
        calls_missing=h["calls_missing"],
    )
    try:
        trace.memory = read_ledger(h, names)
        trace.kernels = read_kernels(h)
    except (LedgerError, KernelsError) as e:
        raise BadTrace(str(e)) from None
    return trace


def checked_header(fd: int, size: int) -> tuple[dict, list[bytes]]:
    """The header of a file that has the magic, checked (read_header), and its names: read
    by pread, not through a mapping, since a header may have holes (a feature's fields
    that were never written) and a read fault on a hole of a full tmpfs is a SIGBUS."""
    buf = os.pread(fd, min(size, _HEADER_MAX), 0)
    h = read_header(buf, size)
    end = h["names_off"] + h["names_size"]
    if len(buf) < end:
        buf += os.pread(fd, end - len(buf), len(buf))
    return h, _names(buf, h)


def _whole_header(f, size: int) -> None:
    """BadTrace unless the file (`f` at its start, `size` bytes) can hold a header."""
    if size == 0:
        raise BadTrace("empty: the process died as it started")
    if size < MIN_HEADER_SIZE:
        if size < len(MAGIC) or f.read(len(MAGIC)) != MAGIC:
            raise BadTrace("it is not a shimgen trace file (no magic)")
        raise BadTrace(f"it is truncated: {size} bytes, less than its header")


def header(path: str | os.PathLike) -> dict:
    """The checked header of a trace file, with `names` (str, slot order), `ns_per_tick`
    (None when unknown) and `nblocks` (the whole blocks it holds) added; ShimgenError as
    load() gives. For readers of the blocks' other contents (shimgen/calls/records.py)."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            _whole_header(f, size)
            with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                if m[:len(MAGIC)] == bytes(len(MAGIC)):  # as load() says it
                    raise BadTrace("no magic: the process died while it made the file")
                if m[:len(MAGIC)] != MAGIC:
                    raise BadTrace("it is not a shimgen trace file (no magic)")
                h, names = checked_header(f.fileno(), size)
    except BadTrace as e:
        raise ShimgenError(f"{name}: {e}") from None
    except OSError as e:
        raise ShimgenError(f"{name}: cannot read the trace file: {e.strerror or e}") from None
    h["names"] = [n.decode("ascii", "replace") for n in names]
    h["ns_per_tick"] = _calibration(h)[0] if h["mode"] != 1 else None
    h["nblocks"] = present_blocks(h, size)
    return h


def missing_note(n: int, complete: bool) -> str:
    """The note of a file that lacks n calls its process counted in memory (the disk had no
    room for a block): said as they were counted, so also of a process that died."""
    return (f"{n} calls are not in the file (no room on the disk for its blocks: counted in "
            "memory, with their errors and injected failures"
            + ("; its table at exit on stderr has them)" if complete else
               ", lost: the process did not reach its exit)"))


def _check_possible(functions: dict, names: list[bytes], in_progress: int) -> None:
    """No function has more failures (its driver's errors and the injected ones) than calls,
    and none lists CUDA_SUCCESS (0) as a failure. A file whose process did not finish it may
    have counted a failure of a call in progress, not yet counted itself: one per block (a
    thread's) at most."""
    for i, (words, _, errs, _, inj) in functions.items():
        calls = words[COUNTED]
        name = names[i].decode("ascii", "replace")
        for what, per in (("error", errs), ("injected failure", inj)):
            if per.get(0):
                raise BadTrace(f"it lists CUDA_SUCCESS (0) as an {what} of {name}")
        failed = sum(errs.values()) + sum(inj.values())
        if failed > calls + in_progress:
            raise BadTrace(f"it counts {failed} failures of {name}, which has {calls} calls")
