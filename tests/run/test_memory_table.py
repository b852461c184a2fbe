"""The ledger's table of live entries after frees (runtime/memory/entries.c): an open-addressing
table with linear probing, whose deletion moves up the entries after the freed one that its
hole would hide from their probe. The FAKE ledger driver hands out addresses the test chose
(FAKE_LEDGER_ADDRESSES) whose first slots collide, next to each other and across the table's
end, so that each free leaves a hole an entry of the same or the next cluster must fill; every
later free must still find its entry, or the ledger keeps bytes the driver gave back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.run.test_memory import fake_totals, ledger_of, one_trace, run_ops
from tests.shimcache import fake_driver_shim

ROOT = Path(__file__).resolve().parents[2]
MASK = (1 << 64) - 1


@pytest.fixture(scope="module")
def fake(probes) -> Path:
    return probes / "libfake_ledger_libcuda.so"


@pytest.fixture(scope="module")
def fake_shim(fake) -> Path:
    return fake_driver_shim(fake)


def _table() -> tuple[int, int]:
    """(the table's slots, the hash's multiplier), read from the runtime's sources."""
    bits = int(re.search(r"#define SLOT_BITS (\d+)", (ROOT / "runtime/memory/lock.h")
                         .read_text()).group(1))
    mult = int(re.search(r"\(key \* (0x[0-9A-Fa-f]+)ull\) >> \(64 - SLOT_BITS\)",
                         (ROOT / "runtime/memory/entries.c").read_text()).group(1), 16)
    return 1 << bits, mult


def keys_at(homes: list[int]) -> list[int]:
    """A key for each first slot of `homes`, each key different (keys of the same slot
    differ in the bits below the slot's)."""
    slots, mult = _table()
    shift = 64 - (slots.bit_length() - 1)
    inverse = pow(mult, -1, 1 << 64)
    out = []
    for n, h in enumerate(homes):
        k = (((h % slots) << shift) | (n + 1) << 20) * inverse & MASK
        assert (k * mult & MASK) >> shift == h % slots and k
        out.append(k)
    return out


def test_every_free_finds_its_entry_after_the_frees_before_it(probes, fake, fake_shim,
                                                              tmp_path):
    slots, _ = _table()
    end = slots - 1
    # (first slot, which item) in the order allocated; then the order freed, by item
    cases = {
        # a run of 3 at slot 1000 and one of slot 1001 after them: the first freed, each
        # after it moves up one, the one of slot 1001 too (it is past its own slot)
        "run": ([1000, 1000, 1000, 1001], [0, 1, 2, 3]),
        # across the end: slot end, then slot 0, then slot end again (placed at 1): the
        # first freed, the one of slot 0 stays where it is, the last moves to the end
        "wrap": ([end, 0, end], [0, 1, 2]),
        # a run across the end, freed from its middle
        "wrap-middle": ([end - 1, end - 1, end, 0, end - 1], [1, 3, 0, 4, 2]),
    }
    for name, (homes, order) in cases.items():
        keys = keys_at(homes)
        ops = ["ctx:0", *(f"alloc:{1000 + i}" for i in range(len(keys))),
               *(f"free:{i}" for i in order)]
        out, traces = run_ops(probes, fake, fake_shim, tmp_path / name, ops,
                              FAKE_LEDGER_ADDRESSES=",".join(f"{k:x}" for k in keys))
        assert all(f"parent {op} rc 0" in out for op in ops), out
        want, got = fake_totals(out), ledger_of(one_trace(traces))
        assert want["columns"]["0"][1:] == [0, 0], (name, out)
        assert got["columns"]["0"][1:] == [0, 0], (name, got)


def test_a_free_in_a_run_of_the_same_first_slot_takes_its_own_entry(probes, fake, fake_shim,
                                                                    tmp_path):
    """Three entries of one first slot, the middle one freed: the ledger gives back its bytes,
    not those of the entry before it in the probe (the same kind, another key), so what the
    ledger holds at exit is what the fake holds."""
    keys = keys_at([1000, 1000, 1000])
    ops = ["ctx:0", "alloc:1000", "alloc:1001", "alloc:1002", "free:1"]
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, ops,
                          FAKE_LEDGER_ADDRESSES=",".join(f"{k:x}" for k in keys))
    assert all(f"parent {op} rc 0" in out for op in ops), out
    want, got = fake_totals(out), ledger_of(one_trace(traces))
    assert want["columns"]["0"][1:] == [2002, 2]
    assert got["columns"]["0"][1:] == want["columns"]["0"][1:]


def test_an_entry_moved_up_leaves_no_copy_behind(probes, fake, fake_shim, tmp_path):
    """Three entries of one first slot, the first freed (the two after it move up), then the
    last, then an allocation the fake gives the last one's address again: no copy of a moved
    entry is left in the table, where the new allocation would find it and give back the
    bytes of the one freed before."""
    keys = keys_at([1000, 1000, 1000])
    ops = ["ctx:0", "alloc:1000", "alloc:1001", "alloc:1002", "free:0", "free:2",
           "alloc:1003"]
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, ops,
                          FAKE_LEDGER_ADDRESSES=",".join(f"{k:x}" for k in keys))
    assert all(f"parent {op} rc 0" in out for op in ops), out
    want, got = fake_totals(out), ledger_of(one_trace(traces))
    assert want["columns"]["0"][1:] == [2004, 2]
    assert got["columns"]["0"][1:] == want["columns"]["0"][1:]
