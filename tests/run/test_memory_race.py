"""`--limit memory` as a limit at the driver (runtime/memory/ledger.c,
runtime/memory/hooks_memory.c, docs/memory.md "The limit at the driver"): on the FAKE driver
tests/c/fake_ledger_libcuda.c, which keeps its own books (the most it held at once) and, with
FAKE_LEDGER_JITTER, yields after it took an allocation's bytes and before it gives a free's back, 8
threads allocate and free near a 1 MiB limit by every route (tests/c/memlimitrace.c), and the main
thread forks while they do: the fake never holds more than the limit, the ledger's peak is never
less than what the fake held (nor more than the limit), and in a forked child, alone, the
two are equal. Rounded routes (pitched rows, arrays) are checked with their rows padded;
unreadable structs are forwarded to the driver; a limit past 2^64 - 1 is none."""

from __future__ import annotations

import os
import subprocess

import pytest

from shimgen.errors import ShimgenError
from shimgen.run.limits import parse_limits
from shimgen.runenv import SIZE_HINT
from shimgen.shim.memroutes import ROUTES
from shimgen.trace.binary import load
from tests.run.test_memory import MiB, assert_same, fake_totals, ledger_of, one_trace, run_ops
from tests.shimcache import fake_driver_shim

ROUNDS, FORK_EVERY = 500, 10


@pytest.fixture(scope="module")
def fake(probes):
    return probes / "libfake_ledger_libcuda.so"


@pytest.fixture(scope="module")
def fake_shim(fake):
    return fake_driver_shim(fake)


def race(probes, fake, shim, tmp_path, seed: int):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    traces = tmp_path / "traces"
    env.update(LD_PRELOAD=str(shim), SHIMGEN_DRIVER=str(fake), SHIMGEN_TRACE="time",
               SHIMGEN_TRACE_DIR=str(traces), SHIMGEN_LIMIT_MEMORY="1MiB",
               FAKE_LEDGER_DEVICES="1", FAKE_LEDGER_JITTER="1")
    proc = subprocess.run([probes / "memlimitrace", str(ROUNDS), "8", str(FORK_EVERY), "24",
                           str(seed)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "memlimitrace rc 0" in proc.stdout, proc.stdout + proc.stderr
    return proc.stdout, {t.pid: t for t in map(load, traces.glob("*.shimtrace"))}


def test_the_limit_holds_at_the_driver_under_threads_and_forks(probes, fake, fake_shim,
                                                                tmp_path):
    """500 rounds of 8 threads by every route, 50 of them forking: the fake's own peak is
    never past the limit, the ledger's peak never below it, and all given back at exit."""
    out, traces = race(probes, fake, fake_shim, tmp_path, 1)
    want = fake_totals(out)
    parent = next(t for t in traces.values() if t.complete and t.ppid not in traces)
    got = ledger_of(parent)
    fake_peak, ledger_peak = want["columns"]["0"][0], got["columns"]["0"][0]
    assert fake_peak <= MiB and fake_peak <= ledger_peak <= MiB, (fake_peak, ledger_peak)
    assert fake_peak > MiB // 2  # (near the limit: the race was run)
    assert got["columns"]["0"][1:] == want["columns"]["0"][1:] == [0, 0]
    assert got["taken"] == {fn: b for fn, (b, _) in want["taken"].items() if b}
    # every route of the table was called, and the limit refused some
    called = set(parent.functions)
    assert {r.name for r in ROUTES if r.kind not in ("info", "total")} <= called
    assert parent.memory.refused > 0 and parent.memory.untracked == 0
    children = [ln for ln in out.splitlines() if ln.startswith("child ")]
    assert len(children) == ROUNDS // FORK_EVERY
    for line in children:
        pid = int(line.split()[1])
        mine = fake_totals(line, f"child {pid}")
        child = ledger_of(traces[pid])
        assert mine["columns"]["0"][0] <= MiB
        assert child["columns"] == mine["columns"], pid  # alone: the peak equal too


def test_pitched_rows_are_checked_padded(probes, fake, fake_shim, tmp_path):
    """4 bytes by 262144 rows is 128 MiB at the driver (rows padded to 512 bytes): refused
    under 1 MiB before it reaches the driver; 2048 such rows are exactly 1 MiB."""
    out, traces = run_ops(probes, fake, fake_shim, tmp_path,
                          ["ctx:0", "pitch:4:262144", "pitch:4:2048", "pitch:4:1"],
                          SHIMGEN_LIMIT_MEMORY="1MiB")
    rcs = [ln.split(" rc ")[1] for ln in out.splitlines() if " rc " in ln]
    assert rcs == ["0", "2", "0", "2"], out
    want = fake_totals(out)
    assert want["taken"]["cuMemAllocPitch_v2"] == [MiB, 1] and want["columns"]["0"][0] == MiB
    t = one_trace(traces)
    assert_same(t, want)
    assert t.memory.refused == 2


def test_a_pitch_past_what_the_device_says_is_refused_after_the_fact(probes, fake, fake_shim,
                                                                   tmp_path):
    """A driver that pads rows more than its alignments say (the fake told to say 32): the
    allocation the limit cannot take is given back and refused; one it can is kept."""
    out, traces = run_ops(probes, fake, fake_shim, tmp_path,
                          ["ctx:0", "pitch:4:4096", "pitch:4:1024", "free:1"],
                          SHIMGEN_LIMIT_MEMORY="1MiB", FAKE_LEDGER_ALIGN_SAYS="32")
    rcs = [ln.split(" rc ")[1] for ln in out.splitlines() if " rc " in ln]
    assert rcs == ["0", "2", "0", "0"], out
    want = fake_totals(out)
    assert want["columns"]["0"][1:] == [0, 0]  # the refused one freed at the driver
    t = one_trace(traces)
    assert t.memory.columns[0].at_exit == 0 and t.memory.refused == 1
    assert t.memory.columns[0].taken == {"cuMemAllocPitch_v2": MiB // 2}


def test_a_pitch_past_what_the_device_says_is_charged_whole_to_a_job_budget(
        probes, fake, fake_shim, tmp_path):
    """Under a job budget of 1 MiB and no limit of the process's own, the same driver: the
    pitched allocation asked as 32 KiB and made as 512 KiB keeps all of its bytes in the
    budget (the rest taken after the fact), so 600,000 more are refused."""
    books = tmp_path / "job"
    books.mkdir(mode=0o700)
    out, _ = run_ops(probes, fake, fake_shim, tmp_path, ["ctx:0", "pitch:4:1024", "alloc:600000"],
                     SHIMGEN_LIMIT_JOB_MEMORY="1MiB", SHIMGEN_BUDGET_FILE=str(books / "books"),
                     FAKE_LEDGER_ALIGN_SAYS="32")
    rcs = [ln.split(" rc ")[1] for ln in out.splitlines() if " rc " in ln]
    assert rcs == ["0", "0", "2"], out
    assert fake_totals(out)["taken"]["cuMemAllocPitch_v2"] == [MiB // 2, 1]


def test_arrays_are_checked_padded_and_a_zero_height_is_one_row(probes, fake, fake_shim,
                                                               tmp_path):
    """An array's rows padded as the driver pads them (the fake, 512 bytes): a 1-D array of
    one 4-byte element (height 0) takes a row of 512, a 3-D one of height and depth 0 too;
    with them, 2047 more rows are past 1 MiB (refused), 2046 fill it, and then a mipmapped
    array of one row is refused."""
    ops = ["ctx:0", "array:1:0:32:1", "array3d:1:0:0:32:1", "array:1:2047:32:1",
           "array:1:2046:32:1", "mipmap:1:0:0:32:1:1"]
    out, traces = run_ops(probes, fake, fake_shim, tmp_path, ops, SHIMGEN_LIMIT_MEMORY="1MiB")
    rcs = [ln.split(" rc ")[1] for ln in out.splitlines() if " rc " in ln]
    assert rcs == ["0", "0", "0", "2", "0", "2"], out
    want = fake_totals(out)
    assert want["columns"]["0"][1] == MiB
    assert_same(one_trace(traces), want)


def test_info_never_more_free_than_the_device_has(probes, fake, fake_shim, tmp_path):
    """Under a 1 GiB limit on a device with 100 MiB free, cuMemGetInfo_v2 answers 100 MiB
    free (of a total of 1 GiB), not what is left of the limit."""
    out, _ = run_ops(probes, fake, fake_shim, tmp_path, ["ctx:0", "alloc:1000", "info"],
                     SHIMGEN_LIMIT_MEMORY="1GiB", FAKE_LEDGER_FREE=str(100 * MiB))
    assert f"parent info free {100 * MiB} total {1 << 30}" in out, out
    out, _ = run_ops(probes, fake, fake_shim, tmp_path / "2", ["ctx:0", "alloc:1000", "info"],
                     SHIMGEN_LIMIT_MEMORY="1MiB", FAKE_LEDGER_FREE=str(100 * MiB))
    assert f"parent info free {MiB - 1000} total {MiB}" in out, out


@pytest.mark.parametrize("value", ["99999999999999999999999", str(1 << 64), "17179869184GiB",
                                   "16777216TiB"])
def test_a_limit_past_any_size_is_refused_as_the_cli_refuses_it(probes, fake, fake_shim,
                                                                 tmp_path, value):
    """A limit past 2^64 - 1 bytes is no limit: the shim says so once, in --limit's words,
    and runs without one (an allocation of 2 GiB goes through); `--limit` refuses it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    env.update(LD_PRELOAD=str(fake_shim), SHIMGEN_DRIVER=str(fake), SHIMGEN_TRACE="time",
               SHIMGEN_TRACE_DIR=str(tmp_path / "traces"), SHIMGEN_LIMIT_MEMORY=value)
    proc = subprocess.run([probes / "memledger", "ctx:0", "alloc:2147483648", "info"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert "alloc:2147483648 rc 0" in proc.stdout, proc.stdout + proc.stderr
    assert "info free 85899345920 total 103079215104" in proc.stdout  # (the device's own)
    said = f"shimgen: SHIMGEN_LIMIT_MEMORY={value} {SIZE_HINT}; no memory limit\n"
    assert proc.stderr.count(said) == 1, proc.stderr
    assert not one_trace(tmp_path / "traces").memory.limit
    with pytest.raises(ShimgenError, match=f"^--limit memory={value}: '{value}' " +
                       SIZE_HINT.replace("(", r"\(").replace(")", r"\)") + "$"):
        parse_limits([f"memory={value}"])


def test_the_largest_size_is_taken_by_both():
    top = str((1 << 64) - 1)
    assert parse_limits([f"memory={top}"]) == {"memory": (1 << 64) - 1}
    for past in (str(1 << 64), "16777216T"):  # as many digits as the largest, or fewer
        with pytest.raises(ShimgenError, match="is not a size"):
            parse_limits([f"memory={past}"])
    with pytest.raises(ShimgenError, match="is not a size"):
        parse_limits(["memory=" + "9" * 5000])  # one line, never int()'s own error


@pytest.mark.parametrize("fn", ["create", "array", "array3d", "mipmap"])
@pytest.mark.parametrize("limit", ["", "1MiB"])
def test_unreadable_structs_are_the_drivers_to_answer(probes, fake, fake_shim, tmp_path, fn,
                                                     limit):
    """cuMemCreate's prop and an array's descriptor at NULL, 0x10 and an unmapped page: the
    driver answers (the fake: CUDA_ERROR_INVALID_VALUE), the program never faults."""
    ops = ["ctx:0"] + [f"bad{fn}:{where}" for where in (0, 1, 2)]
    out, _ = run_ops(probes, fake, fake_shim, tmp_path, ops, SHIMGEN_LIMIT_MEMORY=limit)
    assert out.count(" rc 1") == 3, out

