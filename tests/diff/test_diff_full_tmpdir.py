"""`shimgen diff` when the compiler of its cuGetProcAddress querier has no room for its
temporary files (TMPDIR on a full disk: a small tmpfs, filled, in a mount namespace of the
test's own): one line that says so and names the directory, exit 2."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_a_full_tmpdir_is_said_with_its_directory(drivers, tmp_path):
    if not shutil.which("unshare"):
        pytest.skip("unshare (util-linux) is needed to mount a small tmpfs")
    full = tmp_path / "full"
    full.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("SHIMGEN_")}
    env.update(TMPDIR=str(full), XDG_CACHE_HOME=str(tmp_path / "xdg"))  # no querier cached
    old, new = (str(d.libdir / "libcuda.so.1") for d in drivers[:2])
    inner = (f"mount -t tmpfs -o size=16k,mode=0700 shimgen-test {shlex.quote(str(full))} && "
             f"(dd if=/dev/zero of={shlex.quote(str(full / 'fill'))} bs=4k count=64 "
             f"2>/dev/null; {shlex.quote(sys.executable)} -m shimgen diff "
             f"{shlex.quote(old)} {shlex.quote(new)})")
    ns = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    probe = subprocess.run([*ns, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"this machine refuses a mount namespace: {probe.stderr.strip()[:200]}")
    proc = subprocess.run([*ns, "sh", "-c", inner], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stderr)
    # (the compiler's own line is not shown here: its "file.c:N: fatal error:" reads as a
    # build failure to devtools/mutants.py)
    said_no_space = "no space left on the device of the compiler's temporary files" in proc.stderr
    assert said_no_space, "the compiler's failure for want of space is not said as such"
    assert proc.stderr == ("shimgen: error: cannot compile the cuGetProcAddress querier: no "
                           "space left on the device of the compiler's temporary files, in "
                           f"TMPDIR={full}\n"), proc.stderr
