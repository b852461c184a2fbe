"""The mixed-generation P2P gate (`p2p-mixed`): where libcuda refuses peer access between two
devices whose per-device 64-bit generation field differs, found by analysis of one build
(docs/gates.md, "The P2P gate").

1. **The field.** From ``cuDeviceCanAccessPeer``, the functions reached through direct
   calls and relocated tail jumps are walked breadth first (at most 4 levels, 48
   functions); the other peer entry points (``cuCtxEnablePeerAccess``,
   ``cuDeviceGetP2PAttribute``, the peer copies) are walked the same way to say which
   checks they reach. The first level holding a *field compare* gives the
   field: ``mov off(%a),%r1; mov off(%b),%r2; cmp %r2,%r1`` (two 8-byte loads of one
   displacement through two different struct registers, compared, the next instruction a
   ``je``/``jne``). All compares of that level must name the same displacement.
2. **The checks.** Every field compare of that displacement in the executable code: the
   displacement's bytes are searched for (as the gate bits' init sites are) and each hit is
   decoded as the shape above. Each check records the two loads, the compare, the branch
   and which entry points reach its function by direct calls (most are reached only
   through the driver's own function pointers, so the search, not the walk, lists them).
3. **The change.** The branch after the compare is made to always take the side that equal
   fields take: ``je`` becomes ``jmp`` (``74 xx`` -> ``eb xx``; ``0f 84 rel32`` -> ``90 e9
   rel32``), ``jne`` becomes a no-op of its length (``66 90``; ``66 0f 1f 44 00 00``).

The emulation proof of each check is p2p_prove.py. No byte signature is used: a build whose
code has no such compare gets `P2PGate.status` "none" and the reason."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from capstone import CsInsn
from capstone import x86 as cx86

from ..driver import DriverImage
from .flow import Function, walk_function
from .p2p_profile import FOUND, NONE, P2P_GATE, P2PCheck, P2PGate
from .profile import ByteChange
from .x86 import Code, fam, is_jcc

#: the entry points walked: the first (the peer query) names the field; each check says which
#: of them reach it by direct calls
ENTRIES = ("cuDeviceCanAccessPeer", "cuCtxEnablePeerAccess", "cuDeviceGetP2PAttribute",
           "cuMemcpyPeer", "cuMemcpyPeerAsync", "cuMemcpy3DPeer", "cuMemcpy3DPeerAsync")
MAX_DEPTH = 4
MAX_FUNCTIONS = 48

_REX = range(0x40, 0x50)
#: the branch forms after a compare that the change knows (the opcode bytes)
_JE8, _JE32, _JNE8, _JNE32 = b"\x74", b"\x0f\x84", b"\x75", b"\x0f\x85"


# --------------------------------------------------------------------------------------------
# One field compare


@dataclass(frozen=True)
class _Compare:
    loads: tuple[CsInsn, CsInsn]
    cmp: CsInsn
    branch: CsInsn
    offset: int


def _load(ins: CsInsn) -> tuple[str, int] | None:
    """``mov disp(%base),%r64`` (no index, not rip/rsp): (base register, disp)."""
    if ins.mnemonic != "mov" or len(ins.operands) != 2 \
            or (ins.bytes[0] in _REX and ins.bytes[1] in _REX):  # a stray byte decoded as REX
        return None
    dst, src = ins.operands
    if dst.type != cx86.X86_OP_REG or dst.size != 8 or src.type != cx86.X86_OP_MEM \
            or src.size != 8 or src.mem.index:
        return None
    base = fam(ins, src.mem.base)
    if base in ("", "rip", "rsp"):
        return None
    return base, src.mem.disp


def _compare_at(code: Code, first: CsInsn, changed: bool = False) -> _Compare | None:
    """The field compare starting at `first` (the first load), or None: the second load of
    the same displacement through another register within the next three instructions,
    then ``cmp`` of the two loaded registers, then ``je``/``jne`` (with `changed`: the
    branch as this module changes it, ``jmp`` or ``nop; jmp``, as in a patched copy)."""
    one = _load(first)
    if one is None:
        return None
    r1 = fam(first, first.operands[0].reg)
    if r1 == one[0]:
        return None
    va = first.address + first.size
    second = None
    for _ in range(4):
        ins = code.insn(va)
        if ins is None:
            return None
        va += ins.size
        two = _load(ins)
        if second is None and two is not None and two[1] == one[1] and two[0] != one[0]:
            second = ins
            continue
        if ins.mnemonic == "cmp" and second is not None:
            return _cmp(code, first, second, ins, one[1], changed)
        if is_jcc(ins) or ins.mnemonic in ("call", "jmp", "ret") or ins.mnemonic.startswith("cmp"):
            return None
        written = {fam(ins, o.reg) for o in ins.operands[:1] if o.type == cx86.X86_OP_REG}
        if r1 in written or (second is not None
                             and fam(second, second.operands[0].reg) in written):
            return None
    return None


def _cmp(code: Code, first: CsInsn, second: CsInsn, cmp: CsInsn, offset: int,
         changed: bool) -> _Compare | None:
    regs = {fam(first, first.operands[0].reg), fam(second, second.operands[0].reg)}
    ops = cmp.operands
    if len(ops) != 2 or any(o.type != cx86.X86_OP_REG or o.size != 8 for o in ops) \
            or {fam(cmp, o.reg) for o in ops} != regs:
        return None
    branch = code.insn(cmp.address + cmp.size)
    if branch is not None and changed and branch.mnemonic == "nop" and branch.size == 1:
        branch = code.insn(branch.address + 1)
    if branch is None or branch.mnemonic not in (("jmp",) if changed else ("je", "jne")):
        return None
    return _Compare((first, second), cmp, branch, offset)


def _compares_in(code: Code, fn: Function, changed: bool = False) -> list[_Compare]:
    out = []
    for va in sorted(fn.insns):
        got = _compare_at(code, fn.insns[va], changed)
        if got is not None:
            out.append(got)
    return out


# --------------------------------------------------------------------------------------------
# The field, from the entry points


def _walk(code: Code, entry: int, name: str) -> tuple[list[list[Function]], dict[int, str]]:
    """The functions reached from `entry`, level by level (direct calls, relocated tails)."""
    seen: set[int] = set()
    how = {entry: f"{name} {entry:#x}"}
    levels: list[list[Function]] = []
    frontier = [entry]
    for _depth in range(MAX_DEPTH + 1):
        level: list[Function] = []
        nxt: list[int] = []
        for va in frontier:
            if va in seen or len(seen) >= MAX_FUNCTIONS or not code.image.is_exec(va):
                continue
            seen.add(va)
            fn = walk_function(code, va)
            level.append(fn)
            for site, t in fn.calls:
                how.setdefault(t, f"{how[va]} > call at {site:#x} -> {t:#x}")
                nxt.append(t)
            for t in fn.tails:
                how.setdefault(t, f"{how[va]} > jump through a relocated pointer -> {t:#x}")
                nxt.append(t)
        levels.append(level)
        frontier = nxt
    return levels, how


def _field(code: Code) -> tuple[int | None, list[str], str, dict[int, list[str]],
                                list[Function]]:
    """(offset, how it was reached, why not, function -> entry points reaching it, every
    function walked). The field comes from the peer query (`ENTRIES[0]`) alone: another
    entry point's first compare could be of anything."""
    reach: dict[int, list[str]] = {}
    walked: list[Function] = []
    levels_of: dict[str, tuple[list[list[Function]], dict[int, str]]] = {}
    for name in ENTRIES:
        sym = code.image.function(name)
        if sym is None or not sym.address:
            continue
        levels, how = levels_of[name] = _walk(code, sym.address, name)
        for level in levels:
            for fn in level:
                reach.setdefault(fn.entry, []).append(name)
                walked.append(fn)
    query = ENTRIES[0]
    if query not in levels_of:
        return None, [], f"the driver does not export {query}", reach, walked
    levels, how = levels_of[query]
    for level in levels:
        hits = [(fn, c) for fn in level for c in _compares_in(code, fn)]
        if not hits:
            continue
        offsets = sorted({c.offset for _, c in hits})
        if len(offsets) > 1:
            return None, [], (f"{query}: the functions at one level compare more than one "
                              f"field ({', '.join(map(hex, offsets))})"), reach, walked
        return offsets[0], sorted({how[fn.entry] for fn, _ in hits}), "", reach, walked
    done = [c for level in levels for fn in level for c in _compares_in(code, fn, True)]
    if done:
        return None, [], (f"the branch after {query}'s compare of [{done[0].offset:#x}] at "
                          f"{done[0].cmp.address:#x} is already unconditional (a patched "
                          "copy?)"), reach, walked
    return None, [], (f"no function within reach of {query} compares one 8-byte field of "
                      "two structs and branches on it"), reach, walked


# --------------------------------------------------------------------------------------------
# Every check of the field


def _change(branch: CsInsn) -> list[tuple[int, int, int]] | None:
    """The bytes that make `branch` always take the equal side, as (index in the
    instruction, old, new); None for a form this does not know."""
    raw = bytes(branch.bytes)
    if raw[:1] == _JE8 and len(raw) == 2:
        new = b"\xeb" + raw[1:]
    elif raw[:2] == _JE32 and len(raw) == 6:
        new = b"\x90\xe9" + raw[2:]
    elif raw[:1] == _JNE8 and len(raw) == 2:
        new = b"\x66\x90"
    elif raw[:2] == _JNE32 and len(raw) == 6:
        new = b"\x66\x0f\x1f\x44\x00\x00"
    else:
        return None
    return [(i, a, b) for i, (a, b) in enumerate(zip(raw, new, strict=True)) if a != b]


def _checks(code: Code, offset: int, reach: dict[int, list[str]],
            functions: list[Function]) -> list[P2PCheck]:
    image = code.image
    pat = struct.pack("<i", offset)
    found: dict[int, _Compare] = {}
    for seg in (s for s in image.segments if s.executable):
        blob = image.contents[seg.offset:seg.offset + seg.filesz]
        start = 0
        while (hit := blob.find(pat, start)) >= 0:
            start = hit + 1
            for back in (2, 3, 4):
                ins = code.insn(seg.vaddr + hit - back)
                if ins is None or ins.address + ins.size <= seg.vaddr + hit:
                    continue
                got = _compare_at(code, ins)
                if got is not None:
                    found.setdefault(got.cmp.address, got)
                    break
    owner = {va: fn.entry for fn in functions for va in fn.insns}
    out = []
    for _, c in sorted(found.items()):
        raw = _change(c.branch)
        if raw is None:
            continue
        b = c.branch
        target = b.operands[0].imm
        equal = target if b.mnemonic == "je" else b.address + b.size
        changes = [ByteChange(b.address + i, image.file_offset(b.address + i) or 0, old, new)
                   for i, old, new in raw]
        regs = [_load(x)[0] for x in c.loads]  # type: ignore[index]
        out.append(P2PCheck([code.ref(x) for x in c.loads], code.ref(c.cmp), code.ref(b), regs,
                            equal, changes, sorted(set(reach.get(owner.get(c.cmp.address, -1),
                                                                 [])))))
    return out


def discover_p2p(image: DriverImage, code: Code | None = None) -> P2PGate:
    """The ``p2p-mixed`` gate of one parsed driver (not proven: p2p_prove.prove_p2p)."""
    code = code or Code(image)
    offset, how, why, reach, functions = _field(code)
    if offset is None:
        return P2PGate(P2P_GATE, NONE, why, None, 8, [], [])
    checks = _checks(code, offset, reach, functions)
    if not checks:
        return P2PGate(P2P_GATE, NONE, f"field {offset:#x} found, but no compare of it between "
                       "two structs with a je/jne after it", offset, 8, how, [])
    return P2PGate(P2P_GATE, FOUND, f"{len(checks)} compare(s) of the 8-byte field "
                   f"{offset:#x} of two device structs", offset, 8, how, checks)

