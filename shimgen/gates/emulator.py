"""The driver's code run in an emulator (unicorn), for the proofs (prove.py, and each
init-site change in initsite.py): the library's loadable segments mapped at `facts.BASE`
with its ``R_X86_64_RELATIVE`` relocations applied, as the dynamic loader would, two
synthetic device structs, a result slot, TLS and a stack. Nothing else of the process
exists: no libc, no kernel module, no GPU."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from unicorn import UC_ARCH_X86, UC_HOOK_CODE, UC_MODE_64, UC_PROT_ALL, Uc, UcError
from unicorn.x86_const import (
    UC_X86_REG_EFLAGS,
    UC_X86_REG_FS_BASE,
    UC_X86_REG_R8,
    UC_X86_REG_R9,
    UC_X86_REG_R10,
    UC_X86_REG_R11,
    UC_X86_REG_R12,
    UC_X86_REG_R13,
    UC_X86_REG_R14,
    UC_X86_REG_R15,
    UC_X86_REG_RAX,
    UC_X86_REG_RBP,
    UC_X86_REG_RBX,
    UC_X86_REG_RCX,
    UC_X86_REG_RDI,
    UC_X86_REG_RDX,
    UC_X86_REG_RIP,
    UC_X86_REG_RSI,
    UC_X86_REG_RSP,
)

from .facts import BASE
from .x86 import Code

PAGE = 0x1000
DEV_AREA = 0x7E00_0000_0000  # synthetic device structs
SCRATCH = 0x7E10_0000_0000  # result slot, TLS
STACK = 0x7E20_0000_0000
STACK_SIZE = 0x100000
STOP = 0x7E30_0000_0000  # return address that ends a run
MAX_STEPS = 2_000_000
SENTINEL = 0xDEADBEEF

REGS = {
    "rax": UC_X86_REG_RAX, "rbx": UC_X86_REG_RBX, "rcx": UC_X86_REG_RCX, "rdx": UC_X86_REG_RDX,
    "rsi": UC_X86_REG_RSI, "rdi": UC_X86_REG_RDI, "rbp": UC_X86_REG_RBP, "r8": UC_X86_REG_R8,
    "r9": UC_X86_REG_R9, "r10": UC_X86_REG_R10, "r11": UC_X86_REG_R11, "r12": UC_X86_REG_R12,
    "r13": UC_X86_REG_R13, "r14": UC_X86_REG_R14, "r15": UC_X86_REG_R15,
}


def _up(v: int) -> int:
    return (v + PAGE - 1) & ~(PAGE - 1)


@dataclass
class Run:
    """One emulated call: the value stored through the result pointer, or why there is none."""

    value: int | None
    fault: str | None = None

    def show(self) -> str:
        if self.fault:
            return f"fault ({self.fault})"
        return "no value stored" if self.value is None else str(self.value)


class Emulator:
    """The driver image mapped in unicorn, plus two synthetic device structs."""

    def __init__(self, code: Code, dev_size: int) -> None:
        self.code = code
        img = code.image
        self.dev_size = _up(max(dev_size, PAGE))
        self.dev = DEV_AREA
        self.dev_other = DEV_AREA + self.dev_size
        self.result = SCRATCH
        lo = min(s.vaddr for s in img.segments) & ~(PAGE - 1)
        hi = _up(max(s.vaddr + s.memsz for s in img.segments))
        buf = bytearray(hi - lo)
        for seg in img.segments:
            buf[seg.vaddr - lo:seg.vaddr - lo + seg.filesz] = \
                img.contents[seg.offset:seg.offset + seg.filesz]
        for where, addend in img.relative.items():
            if lo <= where and where + 8 <= hi:
                struct.pack_into("<Q", buf, where - lo, BASE + addend)
        self.lo = lo
        self.image = bytes(buf)
        writable = [(s.vaddr, s.memsz) for s in img.segments if s.writable]
        self.rw = [(v & ~(PAGE - 1), _up(v + m)) for v, m in writable]
        uc = Uc(UC_ARCH_X86, UC_MODE_64)
        uc.mem_map(BASE + lo, hi - lo, UC_PROT_ALL)
        uc.mem_write(BASE + lo, self.image)
        uc.mem_map(DEV_AREA, 2 * self.dev_size, UC_PROT_ALL)
        uc.mem_map(SCRATCH, 4 * PAGE, UC_PROT_ALL)
        uc.mem_map(STACK, STACK_SIZE, UC_PROT_ALL)
        uc.mem_map(STOP, PAGE, UC_PROT_ALL)
        uc.mem_write(STOP, b"\xf4" * PAGE)
        self.uc = uc
        self._forced: dict[int, int] = {}
        self._hooks: list[Any] = []

    def reset(self) -> None:
        uc = self.uc
        for a, b in self.rw:
            uc.mem_write(BASE + a, self.image[a - self.lo:b - self.lo])
        uc.mem_write(DEV_AREA, bytes(2 * self.dev_size))
        uc.mem_write(SCRATCH, bytes(4 * PAGE))
        uc.mem_write(self.result, struct.pack("<I", SENTINEL))
        uc.mem_write(STACK, bytes(STACK_SIZE))
        for r in REGS.values():
            uc.reg_write(r, 0)
        uc.reg_write(UC_X86_REG_EFLAGS, 0x202)
        uc.reg_write(UC_X86_REG_FS_BASE, SCRATCH + 2 * PAGE)
        for h in self._hooks:
            uc.hook_del(h)
        if self._hooks:
            uc.ctl_remove_cache(BASE + self.lo, BASE + len(self.image) + self.lo)
        self._hooks = []

    def set_bits(self, struct_va: int, bits: list[tuple[int, int]]) -> None:
        for off, mask in bits:
            cur = self.uc.mem_read(struct_va + off, 1)[0]
            self.uc.mem_write(struct_va + off, bytes([cur | mask]))

    def set_global(self, vaddr: int, size: int, value: int = 1) -> None:
        self.uc.mem_write(BASE + vaddr, value.to_bytes(size, "little"))

    def force_calls(self, targets: list[int], value: int) -> None:
        """Answer calls to these functions with ``value`` in %rax, without running them."""

        def hook(uc: Uc, address: int, _size: int, _data: Any) -> None:
            rsp = uc.reg_read(UC_X86_REG_RSP)
            ret = struct.unpack("<Q", uc.mem_read(rsp, 8))[0]
            uc.reg_write(UC_X86_REG_RSP, rsp + 8)
            uc.reg_write(UC_X86_REG_RAX, value)
            uc.reg_write(UC_X86_REG_RIP, ret)

        for t in targets:
            self._hooks.append(self.uc.hook_add(UC_HOOK_CODE, hook, begin=BASE + t, end=BASE + t))
            # blocks translated before the hook existed would not call it
            self.uc.ctl_remove_cache(BASE + t, BASE + t + 1)

    def follow(self, path: list[Any] | tuple[Any, ...]) -> None:
        """Run this decoded path as it was decoded: each branch in it goes to the next
        instruction of the path, whatever the flags say, and each call in it is stepped
        over (its callee is not part of what is proven)."""

        def hook(uc: Uc, address: int, size: int, data: Any) -> None:
            uc.reg_write(UC_X86_REG_RIP, BASE + data)

        for ins, nxt in zip(path[:-1], path[1:], strict=True):
            m = ins.mnemonic
            if not (m.startswith("j") or m == "call"):
                continue
            self._hooks.append(self.uc.hook_add(UC_HOOK_CODE, hook, nxt.address,
                                                begin=BASE + ins.address,
                                                end=BASE + ins.address))
            self.uc.ctl_remove_cache(BASE + ins.address, BASE + ins.address + 1)

    def run(self, start: int, regs: dict[str, int], until: int | None = None) -> Run:
        """Run from image address ``start`` until it returns (or reaches ``until``)."""
        uc = self.uc
        rsp = STACK + STACK_SIZE - 0x1000
        rsp -= 8
        uc.mem_write(rsp, struct.pack("<Q", STOP))
        uc.reg_write(UC_X86_REG_RSP, rsp)
        for name, v in regs.items():
            uc.reg_write(REGS[name], v)
        end = STOP if until is None else BASE + until
        try:
            uc.emu_start(BASE + start, end, count=MAX_STEPS)
        except UcError as e:
            rip = uc.reg_read(UC_X86_REG_RIP)
            where = f"{rip - BASE:#x}" if rip >= BASE else f"{rip:#x} (outside the image)"
            return Run(None, f"{e} at {where}")
        rip = uc.reg_read(UC_X86_REG_RIP)
        if rip != end:
            return Run(None, f"stopped after {MAX_STEPS} instructions at {rip - BASE:#x}")
        v = struct.unpack("<I", uc.mem_read(self.result, 4))[0]
        return Run(None if v == SENTINEL else v)

    def reader(self, reader_va: int, attribute: int, bits: list[tuple[int, int]],
               globs: list[tuple[int, int]], forced: list[int]) -> Run:
        self.reset()
        self.set_bits(self.dev, bits)
        for va, size in globs:
            self.set_global(va, size)
        if forced:
            self.force_calls(forced, 1)
        return self.run(reader_va, {"rdi": self.dev, "rsi": attribute, "rdx": self.result})
