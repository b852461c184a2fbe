"""The NVML shim under a shared memory budget (runtime/nvml/view.c, docs/memory.md "NVML: the
limit as nvidia-smi sees it"): real books, made by processes of a budget over the FAKE
driver tests/c/fake_budget_libcuda.c (tests/run/test_budget.py's Job), read by the NVML shim
built from the FAKE libnvidia-ml (tests/c/fake_nvml_libnvidia_ml.c): memory info is the
budget's size and the live processes' use, the process list the live slots with bytes on
the device; a process killed is not listed; the device is found by its UUID (by its index
for books keyed by ordinal); books not made yet answer the size they will have."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.run.test_budget import Job, holding
from tests.runtime.test_nvml_shim import query
from tests.shimcache import fake_driver_shim

GIB = 1 << 30
MiB = 1 << 20


@pytest.fixture(scope="module")
def fake(probes) -> Path:
    return probes / "libfake_budget_libcuda.so"


@pytest.fixture(scope="module")
def budget_shim(fake) -> Path:
    return fake_driver_shim(fake)


def nvml_uuid(raw: bytes) -> str:
    """cuDeviceGetUuid's 16 bytes as nvmlDeviceGetUUID writes them."""
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def live_job(probes, fake, shim, where, **extra):
    """A budget of 1 MiB whose books hold: A 300000 bytes, B 200000, C nothing (it gave back
    what it took), D 100000 but killed by SIGKILL (its slot still in the books)."""
    job = Job(probes, fake, shim, where, **extra)
    c = job.start("alloc:50000", "free", "hold")
    assert c.stdout.readline() == "alloc:50000 rc 0\n"
    assert c.stdout.readline() == "free rc 0\n" and c.stdout.readline() == "holding\n"
    a, b, d = holding(job, 300000), holding(job, 200000), holding(job, 100000)
    d.send_signal(signal.SIGKILL)
    d.wait()
    return job, [a, b, c], d


def answers(shim, job, **env):
    return query(shim, SHIMGEN_BUDGET_FILE=str(job.books), **env)


def test_nvml_answers_the_books_numbers_and_their_live_processes(probes, fake, budget_shim,
                                                                  nvml_fake_shim, tmp_path):
    job, (a, b, c), dead = live_job(probes, fake, budget_shim, tmp_path / "b")
    try:
        books = job.shim_books()
        assert len(books.devices) == 1 and books.devices[0].key.startswith("GPU-")
        slots = {s.pid: s.bytes.get(0, 0) for s in books.slots}
        assert slots[dead.pid] == 100000  # (in the books, and gone)
        live = {p.pid: slots[p.pid] for p in (a, b)}
        assert live == {a.pid: 300000, b.pid: 200000} and slots[c.pid] == 0
        used = sum(live.values())
        out = answers(nvml_fake_shim, job, FAKE_NVML_UUID=books.devices[0].key)
        assert out["v1"] == [0, MiB, MiB - used, used]
        assert out["v2"] == [0, MiB, 0, MiB - used, used]
        for name in ("procs", "procs_v2", "procs_v3"):
            assert out[name][0] == 0 and sorted(out[name][1:]) == sorted(map(list, live.items()))
        assert out["count"] == [0, 1]  # (forwarded)
        # a per-process limit smaller than the budget is the total
        out = answers(nvml_fake_shim, job, FAKE_NVML_UUID=books.devices[0].key,
                      SHIMGEN_LIMIT_MEMORY="400000")
        assert out["v1"] == [0, 400000, 0, 400000]
        # another device: the budget's size, nothing of the budget's on it
        out = answers(nvml_fake_shim, job, FAKE_NVML_UUID=nvml_uuid(b"another-device-1"))
        assert out["v1"] == [0, MiB, MiB, 0] and out["procs_v3"] == [0]
    finally:
        for p in (a, b, c):
            p.kill()
            p.wait()


def test_books_keyed_by_ordinal_are_matched_by_nvml_index(probes, fake, budget_shim,
                                                          nvml_fake_shim, tmp_path):
    job, (a, b, c), _ = live_job(probes, fake, budget_shim, tmp_path / "o",
                                 FAKE_BUDGET_NO_UUID="1")
    try:
        assert job.shim_books().devices[0].key == "ordinal 0"
        out = answers(nvml_fake_shim, job, FAKE_NVML_INDEX="0")
        assert out["v1"] == [0, MiB, MiB - 500000, 500000]
        assert sorted(out["procs_v2"][1:]) == sorted([[a.pid, 300000], [b.pid, 200000]])
        out = answers(nvml_fake_shim, job, FAKE_NVML_INDEX="1")
        assert out["v1"] == [0, MiB, MiB, 0] and out["procs"] == [0]
    finally:
        for p in (a, b, c):
            p.kill()
            p.wait()


def test_books_not_made_yet_answer_the_size_they_will_have(nvml_fake_shim, tmp_path):
    out = query(nvml_fake_shim, SHIMGEN_BUDGET_FILE=str(tmp_path / "none.books"),
                SHIMGEN_LIMIT_JOB_MEMORY="2GiB")
    assert out["v1"] == [0, 2 * GIB, 2 * GIB, 0] and out["procs"] == [0]
    # no size either: no budget, every answer the real library's
    out = query(nvml_fake_shim, SHIMGEN_BUDGET_FILE=str(tmp_path / "none.books"))
    assert out["v1"] == [0, 80 * GIB, 70 * GIB, 10 * GIB]
    # a file there that is not books (as the libcuda shim refuses it): no budget either
    bad = tmp_path / "bad.books"
    bad.write_bytes(b"\0" * 4096)
    bad.chmod(0o600)
    out = query(nvml_fake_shim, SHIMGEN_BUDGET_FILE=str(bad), SHIMGEN_LIMIT_JOB_MEMORY="2GiB")
    assert out["v1"] == [0, 80 * GIB, 70 * GIB, 10 * GIB]
