"""The blocks of a binary trace file summed (binary.py checks the header and the names
first, and says a fault with the file's name): each block's per-function counts, times,
histograms and fine buckets, its error slots, and the injected failures told apart from the
driver's own errors. Only blocks with data are read, and of them only the functions with
calls."""

from __future__ import annotations

import errno
import mmap
import os
import struct

from ..runenv import TRACE_ERR_INJECTED as ERR_INJECTED
from ..runenv import (
    TRACE_FINE_STEP_FIRST,
    TRACE_FSTATS,
    TRACE_FSTATS_SIZE,
    TRACE_FSTATS_WORDS,
    TRACE_FUNCTION_FIELDS,
)
from .model import FINE_BUCKETS, FINE_SUB_SHIFT, HIST_BUCKETS, fine_octave

FSTATS_SIZE = TRACE_FSTATS_SIZE
# struct fstats' words (runenv.TRACE_FSTATS_WORDS), as indexes of 64-bit words
FSTATS_WORDS = FSTATS_SIZE // 8
# The words the blocks are totalled by, each (its index, its fold, its unit, its name in
# FunctionStats), in the list's order; the count's word tells a function with calls.
TOTALLED = tuple((TRACE_FSTATS[word] // 8, fold, unit, name)
                 for word, fold, unit in TRACE_FSTATS_WORDS if fold
                 for name, _, of in TRACE_FUNCTION_FIELDS if of == word)
(COUNT_WORD,) = (w for w, fold, _, _ in TOTALLED if fold == "calls")
TOTAL_WORD = TRACE_FSTATS["total"] // 8  # a function's ticks in its calls (top --functions)
_MAXED = tuple(fold == "max" for _, fold, _, _ in TOTALLED)
ERRSLOT_SIZE = 16  # key, count


class BadTrace(Exception):
    """What is wrong with the file, said by load() with its name."""


def blocks_with_data(fd: int, boff: int, stride: int, nblocks: int):
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


def sum_blocks(m: mmap.mmap, fd: int, h: dict, nblocks: int) -> tuple[dict, int, int]:
    nf, boff, stride = h["nfuncs"], h["blocks_off"], h["block_stride"]
    timed = h["mode"] != 1
    words: dict[int, list[int]] = {}  # function -> its TOTALLED words' totals
    hists: dict[int, list[int]] = {}
    fines: dict[int, dict[int, int]] = {}
    fslots, fmask, fprobes = h["fine_slots"], h["fine_slots"] - 1, h["fine_probes"]
    fshift, fbits, fhash = fslots.bit_length() - 1, h["fine_bits"], h["fine_hash"]
    fmaskb, fstep = (1 << fbits) - 1, fhash if h["version"] >= TRACE_FINE_STEP_FIRST else 0
    errors: dict[int, dict[int, int]] = {}
    injected: dict[int, dict[int, int]] = {}
    untimed = overflow = 0
    mv = memoryview(m)
    try:
        for b in blocks_with_data(fd, boff, stride, nblocks):
            base = boff + b * stride
            fn = mv[base + h["off_fn"]:base + h["off_fn"] + nf * FSTATS_SIZE].cast("Q")
            called = [i for i, c in enumerate(fn[COUNT_WORD::FSTATS_WORDS]) if c]
            for i in called:
                acc = words.setdefault(i, [0] * len(TOTALLED))
                for j, (w, _, _, _) in enumerate(TOTALLED):
                    v = fn[FSTATS_WORDS * i + w]
                    acc[j] = max(acc[j], v) if _MAXED[j] else acc[j] + v
                if timed:
                    ho = base + h["off_hist"] + i * HIST_BUCKETS * 8
                    row = mv[ho:ho + HIST_BUCKETS * 8].cast("Q")
                    if any(row):
                        acc = hists.setdefault(i, [0] * HIST_BUCKETS)
                        for j, v in enumerate(row):
                            acc[j] += v
                        if not fstep:
                            _read_fine(mv, base + h["off_fine"], i, row,
                                       fines.setdefault(i, {}), fshift, fmask, fprobes, fbits,
                                       fmaskb, fhash)
                    row.release()
            fn.release()
            if timed and fstep and called:
                _read_fine_steps(mv[base + h["off_fine"]:base + h["off_fine"] + fslots * 8],
                                 set(called), fstep, hists, fines)
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
    if fstep:  # a function with calls timed has fine buckets, none when every call missed
        for i in hists:
            fines.setdefault(i, {})
    if timed:  # the time path counted the injected failures among the returns too
        _less_injected(errors, injected)
    functions: dict = {}
    none = [0] * len(TOTALLED)
    for i in sorted(set(words) | set(errors) | set(injected)):
        functions[i] = (words.get(i, none), hists.get(i), errors.get(i, {}), fines.get(i),
                        injected.get(i, {}))
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
            raise BadTrace(f"block {b} has an error slot for function {idx}, of {nf}")
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
    """Adds to `acc` the fine buckets of function i in one block's fine table at `off`
    (versions before 8: keys (i + 1) << bits | bucket, from the top bits of (i + 1) * mult;
    each log2 bucket holds all its calls): for each non-empty log2 bucket, only the slots its
    keys can be in, each key taken once, by the bucket it belongs to."""
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


_PAGE = 4096
_ZERO_PAGE = bytes(_PAGE)


def _read_fine_steps(table: memoryview, called: set[int], step: int, hists: dict,
                     fines: dict) -> None:
    """One block's fine table (version 8 on: keys (i + 1) * step + bucket), every slot that
    holds a key of a function with calls in the block: its calls added to the function's
    fine buckets and to its log2 histogram, which holds only the calls that found no fine
    slot. Pages of the table that no call wrote (all zero) are skipped."""
    try:
        for p in range(0, len(table), _PAGE):
            page = table[p:p + _PAGE]
            if page == _ZERO_PAGE:
                page.release()
                continue
            words = page.cast("I")
            for s in range(0, len(words), 2):
                key, n = words[s], words[s + 1]
                if not key or not n:
                    continue
                fn, f = divmod(key, step)
                if fn - 1 in called and f < FINE_BUCKETS:
                    acc = fines.setdefault(fn - 1, {})
                    acc[f] = acc.get(f, 0) + n
                    hists.setdefault(fn - 1, [0] * HIST_BUCKETS)[fine_octave(f)] += n
            words.release()
            page.release()
    finally:
        table.release()


def fine_first(b: int) -> int:
    """The first fine bucket of log2 bucket b (b >= 1)."""
    return 1 << b if b < FINE_SUB_SHIFT else (b - FINE_SUB_SHIFT + 1) << FINE_SUB_SHIFT
