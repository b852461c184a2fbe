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

from ..driver import DriverImage
from .emulator import Emulator, Run
from .facts import BASE, GATE_RULES
from .initsite import prove_patch
from .profile import PROOF_FAILED, PROOF_PASSED, AttrCase, GateDiscoveryError, InsnRef, Profile
from .x86 import Code


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
    p2p: list[str] = field(default_factory=list)  # one line per P2P check (p2p_prove.py)

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
        lines += [f"  {x}" for x in self.p2p]
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)


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


def _prove_p2p(img: DriverImage, code: Code, profile: Profile, result: ProofResult) -> None:
    """The P2P gate's checks (p2p_prove.py), when it was found; a failed one fails the proof."""
    gate = profile.p2p
    if gate is None or gate.status != "found":
        return
    from .p2p_prove import prove_p2p

    got = prove_p2p(img, gate, code)
    result.p2p = [f"{gate.name} check {c['compare']}: " + ("OK" if c["ok"] else "FAILED")
                  for c in got["checks"]]
    result.problems += [f"gate {gate.name}: {x}" for x in got["problems"]]


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
    _prove_p2p(img, emu.code, profile, result)
    required = {g.name for g in profile.gates}
    proven = {a.gate for a in result.attributes if a.ok}
    result.ok = not result.problems and required <= proven
    return result
