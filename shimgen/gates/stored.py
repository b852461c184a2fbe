"""What a ``mov %r8,off(%base)`` writes into a field's byte, found by following the register
back through every block of its function that reaches the store (initsite.py classifies the
store from the answer).

The function is read whole: its bounds come from the unwind table (unwind.py), its
instructions from one linear pass from its start, its edges from fall-through and direct
branches. A forward data-flow pass then gives, before each instruction, what each register
family is known to hold:

* ``Val(load, base, ob, keep, ors)``: the byte ``(field & keep) | ob`` of the struct that
  ``base`` points to, loaded by ``movzbl off(%base)`` at ``load``, with the ``or $imm`` of
  ``ors`` applied since (``and $imm`` narrows ``keep`` and ``ob``);
* the same with ``merge`` set: that byte ``or``'ed with another register (a bitfield built
  from run-time data);
* nothing: not known.

Where paths meet, a register keeps its value only when every path brings the same one. A call
forgets the caller-saved registers; a write to ``base`` forgets every value read through it;
a block reached only through a jump table starts knowing nothing. So a value is reported only
when every way into the store agrees on it.

Where the unwind table does not cover the store (a synthetic image), the region is the
longest straight run of instructions that ends at the store, as decoded backwards.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from capstone import CsInsn
from capstone import x86 as cx86

from .x86 import CALLER_SAVED, Code, direct_target, fam, is_jcc, mem_ops, written_families

TRACE_BACK = 128  # bytes decoded before a store when no function bounds are known
ENDS = ("ret", "retf", "ud2", "hlt", "int3", "jmp")


@dataclass(frozen=True)
class Val:
    load: int  # the movzbl of the field
    base: str  # the register family the struct's address is in
    ob: int  # bits or'ed in
    keep: int  # bits of the field kept
    ors: tuple[int, ...]  # the `or $imm` instructions, in order
    merge: int | None = None  # the `or %src,%dst` that made the value run-time data
    merged_into: bool = False  # that `or` wrote the other register (the byte was its %src)


@dataclass
class Traced:
    """The store's value, and one path from its load to the store that gives it."""

    val: Val
    path: tuple[CsInsn, ...]

    @property
    def ors(self) -> tuple[CsInsn, ...]:
        by = {i.address: i for i in self.path}
        return tuple(by[a] for a in self.val.ors)

    @property
    def merge(self) -> CsInsn | None:
        return next((i for i in self.path if i.address == self.val.merge), None)


def _region(code: Code, store: CsInsn) -> list[CsInsn]:
    """The store's function, decoded from its start; or the straight run before the store."""
    insns = code.function(store.address)
    if insns and any(i.address == store.address for i in insns):
        return insns
    for back in range(TRACE_BACK, 0, -1):
        va, seq = store.address - back, []
        while va < store.address:
            ins = code.insn(va)
            if ins is None or ins.mnemonic in ("jmp", "call") or ins.mnemonic.startswith("ret"):
                break
            seq.append(ins)
            va += ins.size
        if va == store.address and seq:
            return seq + [store]
    return [store]


def _successors(insns: list[CsInsn]) -> dict[int, list[int]]:
    at = {i.address for i in insns}
    succ: dict[int, list[int]] = {}
    for k, ins in enumerate(insns):
        out = []
        m = ins.mnemonic
        if not (m in ENDS or m.startswith("ret")) and k + 1 < len(insns):
            out.append(insns[k + 1].address)
        if is_jcc(ins) or m == "jmp":
            t = direct_target(ins)
            if t is not None and t in at and t not in out:
                out.append(t)
        succ[ins.address] = out
    return succ


def _field_load(ins: CsInsn, offset: int) -> str | None:
    """The base register family of ``movzbl off(%base),%r`` (or ``mov off(%base),%r8``)."""
    if ins.mnemonic not in ("movzx", "mov") or len(ins.operands) != 2 \
            or ins.operands[0].type != cx86.X86_OP_REG:
        return None
    src = ins.operands[1]
    if src.type != cx86.X86_OP_MEM or src.size != 1 or src.mem.disp != offset or src.mem.index:
        return None
    if ins.mnemonic == "mov" and ins.operands[0].size != 1:
        return None
    base = fam(ins, src.mem.base)
    return None if base in ("rip", "rsp", "") else base


def step(ins: CsInsn, state: dict[str, Val], offset: int) -> dict[str, Val]:
    """The registers' values after ``ins``."""
    ops = ins.operands
    m = ins.mnemonic
    wrote = written_families(ins) - {"rflags", ""}
    if m == "call":
        wrote |= CALLER_SAVED
    dst = fam(ins, ops[0].reg) if ops and ops[0].type == cx86.X86_OP_REG else None
    new: Val | None = None
    base = _field_load(ins, offset)
    cur = state.get(dst) if dst else None
    two_regs = len(ops) == 2 and ops[1].type == cx86.X86_OP_REG
    if base is not None:
        new = Val(ins.address, base, 0, 0xFF, ())
    elif dst is None or dst not in wrote:
        pass
    elif m == "mov" and two_regs:
        new = state.get(fam(ins, ops[1].reg))
    elif m in ("or", "and") and len(ops) == 2 and ops[1].type == cx86.X86_OP_IMM \
            and cur is not None and cur.merge is None:
        imm = ops[1].imm & 0xFF
        new = replace(cur, ob=cur.ob | imm, ors=cur.ors + (ins.address,)) if m == "or" \
            else replace(cur, ob=cur.ob & imm, keep=cur.keep & imm)
    elif m == "or" and two_regs and fam(ins, ops[1].reg) != dst:
        other = state.get(fam(ins, ops[1].reg))
        if cur is not None and cur.merge is None:
            new = replace(cur, merge=ins.address)
        elif cur is None and other is not None and other.merge is None:
            new = replace(other, merge=ins.address, merged_into=True)
    out = {f: v for f, v in state.items() if f not in wrote and v.base not in wrote}
    if new is not None and new.base not in wrote:
        out[dst] = new  # type: ignore[index]
    return out


def _flow(insns: list[CsInsn], succ: dict[int, list[int]], offset: int
          ) -> dict[int, dict[str, Val]]:
    """What each register holds before each instruction (absent: not reached)."""
    by = {i.address: i for i in insns}
    before: dict[int, dict[str, Val]] = {insns[0].address: {}}
    work = deque([insns[0].address])
    preds: dict[int, int] = {}
    for outs in succ.values():
        for b in outs:
            preds[b] = preds.get(b, 0) + 1
    # a block that nothing here falls or jumps into is entered from elsewhere (a jump
    # table): it starts knowing nothing
    for ins in insns[1:]:
        if ins.address not in preds:
            before[ins.address] = {}
            work.append(ins.address)
    while work:
        a = work.popleft()
        after = step(by[a], before[a], offset)
        for b in succ[a]:
            old = before.get(b)
            joined = dict(after) if old is None else \
                {f: v for f, v in old.items() if after.get(f) == v}
            if old is None or joined != old:
                before[b] = joined
                work.append(b)
    return before


def _path(insns: list[CsInsn], succ: dict[int, list[int]], src: int, dst: int,
          offset: int, reg: str, want: Val) -> tuple[CsInsn, ...] | None:
    """A shortest path from ``src`` to ``dst`` along which ``reg`` reaches ``dst`` as
    ``want`` (checked by running the transfer along it)."""
    by = {i.address: i for i in insns}
    came: dict[int, int | None] = {src: None}
    work = deque([src])
    while work:
        a = work.popleft()
        if a == dst:
            break
        for b in succ[a]:
            if b not in came:
                came[b] = a
                work.append(b)
    if dst not in came:
        return None
    addrs = [dst]
    while (p := came[addrs[-1]]) is not None:
        addrs.append(p)
    path = tuple(by[a] for a in reversed(addrs))
    state: dict[str, Val] = {}
    for ins in path[:-1]:
        state = step(ins, state, offset)
    return path if state.get(reg) == want else None


def trace_store(code: Code, store: CsInsn, offset: int) -> Traced | str:
    """The value ``store`` writes to ``byte[offset]`` when every way into it agrees, or why
    it is not known."""
    src = next((o for o in store.operands if o.type == cx86.X86_OP_REG), None)
    dst = next((o for o in mem_ops(store) if o.mem.disp == offset), None)
    if src is None or dst is None:
        return "not a store of a register"
    insns = _region(code, store)
    whole = code.function(store.address) is insns
    succ = _successors(insns)
    flow = _flow(insns, succ, offset)
    reg = fam(store, src.reg)
    val = flow.get(store.address, {}).get(reg)
    if val is None or val.base != fam(store, dst.mem.base):
        ins_before = [step(i, flow[i.address], offset).get(reg) for i in insns
                      if store.address in succ[i.address] and i.address in flow]
        if any(v is not None for v in ins_before):
            return "the paths into it bring different values"
        return ("its register is not built from the byte's own load in its function" if whole
                else "the straight run of code before it does not load the byte (the "
                "function's bounds are not in the unwind table)")
    path = _path(insns, succ, val.load, store.address, offset, reg, val)
    return "no path from the load gives that value" if path is None else Traced(val, path)
