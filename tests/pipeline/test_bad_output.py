"""Bad places to build into, and builds that do not finish: an unwritable output root, an
output name taken by a file, a full disk, interrupted and concurrent builds, stale staging
directories. Every error is one line `shimgen: error: ...`, and an earlier build is either
kept whole or replaced whole. docs/reliability.md lists each case with its test.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import tests.badinput as badinput
from shimgen import cli
from shimgen.driver.library import read_driver
from shimgen.errors import ShimgenError
from shimgen.runenv import SHIM_LIBRARY, SHIM_MANIFEST
from shimgen.shim import build as build_mod
from shimgen.shim import install as install_mod
from shimgen.shim.model import build_model
from shimgen.shim.pipeline import build_command
from tests.badinput import (
    CC,
    ROOT,
    assert_one_line_error,
    entries,
    shimgen,
)

no_dac = pytest.fixture(scope="module", name="no_dac")(badinput.no_dac)

# --------------------------------------------------------------------------------------------
# Output


def test_read_only_output_root(drivers, tmp_path, no_dac):
    """A read-only output root: refused before any work, and an earlier build in it stays."""
    out = tmp_path / "out"
    ok = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    lib = next(out.glob(f"*/{SHIM_LIBRARY}"))
    before = lib.read_bytes()
    out.chmod(0o555)
    try:
        proc = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out),
                       prefix=no_dac)
        assert_one_line_error(proc, f"output directory {out}: not writable")
        proc = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out / "sub"),
                       prefix=no_dac)
        assert_one_line_error(proc, f"output directory {out / 'sub'}: Permission denied")
    finally:
        out.chmod(0o755)
    assert lib.read_bytes() == before
    assert entries(out) == [lib.parent.name]


def test_output_name_taken_by_a_file(drivers, tmp_path):
    out = tmp_path / "out"
    img = read_driver(drivers[0].path)
    from shimgen.shim.model import output_name

    out.mkdir()
    (out / output_name(img)).write_text("mine")
    proc = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out))
    assert_one_line_error(proc, "exists and is not a directory")
    assert (out / output_name(img)).read_text() == "mine"
    assert entries(out) == [output_name(img)]


def _model(driver_path: Path):
    img = read_driver(driver_path)
    return build_model(img, build_command(img.path))


def test_disk_full_during_build_keeps_previous(drivers, tmp_path, monkeypatch):
    """An OSError in the middle of a build (ENOSPC while the library is copied): one line,
    the earlier build untouched, no staging directory."""
    model = _model(drivers[0].path)
    out = tmp_path / "out"
    first = build_mod.build(model, out)
    before = first.library.read_bytes()

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out / "x"))

    monkeypatch.setattr(build_mod.shutil, "copy2", full)
    with pytest.raises(ShimgenError, match="No space left on device") as e:
        build_mod.build(model, out)
    assert "\n" not in str(e.value)
    assert first.library.read_bytes() == before
    assert entries(out) == [first.out_dir.name]


def test_install_without_directory_swap(drivers, tmp_path, monkeypatch):
    """Where renameat2(RENAME_EXCHANGE) is not supported, files are moved one by one, the
    library last, and the result is the same."""
    model = _model(drivers[0].path)
    out = tmp_path / "out"
    build_mod.build(model, out)
    monkeypatch.setattr(install_mod, "_exchange", lambda a, b: False)
    second = build_mod.build(model, out)
    assert entries(second.out_dir) == sorted(install_mod.INSTALLED)
    assert entries(out) == [second.out_dir.name]
    manifest = json.loads((second.out_dir / SHIM_MANIFEST).read_text())
    assert manifest["functions"] == len(model.functions)


def test_rebuild_swaps_the_whole_directory(drivers, tmp_path):
    """A rebuild replaces the build as a whole: a file left in the old directory by hand goes
    with it, and the directory keeps a normal mode (not mkdtemp's 0700)."""
    model = _model(drivers[0].path)
    out = tmp_path / "out"
    first = build_mod.build(model, out)
    (first.out_dir / "stray").write_text("x")
    second = build_mod.build(model, out)
    assert entries(second.out_dir) == sorted(install_mod.INSTALLED)
    assert second.out_dir.stat().st_mode & 0o755 == 0o755


def test_stale_staging_is_removed_live_one_kept(drivers, tmp_path):
    """A staging directory left by a killed build is removed by the next build; one that a
    running build holds (its lock is taken) is left alone."""
    out = tmp_path / "out"
    out.mkdir()
    stale = out / f"{install_mod.STAGING_PREFIX}cudashim-x-dead"
    (stale / "meson").mkdir(parents=True)
    (stale / "meson" / "junk.o").write_bytes(b"x")
    live = out / f"{install_mod.STAGING_PREFIX}cudashim-x-live"
    live.mkdir()
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        proc = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        assert not stale.exists()
        assert live.is_dir()
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# Interrupted builds


SLOW_CC = """#!/bin/sh
# Compiles as cc does, but stops for a long time on driver.c, after saying so.
for a in "$@"; do
  case "$a" in
    *driver.c) echo $$ > "{marker}"; sleep 300 ;;
  esac
done
exec "{cc}" "$@"
"""


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"shimgen ended early: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the compiler was never reached")
        time.sleep(0.05)


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize("how, sig", [("process", signal.SIGINT), ("group", signal.SIGINT),
                                      ("process", signal.SIGTERM), ("process", signal.SIGHUP)])
def test_interrupted_build_keeps_previous(drivers, tmp_path, how, sig):
    """Ctrl-C (SIGINT to shimgen, or to its whole process group as a terminal sends it),
    SIGTERM or SIGHUP while meson compiles: exit 128+signal with one line, the earlier build
    byte for byte as it was, no staging directory, and no compiler left running."""
    if CC is None:
        pytest.skip("no C compiler")
    out = tmp_path / "out"
    ok = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    lib = next(out.glob(f"*/{SHIM_LIBRARY}"))
    before = {p.name: p.read_bytes() for p in lib.parent.iterdir() if p.is_file()}

    marker = tmp_path / "compiling"
    slow = tmp_path / "slowcc"
    slow.write_text(SLOW_CC.format(marker=marker, cc=CC))
    slow.chmod(0o755)
    env = dict(os.environ, CC=str(slow))
    # shimgen leaves a signal that was ignored when it started ignored (`nohup`: tested in
    # test_bad_cli.py); here the signals are what a terminal gives, whatever the test runner
    # inherited
    proc = subprocess.Popen([sys.executable, "-m", "shimgen", "build", "--driver",
                             str(drivers[0].path), "--out", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_signals)
    _wait_for(marker, proc, 240)
    if how == "group":
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    announced, _, stderr = stderr.partition("\n")  # the build said, then interrupted
    assert announced.startswith("shimgen: build: building the shim "), announced
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert_one_line_error(result, f"interrupted by {signal.Signals(sig).name}; nothing was "
                                  "installed", code=128 + sig)
    assert stdout == ""
    after = {p.name: p.read_bytes() for p in lib.parent.iterdir() if p.is_file()}
    assert after == before
    assert entries(out) == [lib.parent.name]
    pid = int(marker.read_text())
    deadline = time.monotonic() + 10
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid), "the compiler started by meson is still running"


def test_a_held_signal_waits_even_when_another_thread_takes_it():
    """The mask holds a signal back only from the thread that blocked it: with another
    thread alive (a pytest-xdist worker has one), the kernel gives SIGTERM to that thread,
    and Python runs the handler on the main thread all the same. signals_held still raises
    it only at the end of the outermost block, once."""
    from shimgen.errors import Interrupted, raise_interrupted, signals_held

    stop = threading.Event()
    helper = threading.Thread(target=stop.wait)  # started before the block: SIGTERM open
    helper.start()
    old = signal.signal(signal.SIGTERM, raise_interrupted)
    reached = []
    try:
        with pytest.raises(Interrupted) as got:
            with signals_held():
                with signals_held():
                    os.kill(os.getpid(), signal.SIGTERM)
                    for _ in range(50):  # the handler runs between these bytecodes
                        time.sleep(0.002)
                reached.append("inner block ended")
                time.sleep(0.02)
                reached.append("outer block's end")
        assert got.value.signum == signal.SIGTERM
        assert reached == ["inner block ended", "outer block's end"]
    finally:
        signal.signal(signal.SIGTERM, old)
        stop.set()
        helper.join()


def test_signal_during_install_is_held_back(drivers, tmp_path, monkeypatch, capsys):
    """SIGTERM that lands while the build is being put in place waits for the install to
    finish: the new build is complete, no staging is left, and the line says so."""
    out = tmp_path / "out"
    real_install = build_mod.put_in_place
    calls = []

    def install_with_signal(new, final, staging):
        os.kill(os.getpid(), signal.SIGTERM)  # blocked here: delivered after the install
        time.sleep(0.05)
        calls.append(final)
        real_install(new, final, staging)

    monkeypatch.setattr(build_mod, "put_in_place", install_with_signal)
    code = cli.main(["build", "--driver", str(drivers[0].path), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 128 + signal.SIGTERM, err
    announced, _, err = err.partition("\n")  # the build said, then interrupted
    assert announced.startswith("shimgen: build: building the shim "), announced
    assert err == "shimgen: error: interrupted by SIGTERM, after the new build was installed\n"
    assert len(calls) == 1
    assert entries(out) == [calls[0].name]
    assert entries(calls[0]) == sorted(install_mod.INSTALLED)


# --------------------------------------------------------------------------------------------
# Concurrent builds


def _complete_elf(data: bytes) -> bool:
    """The file is a whole ELF: its section header table (written last) is all there."""
    if data[:4] != b"\x7fELF" or len(data) < 64:
        return False
    shoff = int.from_bytes(data[0x28:0x30], "little")
    shnum = int.from_bytes(data[0x3C:0x3E], "little")
    return len(data) >= shoff + shnum * 64 > 64


def test_concurrent_builds_into_one_place(drivers, tmp_path):
    """Two rounds of three builds of the same driver into the same --out, started at random
    offsets (up to a build's length apart, so that one starts while another compiles or
    installs), while a reader watches the installed library: every build succeeds, the reader
    never sees a partial file or manifest, nothing is left over, and the library that remains
    loads and forwards."""
    d = drivers[0]
    out = tmp_path / "out"
    ok = shimgen("build", "--driver", str(d.path), "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    final = next(out.glob(f"*/{SHIM_LIBRARY}")).parent
    seen, bad = [0], []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                data = (final / SHIM_LIBRARY).read_bytes()
                manifest = (final / SHIM_MANIFEST).read_text()
            except FileNotFoundError:
                continue  # between the swap's two names on a fallback install
            seen[0] += 1
            if not _complete_elf(data):
                bad.append(f"partial library ({len(data)} bytes)")
            try:
                json.loads(manifest)
            except ValueError:
                bad.append("partial shim.json")

    watcher = threading.Thread(target=watch)
    watcher.start()
    procs, results = [], []
    try:
        for _round in range(2):
            started = []
            for _ in range(3):
                time.sleep(random.uniform(0, 1.0))
                started.append(subprocess.Popen(
                    [sys.executable, "-m", "shimgen", "build", "--driver", str(d.path),
                     "--out", str(out)], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE))
            results += [p.communicate(timeout=600) for p in started]
            procs += started
    finally:
        stop.set()
        watcher.join()
    for p, (_stdout, stderr) in zip(procs, results, strict=True):
        assert p.returncode == 0, stderr
        assert stderr.startswith("shimgen: build: building the shim ") and stderr.count("\n") == 1
    assert bad == [] and seen[0] > 0
    assert entries(out) == [final.name]
    assert entries(final) == sorted(install_mod.INSTALLED)

    code = ("import ctypes; l = ctypes.CDLL('libcuda.so.1'); v = ctypes.c_int(0); "
            "assert l.cuDriverGetVersion(ctypes.byref(v)) == 0; print(v.value)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    env.update(LD_LIBRARY_PATH=str(d.libdir))
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True)
    env.update(LD_PRELOAD=str(final / SHIM_LIBRARY), SHIMGEN_TRACE="1")
    shimmed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True)
    assert shimmed.stdout == plain.stdout and int(plain.stdout) > 0
    assert "cuDriverGetVersion" in shimmed.stderr  # the call went through the shim
