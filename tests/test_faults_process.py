"""Faults at run time, the process side: fork and exec, dlclose and reopen, threads that exit
(also inside a driver call), exits from signal handlers, kills, `_exit`, and the
environment read once. CPU only: real Debian drivers and the fake driver; the probes are
tests/c/faults_*.c."""


import json
import re
import select
import signal
import subprocess
from pathlib import Path

import pytest
from faultkit import (
    clean_env,
    run,
    shim_lines,
)

# ---- processes: fork, exec, dlclose, threads, signals ----

@pytest.mark.parametrize("mode", ["1", "time"])
def test_fork_and_exec_children_write_their_own_trace(shims, probes, tmp_path, mode):
    """The parent calls, then 8 children run at once: 4 forked (they call and exit), 4 forked
    and exec'd (a new program under the inherited LD_PRELOAD). Each process writes its own
    whole file: the parent the plain name, each child <name>.<pid>; nothing else is
    written. (Fork alone: tests/test_shim.py test_calls_in_forked_children.)"""
    s = shims[0]
    out_dir = tmp_path / "traces"
    out_dir.mkdir()
    trace = out_dir / "trace.json"
    proc = run([probes / "faults_calls", "forkexec", "8", "5"],
               s.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_FILE=str(trace)))
    parent = int(re.search(r"^pid parent (\d+) calls 5 rc 0 ", proc.stdout, re.M).group(1))
    children = {int(m.group(1)): (m.group(2), int(m.group(3))) for m in
                re.finditer(r"^child (\d+) (forked|exec) (\d+)$", proc.stdout, re.M)}
    assert sorted(k for k, _ in children.values()) == ["exec"] * 4 + ["forked"] * 4
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        ["trace.json"] + [f"trace.json.{pid}" for pid in children])
    data = json.loads(trace.read_text())
    assert (data["pid"], data["calls"]) == (parent, {"cuDriverGetVersion": 5})
    for pid, (_, n) in children.items():
        child = json.loads(Path(f"{trace}.{pid}").read_text())
        assert (child["pid"], child["calls"]) == (pid, {"cuDriverGetVersion": n})
        if mode == "time":
            assert child["time"]["cuDriverGetVersion"]["calls"] == n
    assert shim_lines(proc.stderr) == []


def test_wrapper_process_keeps_the_plain_trace_name(shims, probes, tmp_path):
    """Decided behaviour (docs/multigpu.md, README): the first process of a job that loads the
    shim owns the plain SHIMGEN_TRACE_FILE name, even a wrapper (sh -c, timeout, a launcher)
    that never calls the driver and so writes nothing; the program it starts writes
    <name>.<pid>. Letting every exec'd program claim the plain name would make sibling
    workers of one launcher overwrite each other. Use %p or %r under launchers."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    run(["/bin/sh", "-c", '"$0" calls 3; status=$?; exit $status', probes / "faults_calls"],
        s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)))
    assert not trace.exists()
    written = list(tmp_path.glob("trace.json.*"))
    assert len(written) == 1
    assert json.loads(written[0].read_text())["calls"] == {"cuDriverGetVersion": 3}
    pattern = tmp_path / "t.%p.json"
    run(["/bin/sh", "-c", '"$0" calls 2; status=$?; exit $status', probes / "faults_calls"],
        s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(pattern)))
    per_pid = list(tmp_path.glob("t.*.json"))
    assert len(per_pid) == 1
    assert json.loads(per_pid[0].read_text())["calls"] == {"cuDriverGetVersion": 2}


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

