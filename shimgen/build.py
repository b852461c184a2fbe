"""Build the rendered sources with meson and ninja, and install the result atomically.

Everything happens in a private staging directory beside the output; the output directory
only ever receives complete files through rename(2), the library last. A failed or
interrupted build leaves the previous good build untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import ShimgenError
from .model import ShimModel, output_name
from .render import render

LIBRARY = "libcudashim.so"


@dataclass(frozen=True)
class BuildResult:
    model: ShimModel
    out_dir: Path
    library: Path
    seconds: float


def _tool_env() -> dict[str, str]:
    """PATH with this interpreter's scripts first, so meson finds the ninja we depend on."""
    env = dict(os.environ)
    scripts = sysconfig.get_path("scripts")
    env["PATH"] = os.pathsep.join(p for p in (scripts, env.get("PATH", "")) if p)
    return env


def _meson() -> list[str]:
    return [sys.executable, "-m", "mesonbuild.mesonmain"]


def _run(cmd: list[str], what: str, env: dict[str, str], log: Path) -> None:
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-12:]
        detail = "\n".join(tail)
        raise ShimgenError(f"{what} failed (exit {proc.returncode}); log {log}:\n{detail}")


def _check_writable(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ShimgenError(f"output directory {root}: {e.strerror}") from None
    if not root.is_dir():
        raise ShimgenError(f"output directory {root}: not a directory")
    if not os.access(root, os.W_OK | os.X_OK):
        raise ShimgenError(f"output directory {root}: not writable")


def build(model: ShimModel, out_root: Path, name: str | None = None) -> BuildResult:
    start = time.monotonic()
    out_root = out_root.absolute()
    _check_writable(out_root)
    final = out_root / (name or output_name(model.driver))
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=out_root))
    try:
        src = staging / "src"
        src.mkdir()
        render(model, src)
        env = _tool_env()
        log = staging / "build.log"
        bdir = staging / "meson"
        _run(_meson() + ["setup", str(bdir), str(src)], "meson setup", env, log)
        _run(_meson() + ["compile", "-C", str(bdir)], "compile", env, log)
        built = bdir / LIBRARY
        if not built.is_file():
            raise ShimgenError(f"meson finished but {built} is missing")
        manifest = {
            "shimgen_command": model.command,
            "driver": str(model.driver.real_path),
            "driver_given": str(model.driver.path),
            "driver_version": model.driver.version,
            "build_id": model.driver.build_id,
            "soname": "libcuda.so.1",
            "functions": len(model.functions),
            "hooks": [f.name for f in model.hooked],
            "extra_exports": list(model.extra_exports),
            "data_symbols_left_in_driver": [d.name for d in model.driver.data],
        }
        (staging / "shim.json").write_text(json.dumps(manifest, indent=2) + "\n")
        shutil.copy2(built, staging / LIBRARY)
        _install(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return BuildResult(model, final, final / LIBRARY, time.monotonic() - start)


def _install(staging: Path, final: Path) -> None:
    """Move complete results into `final`: sources, manifest, log, then the library."""
    final.mkdir(exist_ok=True)
    new_src = staging / "src"
    old_src = final / "src"
    if old_src.exists():
        trash = Path(tempfile.mkdtemp(prefix=".old-src.", dir=staging))
        os.replace(old_src, trash / "src")
    os.replace(new_src, old_src)
    for name in ("shim.json", "build.log", LIBRARY):
        os.replace(staging / name, final / name)
