"""What a job is doing now, against a real Debian libcuda (no GPU): a user hook that sleeps
inside cuDriverGetVersion makes a call that lasts; the report and `shimgen top` of the running
job list it in flight (thread, seconds), and after SIGKILL say it died inside it; `run
--stall` says so once; three simulated nodes (SHIMGEN_TEST_HOST) join one run directory and
are reported by rank and by host; a node never joins a run of another command or of its own
host; a process on another host is running while its node's heartbeat is fresh."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shimgen.report import shown
from shimgen.trace.cmdline import SHOWN_MAX
from tests.run.test_run import ROOT, _sigint_default, base_env, run_argv

SLEEP_HOOK = r"""#include <stdlib.h>
#include <time.h>
#include <shimgen/hook.h>

/* HOOK_SLEEP=S sleeps S seconds in every call; a negative S up to -S seconds, at random. */
SHIMGEN_HOOK(CUresult, cuDriverGetVersion, (int *version))
{
    const char *s = getenv("HOOK_SLEEP");
    if (s) {
        double d = atof(s);
        if (d < 0)
            d = -d * (rand() / (double)RAND_MAX);
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
    }
    return SHIMGEN_REAL(cuDriverGetVersion)(version);
}
"""
VERSION_CMD = ("import ctypes; v = ctypes.c_int(); "
               "ctypes.CDLL('libcuda.so.1').cuDriverGetVersion(ctypes.byref(v)); print(v.value)")


def shimgen(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shimgen", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)


@pytest.fixture(scope="module")
def hooked(drivers, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(driver, a shim cache holding its sleep-hooked shim, the hook file)."""
    d = tmp_path_factory.mktemp("inflight")
    hook = d / "sleep.c"
    hook.write_text(SLEEP_HOOK)
    driver = drivers[0].libdir / "libcuda.so.1"
    cache = d / "xdg"
    warm = subprocess.run(run_argv(driver, "--hook", str(hook), "-o", str(d / "warm"), "--",
                                   "true"), env=base_env(cache), capture_output=True, text=True,
                          timeout=300)
    assert warm.returncode == 0, warm.stderr
    return driver, cache, hook


def start(hooked, out: Path, *extra: str, sleep: str = "60", cmd: str = VERSION_CMD,
          **env: str) -> subprocess.Popen:
    driver, cache, hook = hooked
    return subprocess.Popen(run_argv(driver, "--hook", str(hook), *extra, "-o", str(out), "--",
                                     sys.executable, "-c", cmd),
                            env=base_env(cache, HOOK_SLEEP=sleep, **env), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_default)


def report_json(path: Path, *args: str) -> dict:
    """`shimgen report --json [--by X] PATH`, in this process (the command line's own path
    is taken by the text reports below)."""
    from shimgen.report.main import report

    by = args[1] if args[:1] == ("--by",) else None
    return json.loads(report([path], by=by, fmt="json"))


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat", "rb") as fh:
                if d.isdigit() and int(fh.read().rsplit(b")", 1)[1].split()[1]) == pid:
                    out.append(int(d))
        except (OSError, IndexError, ValueError):
            continue
    return out


def stop(job: subprocess.Popen, run: Path) -> None:
    """The traced command killed (its `shimgen run` then ends as it does after a crash):
    `run`'s own children, and every process whose trace file's header names it (read again
    while a file is being made)."""
    from shimgen.errors import ShimgenError
    from shimgen.trace import inflight

    deadline = time.monotonic() + 10
    while job.poll() is None:
        pids, pending = set(_children(job.pid)), False
        for f in (run / "traces").glob("*.shimtrace"):
            try:  # the pid its header names ("[r<rank>-]<pid>[-<k>]": the name's is ambiguous)
                got = inflight.read(f)
            except ShimgenError:
                pending = True  # a file being made
                continue
            if not got.complete:
                pids.add(got.pid)
        for pid in pids - {0, 1, os.getpid()}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    try:
        job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        job.communicate()


def wait_group(run: Path, ready=lambda g: True, timeout: float = 60, what: str = "no job"
               ) -> dict:
    """The run's report group once `ready` says so of it (there is none until the trace
    file is made, and none while it is being made)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if list((run / "traces").glob("*.shimtrace")):
            groups = report_json(run)["groups"]
            if groups and ready(groups[0]):
                return groups[0]
        time.sleep(0.1)
    raise AssertionError(f"{what} in {run}")


def wait_in_flight(run: Path, timeout: float = 60) -> dict:
    return wait_group(run, lambda g: g["in_flight"], timeout, "no call in flight")


def test_a_lasting_call_is_in_flight_and_after_sigkill_the_process_died_inside_it(hooked,
                                                                                  tmp_path):
    run = tmp_path / "run"
    job = start(hooked, run)
    try:
        t0 = time.monotonic()
        g = wait_in_flight(run)
        (pid,) = g["running"]
        (call,) = g["in_flight"]
        assert call == {"pid": pid, "tid": pid, "rank": None, "host": call["host"],
                        "function": "cuDriverGetVersion", "seconds": call["seconds"],
                        "state": "running", "last_launch": None}  # (it launched nothing)
        assert 0 <= call["seconds"] <= time.monotonic() - t0 and g["died"] == []
        text = shimgen("report", run).stdout
        assert "1 running" in text and "has been inside cuDriverGetVersion for" in text
        assert f"running    pid {pid}" in text and "did not finish the file" not in text
        by_pid = shimgen("report", "--by", "pid", run).stdout
        assert f"== pid {pid}: {shown(sys.executable)} -c import ctypes;" in by_pid, by_pid
        from shimgen.top.main import once

        top = json.loads(once(run, True))
        assert top["running"] == [pid] and [(c["pid"], c["tid"], c["function"], c["state"])
                                           for c in top["in_flight"]] == [
            (pid, pid, "cuDriverGetVersion", "running")]
        assert top["in_flight"][0]["seconds"] >= call["seconds"]
        os.kill(pid, signal.SIGKILL)
    finally:
        stop(job, run)
    text = shimgen("report", run).stdout
    assert "1 died" in text and "died inside cuDriverGetVersion after" in text, text
    # its first call never returned: said so, in place of an empty table and its errors
    (line,) = [ln for ln in text.splitlines() if ln.startswith("calls ")]
    assert line.startswith(f"calls      none returned: pid {pid} died inside cuDriverGetVersion "
                           "after ") and line.endswith(" s, its first call"), line
    assert "errors: none (no call returned)" in text.splitlines(), text
    assert " time %" not in text and "not recorded" not in text, text
    g = report_json(run)["groups"][0]
    assert g["running"] == [] and g["died"][0]["inside"].startswith(
        "died inside cuDriverGetVersion after ")
    assert [(c["pid"], c["function"], c["state"]) for c in g["in_flight"]] == [
        (pid, "cuDriverGetVersion", "died")]
    top = json.loads(shimgen("top", "--once", "--json", run).stdout)
    assert [d["pid"] for d in top["died"]] == [pid] and top["running"] == []
    assert [(c["pid"], c["function"], c["state"]) for c in top["in_flight"]] == [
        (pid, "cuDriverGetVersion", "died")]
    once = shimgen("top", "--once", run).stdout
    assert "1 died" in once and "died inside cuDriverGetVersion" in once


def test_a_lasting_call_in_calls_mode_is_in_flight_with_its_records_start(hooked, tmp_path):
    """Calls mode's frames keep the call's place in the ring: the age comes from the record's
    entry ticks (read as a start, the place would be an age of days)."""
    run = tmp_path / "run"
    job = start(hooked, run, "--trace", "calls")
    try:
        t0 = time.monotonic()
        g = wait_in_flight(run)
        (pid,) = g["running"]
        (call,) = g["in_flight"]
        assert (call["pid"], call["function"], call["state"]) == (
            pid, "cuDriverGetVersion", "running")
        assert 0 <= call["seconds"] <= time.monotonic() - t0, call
        os.kill(pid, signal.SIGKILL)
    finally:
        stop(job, run)
    g = report_json(run)["groups"][0]
    assert g["died"][0]["inside"].startswith("died inside cuDriverGetVersion after "), g["died"]


def test_stall_is_said_once_when_a_call_lasts_and_again_when_it_ends(hooked, tmp_path):
    run = tmp_path / "run"
    job = start(hooked, run, "--stall", "2", sleep="3.5")
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    said = [line for line in err.splitlines()
            if line.startswith("shimgen: pid ") and "has been inside" in line]
    assert len(said) == 1, err
    command = shown(f"{sys.executable} -c {VERSION_CMD}")
    assert said[0].startswith("shimgen: pid ") and said[0].endswith(
        f" ({command[:SHOWN_MAX - 3]}...) has been inside cuDriverGetVersion for 2 s"
        if len(command) > SHOWN_MAX else f" ({command}) has been inside cuDriverGetVersion "
        "for 2 s"), said
    assert [line for line in err.splitlines() if " left cuDriverGetVersion after " in line]
    assert said[0] in (run / "notices.log").read_text().splitlines()


def test_counts_mode_says_calls_in_progress_are_not_known(hooked, tmp_path):
    run = tmp_path / "run"
    job = start(hooked, run, "--trace", "counts")
    try:
        g = wait_group(run)
        assert g["in_flight"] == [] and g["in_flight_unknown"] == "not known in counts mode"
        assert "in flight  not known in counts mode" in shimgen("report", run).stdout
    finally:
        stop(job, run)


# ---- one run, many nodes --------------------------------------------------------------

def test_three_nodes_join_one_run_and_are_reported_by_rank_and_by_host(hooked, tmp_path):
    run = tmp_path / "job"
    jobs = [start(hooked, run, sleep="1", SHIMGEN_TEST_HOST=f"node{i}", RANK=str(i))
            for i in range(3)]
    for j in jobs:
        _, err = j.communicate(timeout=120)
        assert j.returncode == 0, err
    tops = [p for p in (run, *(run / f"node{i}" for i in range(3))) if (p / "run.json").is_file()]
    assert len(tops) == 3 and all(json.loads((p / "run.json").read_text())["end"] for p in tops)
    hosts = sorted(json.loads((p / "run.json").read_text())["host"] for p in tops)
    assert hosts == ["node0", "node1", "node2"]
    for p in tops:  # each node's own files, owner-only
        assert (p / "traces").stat().st_mode & 0o777 == 0o700
        assert len(list((p / "traces").glob("*.shimtrace"))) == 1
    by_host = report_json(run, "--by", "host")["groups"]
    assert [(g["group"], g["ranks"], g["processes"]) for g in by_host] == [
        ("node0", ["0"], 1), ("node1", ["1"], 1), ("node2", ["2"], 1)]
    by_rank = report_json(run, "--by", "rank")["groups"]
    assert [(g["group"], g["functions"][0]["calls"]) for g in by_rank] == [
        ("0", 1), ("1", 1), ("2", 1)]
    text = shimgen("report", run).stdout
    assert "processes  3, ranks 0-2: 3 complete" in text


def test_a_node_never_joins_its_own_hosts_run_another_command_or_an_ended_run(hooked,
                                                                              tmp_path):
    run = tmp_path / "job"
    driver, cache, hook = hooked
    first = start(hooked, run, SHIMGEN_TEST_HOST="a")
    try:
        wait_in_flight(run)
        for host, cmd, why in (("a", VERSION_CMD, "a run of this host already"),
                               ("b", VERSION_CMD + "#", "a run of another command")):
            p = subprocess.run(run_argv(driver, "--hook", str(hook), "-o", str(run), "--",
                                        sys.executable, "-c", cmd),
                               env=base_env(cache, SHIMGEN_TEST_HOST=host), capture_output=True,
                               text=True, timeout=120)
            assert p.returncode == 1 and why in p.stderr and "exists and is not empty" in \
                p.stderr, p.stderr
        assert sorted(os.listdir(run)) == ["heartbeat", "notices.log", "run.json", "traces"]
    finally:
        stop(first, run)
    ended = subprocess.run(run_argv(driver, "--hook", str(hook), "-o", str(run), "--",
                                    sys.executable, "-c", VERSION_CMD),
                           env=base_env(cache, SHIMGEN_TEST_HOST="c"), capture_output=True,
                           text=True, timeout=120)
    assert ended.returncode == 1 and "holds a finished run" in ended.stderr  # --force: a new one


def test_a_process_of_another_host_runs_while_its_nodes_heartbeat_is_fresh(hooked, tmp_path):
    """A trace whose boot id is not this machine's is judged by its node's heartbeat."""
    from shimgen.runenv import trace_header_layout
    from shimgen.trace import job

    run = tmp_path / "run"
    p = start(hooked, run)
    try:
        wait_in_flight(run)
        copy = tmp_path / "copy"
        shutil.copytree(run, copy)
    finally:
        stop(p, run)
    (f,) = (copy / "traces").glob("*.shimtrace")
    at = {name: off for name, _, _, off, _ in trace_header_layout()}["boot_id"]
    data = bytearray(f.read_bytes())
    data[at:at + 40] = b"another-boot".ljust(40, b"\0")
    f.write_bytes(bytes(data))
    rec = json.loads((copy / "run.json").read_text())
    rec["end"] = None
    (copy / "run.json").write_text(json.dumps(rec))
    for age, want in ((0, job.RUNNING), (60, job.DIED)):
        (copy / "heartbeat").write_text(f"{time.time_ns() - age * 10**9:020d}\n")
        (proc,), _ = job.snapshot(copy)
        assert proc.state == want and [c.function for c in proc.calls] == [
            "cuDriverGetVersion"]


# ---- the reader races the job ---------------------------------------------------------

BUSY = Path(__file__).with_name("busy_inflight.py")


def _read_map(path: Path) -> dict[int, str]:
    out = {}
    for line in path.read_text().splitlines():
        tid, fn = line.split()
        out[int(tid)] = fn
    return out


def race(hooked, tmp_path: Path, reads: int, seconds: float) -> int:
    """Reads the busy job's trace files `reads` times at random moments while it runs; every
    call read in flight is its thread's own function and began less than the idle pause
    (1.2 s) ago: never a wrong function, never a call that had ended (a frame given back
    keeps its last call's start, and the thread idles 1.2 s outside any call at times).
    The job runs long enough for the reads on a loaded machine (`seconds`), and is killed
    once they are done. Returns the calls seen in flight."""
    from random import Random

    from shimgen.errors import ShimgenError
    from shimgen.trace import inflight

    rnd = Random(os.getpid())
    run, mapfile = tmp_path / "run", tmp_path / "map.txt"
    mapfile.write_text("")
    job = start(hooked, run, sleep="-0.02",
                cmd=f"import runpy, sys; sys.argv = ['busy', '{seconds}', '{mapfile}']; "
                    f"runpy.run_path('{BUSY}', run_name='__main__')")
    seen = done = 0
    finished: set[Path] = set()  # complete, or its process gone: no call can be in flight
    try:
        deadline = time.monotonic() + 60
        while not list(run.glob("traces/*.shimtrace")) and time.monotonic() < deadline:
            time.sleep(0.05)
        # `reads` at least, more (up to 20 times as many) until a few calls were seen in
        # flight: on a loaded machine the job's threads may be between calls for a while
        while (done < reads or (seen <= 5 and done < 20 * reads)) and job.poll() is None:
            files = [f for f in (run / "traces").glob("*.shimtrace") if f not in finished]
            if not files:  # between a process's end and its child's file
                time.sleep(0.01)
                continue
            f = rnd.choice(files)
            try:
                got = inflight.read(f)
            except ShimgenError:
                continue  # a file being made (no magic yet)
            now = time.monotonic_ns()
            done += 1
            if got.complete or not os.path.exists(f"/proc/{got.pid}"):
                finished.add(f)
                continue
            tids = None
            for c in got.calls:
                age = (now - c.mono_ns) / 1e9
                assert -0.01 < age < 1.0, (f.name, c.tid, c.function, age)
                tids = tids or _read_map(mapfile)
                assert tids.get(c.tid) == c.function, (f.name, c.tid, c.function)
                seen += 1
            time.sleep(rnd.random() * 0.003)
    finally:
        stop(job, run)
    assert done >= reads, f"the job ended after {done} reads"
    return seen


def test_a_reader_racing_a_busy_job_never_sees_a_wrong_function_or_an_ended_call(hooked,
                                                                                 tmp_path):
    assert race(hooked, tmp_path, reads=300, seconds=300) > 5


def test_the_same_race_read_thousands_of_times(hooked, tmp_path):
    assert race(hooked, tmp_path, reads=5000, seconds=600) > 500


@pytest.mark.parametrize("args,status,words", [
    (["top", "--json", "."], 2, "top --json goes with --once"),
    (["top", "--once", "/nonexistent-run"], 1, "no such directory"),
    (["run", "--stall", "soon", "--", "true"], 2, "--stall 'soon': a number of seconds"),
    (["run", "--stall", "0", "--", "true"], 2, "a number of seconds above 0"),
])
def test_bad_top_and_stall_arguments_are_one_line(args, status, words):
    p = shimgen(*args)
    assert p.returncode == status and p.stderr.count("\n") == 1 and words in p.stderr, p.stderr


def test_top_on_a_terminal_redraws_until_q(tmp_path):
    """On a terminal, top redraws every second and leaves at `q` (exit 0), its terminal
    restored."""
    import pty
    import select

    (tmp_path / "traces").mkdir()
    pid, fd = pty.fork()
    if pid == 0:  # the child: shimgen top on the pty
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "shimgen", "top", str(tmp_path)])
    seen = b""
    deadline = time.monotonic() + 30
    while b"(q to leave)" not in seen and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.5)[0]:
            seen += os.read(fd, 4096)
    assert b"shimgen top: " in seen and b"0 processes" in seen, seen
    os.write(fd, b"q")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if select.select([fd], [], [], 0.2)[0]:
            try:
                os.read(fd, 4096)
            except OSError:
                pass
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("top did not leave at q")
    os.close(fd)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
