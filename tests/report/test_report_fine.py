"""The fine latency histogram's model (shimgen/trace/model.py) and the binary reader's walk of
a block's fine table (shimgen/trace/binary.py): pure units, no driver. The timing stub's side
is checked end to end by tests/runtime/test_times_exact.py."""

from __future__ import annotations

import random
import struct

from shimgen.trace import blocks
from shimgen.trace.model import (
    FINE_BUCKETS,
    FINE_SUB,
    HIST_BUCKETS,
    fine_bucket,
    fine_octave,
    fine_range,
    log2_range,
    tick_segments,
)


def test_fine_buckets_tile_every_tick_count_at_a_64th_of_its_octave():
    rng = random.Random(7)
    values = list(range(0, 5000)) + [rng.getrandbits(rng.randrange(1, 64)) for _ in range(5000)]
    values += [2**k + d for k in range(6, 64) for d in (-1, 0, 1) if 2**k + d < 2**64]
    for v in values:
        f = fine_bucket(v)
        lo, hi = fine_range(f)
        assert 0 <= f < FINE_BUCKETS and lo <= v < hi, (v, f, lo, hi)
        assert fine_octave(f) == max(v.bit_length() - 1, 0)
        assert v < FINE_SUB or (hi - lo) * FINE_SUB <= lo
    # consecutive buckets meet: no tick count falls between two
    for f in range(FINE_BUCKETS - 1):
        assert fine_range(f)[1] == fine_range(f + 1)[0], f


def hist_of(calls: dict[int, int]) -> list[int]:
    h = [0] * HIST_BUCKETS
    for b, n in calls.items():
        h[b] = n
    return h


def test_an_octave_the_fine_table_missed_falls_back_to_its_log2_bucket():
    """Octave 10 has 5 calls, its fine buckets only 3 (a full table): the octave is its log2
    bucket. Octave 12's fine buckets hold all its calls: they are used."""
    f10, f12a, f12b = fine_bucket(1100), fine_bucket(4200), fine_bucket(7000)
    segs = tick_segments(hist_of({10: 5, 12: 4}), {f10: 3, f12a: 1, f12b: 3})
    assert segs == [(*log2_range(10), 5), (*fine_range(f12a), 1), (*fine_range(f12b), 3)]
    # no fine table at all (a counts trace, or an older reader's input): log2 only
    assert tick_segments(hist_of({3: 2}), None) == [(8, 16, 2)]


def test_the_reader_finds_every_key_wherever_probing_put_it(monkeypatch):
    """Keys of two functions whose homes collide, each displaced up to the probe limit, and a
    key of another octave in the same slots: each is read once, by its own bucket (version 7's
    keys, (i + 1) << bits | bucket from a hashed home)."""
    slots, probes, bits, mult = 1024, 8, 12, 0x9E3779B1
    shift = slots.bit_length() - 1
    table = bytearray(slots * 8)

    def home(i: int) -> int:
        return (((i + 1) * mult) & 0xFFFFFFFF) >> (32 - shift)

    want: dict[int, dict[int, int]] = {3: {}, 9: {}}
    taken: set[int] = set()
    rng = random.Random(3)
    buckets = [fine_bucket(v) for v in (70, 71, 90, 130, 131, 260, 1 << 20)]
    for f in buckets:
        for i in (3, 9):
            s = home(i) + f
            while (s % slots) in taken:
                s += 1
            assert s - (home(i) + f) < probes
            taken.add(s % slots)
            n = rng.randrange(1, 1000)
            struct.pack_into("<II", table, 8 * (s % slots), (i + 1) << bits | f, n)
            want[i][f] = want[i].get(f, 0) + n
    for i in (3, 9):
        row = [0] * HIST_BUCKETS
        for f, n in want[i].items():
            row[fine_octave(f)] += n
        got: dict[int, int] = {}
        blocks._read_fine(memoryview(bytes(table)), 0, i, row, got, shift, slots - 1, probes,
                             bits, (1 << bits) - 1, mult)
        assert got == want[i], i


def test_version_8_keys_are_read_wherever_they_lie_and_fill_the_log2_histogram():
    """Version 8's keys, (i + 1) * step + bucket, anywhere in the table (a page apart, the
    last slot): each adds its calls to its function's fine bucket and to the octave of its
    log2 histogram; a key of a function without calls in the block is not read."""
    step, slots = 20248, 32768
    table = bytearray(slots * 8)
    put = [(3, fine_bucket(70), 5, 7), (3, fine_bucket(1 << 20), 9, 4000),
           (9, fine_bucket(131), 2, slots - 1), (11, fine_bucket(90), 6, 100)]
    for i, f, n, slot in put:
        struct.pack_into("<II", table, 8 * slot, (i + 1) * step + f, n)
    hists = {3: [0] * HIST_BUCKETS}
    hists[3][0] = 1  # a call that found no fine slot
    fines: dict[int, dict[int, int]] = {}
    blocks._read_fine_steps(memoryview(bytes(table)), {3, 9}, step, hists, fines)
    assert fines == {3: {fine_bucket(70): 5, fine_bucket(1 << 20): 9},
                     9: {fine_bucket(131): 2}}
    want3 = [0] * HIST_BUCKETS
    want3[0], want3[6], want3[20] = 1, 5, 9
    want9 = [0] * HIST_BUCKETS
    want9[7] = 2
    assert hists == {3: want3, 9: want9}
