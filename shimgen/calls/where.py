"""Where NVIDIA's headers are looked for (the runtime wheels' include directories, then
toolkits), and a stamp of the files a build reads there. Light on purpose (no hashlib,
tempfile or subprocess): `shimgen run`'s cached path stamps them (shim/sources.py), since a
shim's capture table is rendered from them (calls/headers.py reads them)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

TOOLKIT_INCLUDES = ("/usr/local/cuda/include",)
WHEELS = ("nvidia.cuda_runtime", "nvidia.cu13", "nvidia.cuda_nvcc")
READ = ("cuda.h", "cudaTypedefs.h")  # what a build reads of an include directory


def candidates() -> list[Path]:
    """Every include directory that may hold the headers, in the order they are looked in."""
    out = []
    for name in WHEELS:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        for loc in (spec.submodule_search_locations or []) if spec else []:
            out.append(Path(loc) / "include")
    return out + [Path(d) for d in TOOLKIT_INCLUDES]


def header_stamp_lines() -> list[str]:
    """One line per header file a build may read (its path, size and modification time;
    stat only): headers installed, removed or changed give other lines."""
    lines = []
    for d in candidates():
        for name in READ:
            try:
                st = os.stat(d / name)
            except OSError:
                continue
            lines.append(f"{d / name}\0{st.st_size}\0{st.st_mtime_ns}\n")
    return lines
