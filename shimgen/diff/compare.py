"""`shimgen diff OLD NEW`: what a driver upgrade changes for a shim, its gates and its hooks.

Four comparisons, each of the two drivers read once (driver.read_driver):
- exports: the functions and the objects of .dynsym, added and removed;
- cuGetProcAddress answers (diff/procaddr.py, diff/query.py): every (name, version, flags)
  query of both APIs whose answer differs, asked of each real driver in a process of its own;
- gates (diff/gates.py): each gate's struct offset and bit, its proof, its init-site bytes;
- hooks (--hook FILE.c): which hooked or declared names vanish, appear or change variants,
  and which stop being what cuGetProcAddress returns.

Exit status as diff(1): 0 no differences in what was compared, 1 differences, 2 trouble (the
command line turns a ShimgenError into exit 2 for this command).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cudaversions import variants as _same_function
from ..driver import DriverImage
from ..errors import ShimgenError
from .gates import GateDiff, GatesOf
from .query import Span

SCHEMA = "shimgen-diff/1"
NO_DIFFERENCES, DIFFERENCES, TROUBLE = 0, 1, 2
_HOOK = re.compile(r"\bSHIMGEN_(HOOK|DECLARE)\s*\(\s*[^,()]+?\s*,\s*([A-Za-z_]\w*)\s*,")
# comments and string or character literals, in the order C reads them
_C_TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def driver_file(arg: str | Path) -> Path:
    """OLD or NEW as given: a driver file, or a directory holding libcuda.so.1 (or exactly one
    libcuda.so.<version>)."""
    p = Path(arg)
    if not str(arg).strip():
        raise ShimgenError("diff: empty path")
    if not p.is_dir():
        return p
    if (p / "libcuda.so.1").exists():
        return p / "libcuda.so.1"
    found = sorted(p.glob("libcuda.so.[0-9]*"))
    if len(found) != 1:
        raise ShimgenError(f"driver {p.absolute()}: a directory without libcuda.so.1"
                           + (f" and with {len(found)} libcuda.so.<version> files"
                              if found else ""))
    return found[0]


def check_runnable(image: DriverImage) -> None:
    """diff loads each driver and runs its code (its constructors, its cuGetProcAddress) as
    the user: a driver file is held to the rule of a hook file (owned.distrust_code), and a
    shim (which `build` and `run` refuse as a driver too) is refused."""
    from ..files import distrust_code, open_regular
    from ..shim import check_not_a_shim

    check_not_a_shim(image)
    try:
        fd = open_regular(image.real_path)
    except OSError as e:
        raise ShimgenError(f"driver {image.path}: {e.strerror or e}") from None
    try:
        why = distrust_code(fd, image.real_path)
    finally:
        os.close(fd)
    if why:
        where = "" if image.real_path == image.path else f" ({image.real_path})"
        raise ShimgenError(f"driver {image.path}{where}: {why}; diff loads it and runs its "
                           "code as you, so only you (or root) may be able to change it")


# ---- hooks: the names a hook file hooks or declares ---------------------------------------

def hook_names(text: str) -> list[tuple[str, str]]:
    """(name, "hook" or "declare") for every SHIMGEN_HOOK(ret, name, (params)) and
    SHIMGEN_DECLARE(ret, name, (params)) of a C file, in the order written: comments, string
    and character literals removed first, and preprocessor lines (a #define of the macros)
    skipped. A name written twice is listed once, as a hook if it is hooked anywhere."""
    code = _C_TOKENS.sub(lambda m: " " if m.group(0)[0] == "/" else '""', text)
    code = re.sub(r"\\\n", " ", code)  # continued lines, so a #define is one line
    code = "\n".join(ln for ln in code.splitlines() if not ln.lstrip().startswith("#"))
    out: dict[str, str] = {}
    for m in _HOOK.finditer(code):
        kind = m.group(1).lower()
        out[m.group(2)] = "hook" if "hook" in (kind, out.get(m.group(2))) else kind
    return list(out.items())


def _read_hook_file(path: Path) -> str:
    """The text of a hook file, read as `--hook` reads it for a build (userhooks.load)."""
    from ..shim import userhooks

    return userhooks.load([str(path)])[0].data.decode("utf-8", errors="replace")


def variants(name: str, exports: set[str]) -> list[str]:
    """The exports that are `name` with _v<N>, _ptsz or _ptds suffixes added or removed."""
    return sorted(_same_function(name, exports))


@dataclass(frozen=True)
class HookedName:
    name: str
    kind: str  # "hook" or "declare"
    in_old: bool
    in_new: bool
    old_variants: tuple[str, ...]
    new_variants: tuple[str, ...]
    bypassed: tuple[Span, ...]  # queries that gave this name on OLD and another on NEW

    @property
    def what(self) -> list[str]:
        out = []
        if self.in_old != self.in_new:
            out.append("vanishes" if self.in_old else "appears")
        gained = sorted(set(self.new_variants) - set(self.old_variants))
        lost = sorted(set(self.old_variants) - set(self.new_variants))
        if gained:
            out.append("gains " + ", ".join(gained))
        if lost:
            out.append("loses " + ", ".join(lost))
        if self.bypassed:
            out.append("cuGetProcAddress gives another answer")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "in_old": self.in_old,
                "in_new": self.in_new, "old_variants": list(self.old_variants),
                "new_variants": list(self.new_variants), "what": self.what,
                "bypassed": [span_json(s) for s in self.bypassed]}


def compare_hooks(path: Path, old: DriverImage, new: DriverImage,
                  spans: list[Span]) -> list[HookedName]:
    a, b = set(old.function_names()), set(new.function_names())
    out = []
    for name, kind in hook_names(_read_hook_file(path)):
        gone = tuple(s for s in spans if s.old.symbol == name and s.old.found)
        out.append(HookedName(name, kind, name in a, name in b, tuple(variants(name, a)),
                              tuple(variants(name, b)), gone))
    return out


# ---- the whole comparison -----------------------------------------------------------------

@dataclass
class Diff:
    old: DriverImage
    new: DriverImage
    cuda: tuple[int, int]
    spans: list[Span]
    gates_asked: str  # "yes", "default" or "no"
    old_gates: GatesOf | None = None
    new_gates: GatesOf | None = None
    hooks: dict[str, list[HookedName]] = field(default_factory=dict)
    seconds: float = 0.0
    # The cuGetProcAddress APIs each driver has (diff/query.py's APIS' keys): 2 is CUDA 12.0's
    apis: tuple[list[int], list[int]] = ([1, 2], [1, 2])

    def apis_lacking(self) -> list[tuple[str, DriverImage, int, str]]:
        """(OLD or NEW, its driver, its CUDA version, the API name) for each cuGetProcAddress
        API one driver lacks: its answers are not compared."""
        from .query import APIS

        return [(label, d, cuda, APIS[api])
                for label, d, cuda, has in zip(("OLD", "NEW"), (self.old, self.new),
                                               self.cuda, self.apis, strict=True)
                for api in APIS if api not in has]

    def added(self, what: str = "functions") -> list[str]:
        a, b = ({e.name for e in getattr(d, what)} for d in (self.old, self.new))
        return sorted(b - a)

    def removed(self, what: str = "functions") -> list[str]:
        a, b = ({e.name for e in getattr(d, what)} for d in (self.old, self.new))
        return sorted(a - b)

    @property
    def gates_compared(self) -> bool:
        return self.old_gates is not None and self.new_gates is not None

    def gate_diffs(self) -> list[GateDiff]:
        from .gates import compare

        return compare(self.old_gates, self.new_gates) if self.gates_compared else []

    def gates_differ(self) -> bool:
        if not self.gates_compared:
            return False
        return (bool(self.old_gates.error) != bool(self.new_gates.error)
                or any(g.what for g in self.gate_diffs()))

    def differs(self) -> bool:
        return bool(self.added() or self.removed() or self.added("data")
                    or self.removed("data") or self.spans or self.gates_differ()
                    or any(h.what for hs in self.hooks.values() for h in hs))

    def status(self) -> int:
        return DIFFERENCES if self.differs() else NO_DIFFERENCES

    def to_json(self) -> dict[str, Any]:
        def side(d: DriverImage, cuda: int, g: GatesOf | None,
                 has: list[int]) -> dict[str, Any]:
            return {"path": str(d.real_path), "version": d.version, "build_id": d.build_id,
                    "cuda_version": cuda, "functions": len(d.functions),
                    "proc_address_apis": [APIS[a] for a in has],
                    "gates_error": None if g is None else g.error or None}

        from .query import APIS

        return {
            "schema": SCHEMA, "differences": self.differs(),
            "old": side(self.old, self.cuda[0], self.old_gates, self.apis[0]),
            "new": side(self.new, self.cuda[1], self.new_gates, self.apis[1]),
            "exports": {"added": self.added(), "removed": self.removed(),
                        "objects_added": self.added("data"),
                        "objects_removed": self.removed("data")},
            "proc_address": [span_json(s) for s in self.spans],
            "gates": {"compared": self.gates_compared, "asked": self.gates_asked,
                      "differ": self.gates_differ(),
                      "gates": [g.to_json() for g in self.gate_diffs()]},
            "hooks": {f: [h.to_json() for h in hs] for f, hs in self.hooks.items()},
            "seconds": round(self.seconds, 3),
        }


def span_json(s: Span) -> dict[str, Any]:
    from .query import APIS

    def answer(a) -> dict[str, Any]:
        return {"rc": a.rc, "status": None if a.status < 0 else a.status,
                "symbol": a.symbol if a.found else None, "text": a.text()}

    return {"name": s.name, "api": APIS[s.api], "flags": s.flags, "from": s.low,
            "to": s.high, "kind": s.kind, "old": answer(s.old), "new": answer(s.new)}


def compare(old_path: Path, new_path: Path, gates: str = "default",
            hook_files: list[Path] | None = None) -> Diff:
    """Both drivers read, both queried at once (a process each) while the parent finds their
    gates (`gates`: "yes", "default" (the same: see docs/diff.md) or "no")."""
    from ..driver import read_driver
    from . import procaddr as pa
    from . import query
    from .gates import analyse

    start = time.monotonic()
    old, new = read_driver(old_path), read_driver(new_path)
    for d in (old, new):
        check_runnable(d)
    hook_files = hook_files or []
    for h in hook_files:
        _read_hook_file(h)  # a bad hook file is trouble before any work
    names = query.query_names(old.function_names(), new.function_names())
    with tempfile.TemporaryDirectory(prefix="shimgen-diff-") as tmp:
        exes = {d.arch: pa.querier(Path(tmp), d.arch) for d in (old, new)}
        queries: list[query.Query] = []
        try:
            for d in (old, new):
                queries.append(query.Query(exes[d.arch], d.real_path, d.function_names(), names,
                                          Path(tmp), runner=pa.runner(d.arch)))
            found = [analyse(d) for d in (old, new)] if gates != "no" else [None, None]
            (va, sa), (vb, sb) = (q.result() for q in queries)
        finally:
            for q in queries:
                q.stop()
    spans = query.spans(sa, sb)
    result = Diff(old, new, (va, vb), spans, gates, found[0], found[1],
                  apis=(query.apis(sa), query.apis(sb)))
    for h in hook_files:
        result.hooks[str(h)] = compare_hooks(h, old, new, spans)
    result.seconds = time.monotonic() - start
    return result

