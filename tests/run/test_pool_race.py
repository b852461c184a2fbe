"""The pool table of runtime/memory/reserve.c under racing threads (tests/c/poolrace.c, on
the FAKE driver tests/c/fake_ledger_libcuda.c): threads whose current device is 3 make pools
on devices 0 to 2, allocate from them and destroy them at once, hundreds of rounds with
yields at random. Each allocation is its pool's device's, as the table says under its lock
(a pool missed while another thread changes the table would be device 3's), and once every
pool is destroyed the ledger follows none."""

from __future__ import annotations

import os
import subprocess

from tests.run.test_memory import fake, fake_shim, one_trace  # noqa: F401

ROUNDS, THREADS, RUNS = 2000, 8, 60


def test_racing_threads_pools_are_each_their_devices_and_all_gone_at_the_end(
        probes, fake, fake_shim, tmp_path):  # noqa: F811
    for seed in range(1, RUNS + 1):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
        traces = tmp_path / f"traces{seed}"
        env.update(LD_PRELOAD=str(fake_shim), SHIMGEN_DRIVER=str(fake), SHIMGEN_TRACE="time",
                   SHIMGEN_TRACE_DIR=str(traces))
        proc = subprocess.run([probes / "poolrace", str(ROUNDS), str(THREADS), str(seed)],
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and "poolrace rc 0" in proc.stdout, \
            (seed, proc.stdout + proc.stderr)
        want = {int(w[1]): int(w[2]) for w in map(str.split, proc.stdout.splitlines())
                if w[0] == "taken"}
        t = one_trace(traces)
        got = {c: col.taken.get("cuMemAllocFromPoolAsync", 0)
               for c, col in t.memory.columns.items()}
        assert {c: n for c, n in got.items() if n} == {c: n for c, n in want.items() if n}, \
            (seed, got, want)
        assert t.memory.pools == 0, seed
        assert all(not col.at_exit for col in t.memory.columns.values()), seed
