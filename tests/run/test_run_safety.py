"""`shimgen run` against a real Debian libcuda (no GPU), where another local user can reach
(uid 65534 through setpriv; the tests run as root), where the command cannot start, and
where run is interrupted:

- the default runs directory (./shimgen-runs) is used only when it is the user's own and
  nobody else can write it: one that another user made, or that group or others can write,
  or a symlink, is refused in one line, and nothing is made in it;
- a run directory renamed and replaced by another user's while the command runs (notices.log
  a FIFO) gets nothing of run's, and nothing blocks: run writes through the descriptor of the
  directory it made, and does not read the other one for the report;
- a shim path with a loader token ($LIB, ${ORIGIN}, $PLATFORM: ld.so would refuse the name
  and run the command without the shim) is refused before anything is built or run;
- a command that cannot start (the argument list too long for the kernel, a missing
  interpreter, a file that is no program) is one line, exit 126 or 127, and leaves no run
  directory, nor a runs directory that run made for it;
- SIGTERM sent to run's process group at random moments, during a first build or around a
  cached run: every line says truly what was interrupted and whether the command ran, and a
  command that ran keeps its run directory and its report."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from shimgen.runenv import SHIM_LIBRARY, SHIM_MANIFEST
from tests.faultkit import OTHER, as_other
from tests.run.test_run import _record, base_env, run_argv, shimgen_run


@pytest.fixture(scope="module")
def driver(drivers) -> Path:
    return drivers[0].libdir / "libcuda.so.1"


@pytest.fixture(scope="module")
def cache(driver, tmp_path_factory) -> Path:
    """A shim cache with the driver's plain shim in it."""
    home = tmp_path_factory.mktemp("xdg")
    proc = shimgen_run(driver, home, "-o", str(tmp_path_factory.mktemp("warm") / "r"), "--",
                       "true")
    assert proc.returncode == 0, proc.stderr
    return home


@pytest.fixture
def shared():
    """A directory the second user can reach (a test's tmp_path is 0700 all the way up):
    0711, with `open/` in it that everyone may write, without the sticky bit (a shared
    working directory: anyone may make, rename or remove a name in it)."""
    d = Path(tempfile.mkdtemp(prefix="shimgen-safety-"))
    d.chmod(0o711)
    (d / "open").mkdir()
    (d / "open").chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _runs_refused(runs: Path, why: str) -> str:
    return f"shimgen: error: runs directory {runs}: {why}, or name the run directory with -o DIR"


# ---- the default runs directory ----------------------------------------------------------

def test_a_runs_directory_another_user_made_is_refused(driver, cache, other, shared):
    """Another user makes ./shimgen-runs (0777) in a shared working directory before the
    run: refused in one line; the command does not run and nothing is made in it (it would
    be theirs to rename, and to put a directory of theirs in its place)."""
    cwd = shared / "open"
    runs = cwd / "shimgen-runs"
    as_other(other, f"mkdir -m 777 {shlex.quote(str(runs))}")
    marker = cwd / "ran"
    proc = shimgen_run(driver, cache, "--", "sh", "-c", 'echo > "$0"', str(marker), cwd=cwd)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        _runs_refused(runs, "owned by another user; it is not yours to use")]
    assert os.listdir(runs) == [] and not marker.exists()


@pytest.mark.parametrize("kind", ["0777", "0770", "sticky-1777", "symlink", "a-file"])
def test_a_runs_directory_others_can_write_or_not_a_directory_is_refused(driver, cache, tmp_path,
                                                                        kind):
    """The user's own ./shimgen-runs that group or others can write (with the sticky bit
    too: the rule is the cache's, simple), a symlink (even to a directory of the user's), or
    a file: one line, nothing made, nothing run."""
    runs = tmp_path / "shimgen-runs"
    target = tmp_path / "elsewhere"
    if kind == "symlink":
        target.mkdir(mode=0o700)
        runs.symlink_to(target)
        why = "not a directory (a symbolic link or a file); remove it"
    elif kind == "a-file":
        runs.write_text("mine")
        why = "not a directory (a symbolic link or a file); remove it"
    else:
        runs.mkdir()
        runs.chmod(int(kind.split("-")[-1], 8))
        why = "group or others can write it; chmod go-w it"
    proc = shimgen_run(driver, cache, "--", "sh", "-c", 'echo > "$0"', str(tmp_path / "ran"),
                       cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [_runs_refused(runs, why)]
    assert not (tmp_path / "ran").exists()
    if kind == "a-file":
        assert runs.read_text() == "mine"
    else:
        assert os.listdir(target if kind == "symlink" else runs) == []


def test_a_runs_directory_of_the_users_own_that_others_can_read_is_used(driver, cache,
                                                                       tmp_path):
    runs = tmp_path / "shimgen-runs"
    runs.mkdir()
    runs.chmod(0o755)
    proc = shimgen_run(driver, cache, "--", "true", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [run_dir] = runs.iterdir()
    assert _record(run_dir)["exit"]["status"] == 0
    assert runs.stat().st_mode & 0o777 == 0o755  # left as it was


# ---- a run directory swapped while the command runs --------------------------------------

def test_a_run_directory_swapped_while_the_command_runs_gets_nothing_of_run(driver, cache,
                                                                           other, shared,
                                                                           tmp_path):
    """-o DIR in a directory that everyone may write: while the command runs, another user
    renames DIR and makes a directory of theirs in its place, with notices.log a FIFO. The
    command (whose shim has a notice to write) and run finish; run.json's end record goes to
    run's own directory, where it was moved, and nothing of run's into theirs; the report
    says that DIR is no longer the run's instead of reading theirs."""
    ready, go = tmp_path / "ready", tmp_path / "go"
    out = shared / "open" / "run"
    moved = shared / "open" / "moved"
    os.mkfifo(go)
    # (waits in the shell itself: a program started in between would load the shim, which
    # writes its notice by the name, into theirs)
    script = f"touch {shlex.quote(str(ready))}; read x < {shlex.quote(str(go))}; exec true"
    env = base_env(cache, SHIMGEN_ATTR_OVERRIDE="foo")  # a notice from each shim's load
    proc = subprocess.Popen(run_argv(driver, "-o", str(out), "--", "sh", "-c", script),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.01)
        q = shlex.quote
        as_other(other, f"mv {q(str(out))} {q(str(moved))} && mkdir -m 777 {q(str(out))} && "
                        f"mkfifo -m 666 {q(str(out / 'notices.log'))} && "
                        f"mkdir -m 777 {q(str(out / 'traces'))}")
        with open(go, "w") as fh:  # once the shell reads it
            fh.write("go\n")
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    rec = _record(moved)
    assert rec["exit"]["status"] == 0 and rec["end"], rec
    assert sorted(os.listdir(out)) == ["notices.log", "traces"]  # theirs, as they made it
    assert os.listdir(out / "traces") == [] and (out / "notices.log").is_fifo()
    assert all(p.stat().st_uid == OTHER for p in (out, out / "notices.log", out / "traces"))
    assert (f"report: {out} is no longer this run's directory (it was moved or replaced while "
            "the command ran); not read") in err.splitlines(), err


def test_a_program_started_after_the_run_directory_was_swapped_writes_nothing_there(
        driver, cache, other, shared, tmp_path):
    """As above, but the other user's directory is empty but for their timeline/ (0777),
    and after the swap the command starts a program that loads the shim (a notice at its
    load), makes a traced call and writes a timeline: the program's shim reaches the files of
    the run only through the run directory it was started with (SHIMGEN_RUN_DIR), so
    nothing of it lands in theirs; its notice goes to stderr, with one line that says why."""
    ready, go = tmp_path / "ready", tmp_path / "go"
    out = shared / "open" / "run"
    moved = shared / "open" / "moved"
    os.mkfifo(go)
    program = ("import ctypes; v = ctypes.c_int(); "
               "ctypes.CDLL('libcuda.so.1').cuDriverGetVersion(ctypes.byref(v))")
    q = shlex.quote
    script = (f"touch {q(str(ready))}; read x < {q(str(go))}; "
              f"exec {q(sys.executable)} -c {q(program)}")
    env = base_env(cache, SHIMGEN_ATTR_OVERRIDE="foo")  # a notice from each shim's load
    proc = subprocess.Popen(run_argv(driver, "--trace", "timeline", "-o", str(out), "--", "sh",
                                     "-c", script),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.01)
        as_other(other, f"mv {q(str(out))} {q(str(moved))} && mkdir -m 777 {q(str(out))} && "
                        f"mkdir -m 777 {q(str(out / 'timeline'))}")
        with open(go, "w") as fh:
            fh.write("go\n")
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert sorted(os.listdir(out)) == ["timeline"] and os.listdir(out / "timeline") == [], err
    assert f"SHIMGEN_NOTICE_FILE={moved.parent / 'run' / 'notices.log'}: the run directory " \
        f"{out} is no longer the one this job started with; notices go to stderr" in err, err
    assert _record(moved)["exit"]["status"] == 0


# ---- the shim's path in LD_PRELOAD ---------------------------------------------------------

@pytest.mark.parametrize("token", ["$LIB", "${ORIGIN}", "x$PLATFORM"])
def test_a_loader_token_in_the_shims_path_is_refused_before_anything(driver, tmp_path, token):
    """ld.so reads $LIB, $ORIGIN and $PLATFORM (also as ${...}) in an LD_PRELOAD name and then
    refuses the name: the command would run without the shim, and the report say
    `processes 0`. Refused in one line before anything is built or run."""
    cache = tmp_path / token
    proc = shimgen_run(driver, cache, "--", "sh", "-c", 'echo > "$0"', str(tmp_path / "ran"),
                       cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"shimgen: error: shim cache {cache}/shimgen/shims/"), line
    assert line.endswith(": LD_PRELOAD cannot carry a path with a '$' (the loader reads "
                         "$ORIGIN, $LIB and $PLATFORM in it as its own); set XDG_CACHE_HOME to "
                         "a path without one"), line
    assert not cache.exists() and not (tmp_path / "shimgen-runs").exists()
    assert not (tmp_path / "ran").exists()


# ---- a command that cannot start -------------------------------------------------------------

PAD = 100_000  # bytes of one padding argument (the kernel takes up to 128 KiB each)


def _pads(n: int) -> list[str]:
    return ["x" * PAD] * (n // PAD) + (["x" * (n % PAD)] if n % PAD else [])


def _largest_that_starts(argv: list[str], env: dict[str, str]) -> int:
    """The most bytes of padding arguments after `argv` with which a program still starts
    with `env` (the kernel's limit on argv and environment together, found by trying)."""
    def starts(n: int) -> bool:
        try:
            pid = os.posix_spawn("/bin/true", argv + _pads(n), env)
        except OSError as e:
            assert e.errno == 7, e  # E2BIG
            return False
        os.waitpid(pid, 0)
        return True

    lo, hi = 0, 16 << 20
    assert starts(lo) and not starts(hi)
    while hi - lo > 16:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if starts(mid) else (lo, mid)
    return lo


@pytest.mark.parametrize("case", ["too-long-default", "too-long-out", "no-interpreter",
                                  "not-a-program"])
def test_a_command_that_cannot_start_is_one_line_and_leaves_nothing(driver, cache, tmp_path,
                                                                   case):
    """`shimgen run -- /bin/true ARGS` with ARGS near the kernel's limit: run itself starts,
    and the command, which gets the shim's variables besides, does not (E2BIG). That, a
    script whose interpreter is missing (ENOENT: 127) and a file that is no program
    (ENOEXEC: 126) are each exactly one line (no banner: it is said once the command
    started), and no run directory is left, nor a runs directory or -o parents run made."""
    # a long working directory: the command's variables (its run directory's paths) are
    # longer than run's own arguments by a margin that no rounding of the limit can take
    deep = tmp_path / "/".join(["d" * 200] * 5)
    deep.mkdir(parents=True)
    env = base_env(cache)
    out_args: list[str] = []
    if case == "too-long-out":
        out_args = ["-o", str(deep / "made" / "by" / "run")]
    command = ["/bin/true"]
    status, why = 126, "Argument list too long"
    if case == "no-interpreter":
        command = [str(deep / "script")]
        Path(command[0]).write_text("#!/no/such/interpreter\n")
        Path(command[0]).chmod(0o755)
        status, why = 127, "No such file or directory"
    elif case == "not-a-program":
        command = [str(deep / "data")]
        Path(command[0]).write_bytes(b"\x00\x01\x02 not an executable\n")
        Path(command[0]).chmod(0o755)
        why = "Exec format error"
    argv = run_argv(driver, *out_args, "--", *command)
    if case.startswith("too-long"):
        # a margin for the interpreter's file name, which the kernel counts too
        argv += _pads(_largest_that_starts(argv, env) - 200)
    proc = subprocess.run(argv, env=env, cwd=deep, capture_output=True, text=True, timeout=120)
    assert proc.returncode == status, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [f"shimgen: error: {command[0]}: cannot run it ({why})"]
    assert sorted(os.listdir(deep)) == sorted(
        {"no-interpreter": ["script"], "not-a-program": ["data"]}.get(case, []))


# ---- SIGTERM to run's process group at any moment ----------------------------------------

NOT_RUN = "interrupted by SIGTERM before the command started: the command did not run"
AS_IT_WAS = "as it was"
# each line that says the command did not run, with what it says of the shim cache: True,
# an entry is there; False, none is; AS_IT_WAS, one is when there was one before the run
SAID = {
    # before run's own code (the command line): nothing done
    "interrupted by SIGTERM; nothing was installed, any earlier build is as it was; the "
    "command did not run": AS_IT_WAS,
    f"{NOT_RUN}, and no shim was built": AS_IT_WAS,
    "interrupted by SIGTERM while the shim was being built, before the command started: the "
    "command did not run; the shim was built and is in the cache": True,
    "interrupted by SIGTERM while the shim was being built, before the command started: the "
    "command did not run; no shim was installed in the cache (the next run builds it)": False,
    f"{NOT_RUN}, and no run directory is left; the shim was in the cache already": True,
    f"{NOT_RUN}, and no run directory is left; the shim built now is in the cache": True,
}


def _usable_entry(xdg: Path, name: str) -> bool:
    """Whether the cache holds a built, sealed entry `name` (the run's key's: what the
    line speaks of; an entry of another key is another shim)."""
    e = xdg / "shimgen" / "shims" / name
    manifest = e / SHIM_MANIFEST
    if manifest.is_file() and (e / SHIM_LIBRARY).is_file():
        with contextlib.suppress(ValueError):
            return "library_sha256" in json.loads(manifest.read_text())
    return False


def _interrupted_run(driver: Path, xdg: Path, where: Path, delay: float, hold: float,
                     twice: bool, after_banner: bool) -> tuple[int, str]:
    """`shimgen run -- sh -c ...` in a session of its own, SIGTERM sent to its process
    group `delay` s after it started, or after its banner came (`after_banner`: the command
    runs, or has run); `twice`: first to run alone, then to the group, as timeout(1) does.
    The command marks that it ran first thing, then sleeps `hold` s."""
    where.mkdir()
    argv = run_argv(driver, "--", "sh", "-c", f'echo > "$0"; sleep {hold:.3f}',
                    str(where / "ran"))
    proc = subprocess.Popen(argv, env=base_env(xdg), cwd=where, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    fd = proc.stderr.fileno()
    err = b""
    if after_banner:
        while b"\n" not in err:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            err += chunk
    time.sleep(delay)
    if twice:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    while chunk := os.read(fd, 65536):
        err += chunk
    proc.stderr.close()
    return proc.wait(timeout=120), err.decode(errors="replace")


def _check_true(rc: int, err: str, xdg: Path, where: Path, cold: bool, name: str) -> str:
    """What the run's end said is what happened, of the cache entry `name` (the one every
    run here uses); the kind of end (a build announced, as a cold cache's run does first,
    is no end)."""
    lines = [ln for ln in err.splitlines() if not ln.startswith("shimgen: run: building the ")]
    ran = (where / "ran").exists()
    runs = where / "shimgen-runs"
    run_dirs = sorted(runs.iterdir()) if runs.is_dir() else []
    if rc == -signal.SIGTERM and not lines:  # before shimgen's handlers: Python's start
        assert not ran and not run_dirs, (rc, err)
        return "killed at the start"
    interrupted = [ln for ln in lines if "interrupted" in ln]
    if interrupted:
        # (killed by the second of two after the command line had said its line and set
        # the default action back)
        assert rc in (128 + signal.SIGTERM, -signal.SIGTERM), (rc, err)
        assert len(lines) == 1, err  # the line, and nothing else
        said = lines[0].removeprefix("shimgen: error: ")
        assert said in SAID, said
        assert not ran, f"{said!r}, yet the command ran"
        assert not run_dirs and not runs.exists(), f"{said!r}, yet {run_dirs} is left"
        assert _usable_entry(xdg, name) == (not cold if SAID[said] == AS_IT_WAS else SAID[said]), \
            (said, cold)
        if "was in the cache already" in said:
            assert not cold, said
        if "being built" in said:  # the entry is there and checks out: never built again
            assert cold, said
        return said
    # the command started: its run directory and its report, and its exit status
    assert len(run_dirs) == 1, (rc, err, run_dirs)
    rec = _record(run_dirs[0])
    assert isinstance(rec["pid"], int) and rec["exit"] is not None, (err, rec)
    assert rc == rec["exit"]["status"] and rc in (0, 128 + signal.SIGTERM), (rc, err, rec)
    assert lines[0].startswith("shimgen: run: shim "), err
    assert f"shimgen report: {run_dirs[0]}" in lines, err
    assert any(ln.startswith("command    sh -c ") for ln in lines), err
    return "ran, " + ("killed by SIGTERM" if rc else "exit 0")


def test_sigterm_to_the_group_at_any_moment_is_said_truly(driver, cache, tmp_path):
    """SIGTERM to run's process group (once, or to run and then to the group, as timeout(1)
    sends it) at a random moment: 14 first runs (a fresh cache each: the shim being built,
    a signal in the first second), 13 cached runs (0 to 150 ms in: the start, the checks,
    the run directory, the command) and 13 more 0 to 40 ms after the banner (the command's
    life and end, the report). Every end is true: a line that says the command did not run means no
    command ran and no run directory is left, and what it says of the cache is so; a
    command that ran has its run directory, run.json's end, the report and its status."""
    rng = random.Random(os.getpid())
    # the cache key of every run here: the entry the fixture's run made
    [name] = [e for e in os.listdir(cache / "shimgen" / "shims") if not e.startswith(".")]
    # (a first build, delay, the command's sleep, twice, the delay counted from the banner)
    plans = [(True, rng.uniform(0, 1.0), 0.0, rng.random() < 0.5, False) for _ in range(14)]
    plans += [(False, rng.uniform(0, 0.15), rng.uniform(0, 0.03), rng.random() < 0.5, False)
              for _ in range(13)]
    plans += [(False, rng.uniform(0, 0.04), rng.uniform(0, 0.01), rng.random() < 0.5, True)
              for _ in range(13)]

    def one(i: int) -> tuple[str, tuple]:
        cold, delay, hold, twice, after_banner = plans[i]
        xdg = tmp_path / f"xdg{i}" if cold else cache
        where = tmp_path / f"w{i}"
        rc, err = _interrupted_run(driver, xdg, where, delay, hold, twice, after_banner)
        try:
            return _check_true(rc, err, xdg, where, cold, name), plans[i]
        except AssertionError as e:
            raise AssertionError(f"run {i} {plans[i]}: {e}") from None

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        ends = list(pool.map(one, range(len(plans))))
    kinds = {kind for kind, _ in ends}
    # the moments chosen reach the build and the cached command both (not a proof of
    # anything by themselves: every end above was checked)
    assert any(k.startswith("ran") for k in kinds), ends
    assert any("while the shim was being built" in k for k in kinds), ends
