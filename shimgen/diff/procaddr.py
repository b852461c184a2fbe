"""`shimgen diff`'s cuGetProcAddress querier: a small C program (diff/query.c), compiled once
per user into `$XDG_CACHE_HOME/shimgen/tools/` (named by the digest of its source, so a changed
source gets a new binary) and run once per driver (diff/query.py): the real driver answers
cuGetProcAddress without a GPU. Two drivers never share a process, and a driver that crashes
its process is trouble for the command, not for shimgen. For another architecture's driver
the querier is cross-compiled and run under qemu-user (`runner`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..arches import ARCHES, host
from ..errors import ShimgenError

SOURCE = Path(__file__).with_name("query.c")


# ---- the querier: compiled once, run per driver ------------------------------------------

def _compile_failure(stderr: str) -> str:
    """Why the compiler failed, in one line: no space for its temporary files (it writes them
    in TMPDIR, else /tmp) said as such, with the directory; else its first error line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if any("No space left on device" in line for line in lines):
        tmpdir = os.environ.get("TMPDIR")
        where = f"TMPDIR={tmpdir}" if tmpdir else "/tmp (TMPDIR is not set)"
        return f"no space left on the device of the compiler's temporary files, in {where}"
    errors = [line for line in lines if "error" in line]
    return (errors or lines or ["no output"])[0]


def _compiler(arch: str) -> list[str]:
    """The C compiler of a querier for `arch`: $CC or cc for this machine's own, the cross
    compiler for another (one line when it is missing)."""
    if arch == host():
        return shlex.split(os.environ.get("CC") or "cc")
    facts = ARCHES[arch]
    if shutil.which(facts.cc) is None:
        raise ShimgenError(f"comparing {arch} drivers on this {host()} machine needs the "
                           f"cross compiler {facts.cc}, which is not installed "
                           f"(Debian: apt install {facts.packages})")
    return [facts.cc]


def runner(arch: str) -> list[str]:
    """What runs a querier for `arch`: nothing on this machine's own architecture, qemu-user
    on another (one line when it is missing)."""
    if arch == host():
        return []
    facts = ARCHES[arch]
    if shutil.which(facts.qemu) is None:
        raise ShimgenError(f"comparing {arch} drivers on this {host()} machine runs them "
                           f"under {facts.qemu}, which is not installed (Debian: apt install "
                           "qemu-user)")
    return [facts.qemu, "-L", facts.sysroot]


def _compile(source: bytes, out: Path, arch: str) -> None:
    cc = _compiler(arch)
    try:
        with tempfile.TemporaryDirectory(prefix=".diff-query-", dir=out.parent) as tmp:
            _compile_in(cc, source, Path(tmp), out)
    except OSError as e:
        raise ShimgenError(f"cannot compile the cuGetProcAddress querier: cannot write in "
                           f"{out.parent}: {e.strerror or e}") from None


def _compile_in(cc: list[str], source: bytes, tmp: Path, out: Path) -> None:
    src, exe = tmp / "query.c", tmp / "diff_query"
    src.write_bytes(source)
    try:
        proc = subprocess.run([*cc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                               str(src), "-ldl"], capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise ShimgenError(f"cannot compile the cuGetProcAddress querier with {cc[0]}: "
                           f"{e}") from None
    if proc.returncode != 0:
        raise ShimgenError("cannot compile the cuGetProcAddress querier: "
                           + _compile_failure(proc.stderr))
    os.rename(exe, out)  # whole, under its final name, or not at all


def querier_name(source: bytes) -> str:
    """The cached querier's file name: the digest of its source."""
    return f"diff-query-{hashlib.sha256(source).hexdigest()[:16]}"


def querier(tmp: Path, arch: str = "x86_64") -> Path:
    """The compiled querier: the cached one (`<cache>/tools/diff-query-<digest>`, made once),
    used only as the shim cache's files are (cache_trust: the cache root and tools/ opened
    without following a symlink, each a directory of this user's that nobody else can
    write, the program a regular file of this user's that nobody else can write); otherwise
    one compiled into `tmp`, which is private."""
    from ..cache import cache_root

    try:
        source = SOURCE.read_bytes()
    except OSError as e:
        raise ShimgenError(f"shimgen's {SOURCE.name} is missing ({e.strerror})") from None
    name = querier_name(source) + ("" if arch == host() else f"-{arch}")
    tools = cache_root() / "tools"
    with contextlib.suppress(OSError):
        tools.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tools.mkdir(exist_ok=True, mode=0o700)
    cached = _cached_querier(tools, name)
    if cached == "missing":
        _compile(source, tools / name, arch)
        return tools / name
    if cached == "ok":
        return tools / name
    exe = tmp / name
    _compile(source, exe, arch)
    return exe


def _cached_querier(tools: Path, name: str) -> str:
    """"ok" when `tools/name` may be run, "missing" when it may be made there, else why
    neither (the cache's own checks, cache_trust.open_dir and open_file)."""
    from ..cache import Unusable, open_dir, open_file

    fds: list[int] = []
    try:
        for level in (tools.parent, tools.name):
            fd, why = open_dir(level, fds[-1] if fds else None)
            if why:
                return why
            fds.append(fd)
        try:
            os.stat(name, dir_fd=fds[-1], follow_symlinks=False)
        except FileNotFoundError:
            return "missing"
        try:
            fd, _ = open_file(fds[-1], name)
        except Unusable as e:
            return str(e)
        os.close(fd)
        return "ok"
    except OSError as e:
        return e.strerror or str(e)
    finally:
        for fd in fds:
            os.close(fd)


