"""test_fine_full.py on aarch64 (runtime/arch/aarch64/timing.S), under qemu-user: a thread
whose fine table has no free slot counts its timed calls in their log2 buckets, by their
length, so that every call is in the log2 histogram once. The probe (tracekill.c) and the
FAKE driver (tests/c/fake_libcuda.c) are cross-compiled, as in test_aarch64_timing.py."""

from __future__ import annotations

import os

from tests.runtime.test_aarch64 import QEMU, SYSROOT
from tests.runtime.test_aarch64_timing import _cross, arm  # noqa: F401
from tests.runtime.test_fine_full import (
    FUNCTIONS,
    check_in_their_log2_buckets,
    run_with_full_fine_tables,
)


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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "SHIMGEN_"))}
    check_in_their_log2_buckets(*run_with_full_fine_tables(cmd, env, d, 60))
