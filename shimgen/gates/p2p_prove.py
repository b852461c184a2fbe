"""The emulation proof of the ``p2p-mixed`` gate (p2p.py): each check of the field is run in
unicorn (emulator.py) from its first load, on two synthetic device structs that differ only
in the field, with the driver's bytes and with the changed ones.

A run ends *compatible* when it reaches the place the branch sends equal fields
(``equal_target``), and *not compatible* when it leaves the compare another way first: a
``ret``, a call, an indirect jump, or 64 instructions. What must hold, for each check:

* the driver's bytes, equal fields: compatible (the equal side is what the driver's own
  code takes with equal fields);
* the driver's bytes, different fields (both orders): not compatible;
* the changed bytes, different fields (both orders): compatible;
* the changed bytes, equal fields: compatible, as before.

The two values are ones the driver's special cases (the pairs it accepts although they
differ) do not accept: the proof says which, and fails if the driver's bytes accept them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from capstone import x86 as cx86
from unicorn import UC_HOOK_CODE, Uc

from ..driver import DriverImage
from .emulator import PAGE, SCRATCH, STACK, STACK_SIZE, Emulator
from .facts import BASE
from .p2p_profile import FOUND, P2PCheck, P2PGate
from .x86 import Code

#: the field's values in the two structs: equal, then different (two generations' codes the
#: special cases of every build analysed do not pair)
EQUAL = (0x170, 0x170)
DIFFERENT = ((0x170, 0x1B0), (0x1B0, 0x170))
MAX_STEPS = 64
STRUCT_SIZE = 0x10000  # each synthetic struct: paths past the compare read other fields
COMPATIBLE, NOT_COMPATIBLE = "compatible", "not compatible"


@dataclass
class CheckProof:
    compare: int
    runs: dict[str, str] = field(default_factory=dict)
    ok: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"compare": hex(self.compare), "ok": self.ok, "runs": dict(self.runs)}


def _outcome(emu: Emulator, check: P2PCheck, offset: int, values: tuple[int, int]) -> str:
    """Run `check` from its first load with the field at `values` in the two structs."""
    uc = emu.uc
    a, b = emu.dev, emu.dev_other
    uc.mem_write(a + offset, values[0].to_bytes(8, "little"))
    uc.mem_write(b + offset, values[1].to_bytes(8, "little"))
    # every other register points at scratch memory: an out-pointer a path writes through
    # on its way out is not a fault
    regs = dict.fromkeys(("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11",
                          "r12", "r13", "r14", "r15"), SCRATCH + PAGE + PAGE // 2)
    regs["rbp"] = STACK + STACK_SIZE // 2  # a frame for the locals the paths read
    regs[check.struct_regs[0]], regs[check.struct_regs[1]] = a, b
    seen: dict[str, Any] = {"steps": 0, "end": None}
    target = BASE + check.equal_target

    def hook(u: Uc, address: int, size: int, _data: Any) -> None:
        if address == target:
            seen["end"] = COMPATIBLE
            u.emu_stop()
            return
        seen["steps"] += 1
        ins = emu.code.insn(address - BASE)
        m = ins.mnemonic if ins is not None else "?"
        indirect = m == "jmp" and ins is not None and ins.operands \
            and ins.operands[0].type != cx86.X86_OP_IMM
        if m.startswith("ret") or m == "call" or indirect or m == "?" \
                or seen["steps"] > MAX_STEPS:
            seen["end"] = f"{NOT_COMPATIBLE} (left at {address - BASE:#x}: {m})"
            u.emu_stop()

    h = uc.hook_add(UC_HOOK_CODE, hook)
    try:
        run = emu.run(check.loads[0].vaddr, regs, until=0)
    finally:
        uc.hook_del(h)
    if seen["end"] is None:
        return f"fault ({run.fault})" if run.fault else "no outcome"
    return seen["end"]


def _set_bytes(emu: Emulator, check: P2PCheck, patched: bool) -> None:
    for c in check.changes:
        emu.uc.mem_write(BASE + c.vaddr, bytes([c.new if patched else c.old]))
    lo = min(c.vaddr for c in check.changes)
    hi = max(c.vaddr for c in check.changes) + 1
    emu.uc.ctl_remove_cache(BASE + lo, BASE + hi)


def prove_check(emu: Emulator, check: P2PCheck, offset: int) -> CheckProof:
    proof = CheckProof(check.compare.vaddr)
    want: list[tuple[str, bool, tuple[int, int], str]] = [
        ("driver, equal", False, EQUAL, COMPATIBLE),
        *[(f"driver, {x:#x} vs {y:#x}", False, (x, y), NOT_COMPATIBLE) for x, y in DIFFERENT],
        *[(f"changed, {x:#x} vs {y:#x}", True, (x, y), COMPATIBLE) for x, y in DIFFERENT],
        ("changed, equal", True, EQUAL, COMPATIBLE),
    ]
    ok = True
    for label, patched, values, expect in want:
        emu.reset()
        _set_bytes(emu, check, patched)
        try:
            got = _outcome(emu, check, offset, values)
        finally:
            _set_bytes(emu, check, False)
        proof.runs[label] = got
        ok = ok and got.split(" (")[0] == expect
    proof.ok = ok
    return proof


def prove_p2p(image: DriverImage, gate: P2PGate, code: Code | None = None) -> dict[str, Any]:
    """Run every check of `gate`; its ``proof`` is set and returned (``ok``: every check
    proven, and at least one)."""
    checks: list[CheckProof] = []
    problems: list[str] = []
    bad = [r for k in gate.checks for r in (*k.loads, k.compare, k.branch)
           if image.contents[r.file_offset:r.file_offset + len(r.hex) // 2].hex() != r.hex]
    if bad:
        problems.append(f"{len(bad)} recorded instructions differ from the file "
                        f"(first at {bad[0].vaddr:#x})")
    elif gate.status == FOUND and gate.checks:
        emu = Emulator(code or Code(image), max((gate.offset or 0) + 0x1000, STRUCT_SIZE))
        for k in gate.checks:
            p = prove_check(emu, k, gate.offset or 0)
            checks.append(p)
            if not p.ok:
                problems.append(f"check at {k.compare.vaddr:#x}: "
                                + "; ".join(f"{a} -> {b}" for a, b in p.runs.items()))
    else:
        problems.append(f"no checks to prove ({gate.why})")
    ok = not problems and bool(checks)
    gate.proof = {"status": "passed" if ok else "failed", "ok": ok,
                  "method": "unicorn emulation of each check from its first load, two "
                            "synthetic device structs differing only in the field",
                  "checks": [c.to_json() for c in checks], "problems": problems}
    return gate.proof
