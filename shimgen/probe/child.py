"""The child processes of probes and benchmarks: the one place their environment is built,
and the running of a probe child that answers with one JSON line.

A child never inherits LD_PRELOAD or SHIMGEN_* variables unless asked: LD_PRELOAD is the
shim when one is given, SHIMGEN_* pass through only with `keep_shimgen`, and the variables
given by name are set last. NVLink multicast is always off (NCCL, PyTorch symmetric memory,
NVSHMEM), so no child depends on multicast objects the shim does not know about.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from ..errors import ERROR_PREFIX, ShimgenError

#: Keeps NVLink multicast (NVLS) off in NCCL, torch.distributed symmetric memory and NVSHMEM.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}


def child_env(shim: Path | str | None = None, *, keep_shimgen: bool = False,
              libdir: Path | str | None = None, base: Mapping[str, str] | None = None,
              **variables: str) -> dict[str, str]:
    """The environment of a child: `base` (default os.environ) without LD_PRELOAD, without
    SHIMGEN_* unless `keep_shimgen`; NVLink multicast off; LD_PRELOAD=shim when a shim is
    given; LD_LIBRARY_PATH=libdir when given; then `variables` (e.g. SHIMGEN_TRACE="1")."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if k != "LD_PRELOAD" and (keep_shimgen or not k.startswith("SHIMGEN_"))}
    env.update(MULTICAST_OFF)
    if shim is not None:
        env["LD_PRELOAD"] = str(shim)
    if libdir is not None:
        env["LD_LIBRARY_PATH"] = str(libdir)
    env.update(variables)
    return env


def mapped_libraries() -> dict:
    """Whether a shimgen shim is mapped in this process, and which libcuda file is: by each
    mapped file's name (its basename), never a part of its whole path."""
    from ..runenv import SHIM_LIBRARY

    out = {"shim_mapped": False, "libcuda": None}
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return out
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5].strip()
        base = os.path.basename(path)
        if base == SHIM_LIBRARY:
            out["shim_mapped"] = True
        elif base.startswith("libcuda.so") and out["libcuda"] is None:
            out["libcuda"] = path
    return out


def shell_exports() -> str:
    """MULTICAST_OFF as one shell `export` line, for the GPU scripts (tests/gpu/)."""
    return "export " + " ".join(f"{k}={v}" for k, v in MULTICAST_OFF.items())


def run_probe(args: list[str], shim: Path | None, timeout: float, what: str) -> dict:
    """Run `python -m shimgen probe ARGS --child` without the shim (no SHIMGEN_* either), or
    with LD_PRELOAD=shim (SHIMGEN_* passed through); its last stdout line as JSON, with
    "stderr": the lines the shim said (those starting with "shimgen")."""
    env = child_env(shim, keep_shimgen=shim is not None)
    proc = subprocess.run([sys.executable, "-m", "shimgen", "probe", *args, "--child"],
                          env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 or not proc.stdout.strip():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        said = last.removeprefix(ERROR_PREFIX)
        if proc.returncode == 1 and said != last:  # the child's own one line: said as it is
            raise ShimgenError(said)
        raise ShimgenError(f"{what} failed (exit {proc.returncode}): {said}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    data["stderr"] = [ln for ln in proc.stderr.splitlines() if ln.startswith("shimgen")]
    return data
