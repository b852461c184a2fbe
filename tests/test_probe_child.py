"""shimgen/probe/child.py: the one environment of probe and benchmark child processes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from shimgen.probe.child import MULTICAST_OFF, child_env, shell_exports


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
