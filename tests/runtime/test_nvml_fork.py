"""fork() while another thread's first NVML call loads the real libnvidia-ml through the NVML
shim (runtime/nvml/load.c): the child, whose parent's load was under way in a thread the
child does not have, must not wait for it; its first calls load the real library again and
answer (tests/c/nvml_fork.c, over the FAKE libnvidia-ml, whose load is slowed)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

LINE = re.compile(r"^forks (\d+) during_load (\d+) children_ok (\d+)$", re.M)
RUNS = 300


def test_fork_while_another_thread_loads_the_real_nvml(probes, nvml_fake_shim):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHIMGEN_", "FAKE_NVML"))}
    env.update(LD_PRELOAD=str(nvml_fake_shim), FAKE_NVML_LOAD_MS="3")
    during = 0
    for seed in range(RUNS):
        try:
            proc = subprocess.run([probes / "nvml_fork", str(seed)], env=env,
                                  capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"nvml_fork {seed} hung: a child waits for its parent's load",
                        pytrace=False)
        m = LINE.search(proc.stdout)
        assert proc.returncode == 0 and m, f"seed {seed}: {proc.stdout[-2000:]}{proc.stderr}"
        forks, d, ok = map(int, m.groups())
        assert ok == forks
        during += d > 0
    assert during >= RUNS // 2  # (the window was hit)
