"""The edges of the shim's dlopen redirect (runtime/load/dlopen.c; promised in docs/design.md,
"Every route"): a bare name that starts with `libcuda.so` and any path to the real driver's
file (same device and inode, whatever its name) get the shim; every other name is opened as
asked. The names that must NOT be redirected are real libraries here: small fakes built by
the test, each answering `which()` with its own name, found on LD_LIBRARY_PATH. Also the
exact message of two shims for one driver (docs/reliability.md)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faultkit import run, shim_lines

#: dlopen each name given on the command line (through the shim's dlopen wrapper: Python's
#: ctypes calls dlopen, which binds to the preloaded shim) and say what it got: "which:<name>"
#: for a fake of this test, "lib:<file>" for a library with cuDriverGetVersion (dladdr of it),
#: "error" when dlopen failed.
CHILD = r"""
import ctypes, sys
class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
libc = ctypes.CDLL(None)
libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
for name in sys.argv[1:]:
    try:
        lib = ctypes.CDLL(name, mode=ctypes.RTLD_LOCAL)
    except OSError:
        print(name, "error")
        continue
    if hasattr(lib, "which"):
        lib.which.restype = ctypes.c_char_p
        print(name, "which:" + lib.which().decode())
        continue
    info = DlInfo()
    fn = ctypes.cast(lib.cuDriverGetVersion, ctypes.c_void_p).value
    assert libc.dladdr(fn, ctypes.byref(info))
    print(name, "lib:" + info.fname.decode())
"""

#: Bare names that start like libcuda but are other libraries: never the shim.
OTHER_BARE = ("libcudart.so.12", "libcudadebugger.so.1", "libcuda_fake.so", "libcudaX.so.1",
              "libcuda.s", "libcuda")


@pytest.fixture(scope="module")
def fakes(tmp_path_factory) -> Path:
    """A directory of fake libraries named like the neighbours of libcuda, and a directory
    `rel/` whose libcuda.so.1 and libcuda.so are fakes too (for paths that are not bare)."""
    where = tmp_path_factory.mktemp("redirect")
    src = where / "which.c"
    cc = shlex.split(os.environ.get("CC", "cc"))
    for name in (*OTHER_BARE, "rel/libcuda.so.1", "rel/libcuda.so"):
        out = where / "lib" / name
        out.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(f'const char *which(void) {{ return "{name}"; }}\n')
        subprocess.run([*cc, "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return where / "lib"


def opened(shim, fakes: Path, names: list[str], cwd: Path) -> dict[str, str]:
    env = shim.env()
    env["LD_LIBRARY_PATH"] = f"{fakes}:{env['LD_LIBRARY_PATH']}"
    proc = run([sys.executable, "-c", CHILD, *names], env, cwd=cwd, timeout=60)
    got = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    got = {n: ("lib:" + str(Path(v[4:]).resolve()) if v.startswith("lib:") else v)
           for n, v in got.items()}
    assert set(got) == set(names), proc.stdout + proc.stderr
    return got


def test_other_bare_names_are_not_redirected(shim, fakes):
    got = opened(shim, fakes, list(OTHER_BARE), fakes)
    assert got == {n: f"which:{n}" for n in OTHER_BARE}


def test_paths_that_are_not_the_driver_are_not_redirected(shim, fakes):
    """A path with a '/' is redirected only when it is the driver's file: `./libcuda.so.1`
    and `rel/libcuda.so` here are other files, whatever their names say."""
    names = ["./rel/libcuda.so.1", "rel/libcuda.so", str(fakes / "rel" / "libcuda.so.1")]
    got = opened(shim, fakes, names, fakes)
    assert got == {"./rel/libcuda.so.1": "which:rel/libcuda.so.1",
                   "rel/libcuda.so": "which:rel/libcuda.so",
                   str(fakes / "rel" / "libcuda.so.1"): "which:rel/libcuda.so.1"}


def test_libcuda_names_and_paths_to_the_driver_are_redirected(shim, fakes, tmp_path):
    """Bare libcuda.so* names (even with a fake libcuda.so first on the search path) and
    any path to the driver's file, under its own name or another, get the shim."""
    alias = tmp_path / "not-named-like-a-driver.so"
    alias.symlink_to(shim.driver.path)
    (tmp_path / "libcuda.so").symlink_to(fakes / "rel" / "libcuda.so")
    names = ["libcuda.so", "libcuda.so.1", f"libcuda.so.{shim.driver.version}",
             str(shim.driver.path), str(alias)]
    got = opened(shim, tmp_path, names, tmp_path)  # tmp_path first on the search path
    assert got == {n: f"lib:{shim.library.resolve()}" for n in names}


def test_two_shims_say_exactly_the_promised_line(shims, second_shim, probes):
    """LD_PRELOAD=A:B, two shims for one driver: A says exactly one line, the one
    docs/reliability.md promises, naming B; nothing about the build-id."""
    s = shims[0]
    env = s.env()
    env["LD_PRELOAD"] = f"{s.library}:{second_shim}"
    proc = run([probes / "faults_calls", "calls", "3"], env, timeout=60)
    assert f"version {s.cuda_version}" in proc.stdout
    assert shim_lines(proc.stderr) == [
        f"shimgen: another shim ({second_shim.resolve()}) is preloaded after this one; "
        "calls go through both"]
