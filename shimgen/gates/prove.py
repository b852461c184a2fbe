"""Prove a gate profile by running the driver's own code in an emulator (unicorn).

The library's loadable segments are mapped at a fixed base with its ``R_X86_64_RELATIVE``
relocations applied, as the dynamic loader would. Nothing else of the process exists: no
libc, no kernel module, no GPU. Two pieces of driver code are run:

* the attribute reader, called as ``reader(dev, attribute, &value)`` on a synthetic, zeroed
  device struct. For each gated attribute the proof shows that with the bits and globals the
  case tests set, the driver stores 1; with them clear, 0; and that clearing any one gate bit
  or global alone gives 0 again.
* the caller's code from the ordinal check to the call of the reader, with a synthetic device
  table (slot 0 and slot 1 holding two structs, only slot 1 with the gate set), showing that
  the table address, offset and stride in the profile are the ones the driver uses.

When a case calls a helper (for example the VMM check that attribute 110 also needs), the
helper is first run as it is; if the value cannot reach 1 that way, each direct call made by
the case is answered with 1 without running it, and the proof records that assumption.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
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

from ..elf import DriverImage
from .discover import GATE_RULES
from .profile import PROOF_FAILED, PROOF_PASSED, AttrCase, GateDiscoveryError, InsnRef, Profile
from .x86 import Code

PAGE = 0x1000
BASE = 0x10_0000_0000  # where the library is mapped; never 0, so NULL reads fault
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


@dataclass
class AttrProof:
    attribute: int
    gate: str
    set_value: Run
    clear_value: Run
    single_clears: list[tuple[str, Run]]
    assumptions: list[str]
    ok: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "attribute": self.attribute, "gate": self.gate, "ok": self.ok,
            "set": self.set_value.show(), "clear": self.clear_value.show(),
            "single_clears": {what: r.show() for what, r in self.single_clears},
            "assumptions": list(self.assumptions),
        }


@dataclass
class TableProof:
    ok: bool
    runs: dict[str, str]
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "runs": dict(self.runs), "note": self.note}


@dataclass
class ProofResult:
    ok: bool
    build_id_matches: bool
    bytes_checked: int
    bytes_mismatched: list[str] = field(default_factory=list)
    attributes: list[AttrProof] = field(default_factory=list)
    device_table: TableProof | None = None
    problems: list[str] = field(default_factory=list)
    init_sites: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": PROOF_PASSED if self.ok else PROOF_FAILED,
            "ok": self.ok, "method": "unicorn emulation of the driver's own code",
            "build_id_matches": self.build_id_matches, "insns_checked": self.bytes_checked,
            "insns_mismatched": list(self.bytes_mismatched),
            "attributes": [a.to_json() for a in self.attributes],
            "device_table": None if self.device_table is None else self.device_table.to_json(),
            "init_sites": list(self.init_sites),
            "problems": list(self.problems),
        }

    def summary(self) -> str:
        lines = [f"proof {'PASS' if self.ok else 'FAIL'}"]
        for a in self.attributes:
            assume = f"  assuming {'; '.join(a.assumptions)}" if a.assumptions else ""
            lines.append(f"  {a.gate:<7} attr {a.attribute:<4} set -> {a.set_value.show()}, "
                         f"clear -> {a.clear_value.show()}, each bit/global alone cleared -> "
                         f"{', '.join(r.show() for _, r in a.single_clears) or '-'}"
                         f"{'  OK' if a.ok else '  FAILED'}{assume}")
        if self.device_table is not None:
            t = self.device_table
            lines.append(f"  device table: {'OK' if t.ok else 'FAILED'} "
                         + ", ".join(f"{k} -> {v}" for k, v in t.runs.items()) + (
                             f" ({t.note})" if t.note else ""))
        lines += [f"  init site: {x}" for x in self.init_sites]
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)


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

    def fall_through(self, jumps: list[Any]) -> None:
        """Make these conditional jumps fall through, whatever the flags say (a decoded
        straight-line path is run as it was decoded)."""

        def hook(uc: Uc, address: int, size: int, _data: Any) -> None:
            uc.reg_write(UC_X86_REG_RIP, address + size)

        for j in jumps:
            self._hooks.append(self.uc.hook_add(UC_HOOK_CODE, hook, begin=BASE + j.address,
                                                end=BASE + j.address))
            self.uc.ctl_remove_cache(BASE + j.address, BASE + j.address + 1)

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


def _check_bytes(img: DriverImage, refs: list[InsnRef]) -> list[str]:
    bad = []
    for r in refs:
        got = img.contents[r.file_offset:r.file_offset + len(r.hex) // 2].hex()
        if got != r.hex or img.file_offset(r.vaddr) != r.file_offset:
            bad.append(f"{r.vaddr:#x} ({r.text})")
    return bad


def _all_refs(profile: Profile) -> list[InsnRef]:
    refs: list[InsnRef] = []
    assert profile.reader is not None and profile.device_table is not None
    refs += profile.reader.insns + profile.device_table.insns
    for c in profile.cases:
        refs += [f.insn for f in c.fields] + [g.insn for g in c.globals]
    for g in profile.gates:
        for s in g.init_sites:
            refs.append(s.insn)
            if s.or_insn is not None:
                refs.append(s.or_insn)
        for p in g.init_patches:
            refs += p.insns
    return refs


def _case_inputs(case: AttrCase) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    bits = sorted(case.bit_tests())
    globs = sorted(case.gating_globals())
    return bits, globs


def _prove_attr(emu: Emulator, profile: Profile, gate_name: str, case: AttrCase) -> AttrProof:
    assert profile.reader is not None
    gate = profile.gate(gate_name)
    assert gate is not None
    reader = profile.reader.vaddr
    bits, globs = _case_inputs(case)
    forced: list[int] = []
    assumptions: list[str] = []
    on = emu.reader(reader, case.attribute, bits, globs, forced)
    if on.value != 1 and case.calls:
        forced = list(case.calls)
        assumptions = [f"call {t:#x} returns 1" for t in forced]
        on = emu.reader(reader, case.attribute, bits, globs, forced)
    off = emu.reader(reader, case.attribute, [], [], forced)
    singles: list[tuple[str, Run]] = []
    for f in gate.fields:
        if (f.offset, f.mask) in bits:
            rest = [b for b in bits if b != (f.offset, f.mask)]
            singles.append((f"[{f.offset:#x}]&{f.mask:#x}",
                            emu.reader(reader, case.attribute, rest, globs, forced)))
    for g in gate.globals:
        if (g.vaddr, g.size) in globs:
            rest_g = [x for x in globs if x != (g.vaddr, g.size)]
            singles.append((f"global {g.vaddr:#x}",
                            emu.reader(reader, case.attribute, bits, rest_g, forced)))
    ok = on.value == 1 and off.value == 0 and bool(singles) \
        and all(r.value == 0 for _, r in singles)
    return AttrProof(case.attribute, gate_name, on, off, singles, assumptions, ok)


def _prove_table(emu: Emulator, profile: Profile) -> TableProof:
    t = profile.device_table
    assert t is not None and profile.reader is not None
    rule = GATE_RULES[0]  # the gate every profile has
    gate = profile.gate(rule.name)
    case = profile.case(rule.attribute)
    if gate is None or case is None:
        return TableProof(False, {}, f"no {rule.name} gate")
    if t.attr_reg is None or t.result_reg is None:
        return TableProof(False, {}, "the call site does not pass the attribute and the result "
                          "pointer from registers; the table was not run")
    bits, globs = _case_inputs(case)
    call = emu.code.insn(t.call_site)
    if call is None:
        return TableProof(False, {}, "cannot decode the call site")
    start = min(i.vaddr for i in t.insns)
    table_va = BASE + t.vaddr + t.offset
    runs: dict[str, str] = {}
    values: dict[str, int | None] = {}
    for label, ordinal, gate_slot in (("ordinal 1, gate in slot 1", 1, 1),
                                      ("ordinal 0, gate in slot 1", 0, 1),
                                      ("ordinal 1, gate in slot 0", 1, 0)):
        emu.reset()
        emu.set_bits(emu.dev, bits)
        for va, size in globs:
            emu.set_global(va, size)
        slots = [emu.dev_other, emu.dev_other]
        slots[gate_slot] = emu.dev
        emu.uc.mem_write(table_va, struct.pack("<QQ", *slots))
        if t.count_vaddr is not None and t.count_size:
            emu.set_global(t.count_vaddr, t.count_size, 2)
        regs = {t.index_reg: ordinal, t.attr_reg: rule.attribute, t.result_reg: emu.result}
        r = emu.run(start, regs, until=t.call_site + call.size)
        runs[label] = r.show()
        values[label] = r.value
    ok = list(values.values()) == [1, 0, 0]
    return TableProof(ok, runs, f"ran {start:#x}..{t.call_site:#x} with attribute {rule.attribute}")


def _prove_init_patches(emu: Emulator, profile: Profile, result: ProofResult) -> None:
    """Each chosen init patch, run on synthetic structs with the original and patched bytes
    (initsite.py); a chosen patch that fails is a failed proof."""
    from .initsite import prove_patch

    for gate in profile.gates:
        for p in gate.init_patches:
            if p.status != "chosen":
                result.init_sites.append(f"{gate.name} {p.direction} [{p.offset:#x}]&{p.mask:#x}"
                                         f": {p.status} ({p.why})")
                continue
            problems = prove_patch(emu, emu.code, p, gate.init_sites)
            p.proven = not problems
            result.init_sites.append(
                f"{gate.name} {p.direction} [{p.offset:#x}]&{p.mask:#x}: "
                + ", ".join(f"{c.vaddr:#x} {c.old:#04x}->{c.new:#04x}" for c in p.changes)
                + (" OK" if p.proven else " FAILED"))
            result.problems += [f"gate {gate.name} init site: {x}" for x in problems]


def prove_init_patches(img: DriverImage, profile: Profile) -> list[str]:
    """Only the init-site changes, proven again now (a profile file's own "proven" is not
    taken on trust); each patch's ``proven`` is set from this run. The problems, if any."""
    result = ProofResult(False, img.build_id == profile.build_id, 0)
    max_off = max([f.offset for c in profile.cases for f in c.fields] + [0])
    _prove_init_patches(Emulator(Code(img), max_off + 0x1000), profile, result)
    return result.problems


def prove(img: DriverImage, profile: Profile) -> ProofResult:
    """Check the profile against the file, then run the driver's code to show each gate works."""
    bid_ok = img.build_id == profile.build_id
    refs = _all_refs(profile)
    bad = _check_bytes(img, refs)
    result = ProofResult(False, bid_ok, len(refs), bad)
    if not bid_ok:
        result.problems.append(f"build-id {img.build_id} is not the profile's {profile.build_id}")
        return result
    if bad:
        result.problems.append(f"{len(bad)} recorded instructions differ from the file")
        return result
    if profile.reader is None or profile.device_table is None or not profile.gates:
        raise GateDiscoveryError("profile has no reader, device table or gates to prove")
    max_off = max([f.offset for c in profile.cases for f in c.fields] + [0])
    emu = Emulator(Code(img), max_off + 0x1000)
    for gate in profile.gates:
        for attr in gate.attributes:
            case = profile.case(attr)
            if case is None:
                result.problems.append(f"gate {gate.name}: attribute {attr} has no case")
                continue
            result.attributes.append(_prove_attr(emu, profile, gate.name, case))
    result.device_table = _prove_table(emu, profile)
    _prove_init_patches(emu, profile, result)
    for a in result.attributes:
        if not a.ok:
            result.problems.append(f"gate {a.gate}: attribute {a.attribute} did not go 0 -> 1 "
                                   f"with its bits (set {a.set_value.show()}, "
                                   f"clear {a.clear_value.show()})")
    if not result.device_table.ok:
        result.problems.append("device table: the driver's own lookup did not pick the slot")
    required = {g.name for g in profile.gates}
    proven = {a.gate for a in result.attributes if a.ok}
    result.ok = not result.problems and required <= proven
    return result
