"""Control-flow recovery in the driver's code: one function's instructions from its entry
(direct branches, calls, tail jumps through relocated pointers) and the jump tables it
dispatches through (``movslq (base,idx,4),r; add base,r; jmp *r`` and ``jmp *(base,idx,8)``,
with the bounds check and bias in front of them)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from capstone import CsInsn
from capstone import x86 as cx86

from .x86 import Code, direct_target, fam, is_jcc, mem_ops, rip_target

MAX_FUNC_INSNS = 6000  # instructions walked in one function
MAX_CASES = 1024  # a jump table with more than 4x this many entries is not one


@dataclass
class JumpTable:
    jmp: int
    table: int
    kind: str
    index_reg: str
    count: int  # entries 0..count-1
    bias: int  # attribute = index + bias
    default: int | None
    entries: list[int]
    insns: list[CsInsn]


@dataclass
class Function:
    entry: int
    insns: dict[int, CsInsn]
    prev: dict[int, int]  # address -> address of the instruction that falls into it
    calls: list[tuple[int, int]]  # (call site, target)
    tails: list[int]  # indirect tail jumps through relocated pointers, and direct jumps out
    tables: list[JumpTable]
    truncated: bool


def walk_function(code: Code, entry: int, limit: int = MAX_FUNC_INSNS) -> Function:
    insns: dict[int, CsInsn] = {}
    prev: dict[int, int] = {}
    calls: list[tuple[int, int]] = []
    tails: list[int] = []
    tables: list[JumpTable] = []
    work = [entry]
    truncated = False
    while work:
        va = work.pop()
        while va not in insns:
            if len(insns) >= limit:
                truncated = True
                work.clear()
                break
            ins = code.insn(va)
            if ins is None:
                break
            insns[va] = ins
            nxt = va + ins.size
            m = ins.mnemonic
            if m in ("ret", "ud2", "hlt", "int3") or m.startswith("ret"):
                break
            if m == "call":
                t = direct_target(ins)
                op = _rip_operand(ins) if t is None else None
                if op is not None:
                    t = code.image.pointer_at(rip_target(ins, op))
                if t is not None:
                    calls.append((va, t))
                prev[nxt] = va
                va = nxt
                continue
            if m == "jmp":
                _follow_jmp(code, ins, insns, prev, work, tails, tables)
                break
            if is_jcc(ins):
                t = direct_target(ins)
                if t is not None:
                    work.append(t)
            prev[nxt] = va
            va = nxt
    return Function(entry, insns, prev, calls, tails, tables, truncated)


def _rip_operand(ins: CsInsn):
    """The memory operand of `ins` when it is rip-relative (a pointer in the image), or
    None."""
    mo = mem_ops(ins)
    if mo and fam(ins, mo[0].mem.base) == "rip" and not mo[0].mem.index:
        return mo[0]
    return None


def _follow_jmp(code: Code, ins: CsInsn, insns: dict[int, CsInsn], prev: dict[int, int],
                work: list[int], tails: list[int], tables: list[JumpTable]) -> None:
    """Where a `jmp` goes: a direct target (walked on), a pointer in the image (a tail
    call), or the entries of a jump table it reads (walked on, with its default)."""
    t = direct_target(ins)
    if t is not None:
        work.append(t)
        return
    op = _rip_operand(ins)
    if op is not None:
        p = code.image.pointer_at(rip_target(ins, op))
        if p is not None:
            tails.append(p)
        return
    jt = _jump_table(code, ins, insns, prev)
    if jt is not None:
        tables.append(jt)
        work.extend(jt.entries)
        if jt.default is not None:
            work.append(jt.default)


def back_insns(insns: dict[int, CsInsn], prev: dict[int, int], va: int, n: int) -> list[CsInsn]:
    """Up to ``n`` instructions that fall through into ``va``, nearest first."""
    out = []
    cur = va
    while len(out) < n and cur in prev:
        cur = prev[cur]
        out.append(insns[cur])
    return out


def _jump_table(code: Code, jmp: CsInsn, insns: dict[int, CsInsn],
                prev: dict[int, int]) -> JumpTable | None:
    """Recognise ``movslq (base,idx,4),r; add base,r; jmp *r`` and ``jmp *(base,idx,8)``:
    the dispatch, the table's address, the bounds check in front of it, its entries."""
    back = back_insns(insns, prev, jmp.address, 24)
    dispatch = _dispatch(jmp, back)
    if dispatch is None:
        return None
    kind, base_reg, idx_reg, loads = dispatch
    lea = _table_lea(back, base_reg)
    if lea is None:
        return None
    table = rip_target(lea, mem_ops(lea)[0])
    bounds = _bounds(insns, back, idx_reg)
    if bounds is None or bounds[0] > MAX_CASES * 4:
        return None
    count, default, bias, checks = bounds
    entries = _entries(code, kind, table, count)
    if entries is None:
        return None
    used = sorted([jmp, *loads, lea, *checks], key=lambda x: x.address)
    return JumpTable(jmp.address, table, kind, idx_reg, count, bias, default, entries, used)


def _dispatch(jmp: CsInsn, back: list[CsInsn]) -> tuple[str, str, str, list[CsInsn]] | None:
    """How the jump reads its table: (kind, base register, index register, the instructions
    that load the target). ``rel32``: ``movslq (base,idx,4),r; add base,r; jmp *r``;
    ``abs64``: ``mov (base,idx,8),r; jmp *r`` or ``jmp *(base,idx,8)``."""
    op = jmp.operands[0] if jmp.operands else None
    if op is None:
        return None
    if op.type == cx86.X86_OP_REG:
        target = fam(jmp, op.reg)
        add, load = _rel32_insns(target, back)
        if add is None or load is None:
            return _abs64_load(target, back)
        base_reg = fam(add, add.operands[1].reg)
        if fam(load, load.operands[0].reg) == base_reg:  # movslq (rax,rdx,4),rdx; add rax?
            base_reg = target
        mem = mem_ops(load)[0].mem
        if fam(load, mem.base) != base_reg:
            return None
        return "rel32", base_reg, fam(load, mem.index), [add, load]
    if op.type == cx86.X86_OP_MEM and op.mem.scale == 8 and op.mem.index:
        return "abs64", fam(jmp, op.mem.base), fam(jmp, op.mem.index), []
    return None


def _rel32_insns(target: str, back: list[CsInsn]) -> tuple[CsInsn | None, CsInsn | None]:
    """The ``add %base,%target`` nearest the jump and the ``movslq (..,..,4)`` into %target
    or %base before it: (add, load), None where not found."""
    add = None
    for b in back:
        if add is None and b.mnemonic == "add" and len(b.operands) == 2 \
                and b.operands[0].type == cx86.X86_OP_REG \
                and fam(b, b.operands[0].reg) == target \
                and b.operands[1].type == cx86.X86_OP_REG:
            add = b
            continue
        if add is not None and b.mnemonic == "movsxd" \
                and fam(b, b.operands[0].reg) in (target, fam(add, add.operands[1].reg)):
            mo = mem_ops(b)
            if mo and mo[0].mem.scale == 4:
                return add, b
    return add, None


def _abs64_load(target: str, back: list[CsInsn]) -> tuple[str, str, str, list[CsInsn]] | None:
    """``mov (base,idx,8),%target; jmp *%target``: the nearest write of %target must be it."""
    for b in back:
        if b.mnemonic == "mov" and b.operands[0].type == cx86.X86_OP_REG \
                and fam(b, b.operands[0].reg) == target:
            mo = mem_ops(b)
            if mo and mo[0].mem.scale == 8 and mo[0].mem.index:
                return "abs64", fam(b, mo[0].mem.base), fam(b, mo[0].mem.index), [b]
            return None
    return None


def _table_lea(back: list[CsInsn], base_reg: str) -> CsInsn | None:
    """The ``lea table(%rip),%base`` nearest the jump (None if the nearest lea into %base
    is not rip-relative)."""
    for b in back:
        if b.mnemonic == "lea" and fam(b, b.operands[0].reg) == base_reg:
            mo = mem_ops(b)
            if mo and fam(b, mo[0].mem.base) == "rip" and not mo[0].mem.index:
                return b
            return None
    return None


def _bounds(insns: dict[int, CsInsn], back: list[CsInsn],
            idx_reg: str) -> tuple[int, int | None, int, list[CsInsn]] | None:
    """The bounds check in front of the dispatch, ``cmp $N,%idx; ja default`` on the index or
    a register copied into it, with the bias applied before it: (count, default, bias, the
    instructions)."""
    copies = {idx_reg}
    for i, b in enumerate(back):
        m = b.mnemonic
        if m == "mov" and len(b.operands) == 2 and b.operands[0].type == cx86.X86_OP_REG \
                and b.operands[1].type == cx86.X86_OP_REG \
                and fam(b, b.operands[0].reg) in copies:
            copies.add(fam(b, b.operands[1].reg))
            continue
        if m == "cmp" and b.operands[0].type == cx86.X86_OP_REG \
                and fam(b, b.operands[0].reg) in copies and b.operands[1].type == cx86.X86_OP_IMM:
            nxt = insns.get(b.address + b.size)
            if nxt is None or nxt.mnemonic != "ja":
                return None
            bias, biased = _bias(back[i + 1:i + 6], copies)
            return b.operands[1].imm + 1, direct_target(nxt), bias, [b, nxt, *biased]
    return None


def _bias(before: list[CsInsn], copies: set[str]) -> tuple[int, list[CsInsn]]:
    """A bias applied to the index before the compare, ``lea -K(%r),%idx`` or ``sub $K,%idx``
    (or ``add``), in the nearest write of it: (K, [that instruction]), else (0, [])."""
    for c in before:
        if c.operands and c.operands[0].type == cx86.X86_OP_REG \
                and fam(c, c.operands[0].reg) in copies:
            if c.mnemonic == "sub" and c.operands[1].type == cx86.X86_OP_IMM:
                return c.operands[1].imm, [c]
            if c.mnemonic == "add" and c.operands[1].type == cx86.X86_OP_IMM:
                return -c.operands[1].imm, [c]
            if c.mnemonic == "lea":
                mo = mem_ops(c)
                if mo and not mo[0].mem.index:
                    return -mo[0].mem.disp, [c]
            return 0, []
    return 0, []


def _entries(code: Code, kind: str, table: int, count: int) -> list[int] | None:
    """The table's ``count`` targets (rel32: offsets from the table; abs64: relocated
    pointers), None unless each can be read and is executable."""
    entries = []
    for i in range(count):
        if kind == "rel32":
            raw = code.image.read(table + 4 * i, 4)
            if len(raw) != 4:
                return None
            entries.append((table + struct.unpack("<i", raw)[0]) & 0xFFFFFFFFFFFFFFFF)
        else:
            p = code.image.pointer_at(table + 8 * i)
            if p is None:
                return None
            entries.append(p)
    if not all(code.image.is_exec(e) for e in entries):
        return None
    return entries
