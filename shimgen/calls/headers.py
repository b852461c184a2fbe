"""NVIDIA's own headers read with a real C parser: `cuda.h` and `cudaTypedefs.h` (the
`nvidia-cuda-runtime` wheel's, or a CUDA toolkit's) run through the C compiler's
preprocessor and pycparser, into one plain description of every driver function, enum and
struct that shimgen/calls/model.py turns into what the shim captures and what the report
prints. The description is cached by the digest of the preprocessed text (parsing takes a
second; the cached one is read in milliseconds)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from ..errors import ShimgenError
from .where import candidates

MODEL_VERSION = 2  # of the cached description's shape (2: a function's "varargs")
# The few C library headers cuda.h includes, as much of them as it uses.
FAKE_LIBC = {
    "stdlib.h": "typedef unsigned long size_t;\n",
    "stddef.h": "",
    "stdint.h": "".join(f"typedef {c} {n};\n" for n, c in (
        ("int8_t", "signed char"), ("uint8_t", "unsigned char"), ("int16_t", "short"),
        ("uint16_t", "unsigned short"), ("int32_t", "int"), ("uint32_t", "unsigned int"),
        ("int64_t", "long"), ("uint64_t", "unsigned long"), ("intptr_t", "long"),
        ("uintptr_t", "unsigned long"))),
}
_VERSION = re.compile(rb"^#define\s+CUDA_VERSION\s+(\d+)", re.M)


def header_dir() -> tuple[Path, int] | None:
    """The include directory with the newest cuda.h (and its cudaTypedefs.h), and its
    CUDA_VERSION; None when there is none."""
    best = None
    for d in candidates():
        try:
            text = (d / "cuda.h").read_bytes()
        except OSError:
            continue
        m = _VERSION.search(text)
        v = int(m.group(1)) if m else 0
        if (d / "cudaTypedefs.h").is_file() and (best is None or v > best[1]):
            best = (d, v)
    return best


def preprocess(include: Path) -> str:
    """cudaTypedefs.h (which includes cuda.h) through `cc -E`, with every versioned
    declaration (`__CUDA_API_VERSION_INTERNAL`) and the fake C library above."""
    with tempfile.TemporaryDirectory(prefix="shimgen-calls-") as tmp:
        for name, text in FAKE_LIBC.items():
            Path(tmp, name).write_text(text)
        src = Path(tmp, "all.c")
        src.write_text("#include <cudaTypedefs.h>\n")
        cmd = [os.environ.get("CC", "cc"), "-E", "-P", "-std=c99", "-undef", "-D__x86_64__",
               "-D__linux__", "-D__LP64__=1", "-D__CUDA_API_VERSION_INTERNAL",
               "-D__attribute__(x)=",
               "-nostdinc", "-I", tmp, "-I", str(include), str(src)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ShimgenError(f"cannot preprocess {include}/cuda.h: {e}") from None
        if r.returncode:
            first = (r.stderr.strip().splitlines() or ["failed"])[0]
            raise ShimgenError(f"cannot preprocess {include}/cuda.h: {first}")
        return r.stdout


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "shimgen" / "calls"


def describe(include: Path | None = None) -> dict:
    """The description of `include`'s headers (the newest found when None), from the cache
    or parsed now. ShimgenError when there are none or they cannot be read."""
    if include is None:
        found = header_dir()
        if found is None:
            raise ShimgenError("no cuda.h with cudaTypedefs.h was found (install the "
                               "nvidia-cuda-runtime package)")
        include = found[0]
    text = preprocess(include)
    digest = hashlib.sha256(f"{MODEL_VERSION}\n{text}".encode()).hexdigest()[:32]
    path = cache_dir() / f"{digest}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    from .parse import parse_declarations

    desc = parse_declarations(text)
    desc["include"] = str(include)
    _store(path, desc)
    return desc


def _store(path: Path, desc: dict) -> None:
    """Written whole, owner-only; a cache that cannot be written is no error."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump(desc, f)
        os.replace(tmp, path)
    except OSError:
        pass
