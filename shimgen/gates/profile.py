"""The gate profile: what discovery found in one driver build, and its JSON form.

Every fact carries the instruction it was read from (`InsnRef`: vaddr, file offset, bytes),
so that a run time can check the loaded image is the analysed one. The JSON of each record is
derived from its dataclass fields (records.py: `to_json` / `from_json`). Loading checks
every value and names the first one that is wrong, as `profile: <where> ...`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cuda import ATTRIBUTES, PROBED_ATTRIBUTES
from .facts import GateDiscoveryError
from .records import (
    ByteChange,
    InsnRef,
    _decode,
    _hex,
    _int,
    _need_dict,
    from_json,
    to_json,
)

SCHEMA = "shimgen.gates/1"
EXPORT = "cuDeviceGetAttribute"

# The proof status a profile records (`proof.status`): only a passed proof is baked in
# without `shimgen build --allow-unproven-gates`.
PROOF_PASSED = "passed"
PROOF_FAILED = "failed"
PROOF_NOT_RUN = "not run"
PROOF_STATUSES = (PROOF_PASSED, PROOF_FAILED, PROOF_NOT_RUN)



# --------------------------------------------------------------------------------------------
# The records


@dataclass(frozen=True)
class FieldTest:
    """``dev->byte[offset] & mask`` (a bit test) or another read of a device-struct field."""

    offset: int = _hex()
    size: int
    mask: int | None = _hex()  # None: not a bit test (a compare or a load)
    op: str  # "test", "cmp", "load", "store"
    gating: bool = False  # the path taken when the bit is clear stores 0
    insn: InsnRef = field(kw_only=True)


@dataclass(frozen=True)
class GlobalTest:
    """A read of a global of the library; ``vaddr`` is relative to the load base."""

    vaddr: int = _hex()
    size: int
    op: str
    gating: bool = False  # the path taken when the global is 0 stores 0
    insn: InsnRef = field(kw_only=True)


@dataclass
class AttrCase:
    """What one jump-table case of the attribute reader does.

    kind: "constant" (stores a fixed value), "field" / "global" / "field+global" (only bit
    and byte tests of those, then a 0/1 store), "field-value" (stores a field it loads),
    "computed" (also calls functions or reads other memory: the tests listed are the ones
    seen, not all conditions), "unknown" (nothing decoded).
    """

    # properties written for the reader of the file, after the field named; ignored on loading
    JSON_EXTRA = {"name": "attribute"}

    attribute: int
    target: int = _hex()
    kind: str
    complete: bool
    fields: list[FieldTest] = field(default_factory=list)
    globals: list[GlobalTest] = field(default_factory=list)
    constant: int | None = field(default=None, metadata={"json": "signed"})
    calls: list[int] = field(default_factory=list, metadata={"json": "hex"})
    notes: list[str] = field(default_factory=list, metadata={"optional": True})

    @property
    def name(self) -> str | None:
        """The attribute's name, for the gated attributes and their neighbours."""
        return ATTRIBUTES[self.attribute] if self.attribute in PROBED_ATTRIBUTES else None

    def bit_tests(self) -> set[tuple[int, int]]:
        """Bits that must be set for the attribute to be non-zero (gating bit tests)."""
        return {(f.offset, f.mask) for f in self.fields if f.op == "test" and f.mask and f.gating}

    def gating_globals(self) -> set[tuple[int, int]]:
        """Globals that must be non-zero for the attribute to be non-zero."""
        return {(g.vaddr, g.size) for g in self.globals if g.gating}


@dataclass(frozen=True)
class GateField:
    offset: int = _hex()
    mask: int = _hex()


@dataclass(frozen=True)
class GateGlobal:
    vaddr: int = _hex()
    size: int


@dataclass(frozen=True)
class InitSite:
    """An instruction that writes a gate field's byte.

    kind: "or-imm" (``orb $imm,off(reg)``), "store" (``mov %r8,off(reg)``; ``or_insn`` is the
    ``or $imm,%r`` that fed it, when one is found just before), "and-imm", "mov-imm", "other".
    ``sets_bit`` says whether this write sets the gate's bit as the driver ships.
    """

    offset: int = _hex()
    kind: str
    imm: int | None = _hex()
    sets_bit: bool
    insn: InsnRef
    or_insn: InsnRef | None


@dataclass
class InitPatch:
    """The change at a gate bit's init site that makes the driver itself set the bit
    (direction "set") or never set it ("mask"); initsite.py chooses it.

    status: "chosen" (``insns`` are the instructions changed, ``changes`` their bytes),
    "none" or "ambiguous" (nothing changed; ``why`` says what was found). ``proven``: the
    emulation proof of the change passed (prove.py).
    """

    direction: str
    offset: int = _hex()
    mask: int = _hex()
    status: str
    why: str
    insns: list[InsnRef]
    changes: list[ByteChange]
    proven: bool = False


@dataclass
class Gate:
    name: str
    attributes: list[int]
    fields: list[GateField]
    globals: list[GateGlobal]
    init_sites: list[InitSite]
    # the init-site changes, set and mask per field; absent in profiles of older shimgen
    init_patches: list[InitPatch] = field(default_factory=list, metadata={"optional": True})

    def init_patch(self, direction: str) -> list[InitPatch]:
        """The chosen patches of every field for ``direction``; empty unless every field of
        the gate has a chosen, proven one."""
        got = [p for p in self.init_patches if p.direction == direction]
        fields = {(f.offset, f.mask) for f in self.fields}
        if {(p.offset, p.mask) for p in got if p.status == "chosen" and p.proven} != fields:
            return []
        return got


@dataclass
class DeviceTable:
    """``dev_struct = *(uintptr_t *)(base + vaddr + offset + ordinal * stride)``."""

    vaddr: int = _hex()
    offset: int = _hex()
    stride: int
    count_vaddr: int | None = _hex()  # the device count the ordinal is checked against
    count_size: int | None
    insns: list[InsnRef]
    caller: int = _hex()
    call_site: int = _hex()
    index_reg: str
    attr_reg: str | None  # registers that feed %esi / %rdx at the call (for the proof)
    result_reg: str | None


@dataclass
class Reader:
    vaddr: int = _hex()
    table_vaddr: int = _hex(key="jump_table")
    table_kind: str  # "rel32" or "abs64"
    first_attribute: int
    last_attribute: int
    default_target: int = _hex()
    insns: list[InsnRef]
    chain: list[str]


@dataclass
class Profile:
    driver_file: str
    driver_version: str | None
    build_id: str
    export_vaddr: int
    reader: Reader | None
    device_table: DeviceTable | None
    cases: list[AttrCase]
    gates: list[Gate]
    proof: dict[str, Any] | None = None
    # the mixed-generation P2P gate (gates/p2p_profile.py), a branch of the driver's code, not
    # a struct bit: written into "gates" with "kind": "branch"; None where not looked for
    p2p: Any = None

    @property
    def proof_status(self) -> str:
        """PROOF_PASSED only when the emulation proof ran and passed; PROOF_NOT_RUN for no
        proof at all (`--no-proof`, or a profile without one)."""
        if not self.proof:
            return PROOF_NOT_RUN
        return self.proof.get("status") or (PROOF_PASSED if self.proof.get("ok") is True
                                            else PROOF_FAILED)

    def case(self, attribute: int) -> AttrCase | None:
        return next((c for c in self.cases if c.attribute == attribute), None)

    def gate(self, name: str) -> Gate | None:
        return next((g for g in self.gates if g.name == name), None)

    def to_json(self) -> dict[str, Any]:
        assert self.reader is not None and self.device_table is not None
        return {
            "schema": SCHEMA,
            "driver": {"file": self.driver_file, "version": self.driver_version,
                       "build_id": self.build_id},
            "export": {"name": EXPORT, "vaddr": hex(self.export_vaddr)},
            "reader": to_json(self.reader),
            "device_table": to_json(self.device_table),
            "gates": [to_json(g) for g in self.gates]
            + ([to_json(self.p2p)] if self.p2p is not None else []),
            "attributes": [to_json(c) for c in self.cases],
            "proof": self.proof,
        }


# --------------------------------------------------------------------------------------------
# Loading a profile file

MAX_PROFILE_BYTES = 64 << 20  # a file larger than this is not a profile


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile written by ``Profile.to_json``."""
    from ..files import read_regular

    p = Path(path)
    try:
        data = read_regular(p, MAX_PROFILE_BYTES)
        if len(data) > MAX_PROFILE_BYTES:
            raise GateDiscoveryError(f"profile: {p} is larger than {MAX_PROFILE_BYTES} bytes")
        raw = json.loads(data.decode("utf-8"))
    except OSError as e:
        raise GateDiscoveryError(f"profile: cannot read {p}: {e.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GateDiscoveryError(f"profile: {p} is not JSON ({e})") from None
    return profile_from_json(raw)


def profile_from_json(raw: Any) -> Profile:
    _need_dict(raw, "top level", ("schema", "driver", "export", "reader", "device_table", "gates",
                                  "attributes"))
    if raw["schema"] != SCHEMA:
        raise GateDiscoveryError(f"profile: schema is {raw['schema']!r}, expected {SCHEMA!r}")
    drv = raw["driver"]
    _need_dict(drv, "driver", ("file", "version", "build_id"))
    bid = drv["build_id"]
    if not isinstance(bid, str) or not re.fullmatch(r"[0-9a-f]{16,80}", bid):
        raise GateDiscoveryError("profile: driver.build_id is not a hex GNU build-id")
    ver = drv["version"]
    if ver is not None and (not isinstance(ver, str) or not re.fullmatch(r"\d+(\.\d+)+", ver)):
        raise GateDiscoveryError("profile: driver.version is not like 535.261.03")
    exp = raw["export"]
    _need_dict(exp, "export", ("name", "vaddr"))
    if exp["name"] != EXPORT:
        raise GateDiscoveryError(f"profile: export.name is not {EXPORT}")
    reader = from_json(Reader, raw["reader"], "reader")
    table = from_json(DeviceTable, raw["device_table"], "device_table")
    if table.stride != 8:
        raise GateDiscoveryError("profile: device_table.stride is not 8")
    if not table.insns:
        raise GateDiscoveryError("profile: device_table.insns is empty")
    cases = _decode(list[AttrCase], raw["attributes"], "attributes", None)
    from .p2p_profile import split_gates

    attr_gates, p2p = split_gates(raw["gates"])
    gates = _decode(list[Gate], attr_gates, "gates", None)
    for i, g in enumerate(gates):
        if not g.fields:
            raise GateDiscoveryError(f"profile: gates[{i}] has no fields")
        if any(f.mask == 0 or f.mask > 0xFF for f in g.fields):
            raise GateDiscoveryError(f"profile: gates[{i}] has a field mask that is not one byte")
    if not gates:
        raise GateDiscoveryError("profile: no gates")
    proof = raw.get("proof")
    if proof is not None and not isinstance(proof, dict):
        raise GateDiscoveryError("profile: proof is not an object")
    if proof is not None and "status" in proof:
        status = proof["status"]
        if status not in PROOF_STATUSES:
            raise GateDiscoveryError(f"profile: proof.status is {status!r}, not one of "
                                     + ", ".join(map(repr, PROOF_STATUSES)))
        if (status == PROOF_PASSED) != (proof.get("ok") is True):
            raise GateDiscoveryError(f"profile: proof.status is {status!r} but proof.ok is "
                                     f"{proof.get('ok')!r}")
    return Profile(
        driver_file=_decode(str, drv["file"], "driver.file", None), driver_version=ver,
        build_id=bid, export_vaddr=_int(exp["vaddr"], "export.vaddr", "hex"), reader=reader,
        device_table=table, cases=cases, gates=gates, proof=proof, p2p=p2p,
    )
