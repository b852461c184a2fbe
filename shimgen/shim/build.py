"""Build the rendered sources with meson and ninja, and install the result atomically.

Everything happens in a private staging directory inside the output root
(`.shimgen-staging-<name>-XXXX/`). The new build is assembled complete in `<staging>/out/`
and then put in place with one rename(2): onto a name that does not exist yet, or swapped
with the previous build by renameat2(RENAME_EXCHANGE). Where the file system cannot swap
directories, files are moved one by one, the library last. So a reader of
`<out>/<name>/libcudashim.so` sees the old library or the new one, never a part of one.

- A failed or interrupted build leaves the previous good build untouched and removes its
  staging directory. SIGINT, SIGTERM and SIGHUP are held back while a build is installed.
- Two builds into the same output root compile side by side and install one after the other:
  the install holds flock(2) on the output root's directory. The last to finish wins; each
  install is complete.
- A build that was killed (SIGKILL, power loss) leaves its staging directory behind; the next
  build into the same root removes it. Each build holds a lock on its own staging directory
  for as long as it runs, so a live build's directory is never taken.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .. import progress
from ..arches import ARCHES, host
from ..driver import read_build_id
from ..errors import Interrupted, ShimgenError, signals_held
from ..runenv import SHIM_LIBRARY, SHIM_MANIFEST
from .install import (
    STAGING_PREFIX,
    check_output,
    cleanup,
    dir_lock,
    fsync_tree,
    put_in_place,
    remove_stale_staging,
    rmtree,
)
from .model import SONAME, ShimModel


def _library(model) -> str:
    """The file name of the library a model builds: an NVML shim's model names its own
    (shim/nvml.py), which renders itself by the same steps."""
    return getattr(model, "library_file", SHIM_LIBRARY)


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


def _compile_command(bdir: Path, env: dict[str, str]) -> list[str]:
    """What compiles a configured build directory: ninja itself where it is on `env`'s PATH
    (the one we depend on comes first there, as meson setup found it; $NINJA as meson
    reads it), else `meson compile`, which finds it the same way. `meson compile` is a
    Python start and an import of meson before ninja: 0.2 s of CPU and 0.3 s of a 2-core
    build's wall time (docs/performance.md)."""
    ninja = shutil.which(env.get("NINJA") or "ninja", path=env.get("PATH"))
    return [ninja, "-C", str(bdir)] if ninja else _meson() + ["compile", "-C", str(bdir)]


def cross_triplet(driver) -> str | None:
    """The GNU triplet of the cross compiler a shim for `driver` needs (None: this machine's
    own architecture); one line when it is missing. Asked before anything is announced."""
    if driver.arch == host():
        return None
    arch = ARCHES[driver.arch]
    if shutil.which(arch.cc) is None:
        raise ShimgenError(f"driver {driver.path} is built for {driver.arch}: a shim for it "
                           f"is cross-built on this {host()} machine with "
                           f"{arch.cc}, which is not installed (Debian: apt install "
                           f"{arch.packages})")
    return arch.triplet


def _cross_file(model: ShimModel, new: Path) -> list[str]:
    """meson setup's --cross-file for a driver of another architecture (none for this
    machine's own), written beside the sources."""
    triplet = cross_triplet(model.driver)
    if triplet is None:
        return []
    arch = model.driver.arch
    cross = new / "cross.ini"
    cross.write_text(
        "[binaries]\n"
        + "".join(f"{key} = '{triplet}-{tool}'\n"
                  for key, tool in (("c", "gcc"), ("ar", "ar"), ("strip", "strip")))
        + f"\n[host_machine]\nsystem = 'linux'\ncpu_family = '{arch}'\ncpu = '{arch}'\n"
        "endian = 'little'\n")
    return ["--cross-file", str(cross)]


_ERROR_LINE = re.compile(r"(\berror\b|ERROR:|undefined reference|No such file)", re.I)


def _first_error(log: Path) -> str:
    """The line of the log that says what went wrong: the first error line, else the last."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("$ ")]
    for ln in lines:
        if _ERROR_LINE.search(ln) and not ln.startswith("ninja: build stopped"):
            return ln
    return lines[-1] if lines else "no output"


def _keep_log(log: Path, name: str) -> Path | None:
    """Copy a failed build's log out of the staging directory (which is removed)."""
    try:
        fd, kept = tempfile.mkstemp(prefix=f"shimgen-{name}-", suffix=".log")
        with os.fdopen(fd, "wb") as fh:
            fh.write(log.read_bytes())
        return Path(kept)
    except OSError:
        return None


def _start(cmd: list[str], what: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    """Start one tool, its output appended to `log`, in a session of its own (_finish waits
    for it; _kill_session ends it and every compiler it started)."""
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        try:
            return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            raise ShimgenError(f"{what}: cannot run {cmd[0]} ({e.strerror})") from None


def _finish(proc: subprocess.Popen, what: str, log: Path, name: str) -> None:
    """Wait for a tool _start started: if shimgen is interrupted, the tool and everything it
    started are killed, and gone before the staging directory is removed."""
    try:
        code = proc.wait()
    except BaseException:
        with signals_held():
            _kill_session(proc)
        raise
    if code != 0:
        kept = _keep_log(log, name)
        where = f"; full log {kept}" if kept else ""
        raise ShimgenError(f"{what} failed (exit {code}): {_first_error(log)}{where}")


def _run(cmd: list[str], what: str, env: dict[str, str], log: Path, name: str) -> None:
    """Run one tool to its end (_start, then _finish)."""
    _finish(_start(cmd, what, env, log), what, log, name)


def _session_members(sid: int) -> list[int]:
    """Live processes of session `sid` (ninja puts each compiler in a process group of its
    own, but they all stay in the session that the tool was started in)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def _kill_session(proc: subprocess.Popen, seconds: float = 10.0) -> None:
    """Kill a tool and everything it started, and wait until none of it runs."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + seconds
    while True:
        proc.poll()
        members = _session_members(proc.pid) if os.path.isdir("/proc/self") else []
        if not members or time.monotonic() > deadline:
            break
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))


def _compile(model: ShimModel, new: Path, bdir: Path, name: str) -> Path:
    """Render `model` into `new/src` and build it with meson in `bdir`, the log in
    `new/build.log`; the library built. meson setup reads only meson.build and whether the
    files it names exist, so it runs while the generated sources are rendered: the tree is
    laid out first (meson.build, the runtime, the user's files, the generated files empty),
    and the generated files are written before anything is compiled."""
    new.mkdir()
    src = new / "src"
    src.mkdir()
    progress.step(f"generating the sources of {len(model.functions)} functions")
    env = _tool_env()
    log = new / "build.log"
    cross = _cross_file(model, new)
    if hasattr(model, "library_file"):  # an NVML shim's model renders itself
        parts = model
    else:
        from . import render as parts
    parts.render_layout(model, src)
    setup = _start(_meson() + ["setup", *cross, str(bdir), str(src)], "meson setup", env, log)
    try:
        parts.render(model, src, generated_only=True)
    except BaseException:
        with signals_held():
            _kill_session(setup)
        raise
    progress.step("configuring the build (meson setup)")
    _finish(setup, "meson setup", log, name)
    progress.step("compiling and linking (ninja)")
    _run(_compile_command(bdir, env), "compile", env, log, name)
    progress.step("installing")
    built = bdir / _library(model)
    if not built.is_file():
        raise ShimgenError(f"meson finished but {built} is missing")
    return built


def _write_output(model: ShimModel, built: Path, new: Path, identity: dict | None) -> None:
    """The library `built` copied into `new`, and `new/shim.json` written: what was built,
    from what, and the library's build-id and size (and `identity`, when given)."""
    if hasattr(model, "library_file"):
        _finish_output(model.manifest(), built, new, identity, _library(model))
        return
    manifest = {
        "shimgen_command": model.command,
        "driver": str(model.driver.real_path),
        "driver_given": str(model.driver.path),
        "driver_version": model.driver.version,
        "build_id": model.driver.build_id,
        "soname": SONAME,
        "functions": len(model.functions),
        "exports": [f.name for f in model.functions],  # in slot order (--inject)
        "hooks": [f.name for f in model.hooked],
        "extra_exports": list(model.extra_exports),
        "data_symbols_left_in_driver": [d.name for d in model.driver.data],
        "gates": [g.name for g in model.gates.gates] if model.gates else [],
    }
    if model.user is not None:  # the user's hook files (--hook), as built
        manifest["user_hooks"] = [{"file": str(f.path), "sha256": f.sha256,
                                   "hooks": list(f.hooks), "calls": list(f.calls)}
                                  for f in model.user.files]
    _finish_output(manifest, built, new, identity, SHIM_LIBRARY)


def _finish_output(manifest: dict, built: Path, new: Path, identity: dict | None,
                   library: str) -> None:
    shutil.copy2(built, new / library)
    manifest["library_build_id"] = read_build_id(new / library)
    manifest["library_size"] = (new / library).stat().st_size
    if identity is not None:
        manifest["cache_key"] = identity
    (new / SHIM_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def build(model: ShimModel, out_root: Path, name: str | None = None,
          identity: dict | None = None) -> BuildResult:
    """Build `model` into `out_root/name` (default: output_name). `identity`, when given, is
    recorded in shim.json as "cache_key" (what the shim cache checks an entry against)."""
    start = time.monotonic()
    out_root = out_root.absolute()
    final = check_output(model, out_root, name)
    staging: Path | None = None
    staging_fd = -1
    try:
        with dir_lock(out_root), signals_held():
            remove_stale_staging(out_root)
            staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{final.name}-",
                                            dir=out_root))
            staging_fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            with contextlib.suppress(OSError):
                fcntl.flock(staging_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        new = staging / "out"
        built = _compile(model, new, staging / "meson", final.name)
        _write_output(model, built, new, identity)
        fsync_tree(new)
        installed = False
        try:
            with signals_held():
                with dir_lock(out_root):
                    put_in_place(new, final, staging)
                installed = True
                rmtree(staging)
                os.close(staging_fd)
                staging_fd = -1
        except Interrupted as e:  # held back during the install, delivered just now
            e.installed = installed
            raise
    except OSError as e:
        with signals_held():
            cleanup(staging, staging_fd)
        where = f" ({e.filename})" if e.filename else ""
        raise ShimgenError(f"build into {out_root} failed: {e.strerror or e}{where}") from None
    except BaseException as e:
        if isinstance(e, Interrupted) and e.installed:
            raise
        with signals_held():
            cleanup(staging, staging_fd)
        raise
    return BuildResult(model, final, final / _library(model), time.monotonic() - start)


