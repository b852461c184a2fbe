"""Faults at run time, the process side: fork and exec, dlclose and reopen, threads that exit
(also inside a driver call), exits from signal handlers, kills, `_exit`, and the
environment read once. CPU only: real Debian drivers and the fake driver; the probes are
tests/c/faults_*.c."""


import json
import os
import random
import re
import select
import signal
import subprocess
from pathlib import Path

import pytest

from tests.faultkit import (
    clean_env,
    run,
    shim_lines,
    written_to,
)

# ---- processes: fork, exec, dlclose, threads, signals ----

@pytest.mark.parametrize("mode", ["1", "time"])
def test_fork_and_exec_children_write_their_own_trace(shims, probes, tmp_path, mode):
    """The parent calls, then 8 children run at once: 4 forked (they call and exit), 4 forked
    and exec'd (a new program under the inherited LD_PRELOAD). Each process writes its own
    whole file: the first of the parent and the exec'd programs to write takes the plain
    name; every other process, and every forked copy of the parent, writes <name>.<pid>;
    nothing else is written, and each says where it wrote. (Fork alone:
    tests/runtime/test_shim.py test_calls_in_forked_children.)"""
    s = shims[0]
    out_dir = tmp_path / "traces"
    out_dir.mkdir()
    trace = out_dir / "trace.json"
    proc = run([probes / "faults_calls", "forkexec", "8", "5"],
               s.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_FILE=str(trace)))
    parent = int(re.search(r"^pid parent (\d+) calls 5 rc 0 ", proc.stdout, re.M).group(1))
    kinds = {int(m.group(1)): m.group(2) for m in
             re.finditer(r"^child (\d+) (forked|exec) (\d+)$", proc.stdout, re.M)}
    calls = {int(m.group(1)): int(m.group(3)) for m in
             re.finditer(r"^child (\d+) (forked|exec) (\d+)$", proc.stdout, re.M)}
    assert len(calls) == 8
    calls[parent] = 5
    owner = json.loads(trace.read_text())["pid"]
    assert owner == parent or kinds[owner] == "exec"
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        ["trace.json"] + [f"trace.json.{pid}" for pid in calls if pid != owner])
    for pid, n in calls.items():
        data = json.loads((trace if pid == owner else Path(f"{trace}.{pid}")).read_text())
        assert (data["pid"], data["calls"]) == (pid, {"cuDriverGetVersion": n})
        if mode == "time":
            assert data["time"]["cuDriverGetVersion"]["calls"] == n
    assert sorted(written_to(proc.stderr)) == sorted(str(p) for p in out_dir.iterdir())
    assert shim_lines(proc.stderr) == []


def test_wrapper_process_leaves_the_plain_name_to_the_program(shims, probes, tmp_path):
    """A wrapper (sh -c, timeout, a launcher) loads the shim first but never calls the
    driver, so it writes nothing: the program it starts, the first process of the job to
    write, gets the plain SHIMGEN_TRACE_FILE name, and says so. The next job replaces that
    file (an earlier job's file is the user's name to overwrite); in a job of two programs
    the second writes <name>.<pid>."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    env = s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace))
    script = '"$0" calls 3; status=$?; exit $status'
    proc = run(["/bin/sh", "-c", script, probes / "faults_calls"], env)
    assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 3}
    assert os.listdir(tmp_path) == ["trace.json"]
    assert written_to(proc.stderr) == [str(trace)] and shim_lines(proc.stderr) == []
    proc = run(["/bin/sh", "-c", '"$0" calls 4 && "$0" calls 5', probes / "faults_calls"], env)
    second = int(re.findall(r"^pid main (\d+) calls 5 ", proc.stdout, re.M)[0])
    assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 4}
    other = json.loads(Path(f"{trace}.{second}").read_text())
    assert (other["pid"], other["calls"]) == (second, {"cuDriverGetVersion": 5})
    assert written_to(proc.stderr) == [str(trace), f"{trace}.{second}"]
    quiet = run(["/bin/sh", "-c", script, probes / "faults_calls"],
                {**env, "SHIMGEN_QUIET": "1"})
    assert quiet.stderr == "" and json.loads(trace.read_text())["calls"] == {
        "cuDriverGetVersion": 3}
    pattern = tmp_path / "t.%p.json"
    run(["/bin/sh", "-c", '"$0" calls 2; status=$?; exit $status', probes / "faults_calls"],
        s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(pattern)))
    per_pid = list(tmp_path.glob("t.*.json"))
    assert len(per_pid) == 1
    assert json.loads(per_pid[0].read_text())["calls"] == {"cuDriverGetVersion": 2}


def test_writers_at_the_same_moment_take_the_plain_name_once(shims, probes, tmp_path):
    """200 jobs, each of 4 programs (forked and exec'd) that load the driver, wait at one
    gate and write their traces at nearly the same moment (released at once, then 0 to 499
    us apart at random), all in one directory, so every
    job but the first finds an earlier job's file at the plain name. Every other job runs
    with a fake slow rename preloaded (0 to 999 us before each rename, at random), so that
    writers meet between their look at the name and their rename, even on a busy machine
    with few CPUs. In each job exactly one process takes the plain name and each other
    writes <name>.<pid>: no trace is lost or written over, none is written twice."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    env = s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace))
    slow = {**env, "LD_PRELOAD": f"{probes / 'libslow_rename_fake.so'}:{env['LD_PRELOAD']}"}
    rng = random.Random(20261130)
    for i in range(200):
        before = set(os.listdir(tmp_path))
        proc = run([probes / "faults_calls", "together", "4", "3", rng.randrange(1 << 30)],
                   slow if i % 2 else env)
        calls = {int(m.group(1)): int(m.group(2)) for m in
                 re.finditer(r"^child (\d+) together (\d+)$", proc.stdout, re.M)}
        owner = json.loads(trace.read_text())
        assert owner["pid"] in calls and owner["calls"] == {
            "cuDriverGetVersion": calls[owner["pid"]]}, (i, owner)
        others = {f"trace.json.{pid}" for pid in calls if pid != owner["pid"]}
        assert set(os.listdir(tmp_path)) - before - {"trace.json"} == others, (i, proc.stderr)
        for name in others:
            data = json.loads((tmp_path / name).read_text())
            assert data["calls"] == {"cuDriverGetVersion": calls[data["pid"]]}
            (tmp_path / name).unlink()  # a later job may be given the same pid
        assert sorted(written_to(proc.stderr)) == sorted(
            [str(trace)] + [str(tmp_path / n) for n in others]), (i, proc.stderr)
        assert shim_lines(proc.stderr) == []


@pytest.mark.parametrize("mode", ["1", "time"])
@pytest.mark.parametrize("thread", [False, True], ids=["main", "thread-after-close"])
def test_dlclose_and_reopen_many_times(shims, probes, tmp_path, mode, thread):
    """300 cycles of dlopen, call, dlclose, by three names (libcuda.so.1, libcuda.so and the
    absolute path of the real driver, all the preloaded shim). With a thread that calls and
    only exits after the dlclose. Every call works; the totals are exact."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    names = ["libcuda.so.1", "libcuda.so", str(s.driver.path)]
    proc = run([probes / "faults_reopen", "300", *(["thread"] if thread else []), *names],
               s.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_FILE=str(trace)))
    calls = 900 * (2 if thread else 1)
    assert f"cycles 300 opens 900 calls {calls} failures 0" in proc.stdout
    assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": calls}


@pytest.mark.parametrize("mode", ["1", "time"])
def test_dlclose_of_a_shim_loaded_without_preload(shims, probes, tmp_path, mode):
    s = shims[0]
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libcuda.so.1").symlink_to(s.library)
    trace = tmp_path / "trace.json"
    env = dict(clean_env(), LD_LIBRARY_PATH=str(lib), SHIMGEN_TRACE=mode,
               SHIMGEN_TRACE_FILE=str(trace))
    proc = run([probes / "faults_reopen", "50", "thread", "libcuda.so.1"], env, ok=False)
    assert proc.returncode == 0, proc.stderr
    assert "cycles 50 opens 50 calls 100 failures 0" in proc.stdout
    assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 100}


@pytest.mark.parametrize("mode", ["1", "time"])
def test_threads_exit_while_tracing(shim, probes, tmp_path, mode):
    """20 waves of 24 threads that call and exit (return, pthread_exit, detached) while the
    main thread keeps calling: every call is counted, exactly."""
    trace = tmp_path / "trace.json"
    proc = run([probes / "faults_threads", "libcuda.so.1", "20", "24", "200"],
               shim.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_FILE=str(trace)))
    m = re.search(r"^threads 480 thread_calls 96000 main_calls (\d+) host_funcs 0 bad 0$",
                  proc.stdout, re.M)
    assert m, proc.stdout
    data = json.loads(trace.read_text())
    assert data["calls"] == {"cuDriverGetVersion": 96000 + int(m.group(1))}
    if mode == "time":
        assert data["untimed_calls"] == 0
        assert data["time"]["cuDriverGetVersion"]["calls"] == 96000 + int(m.group(1))


@pytest.mark.parametrize("mode", ["1", "time"])
def test_thread_exits_inside_a_driver_call(fake_shim, probes, tmp_path, mode):
    """Fake driver: each thread ends inside cuLaunchHostFunc, whose host function calls
    pthread_exit; under SHIMGEN_TRACE=time that call never returns through the shim. No
    crash; every call is counted (the calls that never returned are counted, not timed)."""
    trace = tmp_path / "trace.json"
    env = dict(clean_env(), LD_PRELOAD=str(fake_shim), SHIMGEN_TRACE=mode,
               SHIMGEN_TRACE_FILE=str(trace))
    proc = run([probes / "faults_threads", "libcuda.so.1", "10", "16", "100", "callback-exit"],
               env)
    m = re.search(r"^threads 160 thread_calls 16000 main_calls (\d+) host_funcs 160 bad 0$",
                  proc.stdout, re.M)
    assert m, proc.stdout
    data = json.loads(trace.read_text())
    assert data["calls"] == {"cuDriverGetVersion": 16000 + int(m.group(1)),
                             "cuLaunchHostFunc": 160}
    if mode == "time":
        assert data["time"]["cuLaunchHostFunc"]["calls"] == 160


def run_to_signal(probe: Path, how: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Start faults_sigexit, wait for "ready", send SIGTERM when `how` asks for it, and wait
    for the end. Every wait has a time limit: a hang fails the test."""
    proc = subprocess.Popen([str(probe), how, "20000"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the probe never got ready"
        line = proc.stdout.readline()
        assert line.startswith("ready 20000 bad 0"), line
        if how in ("term", "nohandler"):
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, line + out, err


@pytest.mark.parametrize("mode", ["1", "time"])
@pytest.mark.parametrize("how", ["alarm", "term"])
def test_exit_from_a_signal_handler_writes_a_whole_trace(shims, probes, tmp_path, how, mode):
    """exit() in a SIGALRM or SIGTERM handler while four threads and the interrupted main
    thread are calling the driver. Defined behaviour: exit() runs the atexit handler, so the
    trace is written, whole: valid JSON with a snapshot of the counts (at least the calls made
    before the signal; threads still calling may add some while it is written). Nothing
    hangs. Ten runs each."""
    s = shims[0]
    for i in range(10):
        trace = tmp_path / f"trace{i}.json"
        rc, _, err = run_to_signal(probes / "faults_sigexit", how,
                                   s.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_FILE=str(trace)))
        assert rc == 7, err
        data = json.loads(trace.read_text())
        assert list(data["calls"]) == ["cuDriverGetVersion"]
        assert data["calls"]["cuDriverGetVersion"] >= 20000
        if mode == "time":
            assert data["time"]["cuDriverGetVersion"]["calls"] >= 20000
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"trace{i}.json" for i in range(10)]


def test_killed_by_a_signal_writes_no_trace(shims, probes, tmp_path):
    """SIGTERM with its default action: no atexit handler runs, so there is no trace file,
    not even a partial one."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    rc, _, err = run_to_signal(probes / "faults_sigexit", "nohandler",
                               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)))
    assert rc == -signal.SIGTERM
    assert list(tmp_path.iterdir()) == [] and err == ""


@pytest.mark.parametrize("to_file", [True, False], ids=["file", "stderr"])
def test_underscore_exit_writes_no_trace(shims, probes, tmp_path, to_file):
    """_exit() runs no atexit handler: no trace, by design. The same holds for a process
    killed by SIGKILL, and for the calls a process made before it called exec."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    env = s.env(SHIMGEN_TRACE="1", **({"SHIMGEN_TRACE_FILE": str(trace)} if to_file else {}))
    rc, _, err = run_to_signal(probes / "faults_sigexit", "_exit", env)
    assert rc == 7
    assert list(tmp_path.iterdir()) == [] and err == ""


def test_environment_is_read_once_when_the_shim_loads(shims, probes, tmp_path):
    """The program changes SHIMGEN_DRIVER, SHIMGEN_TRACE, SHIMGEN_TRACE_FILE and
    SHIMGEN_QUIET in its own environment before its first driver call: nothing changes. The
    shim read them once, when it was loaded, and never reads them again."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    proc = run([probes / "faults_calls", "setenv", "7"],
               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)))
    assert re.search(rf"^pid main \d+ calls 7 rc 0 version {s.cuda_version}$", proc.stdout,
                     re.M)
    assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 7}

