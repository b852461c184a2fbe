"""`shimgen diff` of two NVML libraries (libnvidia-ml): what an upgrade changes for the NVML
shim, which forwards every export and answers those of nvml.ANSWERS. The exports each has
and not the other, and the answered exports each lacks; no library is loaded (NVML has no
cuGetProcAddress to ask, and no gates)."""

from __future__ import annotations

import json
from pathlib import Path

from ..driver import nvml
from ..errors import ShimgenError
from .compare import DIFFERENCES, NO_DIFFERENCES

SCHEMA = "shimgen-diff-nvml/1"


def nvml_file(arg: str | Path) -> Path:
    """OLD or NEW as given: a file, or a directory holding libnvidia-ml.so.1."""
    p = Path(arg)
    return p / nvml.SONAME if p.is_dir() and (p / nvml.SONAME).exists() else p


def sides(old: str, new: str):
    """(old image, new image) when either side is NVML, both read and checked; None when
    neither is (the libcuda comparison's). NVML against a libcuda is one line."""
    from ..driver import check_nvml, is_nvml, read_image

    a, b = nvml_file(old), nvml_file(new)
    if not a.is_file() and not b.is_file():
        return None  # a directory of a libcuda, or nothing: the libcuda comparison says
    images = []
    for p in (a, b):
        if not p.is_file():
            return None
        images.append(read_image(p))
    kinds = [is_nvml(i) for i in images]
    if not any(kinds):
        return None
    if not all(kinds):
        nv, other = (images[0], images[1]) if kinds[0] else (images[1], images[0])
        raise ShimgenError(f"diff: {nv.path} is NVML ({nvml.SONAME}) and {other.path} is not: "
                           "diff compares two libraries of one kind")
    return tuple(check_nvml(i) for i in images)


def compare(old, new) -> dict:
    a, b = old.function_names(), new.function_names()
    sa, sb = set(a), set(b)
    answered = [x.name for x in nvml.ANSWERS]
    return {
        "schema": SCHEMA,
        "old": {"path": str(old.path), "version": old.version, "functions": len(a)},
        "new": {"path": str(new.path), "version": new.version, "functions": len(b)},
        "removed": [n for n in a if n not in sb],
        "added": [n for n in b if n not in sa],
        "answered_lost": [n for n in answered if n in sa and n not in sb],
        "answered_gained": [n for n in answered if n in sb and n not in sa],
    }


def text(d: dict) -> str:
    o, n = d["old"], d["new"]
    lines = [f"NVML {o['version']} ({o['functions']} exports) -> {n['version']} "
             f"({n['functions']} exports)",
             f"exports    {len(d['removed'])} removed, {len(d['added'])} added"]
    for key, what in (("removed", "removed"), ("added", "added"),
                      ("answered_lost", "answered by the shim, now gone"),
                      ("answered_gained", "answered by the shim, new")):
        lines += [f"  {what}: {name}" for name in d[key]]
    return "\n".join(lines)


def run(old: str, new: str, json_out: bool) -> int | None:
    """The NVML comparison printed, and diff(1)'s status; None when neither is NVML."""
    both = sides(old, new)
    if both is None:
        return None
    d = compare(*both)
    print(json.dumps(d, indent=2) if json_out else text(d))
    return DIFFERENCES if d["removed"] or d["added"] else NO_DIFFERENCES
