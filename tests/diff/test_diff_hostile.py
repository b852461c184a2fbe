"""`shimgen diff` against drivers as an attacker would make them: diff loads both drivers and
runs their code as the user, so each file is held to the hook files' rule (only the user or
root can change it, or a directory above it), a shim is refused, and the querier process
gets no more than it needs: its own process group (killed whole when diff is done), stdin
and stderr /dev/null, no descriptor but its answer pipe, read as it comes up to a cap, its
steps bounded, its time limit on its own exit. The driver is FAKE (tests/c/
fake_evil_libcuda.c, a look-alike that passes the driver checks), built here; the other
user is uid 65534 (faultkit.OTHER), as the cache trust tests have it."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from shimgen import cli
from shimgen.diff import procaddr as pa
from shimgen.diff import query
from tests.badinput import assert_one_line_error, shimgen
from tests.fakeevil import build_fake_evil
from tests.faultkit import OTHER


@pytest.fixture(scope="module")
def evil(tmp_path_factory) -> Path:
    return build_fake_evil(tmp_path_factory.mktemp("fake-evil"))


@pytest.fixture(scope="module")
def evil_new(tmp_path_factory) -> Path:
    """The same look-alike as another build (its own build-id): diff of one build against
    itself answers at once without loading it, so the queriers run only between two."""
    return build_fake_evil(tmp_path_factory.mktemp("fake-evil-new"), "0x" + "ee" * 20)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A shim cache of the test's own (where diff keeps its querier)."""
    xdg = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    return xdg


def diff(capsys, *args: str) -> tuple[int, list[str]]:
    """`shimgen diff --no-gates ARGS` in this process: (exit status, stderr's lines)."""
    code = cli.main(["diff", "--no-gates", *map(str, args)])
    return code, capsys.readouterr().err.splitlines()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def _all_gone(pids: list[int]) -> bool:
    for _ in range(500):  # SIGKILL is sent; the kernel takes a moment to end them
        if all(_gone(p) for p in pids):
            return True
        time.sleep(0.01)
    return False


# ---- the querier's process -----------------------------------------------------------------

def test_the_querier_has_only_its_pipe(evil, evil_new, cache, tmp_path, monkeypatch, capsys):
    """The driver's constructor lists its process's descriptors: stdin, stdout and stderr
    are /dev/null and the one pipe is fd 3, though shimgen's own process has an inheritable
    descriptor open and its stdin is a pipe (a terminal's place)."""
    seen = tmp_path / "fds"
    monkeypatch.setenv("FAKE_EVIL_FDS", str(seen))
    r, w = os.pipe()
    os.set_inheritable(r, True)
    os.set_inheritable(w, True)
    stdin = os.dup(0)
    os.dup2(r, 0)
    try:
        code, err = diff(capsys, evil, evil_new)
    finally:
        os.dup2(stdin, 0)
        for fd in (stdin, r, w):
            os.close(fd)
    assert code == 0, err
    lines = seen.read_text().splitlines()
    assert len(lines) == 8, lines  # two queriers, four descriptors each
    for fd in range(3):
        assert lines.count(f"fd {fd} -> /dev/null") == 2, lines
    assert sum(ln.startswith("fd 3 -> pipe:[") for ln in lines) == 2, lines


def test_what_the_driver_started_is_killed_and_does_not_stall_diff(evil, evil_new, cache, tmp_path,
                                                                   monkeypatch, capsys):
    """A driver whose constructor forks a child that keeps every descriptor open (the answer
    pipe among them): diff ends when the queriers exit, with their answers, never waiting
    for the pipe's end, and the children are gone when it returns."""
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_EVIL_FORK", str(pids))
    monkeypatch.setattr(query, "QUERY_SECONDS", 60)
    code, err = diff(capsys, evil, evil_new)
    assert code == 0, err
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    assert _all_gone(started), [p for p in started if not _gone(p)]


def test_a_driver_that_hangs_is_stopped_and_said_truly(evil, evil_new, cache, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_EVIL_HANG", "1")
    monkeypatch.setattr(query, "QUERY_SECONDS", 2)
    code, err = diff(capsys, evil, evil_new)
    assert code == 2 and len(err) == 1, err
    assert "the process asking its cuGetProcAddress (the driver's load and its answers) " \
        "had not finished after 2 s; stopped" in err[0], err


def test_a_flood_on_the_answer_pipe_is_capped(evil, evil_new, cache, monkeypatch, capsys):
    """A driver that writes on every pipe it finds: diff stops the querier once it has
    written more than the answers for its names could take, and holds no more."""
    monkeypatch.setenv("FAKE_EVIL_FLOOD", str(64 << 20))
    code, err = diff(capsys, evil, evil_new)
    assert code == 2 and len(err) == 1, err
    assert "the process asking its cuGetProcAddress wrote more than " in err[0], err
    cap = int(err[0].split("wrote more than ")[1].split()[0])
    assert cap < 64 << 20


def test_noise_on_stdout_and_stderr_is_not_read(evil, evil_new, cache, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_EVIL_STDERR", str(32 << 20))
    code, err = diff(capsys, evil, evil_new)
    assert code == 0 and err == [], err


def test_a_driver_version_far_out_bounds_the_versions_asked(evil, evil_new, cache, monkeypatch,
                                                            capsys):
    """A driver that says it is CUDA 1999999990: the versions asked stop at the far one
    (99999), so the grid is that of any driver."""
    monkeypatch.setenv("FAKE_EVIL_VERSION", "1999999990")
    monkeypatch.setattr(query, "QUERY_SECONDS", 60)
    code, err = diff(capsys, evil, evil_new)
    assert code == 0 and err == [], err


def test_answers_that_change_without_end_are_bounded(evil, evil_new, cache, monkeypatch, capsys):
    """cuGetProcAddress answers another export every 10 versions: not a step function of a
    driver; the querier stops at MAX_STEPS steps of one query, so its work is bounded by
    the names, and says which name."""
    monkeypatch.setenv("FAKE_EVIL_STEPS", "1")
    code, err = diff(capsys, evil, evil_new)
    assert code == 2 and len(err) == 1, err
    assert "answers that change at too many versions (not a step function) for cuFakeEvil" \
        in err[0], err


# ---- which files diff loads ----------------------------------------------------------------

def _as_root():
    if os.geteuid() != 0:
        pytest.skip("needs root to make another user's files")


CASES = {
    "file-of-another-user": ("owned by another user (uid 65534)", 0o755, 0o755, True, False),
    "file-others-can-write": ("group or others can write it", 0o755, 0o777, False, False),
    "directory-others-can-write": ("can be written by group or others (and is not sticky)",
                                   0o777, 0o755, False, False),
    "directory-of-another-user": ("is owned by another user (uid 65534)", 0o755, 0o755, False,
                                  True),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("side", ["OLD", "NEW"])
def test_a_driver_another_user_could_change_is_refused_before_it_runs(evil, tmp_path, case,
                                                                      side):
    """Refused in one line, exit 2, and the driver's constructor never ran."""
    _as_root()
    needle, dir_mode, file_mode, file_theirs, dir_theirs = CASES[case]
    where = tmp_path / "shared"
    where.mkdir()
    driver = where / "libcuda.so.1"
    shutil.copyfile(evil, driver)
    driver.chmod(file_mode)
    where.chmod(dir_mode)
    if file_theirs:
        os.chown(driver, OTHER, OTHER)
    if dir_theirs:
        os.chown(where, OTHER, OTHER)
    ran = tmp_path / "ran"
    env = dict(os.environ, FAKE_EVIL_FDS=str(ran), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    pair = (driver, evil) if side == "OLD" else (evil, driver)
    proc = shimgen("diff", "--no-gates", *map(str, pair), env=env)
    line = assert_one_line_error(proc, needle, code=2)
    assert "diff loads it and runs its code as you" in line
    assert proc.stdout == "" and not ran.exists()


def test_a_driver_in_a_sticky_shared_directory_is_used(evil, tmp_path):
    """/tmp's kind of directory: others may write it, but not rename or remove what is not
    theirs."""
    _as_root()
    where = tmp_path / "sticky"
    where.mkdir()
    driver = where / "libcuda.so.1"
    shutil.copyfile(evil, driver)
    where.chmod(0o1777)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    proc = shimgen("diff", "--no-gates", str(driver), str(evil), env=env)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("side", ["OLD", "NEW"])
def test_a_shim_is_refused_as_either_driver(evil, tmp_path, side):
    """As `build` and `run` refuse it: exit 2, one line, and nothing loaded (the shim would
    load the FAKE driver, whose constructor says so)."""
    from shimgen.shim.pipeline import make_shim

    shim = make_shim(evil, tmp_path / "out", require_real=False).library
    ran = tmp_path / "ran"
    env = dict(os.environ, FAKE_EVIL_FDS=str(ran), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    pair = (shim, evil) if side == "OLD" else (evil, shim)
    proc = shimgen("diff", "--no-gates", *map(str, pair), env=env)
    assert_one_line_error(proc, "exports dlopen, which the shim needs", code=2)
    assert proc.stdout == "" and not ran.exists()


# ---- the cached querier ----------------------------------------------------------------------

def test_a_cached_querier_another_user_owns_is_never_run(evil, evil_new, cache, tmp_path, capsys):
    """A program at the cached querier's name in tools/, owned by another user: every other
    cache file is refused in that case, and so is this one; a private copy is compiled and
    used instead."""
    _as_root()
    tools = cache / "shimgen" / "tools"
    tools.mkdir(parents=True, mode=0o700)
    (cache / "shimgen").chmod(0o700)
    ran = tmp_path / "planted-ran"
    planted = tools / pa.querier_name(pa.SOURCE.read_bytes())
    planted.write_text(f"#!/bin/sh\ntouch {ran}\n")
    planted.chmod(0o755)
    os.chown(planted, OTHER, OTHER)
    code, err = diff(capsys, evil, evil_new)
    assert code == 0, err
    assert not ran.exists()
    assert planted.stat().st_uid == OTHER  # left as it was
