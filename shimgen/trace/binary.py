"""The reader of the binary trace file that the shim writes with SHIMGEN_TRACE_DIR
(docs/traceformat.md; the shim's side is runtime/tracefile.c and runtime/tracefile_header.c).

`load(path)` checks everything before it trusts it: the magic, the format version, the
byte order, every size and offset (inside the header, inside a block, inside the file),
the names table and the number of blocks. A corrupt, truncated or foreign file is refused
with a `ShimgenError` of one line that names the file and what is wrong. The blocks of a
process are summed into one `tracemodel.ProcessTrace`.

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
    TRACE_BYTE_ORDER,
    TRACE_ERR_INJECTED,
    TRACE_MAGIC,
    TRACE_MODES,
    TRACE_STATES,
    TRACE_SUFFIX,
    TRACE_VERSION,
    TRACE_VERSIONS_READ,
    trace_header_layout,
)
from .clock import calibration as _calibration
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
VERSION = TRACE_VERSION
ERR_INJECTED = TRACE_ERR_INJECTED
BYTE_ORDER = TRACE_BYTE_ORDER
SUFFIX = TRACE_SUFFIX
MODES = TRACE_MODES
RUNNING, COMPLETE = TRACE_STATES["running"], TRACE_STATES["complete"]
PATH_MAX = 4096
MAX_NAME = 256  # an exported name's bytes, its NUL included (the driver's are under 64)

# The header (runtime/tracefile_header.h), from the one list of its fields, little-endian:
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
FSTATS_SIZE = 32  # count, total, max, unused (uint64 each)
ERRSLOT_SIZE = 16  # key, count


class _Bad(Exception):
    """What is wrong with the file, said by load() with its name."""


def _text(raw: bytes, what: str) -> str:
    if b"\0" not in raw:
        raise _Bad(f"its {what} is not terminated")
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _header(m: mmap.mmap, version: int) -> dict:
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
        raise _Bad("it was written with another byte order")
    if h["header_size"] != hsize:
        raise _Bad(f"its header is {h['header_size']} bytes, version {h['version']} has "
                   f"{hsize}")
    nf, page, bs, stride = h["nfuncs"], h["page_size"], h["block_size"], h["block_stride"]
    if not 0 < nf < 1 << 16:
        raise _Bad(f"it has {nf} functions")
    if page < 4096 or page & (page - 1):
        raise _Bad(f"its page size {page} is not a power of two from 4096")
    if not 0 < bs <= stride or stride % page or stride > 1 << 32:
        raise _Bad(f"its block size {bs} and stride {stride} do not fit its pages")
    if h["names_off"] != hsize or h["names_size"] < 2 * nf:
        raise _Bad("its names table is not where the header ends")
    if h["names_size"] > nf * MAX_NAME:
        raise _Bad(f"its names table is {h['names_size']} bytes, more than {nf} names of at "
                   f"most {MAX_NAME - 1} bytes")
    boff = h["blocks_off"]
    if boff % page or boff < h["names_off"] + h["names_size"]:
        raise _Bad(f"its blocks start at {boff}, not a page after the names")
    if h["fstats_size"] != FSTATS_SIZE or h["errslot_size"] != ERRSLOT_SIZE:
        raise _Bad("its per-function or error slot size is not the format's")
    if h["hist_buckets"] != HIST_BUCKETS or h["off_count"] != 0:
        raise _Bad(f"it has {h['hist_buckets']} histogram buckets, not {HIST_BUCKETS}")
    for name, end in (("fn", h["off_fn"] + nf * FSTATS_SIZE), ("untimed", h["off_untimed"] + 8),
                      ("err_overflow", h["off_err_overflow"] + 8),
                      ("err", h["off_err"] + h["err_slots"] * ERRSLOT_SIZE),
                      ("hist", h["off_hist"] + nf * HIST_BUCKETS * 8),
                      ("tid", h["off_tid"] + 4), ("state", h["off_state"] + 4)):
        off = h["off_" + name]
        if off % (4 if name in ("tid", "state") else 8) or end > bs:
            raise _Bad(f"its block field {name} at {off} lies outside a {bs}-byte block")
    fs, fb = h["fine_slots"], h["fine_bits"]
    if (not 0 < fs <= 1 << 24 or fs & (fs - 1) or h["fine_sub_shift"] != FINE_SUB_SHIFT
            or not FINE_BUCKETS <= 1 << fb <= 1 << 16 or not 0 < h["fine_probes"] <= fs
            or h["off_fine"] % 8 or h["off_fine"] + fs * 8 > bs):
        raise _Bad("its fine histogram table is not one this shimgen reads")
    if h["mode"] not in MODES:
        raise _Bad(f"its trace mode {h['mode']} is unknown")
    if h["state"] not in (RUNNING, COMPLETE):
        raise _Bad(f"its state {h['state']} is unknown")
    if size < boff:
        raise _Bad(f"it is truncated: {size} bytes, its blocks start at {boff}")
    n = (size - boff) // stride
    if (size - boff) % stride and not h["blocks_mapped"] <= n < h["blocks_reserved"]:
        # (a part of a block beyond the whole ones is a block the shim could not add, on a
        # full disk: it reserved it, never mapped it, and it is not read)
        raise _Bad(f"it is truncated: {size - boff} bytes of blocks is not a whole number of "
                   f"{stride}-byte blocks")
    if not h["blocks_mapped"] <= n <= h["blocks_reserved"]:
        raise _Bad(f"it is truncated or corrupt: it holds {n} blocks, its header says "
                   f"{h['blocks_mapped']} to {h['blocks_reserved']}")
    if h["state"] == COMPLETE and (not h["end_ns"] or h["end_ns"] < h["start_ns"]):
        raise _Bad("it is marked complete without an end time")


def read_header(m: mmap.mmap, size: int) -> dict:
    """The header of a file that has the magic, checked (_Bad when it is not one this
    reader reads); a version 3 file's without the frame fields (None)."""
    version = struct.unpack_from("<I", m, len(MAGIC))[0]
    if version not in TRACE_VERSIONS_READ:
        raise _Bad(f"it has format version {version}; this shimgen reads versions "
                   f"{', '.join(map(str, TRACE_VERSIONS_READ))}")
    if size < HEADER_SIZES[version]:
        raise _Bad(f"it is truncated: {size} bytes, less than its header")
    h = _header(m, version)
    if version != VERSION:  # the fields it lacks
        h.update(dict.fromkeys(name for name, _ in _HEADERS[VERSION][1] if name not in h))
    _check_header(h, size)
    return h


def _names(m: mmap.mmap, h: dict) -> list[bytes]:
    raw = m[h["names_off"]:h["names_off"] + h["names_size"]]
    names = raw.split(b"\0")
    if names[-1] != b"" or len(names) != h["nfuncs"] + 1 or not all(names[:-1]):
        raise _Bad(f"its names table does not hold {h['nfuncs']} names")
    return names[:-1]


def _blocks_with_data(fd: int, boff: int, stride: int, nblocks: int):
    """The blocks that hold any data: a block that is a hole of a sparse file is zeros and
    adds nothing, so the work is the data's, not the file's apparent size (SEEK_DATA; where
    the file system cannot tell, every block)."""
    b = 0
    while b < nblocks:
        try:
            data = os.lseek(fd, boff + b * stride, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:
                return  # nothing but a hole from here on
            data = boff + b * stride  # (no SEEK_DATA here)
        first = (data - boff) // stride
        if first > b:
            b = first
            continue
        yield b
        b += 1


def _sum_blocks(m: mmap.mmap, fd: int, h: dict, nblocks: int) -> tuple[dict, int, int]:
    nf, boff, stride = h["nfuncs"], h["blocks_off"], h["block_stride"]
    timed = h["mode"] != 1
    counts, totals, maxes = [0] * nf, [0] * nf, [0] * nf
    hists: dict[int, list[int]] = {}
    fines: dict[int, dict[int, int]] = {}
    fslots, fmask, fprobes = h["fine_slots"], h["fine_slots"] - 1, h["fine_probes"]
    fshift, fbits, fhash = fslots.bit_length() - 1, h["fine_bits"], h["fine_hash"]
    fmaskb = (1 << fbits) - 1
    errors: dict[int, dict[int, int]] = {}
    injected: dict[int, dict[int, int]] = {}
    untimed = overflow = 0
    mv = memoryview(m)
    try:
        for b in _blocks_with_data(fd, boff, stride, nblocks):
            base = boff + b * stride
            fn = mv[base + h["off_fn"]:base + h["off_fn"] + nf * FSTATS_SIZE].cast("Q")
            called = [i for i, c in enumerate(fn[0::4]) if c]
            for i in called:
                counts[i] += fn[4 * i]
                if timed:
                    totals[i] += fn[4 * i + 1]
                    maxes[i] = max(maxes[i], fn[4 * i + 2])
                    ho = base + h["off_hist"] + i * HIST_BUCKETS * 8
                    row = mv[ho:ho + HIST_BUCKETS * 8].cast("Q")
                    if any(row):
                        acc = hists.setdefault(i, [0] * HIST_BUCKETS)
                        for j, v in enumerate(row):
                            acc[j] += v
                        _read_fine(mv, base + h["off_fine"], i, row,
                                   fines.setdefault(i, {}), fshift, fmask, fprobes, fbits,
                                   fmaskb, fhash)
                    row.release()
            fn.release()
            untimed += struct.unpack_from("<Q", m, base + h["off_untimed"])[0]
            overflow += struct.unpack_from("<Q", m, base + h["off_err_overflow"])[0]
            eo = base + h["off_err"]
            slots = mv[eo:eo + h["err_slots"] * ERRSLOT_SIZE].cast("Q")
            try:
                _read_errors(slots, b, nf, errors, injected)
            finally:
                slots.release()
    finally:
        mv.release()
    if timed:  # the time path counted the injected failures among the returns too
        _less_injected(errors, injected)
    functions: dict = {}
    for i in sorted(set(i for i in range(nf) if counts[i]) | set(errors) | set(injected)):
        functions[i] = (counts[i], totals[i], maxes[i], hists.get(i), errors.get(i, {}),
                        fines.get(i), injected.get(i, {}))
    return functions, untimed, overflow


def _read_errors(slots, b: int, nf: int, errors: dict, injected: dict) -> None:
    """One block's error slots added to `errors` (the returns the time path counted) and
    `injected` (the failures SHIMGEN_INJECT returned: keys with ERR_INJECTED)."""
    for s in range(0, len(slots), 2):
        key, cnt = slots[s], slots[s + 1]
        if not key:
            continue
        into = injected if key & ERR_INJECTED else errors
        key &= ~ERR_INJECTED
        idx = (key >> 32) - 1
        if not 0 <= idx < nf:
            raise _Bad(f"block {b} has an error slot for function {idx}, of {nf}")
        code = key & 0xFFFFFFFF
        per = into.setdefault(idx, {})
        per[code] = per.get(code, 0) + cnt


def _less_injected(errors: dict, injected: dict) -> None:
    """The driver's own errors: the returns counted less the injected failures among them
    (never below 0: a call counted but not timed has no return counted)."""
    for idx, per in injected.items():
        own = errors.get(idx, {})
        for code, n in per.items():
            left = own.get(code, 0) - n
            if left > 0:
                own[code] = left
            else:
                own.pop(code, None)
        if idx in errors and not own:
            del errors[idx]


def _read_fine(mv: memoryview, off: int, i: int, row, acc: dict[int, int], shift: int,
               mask: int, probes: int, bits: int, maskb: int, mult: int) -> None:
    """Adds to `acc` the fine buckets of function i in one block's fine table at `off`: for
    each non-empty log2 bucket, only the slots its keys can be in (runtime/totals.c), each
    key taken once, by the bucket it belongs to."""
    table = mv[off:off + (mask + 1) * 8].cast("I")
    try:
        home = (((i + 1) * mult) & 0xFFFFFFFF) >> (32 - shift)
        want = (i + 1) << bits
        for b, n in enumerate(row):
            if not n:
                continue
            first = 0 if b == 0 else fine_first(b)
            end = fine_first(b + 1)
            for k in range(home + first, home + end + probes - 1):
                slot = 2 * (k & mask)
                key = table[slot]
                if key & ~maskb == want:
                    f = key & maskb
                    if first <= f < end:
                        acc[f] = acc.get(f, 0) + table[slot + 1]
    finally:
        table.release()


def fine_first(b: int) -> int:
    """The first fine bucket of log2 bucket b (b >= 1)."""
    return 1 << b if b < FINE_SUB_SHIFT else (b - FINE_SUB_SHIFT + 1) << FINE_SUB_SHIFT


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
                raise _Bad("it is a symbolic link, which is not followed in a run") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise _Bad("it is a directory, not a trace file" if stat.S_ISDIR(st.st_mode)
                       else "it is not a regular file")
        with open(fd, "rb") as f:
            size = st.st_size
            _whole_header(f, size)
            with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                return _parse(name, m, f.fileno(), size)
    except _Bad as e:
        raise ShimgenError(f"{name}: {e}") from None
    except OSError as e:
        raise ShimgenError(f"{name}: cannot read the trace file: {e.strerror or e}") from None


def _parse(name: str, m: mmap.mmap, fd: int, size: int) -> ProcessTrace:
    if m[:len(MAGIC)] == bytes(len(MAGIC)):
        raise _Bad("no magic: the process died while it made the file")
    if m[:len(MAGIC)] != MAGIC:
        raise _Bad("it is not a shimgen trace file (wrong magic)")
    h, names = _checked_header(m, size)
    nblocks = min((size - h["blocks_off"]) // h["block_stride"], h["blocks_reserved"])
    functions, untimed, overflow = _sum_blocks(m, fd, h, nblocks)
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
    for i, (calls, total, mx, hist, errs, fine, inj) in functions.items():
        fs = FunctionStats(calls=calls, hist=hist, errors=errs, fine=fine, injected=inj)
        if k is not None:
            fs.total_ns, fs.max_ns = total * k, mx * k
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
    except LedgerError as e:
        raise _Bad(str(e)) from None
    return trace


def _checked_header(m: mmap.mmap, size: int) -> tuple[dict, list[bytes]]:
    """The header of a file that has the magic, checked (read_header), and its names."""
    h = read_header(m, size)
    return h, _names(m, h)


def _whole_header(f, size: int) -> None:
    """_Bad unless the file (`f` at its start, `size` bytes) can hold a header."""
    if size == 0:
        raise _Bad("empty: the process died as it started")
    if size < MIN_HEADER_SIZE:
        if size < len(MAGIC) or f.read(len(MAGIC)) != MAGIC:
            raise _Bad("it is not a shimgen trace file (no magic)")
        raise _Bad(f"it is truncated: {size} bytes, less than its header")


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
                    raise _Bad("no magic: the process died while it made the file")
                if m[:len(MAGIC)] != MAGIC:
                    raise _Bad("it is not a shimgen trace file (no magic)")
                h, names = _checked_header(m, size)
    except _Bad as e:
        raise ShimgenError(f"{name}: {e}") from None
    except OSError as e:
        raise ShimgenError(f"{name}: cannot read the trace file: {e.strerror or e}") from None
    h["names"] = [n.decode("ascii", "replace") for n in names]
    h["ns_per_tick"] = _calibration(h)[0] if h["mode"] != 1 else None
    h["nblocks"] = min((size - h["blocks_off"]) // h["block_stride"], h["blocks_reserved"])
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
    for i, (calls, _, _, _, errs, _, inj) in functions.items():
        name = names[i].decode("ascii", "replace")
        for what, per in (("error", errs), ("injected failure", inj)):
            if per.get(0):
                raise _Bad(f"it lists CUDA_SUCCESS (0) as an {what} of {name}")
        failed = sum(errs.values()) + sum(inj.values())
        if failed > calls + in_progress:
            raise _Bad(f"it counts {failed} failures of {name}, which has {calls} calls")
