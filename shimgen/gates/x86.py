"""x86-64 helpers for reading the driver's code: a decoder over the parsed image (capstone,
one instruction at a time, cached) and small questions about one instruction (register
families, memory operands, branch targets)."""

from __future__ import annotations

import bisect
from typing import Any

from capstone import CS_ARCH_X86, CS_MODE_64, Cs, CsError, CsInsn
from capstone import x86 as cx86

from ..driver import DriverImage
from .profile import InsnRef
from .unwind import Unwind, read_unwind

MAX_FUNCTION_INSNS = 40_000  # instructions of one function decoded


class Code:
    """The executable bytes of a parsed driver, decoded on demand."""

    def __init__(self, image: DriverImage) -> None:
        self.image = image
        self.md = Cs(CS_ARCH_X86, CS_MODE_64)
        self.md.detail = True
        self._cache: dict[int, CsInsn | None] = {}
        self._functions: dict[int, list[CsInsn]] = {}
        self._unwind: Unwind | None = None

    def insn(self, va: int) -> CsInsn | None:
        """The instruction at `va`, or None when `va` is not executable or does not decode."""
        if va in self._cache:
            return self._cache[va]
        got: CsInsn | None = None
        if self.image.is_exec(va):
            try:
                got = next(self.md.disasm(self.image.read(va, 16), va, 1), None)
            except CsError:
                got = None
        self._cache[va] = got
        return got

    def function(self, va: int) -> list[CsInsn] | None:
        """Every instruction of the function that holds `va`, decoded in one pass from its
        start as its unwind entry gives it (unwind.py); None when no entry covers `va`. This
        is where the instructions really begin: a decode that starts at a guessed address
        can take a prefix or an immediate for the start of an instruction."""
        if self._unwind is None:
            self._unwind = read_unwind(self.image)
        bounds = self._unwind.bounds(va)
        if bounds is None:
            return None
        start, end = bounds
        got = self._functions.get(start)
        if got is None:
            got, at = [], start
            while at < end and len(got) < MAX_FUNCTION_INSNS:
                ins = self.insn(at)
                if ins is None:
                    break
                got.append(ins)
                at += ins.size
            self._functions[start] = got
        return got

    def covering(self, va: int) -> CsInsn | None:
        """The instruction of its function's decode whose bytes hold `va` (None: no
        unwind entry, or no such instruction)."""
        insns = self.function(va)
        if not insns:
            return None
        k = bisect.bisect_right([i.address for i in insns], va) - 1
        if k >= 0 and insns[k].address + insns[k].size > va:
            return insns[k]
        return None

    def ref(self, ins: CsInsn) -> InsnRef:
        """The record of `ins` that a profile keeps: where it is and its bytes."""
        off = self.image.file_offset(ins.address)
        assert off is not None
        text = f"{ins.mnemonic} {ins.op_str}".strip()
        return InsnRef(ins.address, off, bytes(ins.bytes).hex(), text)


_FAMILIES: dict[str, str] = {}
for _base in ("a", "b", "c", "d"):
    for _n in (f"r{_base}x", f"e{_base}x", f"{_base}x", f"{_base}l", f"{_base}h"):
        _FAMILIES[_n] = f"r{_base}x"
for _base in ("si", "di", "bp", "sp"):
    for _n in (f"r{_base}", f"e{_base}", _base, f"{_base}l"):
        _FAMILIES[_n] = f"r{_base}"
for _i in range(8, 16):
    for _n in (f"r{_i}", f"r{_i}d", f"r{_i}w", f"r{_i}b"):
        _FAMILIES[_n] = f"r{_i}"
CALLER_SAVED = {"rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11"}


def fam(ins: CsInsn, reg: int) -> str:
    name = ins.reg_name(reg) if reg else ""
    return _FAMILIES.get(name or "", name or "")


def rip_target(ins: CsInsn, op: Any) -> int:
    return ins.address + ins.size + op.mem.disp


def mem_ops(ins: CsInsn) -> list[Any]:
    return [o for o in ins.operands if o.type == cx86.X86_OP_MEM]


def written_families(ins: CsInsn) -> set[str]:
    try:
        _r, w = ins.regs_access()
    except CsError:
        return set()
    return {fam(ins, r) for r in w}


def is_jcc(ins: CsInsn) -> bool:
    return ins.mnemonic.startswith("j") and ins.mnemonic != "jmp"


def direct_target(ins: CsInsn) -> int | None:
    if ins.operands and ins.operands[0].type == cx86.X86_OP_IMM:
        return ins.operands[0].imm
    return None
