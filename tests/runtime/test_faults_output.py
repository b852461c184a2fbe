"""Faults at run time, the trace output side: the trace and timeline JSON for any driver path
(quotes, backslashes, control characters, invalid UTF-8), names too long for the shim,
driver calls made while the process exits (atexit handlers, C++ static destructors), write
errors (/dev/full, RLIMIT_FSIZE), and a process killed while it writes (runtime/output/output.c,
runtime/output/output_name.c, runtime/stats/trace.c). docs/reliability.md, "Trace output", lists
what each test shows."""


import json
import os
import random
import re
import resource
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.faultkit import run, shim_lines, written_to

PATH_MAX = 4096


def table_total(stderr: str) -> int:
    """The number of calls in the one stderr trace table (any mode)."""
    heads = re.findall(r"^shimgen trace \(pid \d+, libcuda [^)]*\): (\d+) calls to 1 functions$",
                       stderr, re.M)
    assert len(heads) == 1, stderr
    return int(heads[0])


def load(path: Path):
    """The file as JSON, read as strict UTF-8 (json.loads of bytes)."""
    return json.loads(path.read_bytes())


# ---- JSON strings: every path the runtime writes (item: driver path escaping) ----

ODD_NAMES = {
    "quote": b'dr"iver',
    "backslash": b"dr\\iver\\",
    "tab": b"dr\tiver",
    "newline": b"dr\niver",
    "controls": b"d\x01\x1f\x7fr",
    "json-lookalike": b'\\u0041", "x": "',
    "utf8": "dr\u00e9\u2713\U0001f600".encode(),
    "invalid-utf8": b"dr\xff\xfe\xc3(\xe2\x82\xed\xa0\x80\xf4\x90\x80\x80\xc0\xafiver",
}


@pytest.mark.parametrize("name", ODD_NAMES)
def test_any_driver_path_gives_valid_json(shims, probes, tmp_path, name):
    """A driver hard-linked to a path with the character(s) of `name`, in a directory of the
    same name, loaded with SHIMGEN_DRIVER; the trace and timeline are written there too.
    Both must be strict JSON (UTF-8), and give back the path exactly: invalid UTF-8 bytes
    come back through \\udcXX, as os.fsdecode reads them (paths may hold a newline on Linux,
    so that is escaped like any control character)."""
    s = shims[0]
    raw = ODD_NAMES[name]
    where = Path(os.fsdecode(bytes(tmp_path) + b"/" + raw))
    where.mkdir()
    driver = where / os.fsdecode(raw + b".so.1")
    try:
        os.link(s.driver.path, driver)
    except OSError:
        driver.write_bytes(s.driver.path.read_bytes())
    trace, timeline = where / "t.json", where / "tl.json"
    proc = run([probes / "faults_calls", "calls", "5"],
               s.env(SHIMGEN_DRIVER=str(driver), SHIMGEN_TRACE="timeline", SHIMGEN_QUIET="1",
                     SHIMGEN_TRACE_FILE=str(trace), SHIMGEN_TIMELINE_FILE=str(timeline)))
    assert proc.stderr == ""
    data, tl = load(trace), load(timeline)
    assert data["driver"] == str(driver)  # str(driver): invalid bytes as \udcXX (os.fsdecode)
    assert data["calls"] == {"cuDriverGetVersion": 5}
    assert tl["otherData"]["driver"] == str(driver)
    assert sum(e["name"] == "cuDriverGetVersion" for e in tl["traceEvents"]) == 5
    assert sorted(p.name for p in where.iterdir()) == sorted([driver.name, "t.json", "tl.json"])


# ---- names that do not fit (item: SHIMGEN_TRACE_FILE longer than the shim's buffer) ----

def deep_dir(root: Path, length: int) -> Path:
    """A directory whose path is exactly `length` bytes long."""
    d = root
    while len(bytes(d)) < length:
        step = min(200, length - len(bytes(d)) - 1)
        if step < 1:  # one byte short: the last component one longer
            d = d.parent / (d.name + "d")
            continue
        d = d / ("d" * step)
    assert len(bytes(d)) == length
    d.mkdir(parents=True)
    return d


@pytest.mark.parametrize("var", ["SHIMGEN_TRACE_FILE", "SHIMGEN_TIMELINE_FILE"])
def test_overlong_file_name_is_refused_not_cut_short(shims, probes, tmp_path, var):
    """A name of 4,096 bytes or more: the shim's buffer holds 4,095. Cut short, it would name
    another file, which is there and must be untouched. One line; the trace goes to the
    stderr table instead (the timeline is not written)."""
    s = shims[0]
    d = deep_dir(tmp_path, 3950)
    short = d / ("x" * (PATH_MAX - 1 - 3950 - 1))  # the name cut to 4,095 bytes
    assert len(bytes(short)) == PATH_MAX - 1
    short.write_text("precious\n")
    name = str(short) + "-and-more.json"
    env = s.env(SHIMGEN_TRACE="timeline", SHIMGEN_TIMELINE_FILE=str(tmp_path / "tl.json"))
    env[var] = name
    proc = run([probes / "faults_calls", "calls", "3"], env)
    lines = shim_lines(proc.stderr)
    instead = ("the trace goes to stderr instead" if var == "SHIMGEN_TRACE_FILE"
               else "no timeline is written")
    assert lines[0] == (f"shimgen: {var} is {len(name)} bytes long, more than the 4095 a path "
                        f"may have; {instead}")
    assert short.read_text() == "precious\n"
    assert [p.name for p in d.iterdir()] == [short.name]
    if var == "SHIMGEN_TRACE_FILE":
        assert len(lines) == 1 and written_to(proc.stderr) == [str(tmp_path / "tl.json")]
        assert table_total(proc.stderr) == 3
    else:
        assert len(lines) == 1 and not (tmp_path / "tl.json").exists()


def test_a_shared_name_without_room_for_its_pid_is_refused(shims, probes, tmp_path):
    """A name with neither %p nor %r is shared by a job's processes: one that finds it taken
    writes "<name>.<pid>", so the name must fit with that added (the writer appends it
    without another check). 4,093 bytes fit alone, not with ".<pid>": one line, nothing
    written, the trace on stderr instead."""
    s = shims[0]
    d = deep_dir(tmp_path, 3900)
    name = d / ("x" * (PATH_MAX - 1 - 3900 - 1 - 2))
    assert len(bytes(name)) == PATH_MAX - 3
    env = s.env(SHIMGEN_TRACE="1")
    env["SHIMGEN_TRACE_FILE"] = str(name)
    proc = run([probes / "faults_calls", "calls", "3"], env)
    assert shim_lines(proc.stderr) == [
        "shimgen: not writing the trace file: its name, with %p, %r or .<pid> added, is "
        "longer than the 4095 bytes a path may have"], proc.stderr
    assert list(d.iterdir()) == []
    assert table_total(proc.stderr) == 3


@pytest.mark.parametrize("var", ["SHIMGEN_TRACE_FILE", "SHIMGEN_TIMELINE_FILE"])
def test_name_too_long_once_expanded_is_refused(shims, probes, tmp_path, var):
    """A 4,095-byte name ending in %p: it fits, but with the pid it does not. Every shorter
    name it could be cut to is a file that is there and must be untouched; one line."""
    s = shims[0]
    d = deep_dir(tmp_path, 3900)
    stem = "x" * (PATH_MAX - 1 - 3900 - 1 - 2)
    for k in range(1, len(stem) + 1):
        (d / stem[:k]).write_text("precious\n")
    before = sorted(p.name for p in d.iterdir())
    pattern = f"{d}/{stem}%p"
    assert len(pattern) == PATH_MAX - 1
    env = s.env(SHIMGEN_TRACE="timeline", SHIMGEN_TIMELINE_FILE=str(tmp_path / "tl.json"),
                SHIMGEN_TRACE_FILE=str(tmp_path / "t.json"))
    env[var] = pattern
    proc = run([probes / "faults_calls", "calls", "3"], env)
    what = "trace file" if var == "SHIMGEN_TRACE_FILE" else "timeline"
    lines = [ln for ln in shim_lines(proc.stderr) if "timeline of" not in ln]
    assert lines == [f"shimgen: not writing the {what}: its name, with %p, %r or .<pid> added, "
                     "is longer than the 4095 bytes a path may have"]
    assert sorted(p.name for p in d.iterdir()) == before
    assert all(p.read_text() == "precious\n" for p in d.iterdir())
    if var == "SHIMGEN_TRACE_FILE":
        assert table_total(proc.stderr) == 3
    else:
        assert load(tmp_path / "t.json")["calls"] == {"cuDriverGetVersion": 3}


# ---- calls made while the process exits (item: the trace written too early) ----

@pytest.mark.parametrize("mode", ["1", "time", "timeline"])
@pytest.mark.parametrize("how", ["return", "exit", "thread"])
def test_calls_from_atexit_handlers_and_static_destructors_are_counted(
        shims, probes, tmp_path, mode, how):
    """atexit handlers and C++ static destructors registered before and after the first
    driver call, a handler registered while the process exits, and an ELF destructor of the
    program all call the driver (tests/c/atexitcalls.cc: 1 + 2 + ... + 64 = 127 calls). The
    trace has every one, exactly, however the process ends."""
    s = shims[0]
    trace, timeline = tmp_path / "t.json", tmp_path / "tl.json"
    proc = run([probes / "atexitcalls", how],
               s.env(SHIMGEN_TRACE=mode, SHIMGEN_TRACE_FILE=str(trace),
                     SHIMGEN_TIMELINE_FILE=str(timeline)))
    ran = sorted(int(n) for n in re.findall(r"^place (\d+) ran$", proc.stdout, re.M))
    assert ran == [1, 2, 4, 8, 16, 32, 64], proc.stdout
    data = load(trace)
    assert data["calls"] == {"cuDriverGetVersion": 127}
    if mode != "1":
        assert data["time"]["cuDriverGetVersion"]["calls"] == 127
    if mode == "timeline":
        events = load(timeline)["traceEvents"]
        assert sum(e["name"] == "cuDriverGetVersion" for e in events) == 127


# ---- write errors (item: silent on a full device or file system) ----

@pytest.mark.parametrize("var", ["SHIMGEN_TRACE_FILE", "SHIMGEN_TIMELINE_FILE"])
def test_write_to_a_full_device_is_said(shims, probes, tmp_path, var):
    """/dev/full: every write fails with ENOSPC. One line; the exit status is the
    program's (0)."""
    s = shims[0]
    env = s.env(SHIMGEN_TRACE="timeline", SHIMGEN_TRACE_FILE=str(tmp_path / "t.json"),
                SHIMGEN_TIMELINE_FILE=str(tmp_path / "tl.json"))
    env[var] = "/dev/full"
    proc = run([probes / "faults_calls", "calls", "3"], env)
    what = "trace file" if var == "SHIMGEN_TRACE_FILE" else "timeline"
    lines = [ln for ln in shim_lines(proc.stderr) if "timeline of" not in ln]
    assert lines == [f"shimgen: cannot write {what} /dev/full: No space left on device"]
    other = tmp_path / ("tl.json" if var == "SHIMGEN_TRACE_FILE" else "t.json")
    assert load(other)


def limit_file_size(limit: int):
    def set_limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


@pytest.mark.parametrize("fake_fs", [False, True], ids=["unnamed-temp", "named-temp"])
def test_file_system_full_keeps_the_previous_file(shims, probes, tmp_path, fake_fs):
    """RLIMIT_FSIZE of 64 KiB, a portable stand-in for a full file system (write fails with
    EFBIG): the timeline (about 1 MB) cannot be written. One line; the previous timeline is
    left as it was, and no temporary file is left behind. The trace (small) is written."""
    s = shims[0]
    trace, timeline = tmp_path / "t.json", tmp_path / "tl.json"
    timeline.write_text('{"previous": true}\n')
    env = s.env(SHIMGEN_TRACE="timeline", SHIMGEN_TRACE_FILE=str(trace),
                SHIMGEN_TIMELINE_FILE=str(timeline))
    if fake_fs:
        env["LD_PRELOAD"] = f"{probes / 'libno_tmpfile_fake.so'}:{env['LD_PRELOAD']}"
    proc = run([probes / "faults_calls", "calls", "10000"], env,
               preexec_fn=limit_file_size(64 * 1024))
    assert shim_lines(proc.stderr) == [f"shimgen: cannot write timeline {timeline}: File too large"]
    assert timeline.read_text() == '{"previous": true}\n'
    assert load(trace)["calls"] == {"cuDriverGetVersion": 10000}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "tl.json"]


# ---- killed while writing (item: half-written JSON left in place) ----

def open_outputs(pid: int) -> list[str]:
    """What the process has open under a directory (its temporary output, if any)."""
    names = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                names.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
    except OSError:
        pass
    return names


TEMP_NAME = re.compile(r"^\.(t|tl)\.json\.shimgen-(\d+)-\d+\.tmp$")
CALLS = 65536  # a full ring of the default size: a timeline of about 7.5 MB


@pytest.mark.parametrize("fake_fs", [False, True], ids=["unnamed-temp", "named-temp"])
def test_killed_while_writing_leaves_previous_or_whole_file(shims, probes, tmp_path, fake_fs):
    """SIGKILL at a random moment after the program's last call, while the shim folds its
    counts and writes a 7.5 MB timeline and then the trace, 100 times. Each time, the trace
    and the timeline are either the previous file, byte for byte, or a complete new one
    (every event, the exact count). With O_TMPFILE (ext4, tmpfs, ...) a killed writer leaves
    nothing: a temporary file has a name only when it is complete. Without it (the fake
    preloaded before the shim), a killed writer leaves its partial ".<name>.shimgen-<its
    pid>-<n>.tmp": a hidden file that is never taken for the output, and that later runs
    leave as it is. The kill must land while the temporary file is open at least 10
    times."""
    s = shims[0]
    out = tmp_path / "out"
    out.mkdir()
    trace, timeline = out / "t.json", out / "tl.json"
    env = s.env(SHIMGEN_TRACE="timeline", SHIMGEN_TRACE_FILE=str(trace), SHIMGEN_QUIET="1",
                SHIMGEN_TIMELINE_FILE=str(timeline))
    if fake_fs:
        env["LD_PRELOAD"] = f"{probes / 'libno_tmpfile_fake.so'}:{env['LD_PRELOAD']}"
    cmd = [str(probes / "atexitcalls"), "bulk", str(CALLS)]

    def start() -> subprocess.Popen:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        ready, _, _ = select.select([p.stdout], [], [], 30)
        assert ready and p.stdout.readline() == b"exiting\n"
        return p

    def whole(f: Path, data: bytes) -> None:
        doc = json.loads(data)
        if f == trace:
            assert doc["calls"] == {"cuDriverGetVersion": CALLS}
        else:
            assert sum(e.get("ph") == "X" for e in doc["traceEvents"]) == CALLS

    spans = []
    for _ in range(3):  # how long the exit takes, and a first whole pair of files
        p = start()
        t0 = time.monotonic()
        assert p.wait(30) == 0
        spans.append(time.monotonic() - t0)
    span = max(spans)
    previous = {f: f.read_bytes() for f in (trace, timeline)}
    for f, data in previous.items():
        whole(f, data)
    rng = random.Random()
    left: dict[str, bytes] = {}
    outcomes = {"kept": 0, "new": 0, "open at the kill": 0}
    for _ in range(100):
        p = start()
        time.sleep(rng.uniform(0, span * 1.2))
        if any(str(out) in name for name in open_outputs(p.pid)):
            outcomes["open at the kill"] += 1
        p.kill()
        p.wait(30)
        for f in (trace, timeline):
            now = f.read_bytes()
            if now == previous[f]:
                outcomes["kept"] += 1
            else:
                whole(f, now)
                previous[f] = now
                outcomes["new"] += 1
        for extra in out.iterdir():
            if extra in (trace, timeline):
                continue
            m = TEMP_NAME.match(extra.name)
            assert m, extra.name
            if extra.name in left:  # an earlier writer's: untouched
                assert extra.read_bytes() == left[extra.name]
                continue
            data = extra.read_bytes()
            if not fake_fs:  # named only once complete (between link and rename)
                whole(trace if m.group(1) == "t" else timeline, data)
            else:
                assert int(m.group(2)) == p.pid, (extra.name, p.pid)
            left[extra.name] = data
    assert outcomes["open at the kill"] >= 10, outcomes
    assert outcomes["kept"] >= 10 and outcomes["new"] >= 10, outcomes
    if fake_fs:
        assert len(left) >= 10, outcomes  # partial files of killed writers


def test_long_message_is_cut_and_still_one_line(shims, probes, tmp_path):
    """A trace file of 3,000 bytes in a directory that is not there: the message naming it
    is longer than the 1 KiB a message may have. It is cut, and still ends its line."""
    s = shims[0]
    name = tmp_path / "missing" / ("y" * 200) / ("z" * 200)
    name = Path(str(name) + "/" + "w" * (3000 - len(str(name)) - 1))
    proc = run([probes / "faults_calls", "calls", "3"],
               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(name)))
    assert proc.stderr.startswith("shimgen: cannot write trace file ")
    assert proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1
    assert len(proc.stderr) == 1023
