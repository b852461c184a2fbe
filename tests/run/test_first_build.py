"""What a first build says (shimgen/progress.py): `shimgen build` and the first `shimgen run`
of a driver say what they are about to do, before the seconds of the build, in one line
naming the driver's version; on a terminal the step it is at is shown and then erased, and
with stderr a pipe nothing else is written (no carriage return). A cached run says nothing
of a build; an input refused before the build is still one line."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from shimgen.progress import BUILD_TAKES
from tests.badinput import ROOT, assert_one_line_error, shimgen
from tests.run.test_run import base_env, shimgen_run

BUILD_LINE = "shimgen: build: building the shim for driver 535.261.03, into "
RUN_LINE = "shimgen: run: building the shim for driver 535.261.03, once: the next runs reuse it"


def test_build_says_what_it_builds_first_and_nothing_more_on_a_pipe(drivers, tmp_path):
    out = tmp_path / "out"
    proc = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == f"{BUILD_LINE}{out} ({BUILD_TAKES})\n", proc.stderr
    assert proc.stdout.startswith("driver     ")


def test_build_shows_its_steps_on_a_terminal_and_erases_them(drivers, tmp_path):
    out = tmp_path / "out"
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "shimgen", "build", "--driver",
                                 str(drivers[0].path), "--out", str(out)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=follower, text=True)
        os.close(follower)
        follower = -1
        said = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the last writer closed the terminal
                break
            if not chunk:
                break
            said += chunk
        stdout, _ = proc.communicate(timeout=300)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert proc.returncode == 0, said
    text = said.decode()
    first, rest = text.split("\r\n", 1)
    assert first.startswith(BUILD_LINE), text
    for step in ("generating the sources of ", "configuring the build (meson setup)",
                 "compiling and linking (ninja)", "installing"):
        assert f"\r\x1b[K  {step}" in rest, (step, text)
    assert rest.endswith("\r\x1b[K"), text  # the step line erased before the summary
    assert stdout.startswith("driver     ")


def test_first_run_says_it_builds_before_it_does_and_a_cached_run_does_not(drivers, tmp_path):
    driver = drivers[0].libdir / "libcuda.so.1"
    cache = tmp_path / "xdg"
    first = shimgen_run(driver, cache, "-o", str(tmp_path / "r1"), "--", "true")
    lines = first.stderr.splitlines()
    assert first.returncode == 0, first.stderr
    assert lines[0].startswith(RUN_LINE) and str(cache) in lines[0], lines
    assert lines[1].startswith("shimgen: run: shim ") and "(built in " in lines[1], lines
    assert "\r" not in first.stderr
    again = shimgen_run(driver, cache, "-o", str(tmp_path / "r2"), "--", "true")
    assert again.returncode == 0 and "building" not in again.stderr, again.stderr
    assert again.stderr.splitlines()[0].startswith("shimgen: run: shim "), again.stderr


def test_a_driver_refused_is_one_line_not_an_announced_build(tmp_path):
    bad = tmp_path / "libcuda.so.1"
    bad.write_bytes(b"\x7fELF" + b"\0" * 60)
    assert_one_line_error(shimgen("build", "--driver", str(bad), "--out", str(tmp_path / "o")),
                          "driver ")
    env = base_env(tmp_path / "xdg")
    proc = subprocess.run([sys.executable, "-m", "shimgen", "run", "--driver", str(bad), "--",
                           "true"], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert_one_line_error(proc, "driver ")
