"""shimgen/probe/child.py: the one environment of probe and benchmark child processes; and
what `shimgen probe` says without cuda-python or without a driver."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.errors import ShimgenError
from shimgen.probe.bindings import INSTALL_HINT, NO_DRIVER
from shimgen.probe.child import MULTICAST_OFF, child_env, shell_exports
from shimgen.probe.gated import collect
from tests.badinput import ROOT, assert_one_line_error, shimgen


def test_nothing_inherited_unless_asked(monkeypatch):
    monkeypatch.setenv("SHIMGEN_TRACE", "time")
    monkeypatch.setenv("LD_PRELOAD", "/elsewhere.so")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    plain = child_env()
    assert "LD_PRELOAD" not in plain and "SHIMGEN_TRACE" not in plain
    shim = child_env(Path("/x/libcudashim.so"))
    assert shim["LD_PRELOAD"] == "/x/libcudashim.so" and "SHIMGEN_TRACE" not in shim
    kept = child_env(Path("/x/libcudashim.so"), keep_shimgen=True)
    assert kept["LD_PRELOAD"] == "/x/libcudashim.so" and kept["SHIMGEN_TRACE"] == "time"
    for env in (plain, shim, kept):
        assert env["NCCL_NVLS_ENABLE"] == "0"
        assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert env["NVSHMEM_DISABLE_NVLS"] == "1"


def test_given_variables_come_last():
    env = child_env("/x/libcudashim.so", libdir="/drv", base={"A": "1", "SHIMGEN_GATES": "-gdr"},
                    SHIMGEN_TRACE="1", NCCL_NVLS_ENABLE="0")
    assert env == {"A": "1", **MULTICAST_OFF, "LD_PRELOAD": "/x/libcudashim.so",
                   "LD_LIBRARY_PATH": "/drv", "SHIMGEN_TRACE": "1"}


def test_shell_exports_set_the_same_variables():
    out = subprocess.run(["bash", "-c", f'{shell_exports()}; env'], capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin"}, check=True).stdout
    got = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert {k: got.get(k) for k in MULTICAST_OFF} == MULTICAST_OFF


# --------------------------------------------------------------------------------------------
# `shimgen probe` without cuda-python, and without a driver: one line that says what to do

HIDE_CUDA_PYTHON = """\
import sys


class HideCudaPython:
    '''An import hook: cuda-python is not installed, as far as this process can tell.'''

    def find_spec(self, name, path=None, target=None):
        if name == "cuda" or name.startswith("cuda."):
            raise ImportError(f"No module named {name!r}")


sys.meta_path.insert(0, HideCudaPython())
"""


@pytest.mark.parametrize("args", [[], ["--p2p"], ["--child"], ["--p2p", "--child"]])
def test_probe_without_cuda_python_says_how_to_install_it(tmp_path, args):
    (tmp_path / "sitecustomize.py").write_text(HIDE_CUDA_PYTHON)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    line = assert_one_line_error(shimgen("probe", *args, env=env),
                                 "the probe needs cuda-python, which is not installed; "
                                 "install the probe extra: pip install '.[probe]'")
    assert line.count("shimgen") == 1  # no doubled prefix
    assert INSTALL_HINT.split(": ", 1)[1] in (ROOT / "README.md").read_text()


class NoDriverFound(Exception):
    """What cuda-python raises when it finds no libcuda to load (its own class is internal)."""


class DriverBindingsWithoutDriver:
    """A fake of cuda.bindings.driver on a machine without a driver: every call raises."""

    def __getattr__(self, name):
        def call(*args):
            raise NoDriverFound('"cuda" is an NVIDIA driver library and can only be found via '
                                "system search")
        return call


def test_probe_without_a_driver_is_one_clear_line():
    with pytest.raises(ShimgenError) as e:
        collect(cu=DriverBindingsWithoutDriver())
    assert str(e.value) == NO_DRIVER and "NoDriverFound" not in str(e.value)


def _driver_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def test_probe_on_a_machine_without_a_driver(tmp_path, monkeypatch):
    """End to end where no libcuda can be loaded (CI): the child's one line is said once, as
    it is, with no internal class name. Where a driver is installed, the parent is given a
    child that fails with that line instead."""
    if not _driver_loads():
        proc = shimgen("probe", env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path)})
        line = assert_one_line_error(proc, NO_DRIVER)
        assert line == "shimgen: error: " + NO_DRIVER
    import shimgen.probe.child as child

    real = subprocess.run
    said = "shimgen: error: " + NO_DRIVER

    def child_that_fails(cmd, **kwargs):
        return real([sys.executable, "-c", f"import sys; sys.stderr.write({said!r} + '\\n'); "
                     "sys.exit(1)"], **kwargs)

    monkeypatch.setattr(child.subprocess, "run", child_that_fails)
    with pytest.raises(ShimgenError) as e:
        child.run_probe([], None, 60, "probe process")
    assert str(e.value) == NO_DRIVER
