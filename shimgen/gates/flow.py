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
                if t is not None:
                    calls.append((va, t))
                else:
                    mo = mem_ops(ins)
                    if mo and fam(ins, mo[0].mem.base) == "rip":
                        p = code.image.pointer_at(rip_target(ins, mo[0]))
                        if p is not None:
                            calls.append((va, p))
                prev[nxt] = va
                va = nxt
                continue
            if m == "jmp":
                t = direct_target(ins)
                if t is not None:
                    work.append(t)
                    break
                mo = mem_ops(ins)
                if mo and fam(ins, mo[0].mem.base) == "rip" and not mo[0].mem.index:
                    p = code.image.pointer_at(rip_target(ins, mo[0]))
                    if p is not None:
                        tails.append(p)
                    break
                jt = _jump_table(code, ins, insns, prev)
                if jt is not None:
                    tables.append(jt)
                    work.extend(jt.entries)
                    if jt.default is not None:
                        work.append(jt.default)
                break
            if is_jcc(ins):
                t = direct_target(ins)
                if t is not None:
                    work.append(t)
            prev[nxt] = va
            va = nxt
    return Function(entry, insns, prev, calls, tails, tables, truncated)


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
    """Recognise ``movslq (base,idx,4),r; add base,r; jmp *r`` and ``jmp *(base,idx,8)``."""
    back = back_insns(insns, prev, jmp.address, 24)
    op = jmp.operands[0] if jmp.operands else None
    if op is None:
        return None
    used: list[CsInsn] = [jmp]
    kind = ""
    base_reg = idx_reg = ""
    if op.type == cx86.X86_OP_REG:
        target = fam(jmp, op.reg)
        add = load = None
        for b in back:
            if add is None and b.mnemonic == "add" and len(b.operands) == 2 \
                    and b.operands[0].type == cx86.X86_OP_REG \
                    and fam(b, b.operands[0].reg) == target \
                    and b.operands[1].type == cx86.X86_OP_REG:
                add = b
                base_reg = fam(b, b.operands[1].reg)
                continue
            if add is not None and load is None and b.mnemonic == "movsxd" \
                    and fam(b, b.operands[0].reg) in (target, base_reg):
                mo = mem_ops(b)
                if mo and mo[0].mem.scale == 4:
                    load = b
                    other = fam(b, b.operands[0].reg)
                    if other == base_reg:  # movslq (rax,rdx,4),rdx ; add rax? normalise
                        base_reg = target
                    if fam(b, mo[0].mem.base) != base_reg:
                        return None
                    idx_reg = fam(b, mo[0].mem.index)
                    break
        if add is None or load is None:
            # mov (base,idx,8),r; jmp *r
            for b in back:
                if b.mnemonic == "mov" and b.operands[0].type == cx86.X86_OP_REG \
                        and fam(b, b.operands[0].reg) == target:
                    mo = mem_ops(b)
                    if mo and mo[0].mem.scale == 8 and mo[0].mem.index:
                        base_reg, idx_reg = fam(b, mo[0].mem.base), fam(b, mo[0].mem.index)
                        used.append(b)
                        kind = "abs64"
                    break
            if not kind:
                return None
        else:
            used += [add, load]
            kind = "rel32"
    elif op.type == cx86.X86_OP_MEM and op.mem.scale == 8 and op.mem.index:
        base_reg, idx_reg = fam(jmp, op.mem.base), fam(jmp, op.mem.index)
        kind = "abs64"
    else:
        return None
    table = None
    for b in back:
        if b.mnemonic == "lea" and fam(b, b.operands[0].reg) == base_reg:
            mo = mem_ops(b)
            if mo and fam(b, mo[0].mem.base) == "rip" and not mo[0].mem.index:
                table = rip_target(b, mo[0])
                used.append(b)
            break
    if table is None:
        return None
    count = default = None
    bias = 0
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
            if nxt is not None and nxt.mnemonic == "ja":
                count = b.operands[1].imm + 1
                default = direct_target(nxt)
                used += [b, nxt]
                # a bias applied before the compare: lea -K(%r),%idx / sub $K,%idx
                for c in back[i + 1:i + 6]:
                    if c.operands and c.operands[0].type == cx86.X86_OP_REG \
                            and fam(c, c.operands[0].reg) in copies:
                        if c.mnemonic == "sub" and c.operands[1].type == cx86.X86_OP_IMM:
                            bias = c.operands[1].imm
                            used.append(c)
                        elif c.mnemonic == "add" and c.operands[1].type == cx86.X86_OP_IMM:
                            bias = -c.operands[1].imm
                            used.append(c)
                        elif c.mnemonic == "lea":
                            mo = mem_ops(c)
                            if mo and not mo[0].mem.index:
                                bias = -mo[0].mem.disp
                                copies.add(fam(c, mo[0].mem.base))
                                used.append(c)
                        break
            break
    if count is None or count > MAX_CASES * 4:
        return None
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
    used.sort(key=lambda x: x.address)
    return JumpTable(jmp.address, table, kind, idx_reg, count, bias, default, entries, used)
