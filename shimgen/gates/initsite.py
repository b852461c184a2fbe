"""Choosing the init site: the instruction(s) where the driver builds a gate's byte, and the
smallest change of their immediates that makes the driver itself set the gate's bit (or, for
a mask, never set it). docs/gates.md, "The init site".

Every writer of the field's byte that discovery lists (discover.py, InitSite) is classified
by what it does to the gate's bit:

* ``sets``: ``orb $imm,off(%r)`` or ``movb $imm,off(%r)`` with the bit in ``imm``, or a store
  of a register that holds the field's own byte (``movzbl off(%r)``) or'ed with such an
  immediate;
* ``keeps``: the same shapes without the bit, or an ``and`` that keeps it;
* ``clears``: an ``and`` or a ``mov`` of an immediate without the bit;
* ``computes``: a store whose bit comes from run-time data (a bitfield assignment such as
  ``and $~0x20,%eax; or %edx,%eax``);
* ``unknown``: a store of a register whose value was not traced.

To **set** the bit, the candidates are the stores that rebuild the byte from itself in a
register with an ``or $imm`` that lacks the bit (the published 590.48.01 shape: ``movzbl
off(%rdi),%eax; mov %eax,%edx; or $0x40,%edx; ...; mov %dl,off(%rdi)``). They are grouped by
the load they start from; exactly one group is chosen, and every ``or`` in it gets the bit.
No group, or several, is reported, never guessed. To **mask** the bit, every writer that sets
it with an immediate loses the bit from that immediate; a ``computes`` writer cannot be fixed
by one immediate and is named in the reason.

`prove_patch` runs each changed path in the emulator (emulator.py) on a synthetic
device struct, with the original and the patched bytes (the image mapped at facts.BASE).
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

from capstone import CsInsn
from capstone import x86 as cx86

from .facts import BASE, MASK, SET
from .profile import ByteChange, InitPatch, InitSite, InsnRef
from .stored import trace_store
from .x86 import Code, fam, mem_ops


@dataclass
class Writer:
    """One writer of the field's byte, classified for one bit."""

    site: InitSite
    effect: str  # sets, keeps, clears, computes, unknown
    load: CsInsn | None = None  # the movzbl of the field (register stores)
    ors: tuple[CsInsn, ...] = ()  # the or $imm instructions applied to that register
    path: tuple[CsInsn, ...] = ()  # a path from the load (or the site) to the store
    merge: CsInsn | None = None  # computes: the `or %src,%dst` that brings the bit in
    keep: int = 0xFF  # computes: the field's bits kept (by `and`) before the merge
    merged_into: bool = False  # computes: the merge wrote the other register
    why: str = ""  # unknown: why the stored value is not traced


def _imm(ins: CsInsn) -> int | None:
    return next((o.imm for o in ins.operands if o.type == cx86.X86_OP_IMM), None)


def _imm_byte_index(ins: CsInsn) -> int | None:
    """Where the low byte of the instruction's immediate is (x86 puts immediates last)."""
    imm = _imm(ins)
    if imm is None:
        return None
    raw = bytes(ins.bytes)
    for size in (1, 4):
        if len(raw) > size and raw[-size:] == (imm & ((1 << 8 * size) - 1)).to_bytes(size,
                                                                                  "little"):
            return len(raw) - size
    return None


def _trace_store(code: Code, store: CsInsn, offset: int, mask: int) -> Writer:
    """Classify ``mov %r8,off(%base)`` by what its register holds there (stored.py)."""
    got = trace_store(code, store, offset)
    if isinstance(got, str):
        return Writer(None, "unknown", why=got)  # type: ignore[arg-type]
    val = got.val
    load = got.path[0]
    if val.merge is not None:
        return Writer(None, "computes", load, (), got.path,  # type: ignore[arg-type]
                      merge=got.merge, keep=val.keep, merged_into=val.merged_into)
    effect = "sets" if val.ob & mask else ("keeps" if val.keep & mask else "clears")
    return Writer(None, effect, load, got.ors, got.path)  # type: ignore[arg-type]


def classify(code: Code, site: InitSite, mask: int) -> Writer:
    """What this writer of the field's byte does to ``mask``."""
    ins = code.insn(site.insn.vaddr)
    assert ins is not None
    if site.kind in ("or-imm", "and-imm", "mov-imm") and site.imm is not None:
        has = bool(site.imm & mask)
        effect = {"or-imm": "sets" if has else "keeps", "and-imm": "keeps" if has else "clears",
                  "mov-imm": "sets" if has else "clears"}[site.kind]
        return Writer(site, effect, path=(ins,))
    if site.kind == "store":
        w = _trace_store(code, ins, site.offset, mask)
        w.site = site
        if w.effect == "unknown":
            w.path = (ins,)
        return w
    return Writer(site, "unknown", path=(ins,), why="not a store this analysis reads")


def _change(code: Code, ins: CsInsn, new_imm_byte: int) -> ByteChange:
    idx = _imm_byte_index(ins)
    assert idx is not None
    ref = code.ref(ins)
    return ByteChange(ref.vaddr + idx, ref.file_offset + idx, ins.bytes[idx], new_imm_byte)


FLAG_REGS = {"rflags", "eflags", "flags"}
FLAGS_LOOK_AHEAD = 64


def _merge_fix(code: Code, w: Writer, mask: int) -> ByteChange | None:
    """For a ``computes`` writer: the one-byte change that drops the merged register, making
    ``or %src,%dst`` into ``or %dst,%dst``; or None when that is not exactly the gate's bit.
    It is, when the `and` before the merge cleared only the gate's bit of the field (so the
    code keeps the other bits and the merged register can hold only that one), the merge is
    a plain two-byte register ``or`` (09 /r or 0b /r, no prefix), and no instruction reads
    the flags it sets before something else sets them (or a call or return)."""
    m = w.merge
    if m is None or w.merged_into or w.keep != (~mask & 0xFF) or len(m.bytes) != 2 \
            or m.bytes[0] not in (9, 11) or m.bytes[1] >> 6 != 3:
        return None
    va = m.address + m.size
    for _ in range(FLAGS_LOOK_AHEAD):
        ins = code.insn(va)
        if ins is None or ins.mnemonic == "jmp":
            return None
        if ins.mnemonic in ("call", "ret") or ins.mnemonic.startswith("ret"):
            break
        try:
            read, written = ins.regs_access()
        except Exception:
            return None
        if {ins.reg_name(r) for r in read} & FLAG_REGS:
            return None
        if {ins.reg_name(r) for r in written} & FLAG_REGS:
            break
        va += ins.size
    else:
        return None
    modrm = m.bytes[1]
    dst = modrm & 7 if m.bytes[0] == 9 else (modrm >> 3) & 7
    ref = code.ref(m)
    return ByteChange(ref.vaddr + 1, ref.file_offset + 1, modrm, 0xC0 | dst << 3 | dst)


def _at(ref: InsnRef) -> str:
    return f"{ref.vaddr:#x}"


def _choose_set(code: Code, writers: list[Writer], offset: int, mask: int,
                note: str) -> InitPatch:
    """The set patch: the one load the stores rebuild the byte from, each or that feeds a
    store gaining the bit; or why there is none."""
    groups: dict[int, list[Writer]] = {}
    for w in writers:
        if w.effect == "keeps" and w.load is not None and w.ors \
                and all(_imm_byte_index(o) is not None for o in w.ors):
            groups.setdefault(w.load.address, []).append(w)
    if len(groups) != 1:
        status = "none" if not groups else "ambiguous"
        why = ("no store rebuilds the byte from itself with an or of an immediate"
               if not groups else "stores rebuild the byte from loads at "
               + ", ".join(f"{a:#x}" for a in sorted(groups)) + "; not told apart")
        return InitPatch(SET, offset, mask, status, why + note, [], [])
    (load_va, group), = groups.items()
    ors = sorted({o.address: o for w in group for o in w.ors}.values(),
                 key=lambda o: o.address)
    changes = [_change(code, o, (_imm(o) | mask) & 0xFF) for o in ors]
    why = (f"the byte is rebuilt from itself (movzbl at {load_va:#x}) and stored at "
           + ", ".join(_at(w.site.insn) for w in group)
           + f"; the or feeding each store gains {mask:#x}" + note)
    return InitPatch(SET, offset, mask, "chosen", why,
                     [code.ref(o) for o in ors], changes)


def choose(code: Code, sites: list[InitSite], offset: int, mask: int,
           direction: str) -> InitPatch:
    """The init patch that makes the driver set (``set``) or never set (``mask``) the bit
    ``mask`` of byte ``offset``: chosen, or why none could be."""
    writers = [classify(code, s, mask) for s in sites if s.offset == offset]
    merges = {id(w): _merge_fix(code, w, mask) for w in writers if w.effect == "computes"}
    computes = [w for w in writers if w.effect == "computes"
                and (direction == SET or merges[id(w)] is None)]
    unknown = [w for w in writers if w.effect == "unknown"]
    note = ("; the bit is computed from run-time data at "
            f"{', '.join(_at(w.site.insn) for w in computes)} (not changed)") if computes else ""
    note += "".join(f"; the value stored at {_at(w.site.insn)} is not traced ({w.why}; not "
                    "changed)" for w in unknown)
    if direction == SET:
        return _choose_set(code, writers, offset, mask, note)
    setters = [w for w in writers if w.effect == "sets"]
    merged = [(w, merges[id(w)]) for w in writers if merges.get(id(w)) is not None]
    fixable: list[CsInsn] = []
    for w in setters:
        if w.site.kind in ("or-imm", "mov-imm"):
            fixable.append(w.path[-1])
        else:
            fixable += [o for o in w.ors if (_imm(o) or 0) & mask]
    if not (setters or merged) or any(_imm_byte_index(i) is None for i in fixable):
        return InitPatch(direction, offset, mask, "none",
                         "no writer sets the bit with an immediate or a plain merge" + note,
                         [], [])
    fixable = sorted({i.address: i for i in fixable}.values(), key=lambda i: i.address)
    changes = [_change(code, i, _imm(i) & ~mask & 0xFF) for i in fixable]
    changes += [c for _, c in merged if c is not None]
    insns = [code.ref(i) for i in fixable] + [code.ref(w.merge) for w, _ in merged if w.merge]
    order = sorted(range(len(changes)), key=lambda k: changes[k].vaddr)
    parts = []
    if setters:
        parts.append("every writer that sets the bit with an immediate loses it: "
                     + ", ".join(_at(w.site.insn) for w in setters))
    if merged:
        parts.append("every store of the bit computed from run-time data drops the merged "
                     "register (or %src,%dst -> or %dst,%dst): "
                     + ", ".join(_at(w.site.insn) for w, _ in merged))
    return InitPatch(direction, offset, mask, "chosen", "; ".join(parts) + note,
                     sorted(insns, key=lambda r: r.vaddr), [changes[k] for k in order])


# --------------------------------------------------------------------------------------------
# The proof: the changed paths run in the emulator, original and patched


def _paths(code: Code, patch: InitPatch,
           sites: list[InitSite]) -> list[tuple[tuple[CsInsn, ...], dict[str, int]]]:
    """Every fall-through path that runs one of the changed instructions, ending at a write
    of the field, with the registers to set at its start: for a merge, its source holding
    the bit (what the driver stores when its run-time condition holds)."""
    changed = {r.vaddr for r in patch.insns}
    out = []
    for s in sites:
        if s.offset != patch.offset:
            continue
        w = classify(code, s, patch.mask)
        if any(i.address in changed for i in w.path):
            regs = {}
            if w.merge is not None and w.merge.address in changed:
                regs[fam(w.merge, w.merge.operands[1].reg)] = patch.mask
            out.append((w.path, regs))
    return out


def prove_patch(emu, code: Code, patch: InitPatch, sites: list[InitSite],
                trials: int = 6) -> list[str]:
    """Problems found running each changed path with the original and the patched bytes on
    synthetic structs (empty: proven). The original must leave the bit as the driver decides
    (``set``: kept as it was; ``mask``: set), the patched bytes must give exactly the same
    struct except that bit, set (``set``) or as it was before (``mask``)."""
    problems: list[str] = []
    paths = _paths(code, patch, sites)
    if not paths or len(patch.changes) != len({c.vaddr for c in patch.changes}):
        return [f"{patch.direction} [{patch.offset:#x}]&{patch.mask:#x}: no path runs the change"]
    rng = random.Random(patch.offset * 256 + patch.mask)
    uc = emu.uc
    for path, extra in paths:
        start, end = path[0].address, path[-1].address + path[-1].size
        base = fam(path[-1], next(o for o in mem_ops(path[-1])
                                  if o.mem.disp == patch.offset).mem.base)
        for t in range(trials):
            before = [0x00, 0xFF, 0x18, 0x58, rng.randrange(256), rng.randrange(256)][t % 6]
            if t % 2 == 0 or patch.direction == MASK:
                before &= ~patch.mask
            # the same struct for both runs: pointers back into it, so that loads through
            # its fields stay inside it
            words = [emu.dev + rng.randrange(0, emu.dev_size // 2, 8) for _ in range(8)]
            fill = b"".join(struct.pack("<Q", words[(i // 8) % 8])
                            for i in range(0, emu.dev_size, 8))
            results = []
            for patched in (False, True):
                emu.reset()
                uc.mem_write(emu.dev, fill)
                uc.mem_write(emu.dev + patch.offset, bytes([before]))
                for c in patch.changes:
                    uc.mem_write(BASE + c.vaddr, bytes([c.new if patched else c.old]))
                    uc.ctl_remove_cache(BASE + c.vaddr, BASE + c.vaddr + 1)
                emu.follow(path)
                regs = {r: emu.dev for r in ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "r8",
                                             "r9", "r10", "r11", "r12", "r13", "r14", "r15")}
                regs[base] = emu.dev
                regs.update(extra)
                run = emu.run(start, regs, until=end)
                results.append((run, bytes(uc.mem_read(emu.dev, emu.dev_size))))
            for c in patch.changes:  # leave the emulator's image as the driver ships it
                uc.mem_write(BASE + c.vaddr, bytes([c.old]))
                uc.ctl_remove_cache(BASE + c.vaddr, BASE + c.vaddr + 1)
            (r0, s0), (r1, s1) = results
            where = f"{patch.direction} path {start:#x}..{path[-1].address:#x} from {before:#04x}"
            if r0.fault or r1.fault:
                problems.append(f"{where}: {r0.fault or r1.fault}")
                continue
            b0, b1 = s0[patch.offset], s1[patch.offset]
            rest_same = s0[:patch.offset] == s1[:patch.offset] \
                and s0[patch.offset + 1:] == s1[patch.offset + 1:]
            if patch.direction == SET:
                ok = (b0 & patch.mask) == (before & patch.mask) and b1 == b0 | patch.mask
            else:
                ok = bool(b0 & patch.mask) and b1 == b0 & ~patch.mask
            if not ok or not rest_same:
                problems.append(f"{where}: original {b0:#04x}, patched {b1:#04x}"
                                + ("" if rest_same else ", other bytes of the struct differ"))
    return problems
