"""Where shimgen's own build inputs are (templates/ and runtime/, in a checkout or installed
as shimgen.templates and shimgen.runtime), and a stamp of them: the shim cache keys a shim by
it, so a changed runtime, template or build module never reuses a shim built from the old
ones. Light on purpose (no jinja2): `shimgen run`'s cached path calls `stamp()`."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from ..errors import ShimgenError

_PACKAGE = Path(__file__).resolve().parents[1]  # shimgen/
# what a build reads besides the driver: the data directories, and the Python that renders
# them (the facts and the build pipeline)
_STAMPED_MODULES = ("cuda.py", "cudaversions.py", "runenv.py", "arches.py")


def _data_dir(name: str, marker: str) -> Path:
    """`name`/ of a source checkout, or the copy installed as shimgen.`name`."""
    for candidate in (_PACKAGE.parent / name, _PACKAGE / name):
        if (candidate / marker).is_file():
            return candidate
    raise ShimgenError(f"shimgen's {name} files are missing (looked in {_PACKAGE.parent}/{name})")


def templates_dir() -> Path:
    return _data_dir("templates", "shim.h.j2")


def runtime_dir() -> Path:
    return _data_dir("runtime", "base/base.h")


def stamp() -> str:
    """16 hex digits that change when any file a build reads changes (its name, size or
    modification time: stat only, no file read, and zlib's checksums rather than hashlib,
    so `run`'s cached path stays fast and light)."""
    # (calls/: the model of the prototypes that calls_table.c is rendered from, and the
    # headers it reads: a shim built before they were installed, or from other ones, is
    # not reused)
    from ..calls import header_stamp_lines

    runtime = runtime_dir()
    dirs = [templates_dir(), _PACKAGE / "shim", _PACKAGE / "calls"]
    dirs += [Path(top) for top, _, _ in os.walk(runtime)]  # runtime/ and its folders
    entries = [(d, e) for d in dirs if d.is_dir() for e in os.scandir(d) if e.is_file()]
    entries += [(_PACKAGE, e) for e in os.scandir(_PACKAGE) if e.name in _STAMPED_MODULES]
    text = "".join(f"{os.path.relpath(d, runtime.parent)}/{e.name}\0{e.stat().st_size}\0"
                   f"{e.stat().st_mtime_ns}\n"
                   for d, e in sorted(entries, key=lambda de: (str(de[0]), de[1].name)))
    data = (text + "".join(header_stamp_lines())).encode()
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"
