"""`shimgen run` against a real Debian libcuda (no GPU): the command's exit status passed on
as a shell would, the signals sent to `run` reaching the command exactly once (and a
terminal's Ctrl-C not twice), the command's environment, the run directory and run.json, and
the command that cannot be started. The shim cache: tests/run/test_run_cache.py."""

from __future__ import annotations

import json
import os
import pty
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shimgen.run.directory import make_run_dir

ROOT = Path(__file__).resolve().parents[2]


def _sigint_default() -> None:
    """SIGINT, SIGTERM and SIGHUP at their defaults and none blocked, as a terminal's shell
    starts a command, whatever the test runner was started with (`nohup python -m pytest`
    ignores SIGHUP, a background job of a script SIGINT): `run` passes an ignored one on
    ignored, by design (test_nohup_reaches_the_command)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def base_env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("SHIMGEN_")}
    env["XDG_CACHE_HOME"] = str(cache)
    env.update(extra)
    return env


def run_argv(driver: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "shimgen", "run", "--driver", str(driver), *args]


def shimgen_run(driver: Path, cache: Path, *args: str, cwd: Path | None = None,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(run_argv(driver, *args), env=env or base_env(cache), cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=_sigint_default)


@pytest.fixture(scope="module")
def driver(drivers) -> Path:
    return drivers[0].libdir / "libcuda.so.1"


@pytest.fixture(scope="module")
def cache(driver, tmp_path_factory) -> Path:
    """A shim cache with the driver's plain shim in it."""
    home = tmp_path_factory.mktemp("xdg")
    warm = tmp_path_factory.mktemp("warm") / "run"  # a place of its own each time it is made
    proc = shimgen_run(driver, home, "-o", str(warm), "--", "true")
    assert proc.returncode == 0, proc.stderr
    return home


def _record(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


# ---- exit status -------------------------------------------------------------------------

@pytest.mark.parametrize("script,status,sig", [
    ("exit 0", 0, None), ("exit 3", 3, None),
    ("kill -TERM $$", 128 + signal.SIGTERM, signal.SIGTERM),
    ("kill -KILL $$", 128 + signal.SIGKILL, signal.SIGKILL),
])
def test_exit_status_is_the_commands(driver, cache, tmp_path, script, status, sig):
    proc = shimgen_run(driver, cache, "-o", str(tmp_path / "r"), "--", "sh", "-c", script)
    assert proc.returncode == status, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("shimgen: run: shim ") and "(cached)" in lines[0], lines
    assert "Traceback" not in proc.stderr
    rec = _record(tmp_path / "r")
    assert rec["exit"]["status"] == status
    assert rec["exit"]["signal"] == sig
    assert rec["exit"]["code"] == (None if sig else status)
    assert rec["end"] and rec["start"] <= rec["end"]


@pytest.mark.parametrize("command,status,says", [
    (["no-such-command-for-shimgen"], 127, "no-such-command-for-shimgen: command not found"),
    (["./not-executable"], 126, "./not-executable: permission denied"),
    (["./a-directory"], 126, "./a-directory: is a directory"),
])
def test_a_command_that_cannot_start_is_one_line_like_a_shell(driver, cache, tmp_path, command,
                                                               status, says):
    (tmp_path / "not-executable").write_text("#!/bin/sh\n")
    (tmp_path / "a-directory").mkdir()
    proc = shimgen_run(driver, cache, "--", *command, cwd=tmp_path)
    assert proc.returncode == status
    assert proc.stderr.splitlines() == [f"shimgen: error: {says}"]
    assert not (tmp_path / "shimgen-runs").exists()  # nothing made for a run that never was


# ---- the command's environment ---------------------------------------------------------

def _env_of(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@pytest.mark.parametrize("mode", ["counts", "time", "timeline"])
def test_the_command_gets_the_shim_first_and_the_run_directory(driver, cache, tmp_path, mode):
    other = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    env = base_env(cache, LD_PRELOAD=other, SHIMGEN_TRACE_FILE="/tmp/elsewhere.json",
                   SHIMGEN_TRACE_JOB="1", SHIMGEN_GATES="gdr")
    run_dir = tmp_path / "r"
    proc = shimgen_run(driver, cache, "--trace", mode, "-o", str(run_dir), "--", "env", env=env)
    assert proc.returncode == 0, proc.stderr
    got = _env_of(proc.stdout)
    rec = _record(run_dir)
    shim = rec["shim"]["path"]
    assert got["LD_PRELOAD"] == f"{shim}:{other}"  # prepended, what was there kept
    assert got["SHIMGEN_TRACE"] == mode
    assert got["SHIMGEN_TRACE_DIR"] == str(run_dir / "traces")
    assert got["SHIMGEN_NOTICE_FILE"] == str(run_dir / "notices.log")
    assert got["SHIMGEN_DRIVER"] == str(driver)
    if mode == "timeline":
        assert got["SHIMGEN_TIMELINE_FILE"] == str(run_dir / "timeline" / "%p.json")
        assert (run_dir / "timeline").is_dir()
    else:
        assert "SHIMGEN_TIMELINE_FILE" not in got
        assert not (run_dir / "timeline").exists()
    for gone in ("SHIMGEN_TRACE_FILE", "SHIMGEN_TRACE_JOB", "SHIMGEN_GATES"):
        assert gone not in got, gone
    assert rec["environment"] == {k: got[k] for k in rec["environment"]}
    assert rec["command"] == ["env"] and rec["trace"] == mode and rec["cwd"] == str(ROOT)
    assert rec["driver"]["version"] == "535.261.03"
    assert rec["driver"]["build_id"] == rec["shim"]["key"]["driver_build_id"]
    assert Path(shim).is_file() and Path(shim).parent.name == rec["shim"]["cache_entry"]
    for p in (run_dir, run_dir / "traces"):
        assert p.stat().st_mode & 0o777 == 0o700, p
    for p in (run_dir / "run.json", run_dir / "notices.log", run_dir / "heartbeat"):
        assert p.stat().st_mode & 0o777 == 0o600, p
    assert sorted(os.listdir(run_dir)) == sorted(
        ["run.json", "notices.log", "traces", "heartbeat"]
        + (["timeline"] if mode == "timeline" else []))


def test_without_a_preload_before_it_is_the_shim_alone(driver, cache, tmp_path):
    proc = shimgen_run(driver, cache, "-o", str(tmp_path / "r"), "--", "env")
    assert _env_of(proc.stdout)["LD_PRELOAD"] == _record(tmp_path / "r")["shim"]["path"]


# ---- the run directory -----------------------------------------------------------------

def test_an_existing_directory_with_files_is_refused(driver, cache, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "mine").write_text("keep")
    proc = shimgen_run(driver, cache, "-o", str(out), "--", "true")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"shimgen: error: run directory {out}: exists and is not empty; name a new or empty "
        "directory (nothing is overwritten)"]
    assert os.listdir(out) == ["mine"] and (out / "mine").read_text() == "keep"


def test_a_symlink_is_refused_and_an_empty_directory_taken(driver, cache, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    proc = shimgen_run(driver, cache, "-o", str(link), "--", "true")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"shimgen: error: run directory {link}: is a symbolic link; name a directory"]
    assert os.listdir(target) == []
    proc = shimgen_run(driver, cache, "-o", str(target), "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert target.stat().st_mode & 0o777 == 0o700 and (target / "run.json").is_file()


def test_default_run_directories_are_new_and_private(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    now = time.time()
    first = make_run_dir(None, "/usr/bin/python3", now)
    second = make_run_dir(None, "python3", now)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    assert first == tmp_path / "shimgen-runs" / f"{stamp}-python3"
    assert second == tmp_path / "shimgen-runs" / f"{stamp}-python3-2"
    for p in (first, second, tmp_path / "shimgen-runs"):
        assert p.stat().st_mode & 0o777 == 0o700
    assert make_run_dir(None, "../../we ird", now).name == f"{stamp}-we_ird"


# ---- signals ---------------------------------------------------------------------------

def _read_until(fd: int, want: str, buf: list[str], timeout: float = 60.0) -> str:
    """Read `fd` until a line holding `want`; that line from `want` on (a terminal echoes
    ^C before the line that follows it)."""
    deadline = time.monotonic() + timeout
    while True:
        for line in "".join(buf).splitlines(keepends=True):
            if want in line and line.endswith("\n"):
                return line[line.index(want):].strip()
        left = deadline - time.monotonic()
        assert left > 0, f"no {want!r} in {''.join(buf)!r}"
        if select.select([fd], [], [], left)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # a pty whose other side is gone
                chunk = b""
            assert chunk, f"no {want!r} in {''.join(buf)!r}"
            buf.append(chunk.decode(errors="replace"))


def _counts(line: str) -> dict[str, int]:
    w = line.split()
    return {w[i]: int(w[i + 1]) for i in (1, 3, 5)}


NAMES = {signal.SIGINT: "INT", signal.SIGTERM: "TERM", signal.SIGHUP: "HUP"}


def test_signals_sent_to_run_reach_the_command_exactly_once(driver, cache, probes, tmp_path):
    """SIGINT, SIGTERM and SIGHUP sent to `run` by another process, at random moments of the
    command's life, one or two at a time: the command receives each exactly once, starts
    with nothing blocked and the dispositions at their defaults, and `run` exits with its
    status."""
    rng = random.Random(os.getpid())
    for i in range(120):
        sigs = rng.choices(list(NAMES), k=rng.choice((1, 1, 2)))
        proc = subprocess.Popen(run_argv(driver, "-o", str(tmp_path / f"r{i}"), "--",
                                         str(probes / "runsignals"), "5"),
                                env=base_env(cache), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, preexec_fn=_sigint_default)
        buf: list[str] = []
        start = _read_until(proc.stdout.fileno(), "start", buf)
        assert start == "start blocked 0 pipe 1 int 1 term 1 hup 1", start
        child = int(_read_until(proc.stdout.fileno(), "ready", buf).split()[1])
        want = dict.fromkeys(NAMES.values(), 0)
        for sig in sigs:
            time.sleep(rng.uniform(0, 0.01))
            proc.send_signal(sig)
            want[NAMES[sig]] += 1
            # the next signal only once this one arrived: two pending ones would merge
            while _counts(_read_until(proc.stdout.fileno(), "now", buf, 10)) != want:
                buf = ["".join(buf).split("now", 1)[1].split("\n", 1)[1]]
        os.kill(child, signal.SIGUSR1)
        got = _counts(_read_until(proc.stdout.fileno(), "got", buf))
        proc.wait(timeout=60)
        err = proc.stderr.read().decode()
        assert got == want, (i, sigs, got, err)
        assert proc.returncode == 5, (i, proc.returncode, err)
        record = _record(tmp_path / f"r{i}")["signals"]
        assert [(r["signal"], r["passed_on"], r["sender_pid"]) for r in record] == \
            [(f"SIG{NAMES[s]}", True, os.getpid()) for s in sigs], record


def test_a_terminals_ctrl_c_reaches_the_command_once(driver, cache, probes, tmp_path):
    """Ctrl-C on a terminal goes to the whole foreground process group, `run` and the
    command both: `run` must not forward it a second time. Then `run` exits with the
    command's status, not as interrupted."""
    for i in range(15):
        pid, fd = pty.fork()
        if pid == 0:  # the child: a session of its own, the pty its terminal
            try:
                _sigint_default()
                os.execve(sys.executable, run_argv(driver, "-o", str(tmp_path / f"r{i}"), "--",
                                                   str(probes / "runsignals"), "4"),
                          base_env(cache))
            finally:
                os._exit(126)
        try:
            buf: list[str] = []
            child = int(_read_until(fd, "ready", buf).split()[1])
            time.sleep(random.uniform(0, 0.02))
            os.write(fd, b"\x03")  # the terminal's interrupt character
            assert _counts(_read_until(fd, "now", buf, 10)) == {"INT": 1, "TERM": 0, "HUP": 0}
            os.kill(child, signal.SIGUSR1)
            got = _counts(_read_until(fd, "got", buf))
        finally:
            _, status = os.waitpid(pid, 0)
            os.close(fd)
        assert got == {"INT": 1, "TERM": 0, "HUP": 0}, (i, "".join(buf))
        assert os.waitstatus_to_exitcode(status) == 4, (i, "".join(buf))
        assert "interrupted" not in "".join(buf)
        # `run` got it from the kernel (SI_KERNEL, 0x80) and did not pass it on. (The count
        # above alone could miss a second delivery: two SIGINTs pending at once are one.)
        assert _record(tmp_path / f"r{i}")["signals"] == [
            {"signal": "SIGINT", "si_code": 0x80, "sender_pid": 0, "passed_on": False}]


def test_nohup_reaches_the_command(driver, cache, probes, tmp_path):
    """`nohup shimgen run -- CMD` (nohup itself, started with SIGHUP at its default): the
    command starts with SIGHUP ignored, as `nohup CMD` would start it, and a SIGHUP sent to
    `run` is not passed on (the command, which set its own handler since, would count it);
    SIGTERM still is."""
    proc = subprocess.Popen(["nohup", *run_argv(driver, "-o", str(tmp_path / "r"), "--",
                                              str(probes / "runsignals"))],
                            env=base_env(cache), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_sigint_default)
    buf: list[str] = []
    assert _read_until(proc.stdout.fileno(), "start", buf) == \
        "start blocked 0 pipe 1 int 1 term 1 hup 0"
    child = int(_read_until(proc.stdout.fileno(), "ready", buf).split()[1])
    proc.send_signal(signal.SIGHUP)
    proc.send_signal(signal.SIGTERM)
    assert _counts(_read_until(proc.stdout.fileno(), "now", buf, 10)) == \
        {"INT": 0, "TERM": 1, "HUP": 0}
    os.kill(child, signal.SIGUSR1)
    assert _counts(_read_until(proc.stdout.fileno(), "got", buf)) == \
        {"INT": 0, "TERM": 1, "HUP": 0}
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert [(r["signal"], r["passed_on"]) for r in _record(tmp_path / "r")["signals"]] == \
        [("SIGTERM", True)]


def test_the_report_at_the_end(monkeypatch, tmp_path):
    """The end of a run calls shimgen.report.main.summary_for_run(run_dir) -> str; while that
    module is missing, or when it fails, one line says how to get the report."""
    import types

    from shimgen.errors import ShimgenError
    from shimgen.run import summary as runreport

    monkeypatch.setitem(sys.modules, "shimgen.report.main", None)  # not there: ImportError
    assert runreport.run_report(tmp_path) == f"report: shimgen report {tmp_path}"
    fake = types.ModuleType("shimgen.report.main")
    monkeypatch.setitem(sys.modules, "shimgen.report.main", fake)
    fake.summary_for_run = lambda d: f"table of {d}"
    assert runreport.run_report(tmp_path) == f"table of {tmp_path}"

    def refuse(d):
        raise ShimgenError("no traces in it")

    fake.summary_for_run = refuse
    assert runreport.run_report(tmp_path) == f"report: no traces in it; shimgen report {tmp_path}"


# ---- --limit (the memory ledger's own tests: tests/run/test_memory.py) -------------------

def test_run_limit_option(driver, cache, tmp_path):
    bad = shimgen_run(driver, cache, "--limit", "memory=2 GiB", "--", "true")
    assert bad.returncode == 1
    assert bad.stderr == ("shimgen: error: --limit memory=2 GiB: '2 GiB' is not a size "
                          "(200MiB, 2GiB, or bytes)\n")
    other = shimgen_run(driver, cache, "--limit", "threads=2", "--", "true")
    assert other.returncode == 1 and "give memory=SIZE" in other.stderr
    ok = shimgen_run(driver, cache, "-o", str(tmp_path / "r"), "--limit", "memory=2GiB", "--",
                     "sh", "-c", "echo $SHIMGEN_LIMIT_MEMORY")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[0] == str(2 << 30)
    assert _record(tmp_path / "r")["limit"] == {"memory": 2 << 30}


def test_a_calls_run_writes_its_timeline_with_each_calls_arguments(driver, cache, probes,
                                                                   tmp_path):
    """`--trace calls`: once the command ended, timeline/<pid>.json (0600, Chrome trace
    JSON) as the timeline mode names it, each event with the call's decoded arguments,
    outputs and result, at the times `report --calls --json` gives; the report says where,
    and what the trace files and the timeline take on disk."""
    run_dir = tmp_path / "r"
    proc = shimgen_run(driver, cache, "--trace", "calls", "-o", str(run_dir), "--",
                       str(probes / "callsdecoded"), "routes")
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(subprocess.run(
        [sys.executable, "-m", "shimgen", "report", "--calls", "--json", str(run_dir)],
        capture_output=True, text=True, cwd=ROOT, timeout=120).stdout)
    (pid,) = {c["pid"] for c in rec["calls"]}
    path = run_dir / "timeline" / f"{pid}.json"
    assert sorted(os.listdir(run_dir / "timeline")) == [path.name]
    assert path.stat().st_mode & 0o777 == 0o600
    assert proc.stderr.splitlines()[-2] == (
        f"timeline   {run_dir / 'timeline'}: 31 calls of 1 processes as Chrome trace JSON "
        "(Perfetto), each call's arguments in its event's args")
    from shimgen.report.memory import size_text

    used = [f.stat().st_blocks * 512 for f in (run_dir / "traces").iterdir()]
    assert proc.stderr.splitlines()[-1] == (
        f"trace size {size_text(sum(used))} on disk in {len(used)} trace file, "
        f"{size_text(path.stat().st_blocks * 512)} of timeline")
    doc = json.loads(path.read_text())
    ev = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in ev] == [c["function"] for c in rec["calls"]]
    for e, c in zip(ev, rec["calls"], strict=True):
        assert abs(e["ts"] - c["start_s"] * 1e6) < 0.002 and abs(e["dur"] - c["dur_us"]) < 0.002
        assert e["args"]["result_name"] == c["result_name"]
    attr = next(e["args"] for e in ev if e["name"] == "cuDeviceGetAttribute")
    assert attr["args"]["attrib"] == "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED"
    assert attr["args"]["dev"] == 0 and attr["args"]["pi"].startswith("0x")
    ver = next(e["args"] for e in ev if e["name"] == "cuDriverGetVersion")
    assert ver["outputs"] == {"driverVersion": 12020} and ver["result_name"] == "CUDA_SUCCESS"
    launch = next(e["args"]["args"] for e in ev if e["name"] == "cuLaunchKernel")
    assert (launch["gridDimZ"], launch["hStream"]) == (3, "stream#1")
