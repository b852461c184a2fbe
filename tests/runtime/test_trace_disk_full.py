"""SHIMGEN_TRACE_DIR on a disk that fills (a small tmpfs, mounted in a mount namespace of the
test's own): a file that cannot be grown is never left to read as damage, and calls counted
in memory once no block can be added are put into the file at exit, as the notice says.
Real Debian drivers on the CPU; the probe is tests/c/tracekill.c."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.errors import ShimgenError
from shimgen.trace import binary as tracefile
from shimgen.trace.binary import load
from tests.faultkit import run
from tests.report.test_tracefile_reader import put

V = "cuDriverGetVersion"
MOUNT_REFUSED = "this machine refuses a tmpfs mount in a mount namespace"


def in_small_disk(kib: int, script: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """Runs `script` (sh) with a fresh tmpfs of `kib` KiB mounted at ./disk, in a mount
    namespace of its own (a user namespace when not root)."""
    (cwd / "disk").mkdir(exist_ok=True)
    inner = (f"mount -t tmpfs -o size={kib}k,mode=0700 shimgen-test disk && cd disk && "
             f"{script}")
    ns = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    return subprocess.run([*ns, "sh", "-c", inner], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def sizes(shims, probes, tmp_path_factory) -> tuple[int, int]:
    """The disk space a header takes (its bytes before block 0, less its holes: GPU time's
    fields when it is off) and how long a block is, from a file made on a roomy disk."""
    if not shutil.which("unshare"):
        pytest.skip("unshare (util-linux) is needed to mount a small tmpfs")
    probe = in_small_disk(64, "true", dict(os.environ), tmp_path_factory.mktemp("mount"))
    if probe.returncode != 0:
        pytest.skip(f"{MOUNT_REFUSED}: {probe.stderr.strip()[:200]}")
    d = tmp_path_factory.mktemp("roomy") / "traces"
    run(["sh", "-c", 'echo | "$0" libcuda.so.1 rounds 1 1 7', probes / "tracekill"],
        shims[0].env(SHIMGEN_TRACE="time", SHIMGEN_TRACE_DIR=str(d)))
    (f,) = d.glob("*.shimtrace")
    h = tracefile._header(f.read_bytes(), tracefile.VERSION)
    return allocated(f, h["blocks_off"]), h["block_stride"]


def allocated(path: Path, end: int) -> int:
    """The bytes of [0, end) of a file that have disk space (a header's holes have none)."""
    n, at = 0, 0
    with open(path, "rb") as f:
        while at < end:
            try:
                data = os.lseek(f.fileno(), at, os.SEEK_DATA)
            except OSError:
                break
            hole = os.lseek(f.fileno(), data, os.SEEK_HOLE)
            n += max(0, min(hole, end) - min(data, end))
            at = hole
    return n


def calls_made(stdout: str) -> int:
    return int(next(line.split()[1] for line in stdout.splitlines()
                    if line.startswith("calls ")))


@pytest.mark.parametrize("mode", ["counts", "time"])
def test_calls_of_threads_that_found_the_disk_full_are_in_the_file_at_exit(
        shims, probes, tmp_path, sizes, mode):
    """Room for the header and one block: the main thread's block is made, every other
    thread's is refused (ENOSPC). Their calls are counted in memory and added to the main
    thread's block at exit: the file holds every call, with nothing missing. (The file is
    read inside the namespace: the tmpfs goes with it.)"""
    boff, stride = sizes
    probe = shlex.quote(str(probes / "tracekill"))
    read = ("import sys; from shimgen.trace.binary import load; t = load(sys.argv[1]); "
            f"print('file', t.functions['{V}'].calls, t.complete, len(t.notes))")
    script = (f"echo | {probe} libcuda.so.1 rounds 3 4 11 && "
              f"{shlex.quote(sys.executable)} -c {shlex.quote(read)} traces/*.shimtrace")
    env = dict(shims[0].env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_DIR="traces"),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = in_small_disk((boff + stride) // 1024 + 64, script, env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "cannot add a block to the trace file" in proc.stderr, proc.stderr
    assert "added to a block of the file at exit" in proc.stderr, proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("file ")]
    _, got, complete, notes = line.split()
    assert int(got) == calls_made(proc.stdout) and complete == "True" and notes == "0", (
        line, proc.stdout)


def test_a_file_that_cannot_be_grown_is_removed_and_the_trace_printed(shims, probes,
                                                                       tmp_path, sizes):
    """No room even for the header: the file made is removed (no empty or partial file is
    left to read as damage), and the trace is printed at exit instead, as the notice says."""
    probe = shlex.quote(str(probes / "tracekill"))
    proc = in_small_disk(4, f"echo | {probe} libcuda.so.1 rounds 1 2 5 && ls -A traces",
                         shims[0].env(SHIMGEN_TRACE="counts", SHIMGEN_TRACE_DIR="traces"),
                         tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "cannot write the trace file" in proc.stderr, proc.stderr
    assert "kept in memory and written at exit" in proc.stderr
    made = calls_made(proc.stdout)
    assert [x for x in proc.stdout.splitlines() if x.endswith(".shimtrace")] == []
    assert any(line.split() == [str(made), V] for line in proc.stderr.splitlines()), proc.stderr


def test_load_of_a_file_with_a_block_the_disk_could_not_take(shims, probes, tmp_path):
    """A part of a block beyond the last whole one, where the header reserved one more block
    than it mapped (fallocate failed mid-way): read as the blocks before it."""
    d = tmp_path / "traces"
    run(["sh", "-c", 'echo | "$0" libcuda.so.1 rounds 1 1 7', probes / "tracekill"],
        shims[0].env(SHIMGEN_TRACE="counts", SHIMGEN_TRACE_DIR=str(d)))
    (f,) = d.glob("*.shimtrace")
    whole = load(f).functions[V].calls
    data = bytearray(f.read_bytes())
    h = tracefile._header(data, tracefile.VERSION)
    put(data, "blocks_reserved", h["blocks_reserved"] + 1)
    p = tmp_path / "partial.shimtrace"
    p.write_bytes(bytes(data) + bytes(4096 * 3))
    assert load(p).functions[V].calls == whole
    put(data, "blocks_reserved", h["blocks_reserved"])  # nothing reserved: damage
    p.write_bytes(bytes(data) + bytes(4096 * 3))
    with pytest.raises(ShimgenError, match="not a whole number"):
        load(p)


# A process that calls the driver N times on its main thread, then N times on each of T
# threads, prints "calls <all>" and leaves by HOW: "exit" (its exit handlers and the shim's
# destructor run) or "_exit" (none runs: Python multiprocessing's children end so).
CALLS = """
import ctypes, os, sys, threading
lib = ctypes.CDLL("libcuda.so.1")
n, t, how = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def work():
    v = ctypes.c_int()
    for _ in range(n):
        lib.cuDriverGetVersion(ctypes.byref(v))
work()
threads = [threading.Thread(target=work) for _ in range(t)]
for th in threads:
    th.start()
for th in threads:
    th.join()
print("calls", n * (t + 1), flush=True)
if how == "_exit":
    os._exit(0)
"""
EVERY = 3  # SHIMGEN_INJECT fails every third call of cuDriverGetVersion
INJECT = f"{V}=CUDA_ERROR_INVALID_VALUE,every={EVERY}"
READ = ("import json, sys; from shimgen.trace.binary import load; t = load(sys.argv[1]); "
        f"f = t.functions.get('{V}'); "
        "print('file', json.dumps([f.calls if f else 0, sum(f.injected.values()) if f else 0, "
        "t.calls_missing, t.complete]))")


def calls_then_leave(tmp_path: Path, shim, kib: int, mode: str, n: int, t: int, how: str,
                     after: str = "") -> subprocess.CompletedProcess:
    """CALLS on a disk of `kib` KiB with SHIMGEN_TRACE_DIR=traces and INJECT, then `after`
    (sh), in the disk's namespace."""
    (tmp_path / "calls.py").write_text(CALLS)
    script = (f"{shlex.quote(sys.executable)} ../calls.py {n} {t} {how}"
              + (f"; {after}" if after else ""))
    env = dict(shim.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_DIR="traces", SHIMGEN_INJECT=INJECT),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return in_small_disk(kib, script, env, tmp_path)


def read_after(proc: subprocess.CompletedProcess) -> list:
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("file ")]
    return json.loads(line[5:])


def report_of(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout[proc.stdout.index("shimgen report:"):]


PY = shlex.quote(sys.executable)
REPORT = f"{PY} -m shimgen report traces"


@pytest.mark.parametrize("block", ["no-block", "main-block"])
@pytest.mark.parametrize("mode", ["counts", "time"])
def test_calls_in_memory_of_a_process_that_leaves_by__exit_are_said_missing(
        shims, tmp_path, sizes, mode, block):
    """No room for a block (none at all, or none but the main thread's): the calls that
    could not be counted in a block are counted in memory and said in the header as they
    are counted, so a process that leaves by _exit (no exit code runs) leaves a file that
    says how many of its calls it lacks; the report says so, never "counts exact"."""
    boff, stride = sizes
    kib = (boff + (stride if block == "main-block" else 0)) // 1024 + 64
    n, t = 300, 3
    proc = calls_then_leave(tmp_path, shims[0], kib, mode, n, t, "_exit",
                            f"{PY} -c {shlex.quote(READ)} traces/*.shimtrace; {REPORT}")
    assert proc.returncode == 0, proc.stderr
    assert "cannot add a block to the trace file" in proc.stderr, proc.stderr
    calls, injected, missing, complete = read_after(proc)
    blockless = n * t if block == "main-block" else n * (t + 1)
    assert [calls, missing, complete] == [n * (t + 1) - blockless, blockless, False], proc.stdout
    report = report_of(proc)
    assert "counts exact" not in report, report
    assert "1 died with calls not in their traces" in report, report
    assert f"({blockless} calls at least)" in report, report
    assert f"note       {blockless} calls are not in the file (no room on the disk" in report


def test_a_process_with_no_room_for_its_file_leaves_a_note(shims, tmp_path, sizes):
    """No room even for the file's header, and the process leaves by _exit: the file is
    removed and an empty note, <name>.nospace, takes its place, so that the run knows the
    process was there and that none of its calls is in it."""
    proc = calls_then_leave(tmp_path, shims[0], 4, "time", 100, 1, "_exit",
                            f"ls -ln traces; {REPORT}")
    assert proc.returncode == 0, proc.stderr
    notes = [x.split() for x in proc.stdout.splitlines() if x.endswith(".nospace")]
    assert len(notes) == 1 and notes[0][0] == "-rw-------" and notes[0][4] == "0", proc.stdout
    assert not [x for x in proc.stdout.splitlines() if x.endswith(".shimtrace")]
    report = report_of(proc)
    assert "processes  1: 0 complete, 1 with no trace (no room on the disk for one)" in report
    assert "(no trace)" in report and "counts exact" not in report, report


@pytest.mark.parametrize("mode", ["counts", "time"])
def test_failures_injected_on_threads_without_a_block_are_in_the_file_at_exit(
        shims, tmp_path, sizes, mode):
    """Room for the header and the main thread's block: the other threads' calls, and the
    failures injected in them, are counted in memory and put in that block at exit; the
    file holds every call and every injected failure."""
    boff, stride = sizes
    n, t = 300, 3
    proc = calls_then_leave(tmp_path, shims[0], (boff + stride) // 1024 + 64, mode, n, t,
                            "exit", f"{PY} -c {shlex.quote(READ)} traces/*.shimtrace")
    assert proc.returncode == 0, proc.stderr
    assert "cannot add a block to the trace file" in proc.stderr, proc.stderr
    total = n * (t + 1)
    assert read_after(proc) == [total, total // EVERY, 0, True], proc.stdout


def test_failures_injected_with_no_room_for_a_block_are_in_the_table_at_exit(
        shims, tmp_path, sizes):
    """Room for the header only: the file has no block, its header says that every call is
    missing from it, and the table at exit has every call and every injected failure, and
    says why the calls were not timed (no block), not "shadow stack full"."""
    boff, _ = sizes
    n, t = 300, 1
    proc = calls_then_leave(tmp_path, shims[0], boff // 1024 + 64, "time", n, t, "exit",
                            f"{PY} -c {shlex.quote(READ)} traces/*.shimtrace")
    assert proc.returncode == 0, proc.stderr
    total = n * (t + 1)
    assert read_after(proc) == [0, 0, total, True], proc.stdout
    assert "shimgen injected failures" in proc.stderr, proc.stderr
    assert any(line.split() == ["cuDriverGetVersion", "1", "CUDA_ERROR_INVALID_VALUE",
                                str(total // EVERY)]
               for line in proc.stderr.splitlines()), proc.stderr
    assert f"{total}  (calls counted but not timed: their thread got no block" in proc.stderr
    assert "shadow stack full" not in proc.stderr, proc.stderr


FORKED = """
import ctypes, os, sys
lib = ctypes.CDLL("libcuda.so.1")
v = ctypes.c_int()
for _ in range(100):
    lib.cuDriverGetVersion(ctypes.byref(v))
child = os.fork()
if child == 0:
    for _ in range(200):
        lib.cuDriverGetVersion(ctypes.byref(v))
    os._exit(0)
os.waitpid(child, 0)
print("child", child, flush=True)
"""


def test_a_forked_child_with_no_room_for_its_blocks_leaves_a_note(shims, tmp_path, sizes):
    """Room for the parent's file and block and for the child's header, not for the child's
    block: the child's file, which could hold none of its calls, is removed and the note of
    no room takes its place, so a child that leaves by _exit (as a multiprocessing worker
    does) is a process without a trace in the report, never a process that died with no
    calls."""
    boff, stride = sizes
    (tmp_path / "forked.py").write_text(FORKED)
    env = dict(shims[0].env(SHIMGEN_TRACE="time", SHIMGEN_TRACE_DIR="traces"),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = in_small_disk((2 * boff + stride) // 1024 + 64,
                         f"{PY} ../forked.py && ls traces && {REPORT}", env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    child = next(x.split()[1] for x in proc.stdout.splitlines() if x.startswith("child "))
    files = [x for x in proc.stdout.splitlines() if x.endswith((".shimtrace", ".nospace"))]
    assert f"{child}.nospace" in files and f"{child}.shimtrace" not in files, proc.stdout
    report = report_of(proc)
    assert "processes  2: 1 complete, 1 with no trace (no room on the disk for one)" in report
    assert f"pid {child} (no trace)" in report and "counts exact" not in report, report


def test_a_child_forked_from_a_process_without_a_block_says_its_calls_missing(
        shims, tmp_path, sizes):
    """Room for two headers and no block: the parent's file has no block when it forks, so
    the child has no block to move; its own file is made (a header) and its calls, counted in
    memory, are said in it as they are counted. The child leaves by _exit: the report has
    both processes and every call they made as missing, none "counts exact"."""
    boff, _ = sizes
    (tmp_path / "forked.py").write_text(FORKED)
    read = ("import sys; from shimgen.trace.binary import load\n"
            "for p in sys.argv[1:]:\n"
            "    t = load(p); print('file', t.pid, t.calls_missing, t.complete)")
    env = dict(shims[0].env(SHIMGEN_TRACE="counts", SHIMGEN_TRACE_DIR="traces"),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = in_small_disk((2 * boff) // 1024 + 64,
                         f"{PY} ../forked.py && {PY} -c {shlex.quote(read)} traces/*.shimtrace"
                         f" && {REPORT}", env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    child = int(next(x.split()[1] for x in proc.stdout.splitlines() if x.startswith("child ")))
    files = {int(x.split()[1]): x.split()[2:] for x in proc.stdout.splitlines()
             if x.startswith("file ")}
    assert len(files) == 2 and files[child] == ["200", "False"], proc.stdout
    assert [v for k, v in files.items() if k != child] == [["100", "True"]], proc.stdout
    report = report_of(proc)
    assert "processes  2: 1 complete, 1 died with calls not in their traces" in report, report
    assert f"pid {child} (200 calls at least)" in report and "counts exact" not in report


def test_a_ring_of_calls_that_cannot_grow_keeps_its_last_calls(shims, probes, tmp_path, sizes):
    """SHIMGEN_TRACE=calls on a disk with room for the file's block and its ring's first 1024
    records but not the next 1024: the ring keeps its last 1024 calls, in order, the 1976
    before them counted as dropped; the process runs to its end and says so once."""
    roomy = tmp_path / "roomy"
    run([probes / "callsdecoded", "loop", "7"],
        shims[0].env(SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR=str(roomy)))
    (f,) = roomy.glob("*.shimtrace")
    h = tracefile._header(f.read_bytes(), tracefile.VERSION)
    first = h["blocks_off"] + h["calls_ring_off"] + 1024 * 256
    assert f.stat().st_size == first
    env = dict(shims[0].env(SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR="traces"),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = in_small_disk(allocated(f, first) // 1024 + 128,
                         f"{probes / 'callsdecoded'} loop 3000 && "
                         f"{PY} -m shimgen report --calls --json traces", env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    notes = [x for x in proc.stderr.splitlines() if "ring of calls cannot grow" in x]
    assert len(notes) == 1 and "it keeps its thread's last 1024 calls" in notes[0], proc.stderr
    got = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert [c["args"]["dev"] for c in got["calls"]] == list(range(3000 - 1024, 3000))
    (p,) = got["processes"]
    assert p["dropped"] == {str(p["pid"]): 3000 - 1024}
