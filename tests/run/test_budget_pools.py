"""The shared memory budget counts what memory pools reserve beyond their allocations
(runtime/budget/budget.c's shimgen_budget_reserve, the ledger's shimgen_ledger_charge;
docs/memory.md "One budget for many processes"), on the FAKE driver
tests/c/fake_budget_libcuda.c, whose one pool reserves in chunks of 64 KiB and keeps what
cuMemFreeAsync gives back until a synchronisation or a trim: a process's reserve refuses
another's allocation that would fit without it; a trim or a synchronisation gives it back;
a process killed while its pool reserves gives it back; a forked child's reserve is its
own; a process short of the budget asks its pools again before a refusal; a graph's reserve
is charged at its upload, never refused, and given back by a trim; a job of processes with
pools ends with the books equal to the fake's."""

from __future__ import annotations

import pytest

from shimgen.report.budget import budget_json
from tests.run.test_budget import Job, MiB
from tests.shimcache import fake_driver_shim


@pytest.fixture(scope="module")
def fake(probes):
    return probes / "libfake_budget_libcuda.so"


@pytest.fixture(scope="module")
def budget_shim(fake):
    return fake_driver_shim(fake)


RESERVE = 524288  # what the fake's pool keeps of 500,000 bytes freed: 8 chunks of 64 KiB


def pool_reserving(job: Job, *then: str):
    """A process whose pool keeps RESERVE bytes (500,000 allocated and freed), then `then`."""
    p = job.start("palloc:500000", "pfree", *then)
    assert p.stdout.readline() == "palloc:500000 rc 0\n"
    assert p.stdout.readline() == "pfree rc 0\n"
    return p


def parts(job: Job) -> dict[int, int]:
    return {s.pid: s.bytes.get(0, 0) for s in job.shim_books().slots}


def test_a_pools_reserve_refuses_what_fits_without_it(probes, fake, budget_shim, tmp_path):
    """A's pool keeps 512 KiB of 1 MiB reserved after its allocation was freed: B's 600,000
    bytes, which would fit without it, are refused, 500,000 are not; the books and the
    report show A's reserve in its part and in the device's use and peak (A's peak: its
    free back to the pool counted once, with the pool's reserve)."""
    job = Job(probes, fake, budget_shim, tmp_path / "refused")
    a = pool_reserving(job, "hold")
    try:
        assert a.stdout.readline() == "holding\n"
        assert parts(job) == {a.pid: RESERVE}
        assert job.run("alloc:600000") == "alloc:600000 rc 2\nbudgetjob rc 0\n"
        b = job.start("alloc:500000", "hold")
        assert b.stdout.readline() == "alloc:500000 rc 0\n"
        assert b.stdout.readline() == "holding\n"
        m = budget_json({"budget": {"books": str(job.books), "group": None}})
        assert m["devices"][0]["used_bytes"] == m["devices"][0]["peak_bytes"] == RESERVE + 500000
        held = {p["pid"]: sum(p["held_bytes"].values()) for p in m["processes"]}
        peak = {p["pid"]: sum(p["peak_bytes"].values()) for p in m["processes"]}
        assert held == {a.pid: RESERVE, b.pid: 500000} and peak[a.pid] == RESERVE
        b.kill()
        b.wait()
        assert job.fake()[0]["over"] == 0
    finally:
        a.kill()
        a.wait()


@pytest.mark.parametrize("give_back", ["trim", "sync"])
def test_a_pools_reserve_given_back_fits_again(probes, fake, budget_shim, tmp_path, give_back):
    """A's pool reserve refuses B's 600,000 bytes; A's trim (cuMemPoolTrimTo) or
    synchronisation gives it back to the driver and to the budget: they fit."""
    job = Job(probes, fake, budget_shim, tmp_path / give_back)
    a = pool_reserving(job, "line", give_back, "hold")
    try:
        assert job.run("alloc:600000") == "alloc:600000 rc 2\nbudgetjob rc 0\n"
        a.stdin.write("\n")
        a.stdin.flush()
        assert a.stdout.readline() == f"{give_back} rc 0\n"
        assert a.stdout.readline() == "holding\n"
        assert parts(job)[a.pid] == 0
        assert job.run("alloc:600000") == "alloc:600000 rc 0\nbudgetjob rc 0\n"
    finally:
        a.kill()
        a.wait()


def test_a_process_killed_while_its_pool_reserves_gives_it_back(probes, fake, budget_shim,
                                                               tmp_path):
    """A's pool reserve refuses B's 530,000 bytes (a repair, which B's refusal makes first,
    keeps it: it is A's slot's); A killed by SIGKILL (its reserve back at the driver): the
    whole budget is C's."""
    job = Job(probes, fake, budget_shim, tmp_path / "kill")
    a = pool_reserving(job, "hold")
    assert a.stdout.readline() == "holding\n"
    assert job.run("alloc:530000") == "alloc:530000 rc 2\nbudgetjob rc 0\n"
    a.kill()
    a.wait()
    assert job.run(f"alloc:{MiB}") == f"alloc:{MiB} rc 0\nbudgetjob rc 0\n"
    assert job.fake()[0]["over"] == 0


def test_a_forked_childs_pool_reserve_is_its_own(probes, fake, budget_shim, tmp_path):
    """A process whose pool keeps 512 KiB forks: the child starts with no pools; its own
    pool keeps 128 KiB of 100,000 bytes freed, in its own part; with the parent's, 400,000
    bytes more are refused and 393,216 (the rest of 1 MiB) taken."""
    job = Job(probes, fake, budget_shim, tmp_path / "fork")
    out = job.run("palloc:500000", "pfree", "fork", "palloc:100000", "pfree", "alloc:400000",
                  "alloc:393216").splitlines()
    assert out[3:] == ["palloc:100000 rc 0", "pfree rc 0", "alloc:400000 rc 2",
                       "alloc:393216 rc 0", "budgetjob rc 0"], out
    child = int(out[2].split()[1])
    got = parts(job)
    assert got[child] == 131072 + 393216 and sum(got.values()) == MiB == RESERVE * 2, got


def test_a_stale_reserve_is_asked_again_before_a_refusal(probes, fake, budget_shim, tmp_path):
    """Under the budget alone, A's pool gives its reserve back where the shim does not look
    (the fake's cuStreamQuery): A's own 600,000 bytes, refused by the reserve as last
    asked, are taken once its pool is asked again."""
    job = Job(probes, fake, budget_shim, tmp_path / "stale")
    out = job.run("palloc:500000", "pfree", "query", "alloc:600000")
    assert out.endswith("query rc 0\nalloc:600000 rc 0\nbudgetjob rc 0\n"), out
    assert job.fake()[0]["over"] == 0


def test_a_graphs_reserve_is_charged_never_refused(probes, fake, budget_shim, tmp_path):
    """A holds 900,000 bytes of 1 MiB and uploads a graph whose allocation node takes
    300,000 (320 KiB reserved): the upload is never refused and the budget's use passes its
    size, so A's next allocation of 1 byte is refused; the instance destroyed and the
    graphs' memory trimmed, it is taken."""
    job = Job(probes, fake, budget_shim, tmp_path / "graph")
    out = job.run("alloc:900000", "graph:300000", "alloc:1", "graphfree", "alloc:1")
    assert out == ("alloc:900000 rc 0\ngraph:300000 rc 0\nalloc:1 rc 2\ngraphfree rc 0\n"
                   "alloc:1 rc 0\nbudgetjob rc 0\n"), out
    assert job.shim_books().devices[0].peak == 900000 + 327680


def test_a_job_with_pools_ends_with_the_books_equal_to_the_drivers(probes, fake, budget_shim,
                                                                   tmp_path):
    """8 processes of random allocations and frees near a 1 MiB budget, half of them from
    their pools (which keep what is freed until a synchronisation, one step in 16): the fake
    never holds more than the budget and the pools' growth not yet charged (a chunk per
    process) and charged past it (a chunk per process); once each has synchronised, what
    each holds in the books (its allocations and its pool's reserve) equals what the fake
    holds for it; once they are gone, a process takes the whole budget."""
    job = Job(probes, fake, budget_shim, tmp_path / "job")
    ps = [job.start(f"pjob:8000:{MiB // 5}:{40 + i}", "sync", "line") for i in range(8)]
    try:
        refused = 0
        for p in ps:
            line = p.stdout.readline()
            assert line.startswith("job refused "), line
            refused += int(line.split()[2])
            assert p.stdout.readline() == "sync rc 0\n"
        numbers, held = job.fake()
        assert refused > 0 and MiB // 2 < numbers["peak"] <= MiB + 2 * 8 * 65536, numbers
        got = parts(job)
        assert {p.pid: got[p.pid] for p in ps} == {p.pid: held[p.pid] for p in ps}
    finally:
        for p in ps:
            p.communicate("\n", timeout=60)
    assert job.run(f"alloc:{MiB}") == f"alloc:{MiB} rc 0\nbudgetjob rc 0\n"
