"""Run-level reports of real process trees, on real Debian drivers on the CPU (the probe is
tests/c/spawnexec.c): children that fork and exec a traced program are one process each,
complete, with exact counts; children SIGKILLed at random while their trace files are made
never cost the report the rest of the run."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.trace import binary as tracefile
from tests.faultkit import run

V = "cuDriverGetVersion"


def report_json(d: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "shimgen", "report", "--json", str(d)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def calls_of(group: dict, name: str = V) -> int:
    return next((f["calls"] for f in group["functions"] if f["function"] == name), 0)


@pytest.mark.parametrize("mode", ["counts", "time"])
def test_children_that_exec_are_processes_that_completed(shims, probes, tmp_path, mode):
    """A parent that forks 200 children one after another, each exec'ing a traced program
    that makes 3 calls and exits 0: 201 processes, all complete, 200 execs, and every call
    counted once (each forked image leaves a file of its own that it never finishes: its
    exec is not a death)."""
    d = tmp_path / "traces"
    run([probes / "spawnexec", "execs", "libcuda.so.1", "200"],
        shims[0].env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_DIR=str(d)))
    files = list(d.glob("*.shimtrace"))
    assert len(files) == 401, len(files)
    (g,) = report_json(d)["groups"]
    assert (g["processes"], g["complete"], g["died"], g["execs"]) == (201, 201, [], 200), {
        k: g[k] for k in ("processes", "complete", "execs", "traces")}
    assert calls_of(g) == 1 + 200 * 3
    assert not any("did not finish" in note for note in g["notes"]), g["notes"]


def test_children_killed_while_they_make_their_files_never_hide_the_others(shims, probes,
                                                                           tmp_path):
    """200 children SIGKILLed 0 to 3 ms after their fork, while they call the driver (some
    before, during or after their file is made): the report reads every file it can and
    names each one it cannot, with why; nothing is lost to one bad file. Repeated with two
    seeds, 100 children each."""
    seed = random.randrange(1 << 30)
    d = tmp_path / "traces"
    for k in range(2):
        run([probes / "spawnexec", "kills", "libcuda.so.1", "100", "3000", str(seed + k)],
            shims[0].env(SHIMGEN_TRACE="time", SHIMGEN_TRACE_DIR=str(d)))
    files = sorted(d.glob("*.shimtrace"))
    data = report_json(d)
    (g,) = data["groups"]
    bad = {u["file"]: u["reason"] for u in data["unreadable"]}
    readable = []
    for f in files:
        try:
            readable.append(tracefile.load(f))
        except Exception as e:  # noqa: BLE001 - the report must list exactly these
            assert str(f) in bad, (f, e, seed)
            assert bad[str(f)] in str(e), (bad[str(f)], str(e), seed)
            assert any(w in str(e) for w in ("empty: the process died as it started",
                                             "no magic: the process died while it made")), e
    assert len(readable) + len(bad) == len(files), seed
    assert g["traces"] == len(readable), seed
    assert calls_of(g) == sum(t.functions[V].calls for t in readable if V in t.functions)
    # the parents completed; every child died (killed), none is reported complete
    assert g["complete"] == 2, (g["complete"], seed)


# A program that calls the driver N times and then execs ARGS (a launcher: `exec python ...`),
# or, with no ARGS, says "ready" and waits to be killed (the program it exec'd).
EXECS = """
import ctypes, os, sys, time
lib = ctypes.CDLL("libcuda.so.1")
v = ctypes.c_int()
for _ in range(int(sys.argv[1])):
    lib.cuDriverGetVersion(ctypes.byref(v))
if len(sys.argv) > 2:
    os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("mode", ["counts", "time"])
def test_a_process_whose_last_program_is_killed_after_exec_died(shims, tmp_path, mode):
    """A launcher that calls the driver and execs the program, which calls it and is then
    SIGKILLed: one process, with the calls of both images, that died (not complete) and keeps
    the note that it did not finish; the image before the exec has none."""
    script = tmp_path / "execs.py"
    script.write_text(EXECS)
    d = tmp_path / "traces"
    proc = subprocess.Popen([sys.executable, str(script), "5", str(script), "7"],
                            env=shims[0].env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_DIR=str(d)),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
    finally:
        proc.kill()
        proc.wait()
    assert len(list(d.glob("*.shimtrace"))) == 2
    (g,) = report_json(d)["groups"]
    assert (g["processes"], g["complete"], g["execs"], len(g["died"])) == (1, 0, 1, 1), g
    assert calls_of(g) == 12
    assert list(g["notes"].values()) == [1] and "did not finish" in next(iter(g["notes"])), g
