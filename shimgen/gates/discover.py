"""Gate discovery: from the export to the attribute reader, its cases, the gates they test
and the instructions that write the gates' bits (docs/gates.md, "How discovery works").

1. ``cuDeviceGetAttribute`` in ``.dynsym`` is a small wrapper; direct jumps and calls, and
   indirect jumps through pointers that an ``R_X86_64_RELATIVE`` relocation fills, lead to
   the implementation (`_find_reader`).
2. The *attribute reader* is the function, called with a device struct in ``%rdi``, that
   bounds-checks the attribute argument (``%esi``) and dispatches through a jump table.
   The call site shows how an ordinal becomes a struct:
   ``lea table(%rip),%rax; mov off(%rax,%idx,8),%rdi`` (the device table).
3. Each jump-table case is walked (cases.py): what it tests (``testb $mask,off(dev)``,
   ``cmpb $0,g(%rip)``), calls, loads and the value it stores through the result pointer.
4. Gates are named by the attributes that test them (`GATE_RULES`, facts.py).
5. The instructions that write each gate's byte (the init sites) are found by searching the
   executable segments for the field's 32-bit displacement and decoding around each hit.

Nothing is guessed: a shape that is not recognised raises GateDiscoveryError naming what
was not found.
"""

from __future__ import annotations

import struct

from capstone import CS_AC_WRITE, CsInsn
from capstone import x86 as cx86

from ..arches import ARCHES
from ..cuda import attribute_name
from ..driver import DriverImage
from .cases import CaseWalker
from .facts import GATE_RULES, MASK, SET
from .flow import MAX_CASES, Function, JumpTable, back_insns, walk_function
from .initsite import choose
from .profile import (
    EXPORT,
    AttrCase,
    DeviceTable,
    Gate,
    GateDiscoveryError,
    GateField,
    GateGlobal,
    InitSite,
    Profile,
    Reader,
)
from .x86 import Code, fam, mem_ops, rip_target, written_families

# Limits that keep the analysis to the few functions that matter (seconds per driver).
MAX_FUNCTIONS = 48
MAX_DEPTH = 4
MIN_CASES = 64
INIT_SEARCH_BACK = 48


def discover(image: DriverImage) -> Profile:
    """Analyse one parsed libcuda; raise GateDiscoveryError when its layout is not understood."""
    name = image.real_path.name
    if not ARCHES[image.arch].gates:
        raise GateDiscoveryError(f"{name} is built for {image.arch}: the gate analysis reads "
                                 "x86-64 code only, for now")
    if not image.segments:
        raise GateDiscoveryError(f"{name} has no loadable segments")
    if not image.build_id:
        raise GateDiscoveryError("no GNU build-id note (.note.gnu.build-id)")
    export = image.function(EXPORT)
    if export is None or not export.address:
        raise GateDiscoveryError(f"{name} does not export {EXPORT}")
    code = Code(image)
    fn, jt, table, chain = _find_reader(code, export.address)
    walker = CaseWalker(code, fn, jt)
    cases: dict[int, AttrCase] = {}
    for i, t in enumerate(jt.entries):
        if t != jt.default:
            cases[i + jt.bias] = walker.decode(i + jt.bias, t)
    gates = _gates(code, cases)
    reader = Reader(fn.entry, jt.table, jt.kind, jt.bias, jt.bias + jt.count - 1,
                    jt.default if jt.default is not None else 0,
                    [code.ref(i) for i in jt.insns], chain)
    version = None if image.version == "unknown" else image.version
    from .p2p import discover_p2p

    return Profile(name, version, image.build_id, export.address, reader, table,
                   [cases[a] for a in sorted(cases)], gates, p2p=discover_p2p(image, code))


def _gates(code: Code, cases: dict[int, AttrCase]) -> list[Gate]:
    """One gate per rule of GATE_RULES whose case tests bits of its own."""
    out: list[Gate] = []
    taken_bits: set[tuple[int, int]] = set()
    taken_globals: set[tuple[int, int]] = set()
    for rule in GATE_RULES:
        case = cases.get(rule.attribute)
        if case is None:
            if rule.required:
                raise GateDiscoveryError(
                    f"attribute {rule.attribute} has no case in the attribute reader")
            continue
        bits = case.bit_tests() - taken_bits
        if not bits:
            if rule.required:
                raise GateDiscoveryError(
                    f"attribute {rule.attribute} ({attribute_name(rule.attribute)}) tests no "
                    f"device-struct bit (case kind {case.kind})")
            continue
        globs = case.gating_globals() - taken_globals
        out.append(_gate(code, rule.name, bits, globs, cases))
        taken_bits |= bits
        taken_globals |= globs
    return out


def _gate(code: Code, name: str, bits: set[tuple[int, int]], globs: set[tuple[int, int]],
          cases: dict[int, AttrCase]) -> Gate:
    attrs = sorted(a for a, c in cases.items() if c.bit_tests() & bits)
    sites: list[InitSite] = []
    patches = []
    for off, mask in sorted(bits):
        mine = _init_sites(code, off, mask)
        sites += mine
        patches += [choose(code, mine, off, mask, d) for d in (SET, MASK)]
    return Gate(name, attrs, [GateField(o, m) for o, m in sorted(bits)],
                [GateGlobal(v, s) for v, s in sorted(globs)], sites, patches)


# --------------------------------------------------------------------------------------------
# The attribute reader and the device table


def _arg_copies(fn: Function, jt: JumpTable) -> bool:
    """Whether the jump table's index is the function's second argument (%esi) or a copy."""
    chain = back_insns(fn.insns, fn.prev, jt.jmp, 64)
    want = {jt.index_reg}
    for b in chain:
        if b.mnemonic in ("mov", "movsxd", "movzx") and len(b.operands) == 2 \
                and b.operands[0].type == cx86.X86_OP_REG \
                and fam(b, b.operands[0].reg) in want:
            if b.operands[1].type == cx86.X86_OP_REG:
                want.add(fam(b, b.operands[1].reg))
            continue
        if b.mnemonic == "lea" and b.operands[0].type == cx86.X86_OP_REG \
                and fam(b, b.operands[0].reg) in want:
            mo = mem_ops(b)
            if mo and mo[0].mem.base and not mo[0].mem.index and fam(b, mo[0].mem.base) != "rip":
                want.add(fam(b, mo[0].mem.base))
    return "rsi" in want and all(
        "rsi" not in written_families(b) for b in chain
        if b.address < min((i.address for i in jt.insns), default=jt.jmp)
    )


def _reader_candidate(fn: Function) -> JumpTable | None:
    for jt in fn.tables:
        if MIN_CASES <= jt.count <= MAX_CASES and _arg_copies(fn, jt):
            return jt
    return None


def _find_device_table(code: Code, caller: Function, site: int) -> DeviceTable | None:
    """At ``call reader``: ``lea T(%rip),%t; mov off(%t,%idx,8),%rdi``."""
    back = back_insns(caller.insns, caller.prev, site, 16)
    load = None
    for b in back:
        if "rdi" in written_families(b):
            if b.mnemonic == "mov" and b.operands[0].type == cx86.X86_OP_REG:
                mo = mem_ops(b)
                if mo and mo[0].mem.index and mo[0].mem.scale == 8:
                    load = b
            break
    if load is None:
        return None
    mem = mem_ops(load)[0].mem
    base_reg, idx = fam(load, mem.base), fam(load, mem.index)
    lea = None
    for b in back_insns(caller.insns, caller.prev, load.address, 16):
        if base_reg in written_families(b):
            if b.mnemonic == "lea":
                mo = mem_ops(b)
                if mo and fam(b, mo[0].mem.base) == "rip" and not mo[0].mem.index:
                    lea = b
            break
    if lea is None:
        return None
    table = rip_target(lea, mem_ops(lea)[0])
    used = [lea, load]
    count_vaddr = count_size = None
    for b in back_insns(caller.insns, caller.prev, lea.address, 12):
        if b.mnemonic == "cmp" and b.operands[0].type == cx86.X86_OP_REG \
                and fam(b, b.operands[0].reg) == idx:
            mo = mem_ops(b)
            if mo and fam(b, mo[0].mem.base) == "rip":
                count_vaddr, count_size = rip_target(b, mo[0]), mo[0].size
                used.append(b)
            break
        if idx in written_families(b):
            break
    attr_reg = result_reg = None
    for b in back:
        if b.address < lea.address and b.address < load.address:
            break
        if b.mnemonic == "mov" and len(b.operands) == 2 and b.operands[0].type == cx86.X86_OP_REG \
                and b.operands[1].type == cx86.X86_OP_REG:
            dst, src = fam(b, b.operands[0].reg), fam(b, b.operands[1].reg)
            if dst == "rsi" and attr_reg is None:
                attr_reg = src
            elif dst == "rdx" and result_reg is None:
                result_reg = src
    used.sort(key=lambda x: x.address)
    return DeviceTable(table, mem.disp, mem.scale, count_vaddr, count_size,
                       [code.ref(i) for i in used], caller.entry, site, idx, attr_reg, result_reg)


def _find_reader(code: Code, export: int) -> tuple[Function, JumpTable, DeviceTable, list[str]]:
    seen: set[int] = set()
    funcs: dict[int, Function] = {}
    how: dict[int, str] = {export: f"{EXPORT} {export:#x}"}
    parents: dict[int, int] = {}
    frontier = [export]
    found: list[tuple[Function, JumpTable]] = []
    for _depth in range(MAX_DEPTH + 1):
        nxt: list[int] = []
        for va in frontier:
            if va in seen or len(seen) >= MAX_FUNCTIONS or not code.image.is_exec(va):
                continue
            seen.add(va)
            fn = walk_function(code, va)
            funcs[va] = fn
            jt = _reader_candidate(fn)
            if jt is not None:
                found.append((fn, jt))
                continue
            for site, t in fn.calls:
                if t not in how:
                    how[t], parents[t] = f"call at {site:#x} -> {t:#x}", va
                nxt.append(t)
            for t in fn.tails:
                if t not in how:
                    how[t], parents[t] = f"jump through a relocated pointer -> {t:#x}", va
                nxt.append(t)
        if found:
            break
        frontier = nxt
    if not found:
        raise GateDiscoveryError(
            f"attribute reader not found: no function within {len(seen)} reachable from "
            f"{EXPORT} dispatches on its %esi argument through a jump table of "
            f">= {MIN_CASES} cases")
    for fn, jt in found:
        for caller in funcs.values():
            for site, t in caller.calls:
                if t != fn.entry:
                    continue
                table = _find_device_table(code, caller, site)
                if table is not None:
                    chain = []
                    cur: int | None = fn.entry
                    while cur is not None:
                        chain.append(how[cur])
                        cur = parents.get(cur)
                    return fn, jt, table, list(reversed(chain))
    raise GateDiscoveryError(
        "device table not found: no call to the attribute reader "
        f"({', '.join(hex(f.entry) for f, _ in found)}) loads %rdi as "
        "off(lea table(%rip), index, 8)")


# --------------------------------------------------------------------------------------------
# Init sites: the instructions that write a gate's byte


def _init_sites(code: Code, offset: int, mask: int) -> list[InitSite]:
    """Instructions in executable code that write ``byte[offset]`` of some struct."""
    pat = struct.pack("<i", offset)
    out: dict[int, InitSite] = {}
    image = code.image
    for seg in (s for s in image.segments if s.executable):
        seg_va = seg.vaddr
        blob = image.contents[seg.offset:seg.offset + seg.filesz]
        start = 0
        while True:
            hit = blob.find(pat, start)
            if hit < 0:
                break
            start = hit + 1
            hit_va = seg_va + hit
            ins = code.covering(hit_va)
            if ins is not None:  # its function's own decode says where the instruction is
                site = _classify_write(code, ins, offset, mask) \
                    if ins.address + ins.size > hit_va + 3 else None
                if site is not None:
                    out[ins.address] = site
                continue
            for back in range(2, 5):
                ins = code.insn(hit_va - back)
                if ins is None or ins.address + ins.size <= hit_va:
                    continue
                site = _classify_write(code, ins, offset, mask)
                if site is not None:
                    out[ins.address] = site
                    break
    return sorted(out.values(), key=lambda s: s.insn.vaddr)


def _classify_write(code: Code, ins: CsInsn, offset: int, mask: int) -> InitSite | None:
    mo = [o for o in mem_ops(ins) if o.mem.disp == offset and not o.mem.index
          and fam(ins, o.mem.base) not in ("rip", "rsp", "")]
    if not mo:
        return None
    op = mo[0]
    if not op.access & CS_AC_WRITE or op.size != 1:
        return None
    m = ins.mnemonic
    imm = next((o.imm & 0xFF for o in ins.operands if o.type == cx86.X86_OP_IMM), None)
    if m == "or" and imm is not None:
        return InitSite(offset, "or-imm", imm, bool(imm & mask), code.ref(ins), None)
    if m == "and" and imm is not None:
        return InitSite(offset, "and-imm", imm, False, code.ref(ins), None)
    if m == "mov" and imm is not None:
        return InitSite(offset, "mov-imm", imm, bool(imm & mask), code.ref(ins), None)
    if m == "mov":
        src = next((o for o in ins.operands if o.type == cx86.X86_OP_REG), None)
        if src is None:
            return None
        reg = fam(ins, src.reg)
        or_ins = _or_before(code, ins, reg)
        if or_ins is not None:
            v = next(o.imm for o in or_ins.operands if o.type == cx86.X86_OP_IMM) & 0xFF
            return InitSite(offset, "store", v, bool(v & mask), code.ref(ins), code.ref(or_ins))
        return InitSite(offset, "store", None, False, code.ref(ins), None)
    return InitSite(offset, "other", imm, False, code.ref(ins), None)


def _or_before(code: Code, store: CsInsn, reg: str) -> CsInsn | None:
    """The ``or $imm,%reg`` that computes the stored byte, decoding forward from earlier starts."""
    for back in range(INIT_SEARCH_BACK, 0, -1):
        va = store.address - back
        seq: list[CsInsn] = []
        while va < store.address:
            ins = code.insn(va)
            if ins is None:
                break
            seq.append(ins)
            va += ins.size
        if va != store.address or not seq:
            continue
        for ins in reversed(seq):
            if reg in written_families(ins):
                if ins.mnemonic == "or" and ins.operands[1].type == cx86.X86_OP_IMM:
                    return ins
                return None
            if ins.mnemonic in ("call", "jmp") or ins.mnemonic.startswith("ret"):
                return None
        return None
    return None
