"""What one jump-table case of the attribute reader does: the case walker.

From a case's first instruction every path is followed (branches both ways, direct jumps,
calls noted and their clobbers applied) while three sets of registers are tracked: those
that hold the device struct, those that hold the result pointer, and those with a known
constant. Each step of `CaseWalker.decode` is a method: the memory operands of one
instruction (`_read_operands`), whether a test gates the value (`_gates_on`), a call
(`_call`), the register effects (`_registers`), the branch (`_branch`), and, at the end,
what kind of case it was (`_classify`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from capstone import CS_AC_WRITE, CsInsn
from capstone import x86 as cx86

from .flow import Function, JumpTable, back_insns
from .profile import AttrCase, FieldTest, GlobalTest
from .x86 import (
    CALLER_SAVED,
    Code,
    direct_target,
    fam,
    is_jcc,
    mem_ops,
    rip_target,
    written_families,
)

MAX_CASE_INSNS = 400  # instructions walked in one case, over all its paths

# Instructions a case may run without the walk losing track of what it computes.
_HANDLED = frozenset((
    "test", "cmp", "xor", "mov", "movzx", "movsx", "movsxd", "sete", "setne", "setb", "seta",
    "setae", "setbe", "setg", "setl", "setge", "setle", "and", "or", "shr", "shl", "sar", "add",
    "sub", "lea", "cmove", "cmovne", "nop", "push", "pop", "leave", "bt", "not", "neg", "cmova",
    "cmovb", "cmovae", "cmovbe", "endbr64", "cmovg", "cmovl", "cmovge", "cmovle", "sbb", "adc",
    "inc", "dec"))

Test = tuple[str, Any, CsInsn]  # ("f", field key, insn) or ("g", global vaddr, insn)


@dataclass
class _Path:
    """Where one path of the walk is, and what its registers hold."""

    va: int
    dev: set[str]  # registers holding the device struct
    res: set[str]  # registers holding the result pointer
    known: dict[str, int]  # registers holding a known constant


@dataclass
class _Walk:
    """What the walk of one case has seen so far, over all its paths."""

    fields: dict[tuple[int, str, int | None], FieldTest] = field(default_factory=dict)
    globs: dict[int, GlobalTest] = field(default_factory=dict)
    calls: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    consts: set[int] = field(default_factory=set)  # constants stored through the result
    stored_regs: set[str] = field(default_factory=set)  # registers of unknown value stored
    incomplete: bool = False
    stored: bool = False
    visited: set[int] = field(default_factory=set)
    work: list[tuple[int, frozenset[str], frozenset[str], dict[str, int]]] = \
        field(default_factory=list)
    count: int = 0

    def lost(self, note: str) -> None:
        self.incomplete = True
        self.notes.append(note)


class CaseWalker:
    """Decodes the jump-table cases of one attribute reader."""

    def __init__(self, code: Code, reader: Function, jt: JumpTable) -> None:
        self.code = code
        self.jt = jt
        # registers holding the device struct and the result pointer after the prologue
        self.dev0 = {"rdi"}
        self.res0 = {"rdx"}
        for b in sorted(back_insns(reader.insns, reader.prev, jt.jmp, 64), key=lambda x: x.address):
            if b.mnemonic == "mov" and len(b.operands) == 2 \
                    and b.operands[0].type == cx86.X86_OP_REG \
                    and b.operands[1].type == cx86.X86_OP_REG:
                dst, src = fam(b, b.operands[0].reg), fam(b, b.operands[1].reg)
                for s in (self.dev0, self.res0):
                    s.discard(dst)
                if src in self.dev0:
                    self.dev0.add(dst)
                elif src in self.res0:
                    self.res0.add(dst)
            else:
                for r in written_families(b):
                    self.dev0.discard(r)
                    self.res0.discard(r)

    def _gates_on(self, ins: CsInsn, test: CsInsn, dev: set[str], res: set[str],
                  known: dict[str, int]) -> bool:
        """Whether ``ins``, right after ``test``, sends the 'bit clear / byte zero' case to a 0.

        ``test $m,x; je L`` and ``cmp $0,x; je L`` take L when clear; ``jne L`` falls through
        when clear; ``cmp $0,x; setne %r8`` (with the rest of the register known to be 0) makes
        the value itself.
        """
        m = ins.mnemonic
        if test.mnemonic == "cmp":
            imm = [o for o in test.operands if o.type == cx86.X86_OP_IMM]
            if not imm or imm[0].imm != 0:
                return False
            if m == "setne" and ins.operands[0].type == cx86.X86_OP_REG:
                r = fam(ins, ins.operands[0].reg)
                return known.get(r) == 0 and self._zero_store(ins.address + ins.size, dev, res,
                                                            {**known, r: 0}, r)
        if m in ("je", "jz"):
            t = direct_target(ins)
            return t is not None and self._zero_store(t, dev, res, known, None)
        if m in ("jne", "jnz"):
            return self._zero_store(ins.address + ins.size, dev, res, known, None)
        return False

    def _zero_store(self, va: int, dev: set[str], res: set[str], known: dict[str, int],
                    value_reg: str | None) -> bool:
        """Whether straight-line code from ``va`` stores 0 (or ``value_reg``) through the result."""
        known = dict(known)
        for _ in range(12):
            ins = self.code.insn(va)
            if ins is None:
                return False
            m = ins.mnemonic
            mo = mem_ops(ins)
            if mo and fam(ins, mo[0].mem.base) in res and not mo[0].mem.index \
                    and mo[0].mem.disp == 0 and mo[0].access & CS_AC_WRITE:
                src = [o for o in ins.operands if o.type != cx86.X86_OP_MEM]
                if src and src[0].type == cx86.X86_OP_IMM:
                    return src[0].imm == 0 and value_reg is None
                if src and src[0].type == cx86.X86_OP_REG:
                    r = fam(ins, src[0].reg)
                    return r == value_reg if value_reg else known.get(r) == 0
                return False
            if m == "jmp":
                t = direct_target(ins)
                if t is None:
                    return False
                va = t
                continue
            if m == "call" or m.startswith("ret") or is_jcc(ins) or mo:
                return False
            if m == "xor" and ins.operands[0].type == ins.operands[1].type == cx86.X86_OP_REG \
                    and ins.operands[0].reg == ins.operands[1].reg:
                known[fam(ins, ins.operands[0].reg)] = 0
            elif m == "mov" and ins.operands[0].type == cx86.X86_OP_REG \
                    and ins.operands[1].type == cx86.X86_OP_IMM:
                known[fam(ins, ins.operands[0].reg)] = ins.operands[1].imm
            else:
                for r in written_families(ins):
                    if r == value_reg:
                        return False
                    known.pop(r, None)
            va += ins.size
        return False

    def decode(self, attribute: int, target: int) -> AttrCase:
        w = _Walk(work=[(target, frozenset(self.dev0), frozenset(self.res0), {})])
        while w.work:
            va, dev, res, known = w.work.pop()
            self._walk_path(w, _Path(va, set(dev), set(res), dict(known)))
        return self._classify(w, attribute, target)

    def _walk_path(self, w: _Walk, p: _Path) -> None:
        """Follow one path until it returns, leaves the walk, or joins a visited one."""
        last_test: Test | None = None
        while p.va not in w.visited:
            w.count += 1
            if w.count > MAX_CASE_INSNS:
                w.lost("walk stopped at the instruction limit")
                w.work.clear()
                return
            ins = self.code.insn(p.va)
            if ins is None:
                w.lost(f"cannot decode at {p.va:#x}")
                return
            w.visited.add(p.va)
            m = ins.mnemonic
            if m.startswith("ret"):
                return
            this_test = self._read_operands(w, p, ins)
            if last_test is not None and self._gates_on(ins, last_test[2], p.dev, p.res,
                                                        p.known):
                self._mark_gating(w, last_test)
            last_test = this_test
            if m == "call":
                self._call(w, p, ins)
                p.va += ins.size
                continue
            self._registers(p, ins)
            if not self._branch(w, p, ins):
                return

    def _read_operands(self, w: _Walk, p: _Path, ins: CsInsn) -> Test | None:
        """Record what `ins` reads or writes in memory: a global of the library, a field of
        the device struct, or the result. Returns the test it makes, if it is one."""
        m = ins.mnemonic
        this_test: Test | None = None
        for op in mem_ops(ins):
            base, idx = fam(ins, op.mem.base), op.mem.index
            is_write = bool(op.access & CS_AC_WRITE)
            if base == "rip" and not idx:
                gva = rip_target(ins, op)
                if m == "lea":
                    continue
                kind = "test" if m == "test" else "cmp" if m == "cmp" else \
                    "store" if is_write else "load"
                w.globs.setdefault(gva, GlobalTest(gva, op.size, kind, insn=self.code.ref(ins)))
                if kind in ("test", "cmp"):
                    this_test = ("g", gva, ins)
            elif base in p.dev and not idx and m != "lea":
                mask = None
                kind = "store" if is_write else "load"
                if m in ("test", "cmp"):
                    kind = m
                    imm = [o for o in ins.operands if o.type == cx86.X86_OP_IMM]
                    if m == "test" and imm:
                        mask = imm[0].imm & ((1 << (8 * op.size)) - 1)
                w.fields.setdefault((op.mem.disp, kind, mask), FieldTest(
                    op.mem.disp, op.size, mask, kind, insn=self.code.ref(ins)))
                if kind == "test" and mask:
                    this_test = ("f", (op.mem.disp, kind, mask), ins)
            elif base in p.res and not idx and op.mem.disp == 0 and is_write:
                w.stored = True
                src = [o for o in ins.operands if o.type != cx86.X86_OP_MEM]
                if src and src[0].type == cx86.X86_OP_IMM:
                    w.consts.add(src[0].imm)
                elif src and src[0].type == cx86.X86_OP_REG:
                    r = fam(ins, src[0].reg)
                    if r in p.known:
                        w.consts.add(p.known[r])
                    else:
                        w.stored_regs.add(r)
            elif base in ("rbp", "rsp") and m == "lea":
                continue
            elif m != "lea" and m != "nop" and not m.startswith("nop"):
                w.lost(f"reads other memory at {ins.address:#x}: {m} {ins.op_str}")
        return this_test

    @staticmethod
    def _mark_gating(w: _Walk, test: Test) -> None:
        kind, key, _ = test
        if kind == "f":
            w.fields[key] = replace(w.fields[key], gating=True)
        else:
            w.globs[key] = replace(w.globs[key], gating=True)

    @staticmethod
    def _call(w: _Walk, p: _Path, ins: CsInsn) -> None:
        t = direct_target(ins)
        if t is not None:
            w.calls.append(t)
        else:
            w.notes.append(f"indirect call at {ins.address:#x}")
        w.incomplete = True
        for r in CALLER_SAVED:
            p.dev.discard(r)
            p.res.discard(r)
            p.known.pop(r, None)

    @staticmethod
    def _registers(p: _Path, ins: CsInsn) -> None:
        """What `ins` does to the registers the walk tracks."""
        m = ins.mnemonic
        dev, res, known = p.dev, p.res, p.known
        if m == "mov" and len(ins.operands) == 2 and ins.operands[0].type == cx86.X86_OP_REG:
            dst = fam(ins, ins.operands[0].reg)
            src = ins.operands[1]
            dev.discard(dst)
            res.discard(dst)
            known.pop(dst, None)
            if src.type == cx86.X86_OP_REG:
                s = fam(ins, src.reg)
                if s in dev:
                    dev.add(dst)
                if s in res:
                    res.add(dst)
                if s in known:
                    known[dst] = known[s]
            elif src.type == cx86.X86_OP_IMM:
                known[dst] = src.imm
        elif m == "xor" and len(ins.operands) == 2 \
                and ins.operands[0].type == ins.operands[1].type == cx86.X86_OP_REG \
                and ins.operands[0].reg == ins.operands[1].reg:
            r = fam(ins, ins.operands[0].reg)
            dev.discard(r)
            res.discard(r)
            known[r] = 0
        else:
            for r in written_families(ins):
                if r == "rflags":
                    continue
                dev.discard(r)
                res.discard(r)
                known.pop(r, None)

    @staticmethod
    def _branch(w: _Walk, p: _Path, ins: CsInsn) -> bool:
        """Move the path past `ins`: False when it cannot be followed."""
        m = ins.mnemonic
        if m == "jmp":
            t = direct_target(ins)
            if t is None:
                w.lost(f"indirect jump at {ins.address:#x}")
                return False
            p.va = t
            return True
        if is_jcc(ins):
            t = direct_target(ins)
            if t is not None:
                w.work.append((t, frozenset(p.dev), frozenset(p.res), dict(p.known)))
        elif m not in _HANDLED and not m.startswith("nop") and not m.startswith("j"):
            w.lost(f"unhandled instruction at {ins.address:#x}: {m}")
        p.va += ins.size
        return True

    @staticmethod
    def _classify(w: _Walk, attribute: int, target: int) -> AttrCase:
        """The kind of case, from everything the walk saw."""
        field_list = list(w.fields.values())
        glob_list = list(w.globs.values())
        tests = [f for f in field_list if f.op in ("test", "cmp")]
        gtests = [g for g in glob_list if g.op in ("test", "cmp")]
        other_loads = [f for f in field_list if f.op == "load"]
        constant = None
        if not w.stored:
            kind = "unknown"
            w.notes.append("no store through the result pointer seen")
        elif w.incomplete:
            kind = "computed" if (field_list or glob_list or w.calls) else "unknown"
        elif not field_list and not glob_list and len(w.consts) == 1 and not w.stored_regs:
            kind, constant = "constant", next(iter(w.consts))
        elif other_loads and not tests and not gtests:
            kind = "field-value"
        elif (tests or gtests) and not other_loads \
                and not [g for g in glob_list if g.op == "load"]:
            kind = "field+global" if tests and gtests else "field" if tests else "global"
        elif field_list or glob_list:
            kind = "computed"
        else:
            kind = "unknown"
        complete = not w.incomplete and kind != "unknown"
        return AttrCase(attribute, target, kind, complete, field_list, glob_list, constant,
                        sorted(set(w.calls)), w.notes)
