"""`shimgen diff`'s gates: each driver's gates found and proven (gates/discover.py,
gates/prove.py), and what differs for each gate: its struct fields (offset and bit), its
globals, whether the proof passes, and the init-site bytes `shimgen patch` would change,
per direction (set, mask); the P2P gate's field, proof and branch bytes (gates/p2p.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..driver import DriverImage
from ..errors import ShimgenError


@dataclass(frozen=True)
class InitBytes:
    """What `shimgen patch` would change for one gate and direction on one driver."""

    direction: str
    status: str  # "chosen", "none" or "ambiguous" (gates/initsite.py)
    why: str
    proven: bool
    changes: tuple[tuple[int, int, int], ...]  # (file offset, byte as shipped, patched byte)
    insns: tuple[tuple[int, str, str], ...]  # (file offset, bytes in hex, text)

    def facts(self) -> tuple:
        """What is compared: the choice, its proof and every byte (not the wording)."""
        return self.direction, self.status, self.proven, self.changes

    def to_json(self) -> dict[str, Any]:
        return {"direction": self.direction, "status": self.status, "why": self.why,
                "proven": self.proven,
                "changes": [{"file_offset": hex(o), "old": f"{a:#04x}", "new": f"{b:#04x}"}
                            for o, a, b in self.changes],
                "insns": [{"file_offset": hex(o), "bytes": h, "text": t}
                          for o, h, t in self.insns]}


@dataclass(frozen=True)
class GateSide:
    """One gate as one driver has it."""

    name: str
    fields: tuple[tuple[int, int], ...]  # (struct offset, bit mask)
    globals: tuple[tuple[int, int], ...]  # (vaddr, size)
    proven: bool
    init: tuple[InitBytes, ...]

    def to_json(self) -> dict[str, Any]:
        return {"fields": [{"offset": hex(o), "mask": hex(m)} for o, m in self.fields],
                "globals": [{"vaddr": hex(v), "size": s} for v, s in self.globals],
                "proven": self.proven, "init": [i.to_json() for i in self.init]}


@dataclass
class GatesOf:
    """One driver's gates, or why they could not be found or proven."""

    gates: dict[str, GateSide] = field(default_factory=dict)
    error: str = ""
    # the gates the driver has, as `shimgen gates` lists them (a P2P gate not found is in
    # `gates`, for the comparison, and not here)
    found: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class GateDiff:
    name: str
    old: GateSide | None
    new: GateSide | None

    @property
    def what(self) -> list[str]:
        """What differs, in words; empty when nothing does."""
        o, n = self.old, self.new
        if o is None or n is None:
            return ["only in OLD" if n is None else "only in NEW"]
        out = []
        if o.fields != n.fields:
            out.append("struct offset or bit")
        if o.globals != n.globals:
            out.append("globals")
        if o.proven != n.proven:
            out.append("proof")
        for d in sorted({i.direction for i in o.init + n.init}):
            a = [i.facts() for i in o.init if i.direction == d]
            b = [i.facts() for i in n.init if i.direction == d]
            if a != b:
                out.append(f"{d} init site")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "differs": bool(self.what), "what": self.what,
                "old": None if self.old is None else self.old.to_json(),
                "new": None if self.new is None else self.new.to_json()}


def analyse(image: DriverImage) -> GatesOf:
    """Discovery and the emulation proof on one driver. A layout the analyser does not know
    or a failed proof is a finding (`error`), not a failure of the command."""
    import time

    from ..gates import find_gates, prove_gates

    start = time.monotonic()
    try:
        profile = find_gates(image)
        result = prove_gates(image, profile)
    except ShimgenError as e:
        return GatesOf(error=str(e), seconds=time.monotonic() - start)
    table_ok = result.device_table is not None and result.device_table.ok
    out = GatesOf(seconds=time.monotonic() - start)
    for g in profile.gates:
        proofs = [a for a in result.attributes if a.gate == g.name]
        init = tuple(InitBytes(
            p.direction, p.status, p.why, p.proven,
            tuple((c.file_offset, c.old, c.new) for c in p.changes),
            tuple((r.file_offset, r.hex, r.text) for r in p.insns)) for p in g.init_patches)
        out.gates[g.name] = GateSide(
            g.name, tuple((f.offset, f.mask) for f in g.fields),
            tuple((x.vaddr, x.size) for x in g.globals),
            table_ok and bool(proofs) and all(a.ok for a in proofs), init)
    if profile.p2p is not None:
        out.gates[profile.p2p.name] = p2p_side(profile.p2p)
    out.found = [g.name for g in profile.gates] + (
        [profile.p2p.name] if profile.p2p is not None and profile.p2p.status == "found" else [])
    if not result.ok:
        out.error = "the emulation proof failed: " + ("; ".join(result.problems)
                                                       or "no gate proven")
    return out


def p2p_side(g) -> GateSide:
    """The P2P gate (gates/p2p.py) as a side of the diff: its field (mask 0: the whole 8-byte
    field is compared), its proof, and as its one "set" change every check's compare and
    branch with the branch bytes `shimgen patch --gates p2p-mixed` changes."""
    found = g.status == "found"
    init = InitBytes("set", "chosen" if found else "none", g.why, g.proven,
                     tuple((c.file_offset, c.old, c.new) for c in g.changes),
                     tuple((r.file_offset, r.hex, r.text) for k in g.checks
                           for r in (k.compare, k.branch)))
    return GateSide(g.name, ((g.offset, 0),) if g.offset is not None else (), (), g.proven,
                    (init,))


def compare(old: GatesOf, new: GatesOf) -> list[GateDiff]:
    names = sorted(set(old.gates) | set(new.gates))
    return [GateDiff(n, old.gates.get(n), new.gates.get(n)) for n in names]
