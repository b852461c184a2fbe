"""The model of the driver's prototypes, kept in one place: from the headers' description
(headers.py), for each function the shim exports, each argument's name, kind and where
its value is (an argument register or a stack slot of the call record), and what the shim
captures for it (a string or a struct at entry, an output after a successful return, in
the record's capture area). The build renders the capture table from it
(templates/calls_table.c.j2); the report decodes the records with the same plan."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache

from .. import runenv
from ..cuda import returns_result

REGS = 6  # integer argument registers of the x86-64 calling convention
SLOTS = REGS + runenv.CALLS_STACK_ARGS  # the argument words a record keeps
CAPTURE_ROOM = runenv.CALLS_RECORD_SIZE - runenv.CALLS_CAPTURE_OFF
KIND_NUMBER = {name: number for number, name in runenv.CALLS_CAPTURE_KINDS.items()}
FLAG = {name: number for number, name in runenv.CALLS_CAPTURE_FLAGS.items()}
KIND_MASK = runenv.CALLS_CAPTURE_KIND_MASK
# an output's pointee kinds captured with a flag (runenv.CALLS_CAPTURE_FLAGS), their bytes
POINTED = {"string": ("pointed", 8 + runenv.CALLS_STRING_MAX), "function": ("function", 16)}
# A handle's short name where the type's own is long (CUcontext: ctx#1).
HANDLE_NAMES = {"CUcontext": "ctx", "CUfunction": "func", "CUstream": "stream",
                "CUevent": "event", "CUmodule": "module", "CUlibrary": "lib",
                "CUkernel": "kernel", "CUgraph": "graph", "CUgraphExec": "graphexec",
                "CUgraphNode": "node", "CUmemoryPool": "pool", "CUarray": "array"}
_SUFFIX = re.compile(r"(_v\d+)?(_ptds|_ptsz)?$")


@dataclass(frozen=True)
class Arg:
    name: str
    kind: str  # int, uint, addr, enum, handle, string, struct, out, outstr, ptr, float, other
    slot: int | None  # the record's argument word (0-5 registers, 6-10 stack); None: not kept
    info: str = ""  # the enum's or struct's name, the handle's short name
    pointee: dict | None = None  # an output's: its own kind and info
    capture: tuple[int, int, int] | None = None  # (kind number, size, offset in the area)
    size: int = 8  # a scalar's bytes


@dataclass(frozen=True)
class Proto:
    name: str
    args: tuple[Arg, ...]
    returns_result: bool
    nstack: int  # stack words the record keeps
    captures: tuple[tuple[int, int, int, int], ...] = field(default=())  # (slot, kind, size, off)


def _handle(d: dict) -> str | None:
    td = d.get("typedef", "")
    if d["k"] == "ptr" and td.startswith("CU") and d["to"]["k"] in ("struct", "void"):
        return HANDLE_NAMES.get(td, td[2:].lower())
    return None


def _scalar(d: dict) -> tuple[str, str, int]:
    """(kind, info, size) of a value an argument or an output holds."""
    h = _handle(d)
    if h:
        return "handle", h, 8
    k = d["k"]
    if k == "int":
        if "deviceptr" in d.get("typedef", "").lower():
            return "addr", "", d["size"]
        return ("int" if d["signed"] else "uint"), "", d["size"]
    if k == "enum":
        return "enum", d.get("name", ""), 4
    if k == "ptr":
        return "addr", "", 8
    return "other", "", 0


def _arg(desc: dict, name: str, d: dict, slot: int | None) -> Arg:
    if slot is None:
        return Arg(name, "float" if d["k"] == "float" else "other", None)
    h = _handle(d)
    if h or d["k"] != "ptr":
        kind, info, size = _scalar(d)
        return Arg(name, kind, slot, info, size=size or 8)
    to = d["to"]
    if to["k"] == "int" and to["size"] == 1 and "typedef" not in to:
        return Arg(name, "string" if d["const"] else "outstr", slot)
    if not d["const"] and to["k"] == "ptr" and to.get("const") and to["to"]["k"] == "int" \
            and to["to"]["size"] == 1:  # const char **: the string the driver points it to
        return Arg(name, "out", slot, "", {"kind": "string", "info": "",
                                           "size": POINTED["string"][1]})
    if not d["const"] and to["k"] == "ptr" and to["to"]["k"] == "void" \
            and name in runenv.CALLS_FUNCTION_OUTPUTS:  # void **pfn: a driver function
        return Arg(name, "out", slot, "", {"kind": "function", "info": "",
                                           "size": POINTED["function"][1]})
    if to["k"] == "struct" and to["name"] in desc["structs"]:
        return Arg(name, "struct" if d["const"] else "out", slot, to["name"],
                   {"kind": "struct", "info": to["name"],
                    "size": desc["structs"][to["name"]]["size"]})
    if not d["const"] and (to["k"] in ("int", "enum") or _handle(to)
                           or (to["k"] == "ptr" and to["to"]["k"] != "void")):
        kind, info, size = _scalar(to)
        return Arg(name, "out", slot, info, {"kind": kind, "info": info, "size": size})
    return Arg(name, "ptr", slot)


def _captures(args: list[Arg]) -> tuple[list[Arg], tuple]:
    out, caps, off = [], [], 0
    for a in args:
        size = {"string": runenv.CALLS_STRING_MAX, "outstr": runenv.CALLS_STRING_MAX}.get(
            a.kind, (a.pointee or {}).get("size", 0))
        if a.kind == "struct":
            size = (a.pointee or {}).get("size", 0)
        kind = {"string": "string", "outstr": "output", "struct": "struct",
                "out": "output"}.get(a.kind)
        size = min(size, CAPTURE_ROOM - off)
        if kind and size > 0 and a.slot is not None:
            pointed = POINTED.get((a.pointee or {}).get("kind")) if a.kind == "out" else None
            number = KIND_NUMBER[kind] | (FLAG["text"] if a.kind == "outstr" else
                                          FLAG[pointed[0]] if pointed else 0)
            a = Arg(a.name, a.kind, a.slot, a.info, a.pointee, (number, size, off), a.size)
            caps.append((a.slot, number, size, off))
            off += (size + 7) & ~7
        out.append(a)
    return out, tuple(caps)


def _lookup(desc: dict, name: str) -> dict | None:
    fn = desc["functions"].get(name)
    if fn is not None:
        return fn
    if re.search(r"_v\d+(_ptds|_ptsz)?$", name):
        return None  # a versioned export the headers do not declare: newer than they are
    base, suffix = _SUFFIX.sub("", name), (_SUFFIX.search(name).group(2) or "")
    best = _newest_pfn(desc).get((base, suffix))
    return best[1] if best else None


_PFN_KEY = re.compile(r"(.+?)_v(\d+)(_ptds|_ptsz)?")
_PFN_NEWEST: dict[int, tuple[dict, dict]] = {}  # id(desc) -> (desc, its index)


def _newest_pfn(desc: dict) -> dict:
    """The headers' `PFN_<name>_v<N>[_ptds|_ptsz]` typedefs by the export they describe,
    (name, suffix) -> (N, prototype) of the newest; made once per description (a scan of
    every typedef for each of some 600 exports was most of the capture table's time)."""
    known = _PFN_NEWEST.get(id(desc))
    if known is not None and known[0] is desc:
        return known[1]
    index: dict = {}
    for key, proto in desc["pfn"].items():
        m = _PFN_KEY.fullmatch(key)
        if m:
            at, version = (m.group(1), m.group(3) or ""), int(m.group(2))
            if at not in index or version > index[at][0]:
                index[at] = (version, proto)
    _PFN_NEWEST[id(desc)] = (desc, index)
    return index


def prototype(desc: dict, name: str) -> Proto | None:
    """The model of one function, or None when the headers do not know it (or it takes an
    argument this model does not place, such as a struct by value). An export is found by
    its name among the declarations (every versioned one, `__CUDA_API_VERSION_INTERNAL`),
    else, for an unversioned name (or its _ptds/_ptsz form), through the newest
    `PFN_<name>_v<version>` typedef; a versioned name the headers do not declare is newer
    than they are, and unknown."""
    fn = _lookup(desc, name)
    if fn is None:
        return None
    args, ints = [], 0
    for aname, d in fn["args"]:
        if d["k"] == "struct":
            return None
        if d["k"] == "float":
            args.append(_arg(desc, aname, d, None))
            continue
        args.append(_arg(desc, aname, d, ints if ints < SLOTS else None))
        ints += 1
    if ints > SLOTS:
        return None
    # a record's unread word (runenv.CALLS_UNREAD_WORD) must be none of the function's own
    args, caps = _captures(args) if ints <= runenv.CALLS_UNREAD_WORD else (args, ())
    ret = fn["ret"]
    return Proto(name, tuple(args), ret.get("typedef") == "CUresult",
                 max(0, ints - REGS), caps)


@lru_cache(maxsize=4)
def _cached_description(include: str | None):
    from .headers import describe

    return describe(None if include is None else __import__("pathlib").Path(include))


def description(include: str | None = None) -> dict:
    return _cached_description(include)


# The timing entry a function's stub takes (runtime/arch/x86_64/timing.S, timedfns.inc):
# what its declaration in the headers lets the entry leave unkept around rdtsc.
TIMED_ANY = 0  # no declaration known: rax and rdx kept at the call, rdx at the return
TIMED_RESULT = 1  # a CUresult, no varargs: rax not kept (no vector-register count), nor rdx
#                   at the return (a CUresult is eax alone)
TIMED_RESULT_TWO = 2  # the same, with at most two integer arguments: rdx (the third) not kept
TIMED_ARG_KINDS = ("ptr", "int", "enum")  # one integer register each (x86-64 SysV)


def timing_kind(desc: dict, name: str) -> int:
    """The timing entry of export `name`: only a declaration of that very name counts (a
    versioned export keeps its ABI: NVIDIA names a changed one _v2 and so on), returning a
    CUresult (and counted as one: cuda.returns_result), without varargs. An argument passed
    by value as anything but a pointer, an integer, an enum or a float may take more than
    one register: rdx is kept for it."""
    fn = desc["functions"].get(name)
    if fn is None or fn.get("varargs") or fn["ret"].get("typedef") != "CUresult" \
            or not returns_result(name):
        return TIMED_ANY
    ints = 0
    for _, d in fn["args"]:
        if d["k"] == "float":
            continue
        if d["k"] not in TIMED_ARG_KINDS or d.get("size", 8) > 8:
            return TIMED_RESULT
        ints += 1
    return TIMED_RESULT_TWO if ints <= 2 else TIMED_RESULT


def timing_kinds(names: list[str]) -> list[int]:
    """timing_kind of each export (in slot order); without headers (or pycparser), TIMED_ANY
    for every one."""
    try:
        desc = description()
    except Exception:  # noqa: BLE001 - no headers: every entry keeps what it may need
        return [TIMED_ANY] * len(names)
    return [timing_kind(desc, n) for n in names]


def _exit_info(caps) -> int:
    """The info bits of a function's outputs (runtime/arch/layout.h, CALLS_INFO_*): one output
    of 4 or 8 bytes and no other capture is copied by runtime/arch/x86_64/calls.S itself (32, 64
    for 8 bytes, its argument word << 8); any other outputs go through C (16)."""
    if len(caps) == 1 and caps[0][1] == KIND_NUMBER["output"] and caps[0][2] in (4, 8) \
            and caps[0][3] == 0:
        return 32 | (64 if caps[0][2] == 8 else 0) | caps[0][0] << 8
    return 16


def table_digest(table: dict) -> int:
    """The digest of a capture table (its info, first and captures: what a record's
    captures are, not where the headers lay), 64 bits, never 0: the shim records it in a
    calls trace's header, and `report --calls` decodes a trace's captures only with a table
    of the same digest."""
    text = json.dumps([table["info"], table["first"], table["captures"]],
                      separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") or 1


def capture_table(names: list[str]) -> dict:
    """What the build renders into calls_table.c: per function (in slot order) its info byte
    (stack words | 8 entry captures | 16 exit captures) and its captures; the headers' source;
    the table's digest. Without headers (or pycparser) every function is recorded as unknown
    (six registers)."""
    try:
        desc = description()
    except Exception as e:  # noqa: BLE001 - no headers is a build that records raw calls
        raw = {"source": f"none ({str(e).splitlines()[0] if str(e) else type(e).__name__})",
               "info": [0] * len(names), "first": [0] * (len(names) + 1), "captures": []}
        return {**raw, "digest": table_digest(raw)}
    info, first, caps = [], [], []
    for i, n in enumerate(names):
        p = prototype(desc, n)
        first.append(len(caps))
        if p is None:
            info.append(0)
            continue
        entry = any(k & KIND_MASK != KIND_NUMBER["output"] for _, k, _, _ in p.captures)
        exit_ = any(k & KIND_MASK == KIND_NUMBER["output"] for _, k, _, _ in p.captures)
        info.append(p.nstack | (8 if entry else 0) | (_exit_info(p.captures) if exit_ else 0))
        caps.extend((i, slot, kind, size, off) for slot, kind, size, off in p.captures)
    first.append(len(caps))
    table = {"source": desc.get("include", "?"), "info": info, "first": first, "captures": caps}
    return {**table, "digest": table_digest(table)}
