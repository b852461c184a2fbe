"""The ``p2p-mixed`` gate's records (p2p.py finds them, p2p_prove.py proves them): one per
driver, written into a gate profile's ``gates`` list with ``"kind": "branch"`` beside the
attribute gates, and read back from it. Their JSON is derived from the dataclass fields
(records.py), as every record of the profile. No capstone, no unicorn."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .facts import GateDiscoveryError
from .records import ByteChange, InsnRef, from_json

P2P_GATE = "p2p-mixed"
BRANCH = "branch"  # the "kind" of the gate in a profile's "gates" list
FOUND, NONE = "found", "none"


@dataclass(frozen=True)
class P2PCheck:
    """One compare of the field between two device structs and the branch after it.
    ``equal_target``: where the branch sends equal fields (the compatible side);
    ``changes``: the branch's bytes that make it always go there; ``reached_from``: the
    entry points whose walk by direct calls reaches the compare's function."""

    loads: list[InsnRef]
    compare: InsnRef
    branch: InsnRef
    struct_regs: list[str]  # the registers that hold the two structs, in the loads' order
    equal_target: int = field(metadata={"json": "hex"})
    changes: list[ByteChange]
    reached_from: list[str] = field(default_factory=list)


@dataclass
class P2PGate:
    """The ``p2p-mixed`` gate of one build: the field, every check of it, their proof.
    status: "found" or "none" (``why`` says what is missing)."""

    JSON_EXTRA = {"kind": "name"}

    name: str
    status: str
    why: str
    offset: int | None = field(metadata={"json": "hex"})
    size: int
    found_from: list[str]
    checks: list[P2PCheck]
    # p2p_prove.py's result, kept as written (read back as an object, not field by field)
    proof: dict[str, Any] | None = field(default=None, metadata={"optional": True})

    kind = BRANCH

    @property
    def changes(self) -> list[ByteChange]:
        return [c for k in self.checks for c in k.changes]

    @property
    def proven(self) -> bool:
        """Every check ran and passed (p2p_prove.py)."""
        return self.status == FOUND and bool(self.proof) and self.proof.get("ok") is True

    def insns(self) -> list[InsnRef]:
        """Every instruction the gate records (what a run time compares before writing)."""
        return [r for k in self.checks for r in (*k.loads, k.compare, k.branch)]


def split_gates(raw: Any) -> tuple[Any, P2PGate | None]:
    """A profile's ``gates`` list: (the attribute gates, the P2P gate or None)."""
    if not isinstance(raw, list):
        return raw, None
    branch = [g for g in raw if isinstance(g, dict) and g.get("kind") == BRANCH]
    if len(branch) > 1:
        raise GateDiscoveryError("profile: gates has more than one branch gate")
    rest = [g for g in raw if not (isinstance(g, dict) and g.get("kind") == BRANCH)]
    if not branch:
        return rest, None
    proof = branch[0].get("proof")
    if proof is not None and not isinstance(proof, dict):
        raise GateDiscoveryError(f"profile: the {P2P_GATE} gate's proof is not an object")
    gate = from_json(P2PGate, {k: v for k, v in branch[0].items() if k != "proof"}, "gates[p2p]")
    if gate.name != P2P_GATE or gate.status not in (FOUND, NONE):
        raise GateDiscoveryError(f"profile: the branch gate is not a {P2P_GATE} record")
    gate.proof = proof
    return rest, gate
