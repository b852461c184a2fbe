"""SHIMGEN_TRACE_DIR: the binary trace file of each process (runtime/tracefile/tracefile.c,
docs/traceformat.md), against real Debian drivers on the CPU. Processes killed with SIGKILL
at known counts (the file's counts are exact) or while their threads race (the file holds
every call made, at most one more per thread: the one in progress), threads that reuse
freed blocks (counted once), a thread killed inside a call, fork and exec trees (one file
per process, each with its own calls only), concurrent first calls, signal handlers that
call the driver during first calls, owner-only files and directory, names, and the
loaded driver's version. The probe is tests/c/tracekill.c; seeds are random per run and
printed on failure. The reader's refusals are in tests/report/test_tracefile_reader.py."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from shimgen.trace.binary import load
from tests.faultkit import clean_env, run, shim_lines

V = "cuDriverGetVersion"


def files(d: Path) -> list[Path]:
    return sorted(d.glob("*.shimtrace"))


def only_trace(d: Path):
    fs = files(d)
    assert len(fs) == 1, fs
    return load(fs[0])


def calls(t, name=V) -> int:
    f = t.functions.get(name)
    return f.calls if f else 0


def start(probes, env, *args) -> subprocess.Popen:
    return subprocess.Popen([str(probes / "tracekill"), "libcuda.so.1", *map(str, args)],
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_sigkill_leaves_exact_counts_and_reused_blocks_count_once(shims, probes, tmp_path):
    """60 processes: rounds of threads that make random numbers of calls and exit (later
    rounds claim the blocks they freed), then threads that stay alive; once every call is
    made, SIGKILL after a random pause (or a normal exit). The file holds exactly the calls
    made, each once; a killed process's file is not complete and has no end time; a normal
    exit's is complete. The file is the process's own: <pid>.shimtrace, mode 0600, in a
    directory made 0700."""
    s = shims[0]
    for i in range(60):
        seed = random.randrange(1 << 30)
        mode = random.choice(["1", "time", "timeline"])
        d = tmp_path / f"run{i}" / "traces"
        d.parent.mkdir()
        p = start(probes, s.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_DIR=str(d),
                                SHIMGEN_TIMELINE_FILE=str(d.parent / "tl.json")), "rounds",
                  random.randint(1, 6), random.randint(1, 6), seed)
        n = int(p.stdout.readline().split()[1])
        kill = i % 2 == 0
        time.sleep(random.random() * 0.02)
        if kill:
            p.send_signal(signal.SIGKILL)
        else:
            p.stdin.close()
        rc = p.wait(timeout=60)
        assert rc == (-signal.SIGKILL if kill else 0), (seed, p.stderr.read())
        err = p.stderr.read()
        assert "shimgen trace (" not in err and all(  # the file is the record: no table
            ln.startswith("shimgen: timeline of ") for ln in shim_lines(err)), err
        t = only_trace(d)
        assert calls(t) == n, (seed, mode, kill, n, calls(t))
        assert t.pid == p.pid and files(d)[0].name == f"{p.pid}.shimtrace"
        assert t.complete == (not kill) and (t.end_ns is None) == kill
        assert t.mode == {"1": "counts"}.get(mode, mode)
        assert stat.S_IMODE(files(d)[0].stat().st_mode) == 0o600
        assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_file_system_without_fallocate(shims, probes, tmp_path):
    """Where fallocate fails (a preloaded fake), each block is added by writing zeros over
    it alone: 10 processes of threads adding blocks at once, killed, exact counts."""
    s = shims[0]
    for i in range(10):
        seed = random.randrange(1 << 30)
        d = tmp_path / f"t{i}"
        env = s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_DIR=str(d))
        env["LD_PRELOAD"] = f"{probes / 'libno_fallocate_fake.so'}:{env['LD_PRELOAD']}"
        p = start(probes, env, "rounds", 3, 6, seed)
        n = int(p.stdout.readline().split()[1])
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
        assert calls(only_trace(d)) == n, seed


def test_sigkill_while_threads_race_loses_nothing(shims, probes, tmp_path):
    """40 processes of 1 to 8 threads calling as fast as they can, each storing its calls
    made after each call; SIGKILL at a random moment. The file holds every call made, and
    at most one more per thread (a call counted, not yet stored by the probe)."""
    s = shims[0]
    for i in range(40):
        t = random.randint(1, 8)
        mode = random.choice(["1", "time"])
        d = tmp_path / f"t{i}"
        counters = tmp_path / f"c{i}"
        counters.write_bytes(bytes(4096))
        p = start(probes, s.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_DIR=str(d)), "race", t,
                  counters)
        assert p.stdout.readline() == "started\n"
        delay = random.random() * 0.05
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
        raw = counters.read_bytes()
        made = sum(int.from_bytes(raw[8 * k:8 * k + 8], "little") for k in range(t))
        got = calls(only_trace(d))
        assert made <= got <= made + t, (mode, t, delay, made, got)


@pytest.mark.parametrize("mode", ["1", "time"])
def test_sigkill_inside_a_call(fake_shim, probes, tmp_path, mode):
    """The fake driver (it runs host callbacks at once): 25 calls, then a call that never
    returns (its callback waits), and SIGKILL. The 25 are in the file; the call in progress
    is counted when counting (on entry) and not when timing (calls are counted on return)."""
    d = tmp_path / "traces"
    env = dict(clean_env(), LD_PRELOAD=str(fake_shim), SHIMGEN_TRACE=mode,
               SHIMGEN_TRACE_DIR=str(d))
    p = start(probes, env, "inside", 25)
    assert p.stdout.readline() == "inside\n"
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    t = only_trace(d)
    assert calls(t) == 25 and not t.complete
    assert calls(t, "cuLaunchHostFunc") == (1 if mode == "1" else 0)


@pytest.mark.parametrize("exec_", [0, 1], ids=["fork", "fork-exec"])
def test_fork_and_exec_trees_give_each_process_its_own_file(shims, probes, tmp_path, exec_):
    """A chain of 4 forks (with exec: each child makes calls, then execs): one file per
    process image, each with exactly the calls that image made; a parent's calls after
    its child began are its own (a child that wrote its parent's file would add its calls
    there, or zero the parent's counts when it starts from zero). With exec, the image
    before the exec is <pid>.shimtrace and the one after <pid>-1.shimtrace."""
    s = shims[0]
    for i in range(6):
        seed = random.randrange(1 << 30)
        d = tmp_path / f"t{i}"
        mode = random.choice(["1", "time"])
        proc = run([probes / "tracekill", "libcuda.so.1", "fork", "4", seed, exec_],
                   s.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_DIR=str(d)))
        want = {}
        for m in re.finditer(r"^pid (\d+) image (\d) calls (\d+)$", proc.stdout, re.M):
            pid, image = m.group(1), int(m.group(2))
            want[f"{pid}.shimtrace" if image == 0 else f"{pid}-{image}.shimtrace"] = int(
                m.group(3))
        assert len(want) == (9 if exec_ else 5), proc.stdout
        got = {f.name: calls(load(f)) for f in files(d)}
        assert got == want, (seed, mode)


def test_sixty_four_first_calls_at_once_make_one_file(shims, probes, tmp_path):
    """64 threads make their first call at once (the file is made by one of them while the
    others wait for it), in 20 processes, alive at exit: one file, every call in it."""
    s = shims[0]
    for i in range(20):
        seed = random.randrange(1 << 30)
        d = tmp_path / f"t{i}"
        proc = run([probes / "race_firstcall", "200", str(seed)],
                   s.env(SHIMGEN_TRACE=random.choice(["1", "time"]), SHIMGEN_TRACE_DIR=str(d)))
        assert "threads 64 calls 12800 failures 0" in proc.stdout, (seed, proc.stdout)
        t = only_trace(d)
        assert calls(t) == 12800 and t.complete, seed


@pytest.mark.parametrize("how", ["threads", "main"])
def test_signal_handler_calls_during_first_calls_are_in_the_file(shims, probes, tmp_path,
                                                                   how):
    """sigfirstcall: SIGUSR1 from a random moment around threads' first calls (including
    the one that makes the file), the handler calling the driver. No hang, and every call
    of a thread or a handler is in the file once."""
    s = shims[0]
    seed = str(random.randrange(1 << 30))
    d = tmp_path / "traces"
    proc = run([probes / "sigfirstcall", "libcuda.so.1", how, "100", seed],
               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_DIR=str(d)), timeout=90)
    lines = re.findall(r"calls (\d+) handler (\d+) bad (\d+)", proc.stdout)
    assert lines and all(b == "0" for _, _, b in lines), proc.stdout
    if how == "threads":
        (c, h, _), = lines
        assert calls(only_trace(d)) == int(c) + int(h), (seed, proc.stdout)
    else:
        by_pid = {m.group(1): int(m.group(2)) + int(m.group(3)) for m in re.finditer(
            r"^child (\d+) calls (\d+) handler (\d+)", proc.stdout, re.M)}
        got = {f.name.split(".")[0]: calls(load(f)) for f in files(d)}
        assert got == by_pid, (seed, proc.stdout)


def test_forked_child_with_timed_calls_in_progress(fake_shim, probes, tmp_path):
    """forktime with the trace file and the JSON together: the child is forked with timed
    calls of the parent's on other threads done and gets its own file, whose counts are
    the JSON's; the parent's file has the parent's (the block moved to the child's file
    at the same address keeps the frames a timed call uses)."""
    d = tmp_path / "traces"
    trace = tmp_path / "trace.json"
    env = dict(clean_env(), LD_PRELOAD=str(fake_shim), SHIMGEN_TRACE="time",
               SHIMGEN_TRACE_FILE=str(trace), SHIMGEN_TRACE_DIR=str(d))
    proc = run([probes / "forktime", "50", "3"], env)
    child = re.search(r"^child (\d+) rc 0$", proc.stdout, re.M).group(1)
    for path in (trace, Path(f"{trace}.{child}")):
        j = json.loads(path.read_text())
        t = load(d / f"{j['pid']}.shimtrace")
        assert {n: f.calls for n, f in t.functions.items()} == j["calls"]
        assert t.complete and t.ns_per_tick is not None
    assert len(files(d)) == 2


def test_directory_refused_when_a_symlink_or_not_ours(shims, probes, tmp_path):
    """A SHIMGEN_TRACE_DIR that is a symbolic link, or someone else's directory, is refused
    with one line (said once: not again by a child forked after it), and the trace is kept
    in memory and printed at exit as without the variable. A process that never calls the
    driver leaves no file."""
    s = shims[0]
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    other = tmp_path / "other"
    other.mkdir()
    os.chown(other, 65534, 65534)
    for d in (link, other):
        proc = run([probes / "tracekill", "libcuda.so.1", "fork", "1", "7", "0"],
                   s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_DIR=str(d)))
        lines = shim_lines(proc.stderr)
        assert len(lines) == 1 and "SHIMGEN_TRACE_DIR=" in lines[0], lines  # the child: none
        assert proc.stderr.count("shimgen trace (pid") == 2
        assert not list(real.iterdir()) and not list(other.iterdir())
    d = tmp_path / "none"
    run(["sh", "-c", "true"], s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_DIR=str(d)))
    assert not d.exists()


def test_rank_names_the_file(shims, probes, tmp_path):
    """With a launcher's rank, the file is r<rank>-<pid>.shimtrace and the header has it."""
    s = shims[0]
    d = tmp_path / "traces"
    p = start(probes, s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_DIR=str(d), RANK="3"), "rounds",
              1, 1, 1)
    p.stdout.readline()
    p.stdin.close()
    assert p.wait(timeout=60) == 0
    assert [f.name for f in files(d)] == [f"r3-{p.pid}.shimtrace"]
    assert only_trace(d).rank == "3"


def test_notice_file_gets_every_notice(shims, probes, tmp_path):
    """SHIMGEN_NOTICE_FILE: each notice is appended there as one line, "[pid N] " first,
    and nothing goes to stderr; the file is owner-only. One that cannot be opened (a
    directory) leaves the notices on stderr."""
    s = shims[0]
    log = tmp_path / "notices.log"
    env = s.env(SHIMGEN_TRACE="bogus", SHIMGEN_NOTICE_FILE=str(log))
    for _ in range(2):
        proc = run([probes / "tracekill", "libcuda.so.1", "fork", "0", "1", "0"], env)
        assert proc.stderr == ""
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and all(re.fullmatch(
        r"\[pid \d+\] shimgen: SHIMGEN_TRACE=bogus: 'bogus' is not a known mode.*", ln)
        for ln in lines), lines
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    proc = run([probes / "tracekill", "libcuda.so.1", "fork", "0", "1", "0"],
               s.env(SHIMGEN_TRACE="bogus", SHIMGEN_NOTICE_FILE=str(tmp_path)))
    assert len(shim_lines(proc.stderr)) == 1


def test_traces_name_the_loaded_driver(shims, probes, tmp_path):
    """A shim built for one driver, SHIMGEN_DRIVER set to another real driver: the JSON, the
    table, the timeline and the binary file all name the loaded driver's version (the
    build-time one stays in the JSON as shim_driver_version)."""
    built, other = shims[0], shims[-1]
    assert built.driver.version != other.driver.version
    d = tmp_path / "traces"
    trace = tmp_path / "trace.json"
    timeline = tmp_path / "timeline.json"
    env = built.env(SHIMGEN_DRIVER=str(other.driver.path), SHIMGEN_TRACE="timeline",
                    SHIMGEN_TRACE_DIR=str(d), SHIMGEN_TRACE_FILE=str(trace),
                    SHIMGEN_TIMELINE_FILE=str(timeline))
    run([probes / "tracekill", "libcuda.so.1", "fork", "0", "1", "0"], env)
    j = json.loads(trace.read_text())
    assert j["driver_version"] == other.driver.version
    assert j["shim_driver_version"] == built.driver.version
    assert json.loads(timeline.read_text())["otherData"]["driver_version"] == (
        other.driver.version)
    t = only_trace(d)
    assert t.driver_version == other.driver.version
    assert t.driver_build_id == j["loaded_build_id"] != j["build_id"]
    env = built.env(SHIMGEN_DRIVER=str(other.driver.path), SHIMGEN_TRACE="1")
    proc = run([probes / "tracekill", "libcuda.so.1", "fork", "0", "1", "0"], env)
    assert f"libcuda {other.driver.version})" in proc.stderr
