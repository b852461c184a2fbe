"""One memory budget for many processes (runtime/budget/, docs/memory.md "One budget for many
processes"), on the FAKE driver tests/c/fake_budget_libcuda.c, whose books are a file its
processes share, so that what "the driver" holds for all of them at once is known: a job of
processes near the budget never takes the fake past it, and the shim's books end equal to
the fake's; a process killed by SIGKILL while it holds memory, reaped or left a zombie,
gives it back to the next process short of it; a process killed while it holds the books'
lock, mid-update, blocks nobody and the budget still holds, as does a lock word naming no
slot; a signal handler inside its own thread's update makes none of its own; a slot being
claimed is not counted; a device is keyed by its UUID;
the read-only view (view.h) shows the live processes alone; the layout the report reads is
the compiler's; the report names each refusal's process."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from shimgen.report.budget import budget_json, budget_lines
from shimgen.trace import budget as books_py
from tests.run.test_memory import one_trace
from tests.shimcache import fake_driver_shim

MiB = 1 << 20
UUID = "fake-budget-dev0"
LIVE_AT = 1 << 40  # runtime/budget/view.h's BOOKS_LIVE_AT: the slots' liveness locks
FAKE_BOOKS = 4 * 8 + 512 * 24  # tests/c/fake_budget_libcuda.c's struct fake_books


@pytest.fixture(scope="module")
def fake(probes):
    return probes / "libfake_budget_libcuda.so"


@pytest.fixture(scope="module")
def budget_shim(fake):
    return fake_driver_shim(fake)


class Job:
    """Processes of one budget over the fake: their environment, the books of both."""

    def __init__(self, probes: Path, fake: Path, shim: Path, where: Path, limit: int = MiB,
                 **extra: str) -> None:
        where.mkdir(mode=0o700, exist_ok=True)
        self.books = where / "budget.books"
        self.fake_books = where / "fake.books"
        if not self.fake_books.exists():
            fd = os.open(self.fake_books, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            os.ftruncate(fd, FAKE_BOOKS)
            os.close(fd)
        self.prog = str(probes / "budgetjob")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
        self.env.update(LD_PRELOAD=str(shim), SHIMGEN_DRIVER=str(fake),
                        SHIMGEN_BUDGET_FILE=str(self.books),
                        SHIMGEN_LIMIT_JOB_MEMORY=str(limit),
                        FAKE_BUDGET_BOOKS=str(self.fake_books), FAKE_BUDGET_LIMIT=str(limit),
                        **extra)

    def start(self, *ops: str, **extra: str) -> subprocess.Popen:
        return subprocess.Popen([self.prog, *ops], env={**self.env, **extra},
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def run(self, *ops: str, **extra: str) -> str:
        p = subprocess.run([self.prog, *ops], env={**self.env, **extra}, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and "budgetjob rc 0" in p.stdout, p.stdout + p.stderr
        assert not p.stderr, p.stderr
        return p.stdout

    def fake(self) -> tuple[dict, dict[int, int]]:
        """The fake's numbers (peak, over, allocs, frees) and each process's bytes."""
        data = self.fake_books.read_bytes()
        peak, over, allocs, frees = (int.from_bytes(data[i:i + 8], "little")
                                     for i in range(0, 32, 8))
        held = {}
        for i in range(512):
            at = 32 + 24 * i
            pid = int.from_bytes(data[at:at + 4], "little")
            if pid:
                held[pid] = int.from_bytes(data[at + 16:at + 24], "little")
        return {"peak": peak, "over": over, "allocs": allocs, "frees": frees}, held

    def shim_books(self) -> books_py.Books:
        return books_py.load(self.books)


def holding(job: Job, n: int) -> subprocess.Popen:
    p = job.start(f"alloc:{n}", "hold")
    assert p.stdout.readline() == f"alloc:{n} rc 0\n"
    assert p.stdout.readline() == "holding\n"
    return p


def stress(job: Job, procs: int, rounds: int, kills: int, seed: int) -> list[int]:
    """`procs` processes of random allocations and frees near the budget, `kills` of them
    killed by SIGKILL at random moments; the pids killed."""
    rng = random.Random(seed)
    ps = [job.start(f"job:{rounds}:{MiB // 5}:{seed * 1000 + i}") for i in range(procs)]
    killed = []
    for p in rng.sample(ps, kills):
        time.sleep(rng.random() * 0.05)
        p.kill()
        killed.append(p.pid)
    for p in ps:
        out, err = p.communicate(timeout=120)
        if p.pid not in killed:
            assert p.returncode == 0 and "budgetjob rc 0" in out, out + err
    return killed


def check_stress(job: Job, killed: list[int]) -> None:
    """The fake never past the budget; each process's part in the shim's books equal to
    the fake's (one killed may have had a reservation in flight: never less); once a process
    needs the whole budget, the books are what the fake holds: nothing else."""
    numbers, held = job.fake()
    assert numbers["over"] == 0 and numbers["peak"] <= MiB, numbers
    assert numbers["peak"] > MiB // 2, numbers  # (near the budget: the race was run)
    b = job.shim_books()
    assert b.devices[0].peak <= MiB and b.refused > 0
    for s in b.slots:
        mine = s.bytes.get(0, 0)
        assert mine >= held[s.pid] if s.pid in killed else mine == held[s.pid], s.pid
    assert job.run(f"alloc:{MiB}") == f"alloc:{MiB} rc 0\nbudgetjob rc 0\n"
    b = job.shim_books()
    assert b.devices[0].used == MiB == sum(s.bytes.get(0, 0) for s in b.slots)


def test_a_job_never_takes_the_driver_past_its_budget(probes, fake, budget_shim, tmp_path):
    """16 processes of random allocations and frees near a 1 MiB budget, 3 of them killed
    with SIGKILL: the fake never holds more than the budget, the books end as the fake's."""
    job = Job(probes, fake, budget_shim, tmp_path / "job")
    check_stress(job, stress(job, 16, 8000, 3, 1))


@pytest.mark.parametrize("reap", [True, False])
def test_a_process_killed_holding_memory_gives_it_back(probes, fake, budget_shim, tmp_path,
                                                      reap):
    """A holds 1000000 bytes of 1 MiB: B is refused; A killed by SIGKILL (reaped, or left a
    zombie by its parent): C gets them, with no wait; the refusal is in the books with B's
    pid, and the report names it."""
    job = Job(probes, fake, budget_shim, tmp_path / "kill")
    a = holding(job, 1000000)
    b = job.start("alloc:100000")
    out, _ = b.communicate(timeout=60)
    assert out.startswith("alloc:100000 rc 2\n"), out
    a.kill()
    if reap:
        a.wait()
    else:  # a zombie until its parent waits: its files closed, its memory back
        while _state(a.pid) != "Z":
            time.sleep(0.001)
    assert job.run("alloc:1000000") == "alloc:1000000 rc 0\nbudgetjob rc 0\n"
    a.wait()
    books = job.shim_books()
    assert [(r.pid, r.size) for r in books.refusals] == [(b.pid, 100000)]
    m = budget_json({"budget": {"books": str(job.books), "group": None}})
    assert m["refusals"] == [{"pid": b.pid, "device": f"GPU-{UUID.encode().hex()[:8]}-"
                              f"{UUID.encode().hex()[8:12]}-{UUID.encode().hex()[12:16]}-"
                              f"{UUID.encode().hex()[16:20]}-{UUID.encode().hex()[20:]}",
                              "size_bytes": 100000, "used_bytes": 1000000}]
    assert any(ln.startswith(f"  refused: pid {b.pid} asked 97.66 KiB on GPU-")
               for ln in budget_lines({"budget": {"books": str(job.books), "group": None}}))


def _state(pid: int) -> str:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return text.rsplit(")", 1)[1].split()[0]


def test_a_process_killed_holding_the_lock_blocks_nobody(probes, fake, budget_shim,
                                                        tmp_path):
    """While B holds 600000 bytes of 1 MiB and C is under way, A dies by SIGKILL holding the
    books' lock, its update half-done (the device's `used` at 0): C's next allocation takes
    the lock over and the books are made whole (A's 300000 back, B's still counted: 600000
    more refused, 400000 not), and a job of 8 after it still never passes the budget."""
    job = Job(probes, fake, budget_shim, tmp_path / "lock")
    b = holding(job, 600000)
    c = job.start("alloc:1", "line", "alloc:600000", "alloc:400000")
    assert c.stdout.readline() == "alloc:1 rc 0\n"
    p = subprocess.run([job.prog, "alloc:300000", "alloc:100"], timeout=60, capture_output=True,
                       env={**job.env, "FAKE_BUDGET_DIE_LOCKED": "2"}, text=True)
    assert p.returncode == -signal.SIGKILL and p.stdout == "alloc:300000 rc 0\n", p.stdout
    out, _ = c.communicate("\n", timeout=20)
    assert out == "alloc:600000 rc 2\nalloc:400000 rc 0\nbudgetjob rc 0\n", out
    assert job.fake()[0]["over"] == 0
    b.kill()
    b.wait()
    check_stress(job, stress(job, 8, 2000, 0, 2))


def test_a_signal_handlers_allocation_inside_the_books_update_is_not_followed(
        probes, fake, budget_shim, tmp_path):
    """B holds a byte; A asks for 1 MiB, so the budget is short and A repairs the books,
    its lock held, looking at B's liveness lock: there a signal (a seccomp trap of that
    fcntl) runs a handler that allocates 1000 bytes. The handler finds the lock held by its
    own thread: its allocation is made but not followed (never an update inside A's own),
    the 1 MiB is refused, and the lock ends free and the books' seq even (no update under
    way)."""
    job = Job(probes, fake, budget_shim, tmp_path / "handler")
    b = holding(job, 1)
    try:
        out = job.run(f"trapped:{MiB}")
    finally:
        b.kill()
        b.wait()
    assert out == f"trapped:{MiB} rc 2 handler 0\nbudgetjob rc 0\n", out
    data = job.books.read_bytes()
    lock_at = books_py.HEADER.size - 64
    seq = int.from_bytes(data[lock_at - 16:lock_at - 8], "little")
    assert int.from_bytes(data[lock_at:lock_at + 8], "little") == 0 and seq % 2 == 0, seq
    assert 1000 not in [s.bytes.get(0, 0) for s in books_py.parse(data).slots]


def test_two_runs_share_a_budget_and_devices_are_keyed_by_uuid(probes, fake, budget_shim,
                                                               tmp_path):
    """Two runs' processes on one books file share its budget per device; a process whose
    device has another UUID has a budget of its own; without a UUID, the ordinal."""
    job = Job(probes, fake, budget_shim, tmp_path / "two")
    a = holding(job, 800000)
    assert job.run("alloc:300000") == "alloc:300000 rc 2\nbudgetjob rc 0\n"
    other = "fake-budget-dev1"
    assert job.run("alloc:1000000", FAKE_BUDGET_UUID=other).startswith("alloc:1000000 rc 0\n")
    a.kill()
    a.wait()
    assert job.run("alloc:1000000", FAKE_BUDGET_NO_UUID="1").endswith("rc 0\nbudgetjob rc 0\n")
    keys = [d.key for d in job.shim_books().devices]
    assert keys[1] == "GPU-" + "-".join(other.encode().hex()[a:b] for a, b in
                                       ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32)))
    assert keys[2] == "ordinal 0" and len(keys) == 3


def test_a_limit_of_its_own_and_the_budget_together(probes, fake, budget_shim, tmp_path):
    """--limit memory and job-memory together: A (600000 of its own, 1 MiB together) holds
    500000; 200000 more are past its own limit, refused, and given back to the budget, so B
    takes 500000; then 100000 more of A's are past the budget. A's trace counts each refusal
    once."""
    job = Job(probes, fake, budget_shim, tmp_path / "both", SHIMGEN_LIMIT_MEMORY="600000")
    a = job.start("alloc:500000", "alloc:200000", "line", "alloc:100000", SHIMGEN_TRACE="time",
                  SHIMGEN_TRACE_DIR=str(tmp_path / "traces"))
    assert a.stdout.readline() == "alloc:500000 rc 0\n"
    assert a.stdout.readline() == "alloc:200000 rc 2\n"
    b = holding(job, 500000)
    out, _ = a.communicate("\n", timeout=60)
    assert out == "alloc:100000 rc 2\nbudgetjob rc 0\n", out
    assert one_trace(tmp_path / "traces").memory.refused == 2
    b.kill()
    b.wait()
    assert job.fake()[0]["over"] == 0


def test_a_process_of_pid_1_is_counted_while_it_lives_and_freed_once_gone(
        probes, fake, budget_shim, tmp_path):
    """A slot of pid 1 (a container's first process, of another pid namespace) holding
    600000 bytes, its liveness lock held: counted (600000 more refused, 400000 not); its lock
    let go, it is found gone and the whole budget is free again."""
    job = Job(probes, fake, budget_shim, tmp_path / "pid1")
    assert job.run("alloc:1") == "alloc:1 rc 0\nbudgetjob rc 0\n"  # the books, device 0
    i = 200
    at = books_py.HEADER.size + books_py.DEVICES * books_py.DEVICE.size + i * books_py.SLOT.size
    fd = os.open(job.books, os.O_RDWR)
    try:
        os.pwrite(fd, books_py.SLOT.pack(1, 0, 0xF00D, 1, 600000, *[0] * 15,
                                         600000, *[0] * 15), at)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, LIVE_AT + i, os.SEEK_SET)
        out, _ = job.start("alloc:600000", "alloc:400000").communicate(timeout=60)
        assert out == "alloc:600000 rc 2\nalloc:400000 rc 0\nbudgetjob rc 0\n", out
    finally:
        os.close(fd)
    out, _ = job.start(f"alloc:{MiB}").communicate(timeout=60)
    assert out == f"alloc:{MiB} rc 0\nbudgetjob rc 0\n", out
    assert all(s.pid != 1 for s in job.shim_books().slots)


def test_a_slot_being_claimed_is_not_counted(probes, fake, budget_shim, tmp_path):
    """A slot of pid -1 (being claimed: one of a process gone, taken before its bytes are
    cleared) that still shows 600000 bytes: the sum of the live slots made again (at the
    new process's start, and when the budget is short) leaves it out, so 600000 fit."""
    job = Job(probes, fake, budget_shim, tmp_path / "claimed")
    assert job.run("alloc:1") == "alloc:1 rc 0\nbudgetjob rc 0\n"  # the books, device 0
    at = books_py.HEADER.size + books_py.DEVICES * books_py.DEVICE.size + 200 * books_py.SLOT.size
    fd = os.open(job.books, os.O_RDWR)
    try:
        os.pwrite(fd, books_py.SLOT.pack(-1, 0, 0, 0, 600000, *[0] * 15, 600000, *[0] * 15),
                  at)
    finally:
        os.close(fd)
    assert job.run("alloc:600000", "alloc:400000") == (
        "alloc:600000 rc 0\nalloc:400000 rc 0\nbudgetjob rc 0\n")


def test_a_lock_word_naming_no_slot_is_taken_over(probes, fake, budget_shim, tmp_path):
    """The books' lock word damaged, naming slot 256 (one past the last) as its holder: no
    process will ever let it go, so a new process takes it over (as a dead holder's) and
    goes on, never waiting for ever."""
    job = Job(probes, fake, budget_shim, tmp_path / "damaged")
    assert job.run("alloc:1") == "alloc:1 rc 0\nbudgetjob rc 0\n"  # the books, device 0
    fd = os.open(job.books, os.O_RDWR)
    try:
        os.pwrite(fd, (257 << 48 | 0x1000).to_bytes(8, "little"), books_py.HEADER.size - 64)
    finally:
        os.close(fd)
    assert job.run("alloc:1000") == "alloc:1000 rc 0\nbudgetjob rc 0\n"
    data = job.books.read_bytes()
    assert int.from_bytes(data[books_py.HEADER.size - 64:][:8], "little") == 0


def test_a_forked_child_has_a_slot_of_its_own(probes, fake, budget_shim, tmp_path):
    """A process holding 600000 bytes of 1 MiB forks: the child's allocations are its own
    slot's (600000 more refused, 400000 taken), and the parent's are still counted."""
    job = Job(probes, fake, budget_shim, tmp_path / "fork")
    out = job.run("alloc:600000", "fork", "alloc:600000", "alloc:400000")
    lines = out.splitlines()
    assert lines[1].startswith("child ") and lines[2:] == [
        "alloc:600000 rc 2", "alloc:400000 rc 0", "budgetjob rc 0"], out
    child = int(lines[1].split()[1])
    parts = {s.pid: s.bytes.get(0, 0) for s in job.shim_books().slots}
    assert parts[child] == 400000 and sorted(parts.values()) == [400000, 600000], parts


def test_the_view_shows_the_live_processes(probes, fake, budget_shim, tmp_path):
    """view.h's read-only view: the limit, the device's use summed over the live processes
    alone, each one's bytes; a process killed leaves it at once."""
    job = Job(probes, fake, budget_shim, tmp_path / "view")
    a, b = holding(job, 300000), holding(job, 200000)
    view = [probes / "budgetview", str(job.books)]
    out = subprocess.run(view, capture_output=True, text=True, timeout=30).stdout
    assert out.startswith(f"limit {MiB} devices 1 procs 2\ndevice {UUID} used 500000 ")
    assert f"pid {a.pid} bytes 300000\n" in out and f"pid {b.pid} bytes 200000\n" in out
    a.kill()
    a.wait()
    out = subprocess.run(view, capture_output=True, text=True, timeout=30).stdout
    assert f"procs 1\ndevice {UUID} used 200000 " in out and f"pid {a.pid}" not in out
    b.kill()
    b.wait()
    os.chmod(job.books, 0o644)  # (not the user's alone: no view)
    assert subprocess.run(view, capture_output=True, text=True).stdout == "no view\n"


def test_the_books_layout_is_the_compilers(probes):
    out = subprocess.run([probes / "budgetview", "layout"], capture_output=True, text=True,
                         check=True).stdout.split()
    got = dict(zip(out[::2], map(int, out[1::2]), strict=True))
    h = books_py.HEADER.size
    dev, slot = books_py.DEVICE.size, books_py.SLOT.size
    assert got == {"limit": 16, "seq": 24, "refused": 32, "lock": 40, "device": h,
                   "slot": h + 16 * dev, "refusals": h + 16 * dev + 256 * slot,
                   "size_device": dev, "size_slot": slot,
                   "size_refusal": books_py.REFUSAL.size, "size_books": books_py.SIZE}


def test_books_of_another_kind_are_refused_in_one_line(probes, fake, budget_shim, tmp_path):
    """Books that are not ours alone, or not books: one line, and no shared budget."""
    job = Job(probes, fake, budget_shim, tmp_path / "bad")
    job.books.write_bytes(b"x" * 100)
    os.chmod(job.books, 0o600)
    p = subprocess.run([job.prog, "alloc:2000000"], env=job.env, capture_output=True, text=True,
                       timeout=60)
    assert p.stdout == "alloc:2000000 rc 0\nbudgetjob rc 0\n"
    assert p.stderr == (f"shimgen: SHIMGEN_BUDGET_FILE={job.books} is not books of this user "
                        "alone (owner-only) of this version; no shared memory budget\n")


def test_a_job_of_64_processes_never_takes_the_driver_past_its_budget(probes, fake, budget_shim,
                                                                     tmp_path):
    """The second tier's stress: 64 processes, 8 of them killed. SHIMGEN_STRESS_ROUNDS sets
    each process's rounds (default 20,000, some 15 s on 2 cores); the minute-long run that
    docs/memory.md reports gave it 80,000."""
    rounds = int(os.environ.get("SHIMGEN_STRESS_ROUNDS", "20000"))
    job = Job(probes, fake, budget_shim, tmp_path / "job64")
    check_stress(job, stress(job, 64, rounds, 8, 3))


def test_mem_get_info_answers_the_budget_alone(probes, fake, budget_shim, tmp_path):
    """Under the shared budget alone, cuMemGetInfo_v2 answers its size as the total and
    what the device has left of it as free (never more than the driver's free);
    cuDeviceTotalMem_v2 its size. With a limit of the process's own, the smaller of both."""
    job = Job(probes, fake, budget_shim, tmp_path / "info")
    a = holding(job, 300000)
    try:
        out = job.run("alloc:200000", "info")
        assert f"info {MiB - 500000} {MiB} {MiB} rc 0\n" in out, out
        out = job.run("alloc:200000", "info", FAKE_BUDGET_FREE="1000")
        assert f"info 1000 {MiB} {MiB} rc 0\n" in out, out
        # its own limit larger than what the budget has left: the budget's left is free
        out = job.run("alloc:200000", "info", SHIMGEN_LIMIT_MEMORY="900000")
        assert f"info {MiB - 500000} 900000 900000 rc 0\n" in out, out
        # its own left the smaller
        out = job.run("alloc:200000", "info", SHIMGEN_LIMIT_MEMORY="400000")
        assert "info 200000 400000 400000 rc 0\n" in out, out
    finally:
        a.kill()
        a.wait()
