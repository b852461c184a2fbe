"""The gate profile: what discovery found in one driver build, and its JSON form.

Every fact carries the instruction it was read from (`InsnRef`: vaddr, file offset, bytes),
so that a run time can check the loaded image is the analysed one. The JSON of each record is
derived from its dataclass fields (`to_json` / `from_json`): a field's metadata says how an
integer is written ("hex": a string like 0x1f; "signed": any integer; otherwise a
non-negative integer) and under which key, when it is not the field's name. Loading checks
every value and names the first one that is wrong, as `profile: <where> ...`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cuda import ATTRIBUTES, PROBED_ATTRIBUTES
from ..errors import ShimgenError

SCHEMA = "shimgen.gates/1"
EXPORT = "cuDeviceGetAttribute"

# The proof status a profile records (`proof.status`): only a passed proof is baked in
# without `shimgen build --allow-unproven-gates`.
PROOF_PASSED = "passed"
PROOF_FAILED = "failed"
PROOF_NOT_RUN = "not run"
PROOF_STATUSES = (PROOF_PASSED, PROOF_FAILED, PROOF_NOT_RUN)


class GateDiscoveryError(ShimgenError):
    """The driver's layout is not the one this analyser knows, or a profile is malformed; the
    message says what is missing."""


def _hex(**more: Any) -> Any:
    return field(metadata={"json": "hex", **more})


# --------------------------------------------------------------------------------------------
# The records


@dataclass(frozen=True)
class InsnRef:
    """One instruction of the driver, as it must appear in the loaded image."""

    vaddr: int = _hex()
    file_offset: int = _hex()
    hex: str = field(metadata={"key": "bytes", "json": "bytes"})
    text: str


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


@dataclass(frozen=True)
class ByteChange:
    """One byte of the driver's code, as shipped (``old``) and as patched (``new``)."""

    vaddr: int = _hex()
    file_offset: int = _hex()
    old: int = _hex()
    new: int = _hex()


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
            "gates": [to_json(g) for g in self.gates],
            "attributes": [to_json(c) for c in self.cases],
            "proof": self.proof,
        }


# --------------------------------------------------------------------------------------------
# JSON, derived from the fields


def _key(f: dataclasses.Field) -> str:
    return f.metadata.get("key", f.name)


def _encode(value: Any, how: str | None) -> Any:
    if isinstance(value, list):
        return [_encode(v, how) for v in value]
    if dataclasses.is_dataclass(value):
        return to_json(value)
    if how == "hex" and isinstance(value, int):
        return hex(value)
    return value


def to_json(record: Any) -> dict[str, Any]:
    """A record as a JSON object: one key per field, in the fields' order, plus its
    JSON_EXTRA properties."""
    extra = getattr(record, "JSON_EXTRA", {})
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        out[_key(f)] = _encode(getattr(record, f.name), f.metadata.get("json"))
        out.update({name: getattr(record, name) for name, after in extra.items()
                    if after == f.name})
    return out


def _need_dict(d: Any, where: str, keys: tuple[str, ...]) -> None:
    if not isinstance(d, dict):
        raise GateDiscoveryError(f"profile: {where} is not an object")
    for k in keys:
        if k not in d:
            raise GateDiscoveryError(f"profile: {where} has no '{k}'")


def _int(v: Any, where: str, how: str | None) -> int:
    if how == "hex":
        if isinstance(v, str) and re.fullmatch(r"0x[0-9a-f]+", v):
            return int(v, 16)
        raise GateDiscoveryError(f"profile: {where} is not a hex string like 0x1f")
    if how == "signed":
        if isinstance(v, int):
            return v
        raise GateDiscoveryError(f"profile: {where} is not an integer or null")
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    raise GateDiscoveryError(f"profile: {where} is not a non-negative integer")


def _decode(tp: Any, v: Any, where: str, how: str | None) -> Any:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        if v is None and type(None) in args:
            return None
        tp = next(a for a in args if a is not type(None))
        args = typing.get_args(tp)
    if typing.get_origin(tp) is list:
        if not isinstance(v, list):
            raise GateDiscoveryError(f"profile: {where} is not a list")
        return [_decode(args[0], x, f"{where}[{i}]", how) for i, x in enumerate(v)]
    if dataclasses.is_dataclass(tp):
        return from_json(tp, v, where)
    if tp is bool:
        if isinstance(v, bool):
            return v
        raise GateDiscoveryError(f"profile: {where} is not true/false")
    if tp is int:
        return _int(v, where, how)
    if not isinstance(v, str):
        raise GateDiscoveryError(f"profile: {where} is not a string")
    if how == "bytes" and not re.fullmatch(r"(?:[0-9a-f]{2})+", v):
        raise GateDiscoveryError(f"profile: {where} is not lowercase hex")
    return v


def from_json(cls: type, d: Any, where: str) -> Any:
    """The record of type `cls` that `to_json` wrote, every value checked."""
    fields = dataclasses.fields(cls)
    _need_dict(d, where, tuple(_key(f) for f in fields if not f.metadata.get("optional")))
    hints = typing.get_type_hints(cls)
    values = {f.name: _decode(hints[f.name], d[_key(f)], f"{where}.{_key(f)}",
                              f.metadata.get("json"))
              for f in fields if _key(f) in d}
    return cls(**values)


# --------------------------------------------------------------------------------------------
# Loading a profile file

MAX_PROFILE_BYTES = 64 << 20  # a file larger than this is not a profile


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile written by ``Profile.to_json``."""
    from ..infile import read_regular

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
    gates = _decode(list[Gate], raw["gates"], "gates", None)
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
        device_table=table, cases=cases, gates=gates, proof=proof,
    )
