"""Files the shim opens by a name from the environment may be special files: a FIFO (with or
without a reader), a device, a directory. The shim never blocks on one and never writes
one: SHIMGEN_NOTICE_FILE falls back to stderr, SHIMGEN_DRIVER fails the calls with one line
(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED). Real Debian drivers on the CPU; the probe is
tests/c/race.c."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def run_race(probes: Path, shim, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(probes / "race"), "1", str(shim.cuda_version)], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("reader", [False, True], ids=["no-reader", "reader"])
def test_a_fifo_as_the_notice_file_never_blocks_and_is_never_written(shims, probes,
                                                                     tmp_path, reader):
    """With no reader, opening a FIFO to write would block for ever: it is opened without
    blocking (fails at once). With a reader, it opens, and is refused as not a regular
    file: nothing of the shim's goes into it; the notice goes to stderr."""
    s = shims[0]
    fifo = tmp_path / "notices"
    os.mkfifo(fifo)
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK) if reader else None
    try:
        proc = run_race(probes, s, s.env(SHIMGEN_NOTICE_FILE=str(fifo), SHIMGEN_TRACE="bogus"))
        assert proc.returncode == 0, proc.stderr
        assert "not a known mode" in proc.stderr, proc.stderr
        if rfd is not None:
            try:
                data = os.read(rfd, 4096)  # b"": no writer left, and none ever wrote
            except BlockingIOError:
                data = b""
            assert data == b"", data
    finally:
        if rfd is not None:
            os.close(rfd)


def test_a_notice_file_of_another_kind_or_through_a_link_is_not_written(shims, probes,
                                                                        tmp_path):
    s = shims[0]
    real = tmp_path / "real.log"
    real.write_text("")
    link = tmp_path / "link.log"
    link.symlink_to(real)
    for target in (link, tmp_path, Path("/dev/null")):
        proc = run_race(probes, s, s.env(SHIMGEN_NOTICE_FILE=str(target), SHIMGEN_TRACE="x"))
        assert proc.returncode == 0 and "not a known mode" in proc.stderr, (target, proc.stderr)
    assert real.read_text() == ""


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_special_file_as_the_driver_fails_the_calls_at_once(shims, probes, tmp_path, kind):
    """SHIMGEN_DRIVER naming a FIFO made dlopen block for ever; a directory or device is no
    library either. Checked (stat, which never blocks) before dlopen: one line, every call
    returns 303, the program goes on."""
    s = shims[0]
    path = {"fifo": tmp_path / "libcuda.so.1", "directory": tmp_path,
            "device": Path("/dev/zero")}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    proc = run_race(probes, s, s.env(SHIMGEN_DRIVER=str(path)))
    assert proc.returncode == 1 and "failures 64" in proc.stdout, (proc.stdout, proc.stderr)
    assert proc.stderr.count("cannot load the real CUDA driver") == 1, proc.stderr
    why = "a directory" if kind == "directory" else "not a regular file"
    assert why in proc.stderr, proc.stderr


@pytest.mark.parametrize("cmd", ["build", "gates"])
def test_a_fifo_as_a_gate_profile_is_refused_at_once(shims, tmp_path, cmd):
    """`--gates PROFILE` (build) and `--json PROFILE` (gates: the profile it would replace is
    read first to be sure it is one): a FIFO is opened without blocking and refused."""
    fifo = tmp_path / "profile.json"
    os.mkfifo(fifo)
    d = str(shims[0].driver.path)
    args = {"build": ["build", "--driver", d, "--gate-profile", str(fifo), "--out",
                      str(tmp_path / "o")],
            "gates": ["gates", "--driver", d, "--json", str(fifo), "--no-proof"]}[cmd]
    proc = subprocess.run([sys.executable, "-m", "shimgen", *args], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
