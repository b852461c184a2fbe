"""Find libcuda's attribute gates by static analysis of the driver binary.

The path followed (docs/gates.md, "How discovery works"):

1. ``cuDeviceGetAttribute`` in ``.dynsym`` is a small wrapper; direct jumps and calls, and
   indirect jumps through pointers that an ``R_X86_64_RELATIVE`` relocation fills, lead to
   the implementation.
2. The *attribute reader* is the function, called with a device struct in ``%rdi``, that
   bounds-checks the attribute argument (``%esi``) and dispatches through a jump table.
   The call site shows how an ordinal becomes a struct:
   ``lea table(%rip),%rax; mov off(%rax,%idx,8),%rdi`` (the device table).
3. Each jump-table case is walked: what it tests (``testb $mask,off(dev)``, ``cmpb $0,g(%rip)``),
   calls, loads and the value it stores through the result pointer.
4. Gates are named by the attributes that test them: the bits and globals tested by
   GPU_DIRECT_RDMA_SUPPORTED (116) are ``gdr``; the extra bits tested by DMA_BUF_SUPPORTED
   (124) are ``dmabuf``.
5. The instructions that write each gate's byte (the init sites) are found by searching the
   executable segment for the field's 32-bit displacement and decoding around each hit.

Every fact carries the instruction it was read from (vaddr, file offset, bytes), so a run
time can check that the loaded image is the analysed one. Nothing is guessed: a shape that
is not recognised raises :class:`GateDiscoveryError` naming what was not found.
"""

from __future__ import annotations

import argparse
import json
import re
import struct
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from capstone import CS_AC_WRITE, CS_ARCH_X86, CS_MODE_64, Cs, CsError, CsInsn
from capstone import x86 as cx86
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

SCHEMA = "shimgen.gates/1"
EXPORT = "cuDeviceGetAttribute"
R_X86_64_RELATIVE = 8

#: CUdevice_attribute numbers whose names this module uses (values from cuda.h).
ATTRIBUTE_NAMES: dict[int, str] = {
    103: "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED",
    110: "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED",
    116: "GPU_DIRECT_RDMA_SUPPORTED",
    117: "GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS",
    118: "GPU_DIRECT_RDMA_WRITES_ORDERING",
    124: "DMA_BUF_SUPPORTED",
    146: "HOST_ALLOC_DMA_BUF_SUPPORTED",
}
REQUIRED_ATTRIBUTES = (110, 116, 124, 146)
ATTR_GDR = 116
ATTR_DMABUF = 124

# Limits that keep the analysis to the few functions that matter (seconds per driver).
MAX_FUNCTIONS = 48
MAX_DEPTH = 4
MAX_FUNC_INSNS = 6000
MAX_CASE_INSNS = 400
MIN_CASES = 64
MAX_CASES = 1024
INIT_SEARCH_BACK = 48


class GateDiscoveryError(Exception):
    """The driver's layout is not the one this analyser knows; the message says what is missing."""


# --------------------------------------------------------------------------------------------
# Model


@dataclass(frozen=True)
class InsnRef:
    """One instruction of the driver, as it must appear in the loaded image."""

    vaddr: int
    file_offset: int
    hex: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"vaddr": _h(self.vaddr), "file_offset": _h(self.file_offset),
                "bytes": self.hex, "text": self.text}

    @classmethod
    def from_json(cls, d: Any, where: str) -> InsnRef:
        _need_dict(d, where, ("vaddr", "file_offset", "bytes", "text"))
        hx = d["bytes"]
        if not isinstance(hx, str) or not re.fullmatch(r"(?:[0-9a-f]{2})+", hx):
            raise GateDiscoveryError(f"profile: {where}.bytes is not lowercase hex")
        return cls(_int(d["vaddr"], f"{where}.vaddr"),
                   _int(d["file_offset"], f"{where}.file_offset"), hx,
                   _str(d["text"], f"{where}.text"))


@dataclass(frozen=True)
class FieldTest:
    """``dev->byte[offset] & mask`` (a bit test) or another read of a device-struct field."""

    offset: int
    size: int
    mask: int | None  # None: not a bit test (a compare or a load)
    op: str  # "test", "cmp", "load", "store"
    insn: InsnRef
    gating: bool = False  # the path taken when the bit is clear stores 0

    def to_json(self) -> dict[str, Any]:
        return {"offset": _h(self.offset), "size": self.size,
                "mask": None if self.mask is None else _h(self.mask), "op": self.op,
                "gating": self.gating, "insn": self.insn.to_json()}

    @classmethod
    def from_json(cls, d: Any, where: str) -> FieldTest:
        _need_dict(d, where, ("offset", "size", "mask", "op", "gating", "insn"))
        mask = None if d["mask"] is None else _int(d["mask"], f"{where}.mask")
        return cls(_int(d["offset"], f"{where}.offset"), _plain_int(d["size"], f"{where}.size"),
                   mask,
                   _str(d["op"], f"{where}.op"), InsnRef.from_json(d["insn"], f"{where}.insn"),
                   _bool(d["gating"], f"{where}.gating"))


@dataclass(frozen=True)
class GlobalTest:
    """A read of a global of the library; ``vaddr`` is relative to the load base."""

    vaddr: int
    size: int
    op: str
    insn: InsnRef
    gating: bool = False  # the path taken when the global is 0 stores 0

    def to_json(self) -> dict[str, Any]:
        return {"vaddr": _h(self.vaddr), "size": self.size, "op": self.op,
                "gating": self.gating, "insn": self.insn.to_json()}

    @classmethod
    def from_json(cls, d: Any, where: str) -> GlobalTest:
        _need_dict(d, where, ("vaddr", "size", "op", "gating", "insn"))
        return cls(_int(d["vaddr"], f"{where}.vaddr"), _plain_int(d["size"], f"{where}.size"),
                   _str(d["op"], f"{where}.op"), InsnRef.from_json(d["insn"], f"{where}.insn"),
                   _bool(d["gating"], f"{where}.gating"))


@dataclass
class AttrCase:
    """What one jump-table case of the attribute reader does.

    kind: "constant" (stores a fixed value), "field" / "global" / "field+global" (only bit
    and byte tests of those, then a 0/1 store), "field-value" (stores a field it loads),
    "computed" (also calls functions or reads other memory: the tests listed are the ones
    seen, not all conditions), "unknown" (nothing decoded).
    """

    attribute: int
    target: int
    kind: str
    complete: bool
    fields: list[FieldTest] = field(default_factory=list)
    globals: list[GlobalTest] = field(default_factory=list)
    constant: int | None = None
    calls: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str | None:
        return ATTRIBUTE_NAMES.get(self.attribute)

    def bit_tests(self) -> set[tuple[int, int]]:
        """Bits that must be set for the attribute to be non-zero (gating bit tests)."""
        return {(f.offset, f.mask) for f in self.fields if f.op == "test" and f.mask and f.gating}

    def gating_globals(self) -> set[tuple[int, int]]:
        """Globals that must be non-zero for the attribute to be non-zero."""
        return {(g.vaddr, g.size) for g in self.globals if g.gating}

    def to_json(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "name": self.name, "target": _h(self.target),
                "kind": self.kind, "complete": self.complete,
                "fields": [f.to_json() for f in self.fields],
                "globals": [g.to_json() for g in self.globals],
                "constant": self.constant, "calls": [_h(c) for c in self.calls],
                "notes": list(self.notes)}

    @classmethod
    def from_json(cls, d: Any, where: str) -> AttrCase:
        _need_dict(d, where, ("attribute", "target", "kind", "complete", "fields", "globals",
                              "constant", "calls"))
        const = d["constant"]
        if const is not None and not isinstance(const, int):
            raise GateDiscoveryError(f"profile: {where}.constant is not an integer or null")
        return cls(
            attribute=_plain_int(d["attribute"], f"{where}.attribute"),
            target=_int(d["target"], f"{where}.target"),
            kind=_str(d["kind"], f"{where}.kind"),
            complete=_bool(d["complete"], f"{where}.complete"),
            fields=[FieldTest.from_json(x, f"{where}.fields[{i}]")
                    for i, x in enumerate(_list(d["fields"], f"{where}.fields"))],
            globals=[GlobalTest.from_json(x, f"{where}.globals[{i}]")
                     for i, x in enumerate(_list(d["globals"], f"{where}.globals"))],
            constant=const,
            calls=[_int(x, f"{where}.calls") for x in _list(d["calls"], f"{where}.calls")],
            notes=[_str(x, f"{where}.notes") for x in _list(d.get("notes", []), f"{where}.notes")],
        )


@dataclass(frozen=True)
class GateField:
    offset: int
    mask: int

    def to_json(self) -> dict[str, Any]:
        return {"offset": _h(self.offset), "mask": _h(self.mask)}


@dataclass(frozen=True)
class GateGlobal:
    vaddr: int
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"vaddr": _h(self.vaddr), "size": self.size}


@dataclass(frozen=True)
class InitSite:
    """An instruction that writes a gate field's byte.

    kind: "or-imm" (``orb $imm,off(reg)``), "store" (``mov %r8,off(reg)``; ``or_insn`` is the
    ``or $imm,%r`` that fed it, when one is found just before), "and-imm", "mov-imm", "other".
    ``sets_bit`` says whether this write sets the gate's bit as the driver ships.
    """

    offset: int
    kind: str
    imm: int | None
    sets_bit: bool
    insn: InsnRef
    or_insn: InsnRef | None

    def to_json(self) -> dict[str, Any]:
        return {"offset": _h(self.offset), "kind": self.kind,
                "imm": None if self.imm is None else _h(self.imm), "sets_bit": self.sets_bit,
                "insn": self.insn.to_json(),
                "or_insn": None if self.or_insn is None else self.or_insn.to_json()}


@dataclass
class Gate:
    name: str
    attributes: list[int]
    fields: list[GateField]
    globals: list[GateGlobal]
    init_sites: list[InitSite]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "attributes": list(self.attributes),
                "fields": [f.to_json() for f in self.fields],
                "globals": [g.to_json() for g in self.globals],
                "init_sites": [s.to_json() for s in self.init_sites]}


@dataclass
class DeviceTable:
    """``dev_struct = *(uintptr_t *)(base + vaddr + offset + ordinal * stride)``."""

    vaddr: int
    offset: int
    stride: int
    count_vaddr: int | None  # the device count the ordinal is checked against, when seen
    count_size: int | None
    insns: list[InsnRef]
    caller: int
    call_site: int
    index_reg: str
    attr_reg: str | None  # registers that feed %esi / %rdx at the call (for the proof)
    result_reg: str | None

    def to_json(self) -> dict[str, Any]:
        return {"vaddr": _h(self.vaddr), "offset": _h(self.offset), "stride": self.stride,
                "count_vaddr": None if self.count_vaddr is None else _h(self.count_vaddr),
                "count_size": self.count_size, "insns": [i.to_json() for i in self.insns],
                "caller": _h(self.caller), "call_site": _h(self.call_site),
                "index_reg": self.index_reg, "attr_reg": self.attr_reg,
                "result_reg": self.result_reg}


@dataclass
class Reader:
    vaddr: int
    table_vaddr: int
    table_kind: str  # "rel32" or "abs64"
    first_attribute: int
    last_attribute: int
    default_target: int
    insns: list[InsnRef]
    chain: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"vaddr": _h(self.vaddr), "jump_table": _h(self.table_vaddr),
                "table_kind": self.table_kind, "first_attribute": self.first_attribute,
                "last_attribute": self.last_attribute, "default_target": _h(self.default_target),
                "insns": [i.to_json() for i in self.insns], "chain": list(self.chain)}


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
            "export": {"name": EXPORT, "vaddr": _h(self.export_vaddr)},
            "reader": self.reader.to_json(),
            "device_table": self.device_table.to_json(),
            "gates": [g.to_json() for g in self.gates],
            "attributes": [c.to_json() for c in self.cases],
            "proof": self.proof,
        }


# --------------------------------------------------------------------------------------------
# JSON helpers and profile loading


def _h(v: int) -> str:
    return hex(v)


def _need_dict(d: Any, where: str, keys: tuple[str, ...]) -> None:
    if not isinstance(d, dict):
        raise GateDiscoveryError(f"profile: {where} is not an object")
    for k in keys:
        if k not in d:
            raise GateDiscoveryError(f"profile: {where} has no '{k}'")


def _int(v: Any, where: str) -> int:
    if isinstance(v, str) and re.fullmatch(r"0x[0-9a-f]+", v):
        return int(v, 16)
    raise GateDiscoveryError(f"profile: {where} is not a hex string like 0x1f")


def _plain_int(v: Any, where: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    raise GateDiscoveryError(f"profile: {where} is not a non-negative integer")


def _str(v: Any, where: str) -> str:
    if isinstance(v, str):
        return v
    raise GateDiscoveryError(f"profile: {where} is not a string")


def _bool(v: Any, where: str) -> bool:
    if isinstance(v, bool):
        return v
    raise GateDiscoveryError(f"profile: {where} is not true/false")


def _list(v: Any, where: str) -> list[Any]:
    if isinstance(v, list):
        return v
    raise GateDiscoveryError(f"profile: {where} is not a list")


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile written by ``Profile.to_json``."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
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

    rd = raw["reader"]
    _need_dict(rd, "reader", ("vaddr", "jump_table", "table_kind", "first_attribute",
                              "last_attribute", "default_target", "insns", "chain"))
    reader = Reader(
        vaddr=_int(rd["vaddr"], "reader.vaddr"),
        table_vaddr=_int(rd["jump_table"], "reader.jump_table"),
        table_kind=_str(rd["table_kind"], "reader.table_kind"),
        first_attribute=_plain_int(rd["first_attribute"], "reader.first_attribute"),
        last_attribute=_plain_int(rd["last_attribute"], "reader.last_attribute"),
        default_target=_int(rd["default_target"], "reader.default_target"),
        insns=[InsnRef.from_json(x, "reader.insns") for x in _list(rd["insns"], "reader.insns")],
        chain=[_str(x, "reader.chain") for x in _list(rd["chain"], "reader.chain")],
    )
    dt = raw["device_table"]
    _need_dict(dt, "device_table", ("vaddr", "offset", "stride", "count_vaddr", "count_size",
                                    "insns", "caller", "call_site", "index_reg", "attr_reg",
                                    "result_reg"))
    stride = _plain_int(dt["stride"], "device_table.stride")
    if stride != 8:
        raise GateDiscoveryError("profile: device_table.stride is not 8")
    table = DeviceTable(
        vaddr=_int(dt["vaddr"], "device_table.vaddr"),
        offset=_int(dt["offset"], "device_table.offset"),
        stride=stride,
        count_vaddr=None if dt["count_vaddr"] is None
        else _int(dt["count_vaddr"], "device_table.count_vaddr"),
        count_size=None if dt["count_size"] is None
        else _plain_int(dt["count_size"], "device_table.count_size"),
        insns=[InsnRef.from_json(x, "device_table.insns")
               for x in _list(dt["insns"], "device_table.insns")],
        caller=_int(dt["caller"], "device_table.caller"),
        call_site=_int(dt["call_site"], "device_table.call_site"),
        index_reg=_str(dt["index_reg"], "device_table.index_reg"),
        attr_reg=None if dt["attr_reg"] is None else _str(dt["attr_reg"], "device_table.attr_reg"),
        result_reg=None if dt["result_reg"] is None
        else _str(dt["result_reg"], "device_table.result_reg"),
    )
    if not table.insns:
        raise GateDiscoveryError("profile: device_table.insns is empty")
    cases = [AttrCase.from_json(x, f"attributes[{i}]")
             for i, x in enumerate(_list(raw["attributes"], "attributes"))]
    gates: list[Gate] = []
    for i, g in enumerate(_list(raw["gates"], "gates")):
        w = f"gates[{i}]"
        _need_dict(g, w, ("name", "attributes", "fields", "globals", "init_sites"))
        fields = []
        for j, f in enumerate(_list(g["fields"], f"{w}.fields")):
            _need_dict(f, f"{w}.fields[{j}]", ("offset", "mask"))
            fields.append(GateField(_int(f["offset"], f"{w}.fields[{j}].offset"),
                                    _int(f["mask"], f"{w}.fields[{j}].mask")))
        if not fields:
            raise GateDiscoveryError(f"profile: {w} has no fields")
        for f in fields:
            if f.mask == 0 or f.mask > 0xFF:
                raise GateDiscoveryError(f"profile: {w} has a field mask that is not one byte")
        globs = []
        for j, x in enumerate(_list(g["globals"], f"{w}.globals")):
            _need_dict(x, f"{w}.globals[{j}]", ("vaddr", "size"))
            globs.append(GateGlobal(_int(x["vaddr"], f"{w}.globals[{j}].vaddr"),
                                    _plain_int(x["size"], f"{w}.globals[{j}].size")))
        sites = []
        for j, s in enumerate(_list(g["init_sites"], f"{w}.init_sites")):
            ws = f"{w}.init_sites[{j}]"
            _need_dict(s, ws, ("offset", "kind", "imm", "sets_bit", "insn", "or_insn"))
            sites.append(InitSite(
                _int(s["offset"], f"{ws}.offset"), _str(s["kind"], f"{ws}.kind"),
                None if s["imm"] is None else _int(s["imm"], f"{ws}.imm"),
                _bool(s["sets_bit"], f"{ws}.sets_bit"),
                InsnRef.from_json(s["insn"], f"{ws}.insn"),
                None if s["or_insn"] is None else InsnRef.from_json(s["or_insn"], f"{ws}.or_insn"),
            ))
        attrs = [_plain_int(a, f"{w}.attributes")
                 for a in _list(g["attributes"], f"{w}.attributes")]
        gates.append(Gate(_str(g["name"], f"{w}.name"), attrs, fields, globs, sites))
    if not gates:
        raise GateDiscoveryError("profile: no gates")
    proof = raw.get("proof")
    if proof is not None and not isinstance(proof, dict):
        raise GateDiscoveryError("profile: proof is not an object")
    return Profile(
        driver_file=_str(drv["file"], "driver.file"), driver_version=ver, build_id=bid,
        export_vaddr=_int(exp["vaddr"], "export.vaddr"), reader=reader, device_table=table,
        cases=cases, gates=gates, proof=proof,
    )


# --------------------------------------------------------------------------------------------
# The ELF image


class Image:
    """The driver file: loadable segments, dynamic symbols, build-id, RELATIVE relocations."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.data = path.read_bytes()
        except OSError as e:
            raise GateDiscoveryError(f"cannot read {path}: {e.strerror}") from None
        try:
            import io

            elf = ELFFile(io.BytesIO(self.data))
            if elf.elfclass != 64 or elf["e_machine"] != "EM_X86_64":
                raise GateDiscoveryError(f"{path.name} is not an x86-64 ELF file")
            if elf["e_type"] != "ET_DYN":
                raise GateDiscoveryError(f"{path.name} is not a shared object")
            self.segments = [
                (s["p_vaddr"], s["p_offset"], s["p_filesz"], s["p_memsz"], s["p_flags"])
                for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"
            ]
            self.build_id = self._build_id(elf)
            dynsym = elf.get_section_by_name(".dynsym")
            if dynsym is None:
                raise GateDiscoveryError(f"{path.name} has no .dynsym")
            self.symbols = {s.name: s["st_value"] for s in dynsym.iter_symbols()
                            if s["st_value"] and s["st_info"]["type"] == "STT_FUNC"}
            self.relative = self._relative_relocs(elf)
        except (ELFError, struct.error, ValueError) as e:
            raise GateDiscoveryError(f"{path.name} is not a readable ELF file ({e})") from None
        if not self.segments:
            raise GateDiscoveryError(f"{path.name} has no loadable segments")
        self.md = Cs(CS_ARCH_X86, CS_MODE_64)
        self.md.detail = True
        self._cache: dict[int, CsInsn | None] = {}

    @staticmethod
    def _build_id(elf: ELFFile) -> str:
        for sec in elf.iter_sections():
            if sec["sh_type"] != "SHT_NOTE":
                continue
            for note in sec.iter_notes():
                if note["n_type"] == "NT_GNU_BUILD_ID":
                    return str(note["n_desc"])
        raise GateDiscoveryError("no GNU build-id note (.note.gnu.build-id)")

    @staticmethod
    def _relative_relocs(elf: ELFFile) -> dict[int, int]:
        out: dict[int, int] = {}
        for sec in elf.iter_sections():
            if sec["sh_type"] != "SHT_RELA":
                continue
            raw = sec.data()
            for off, info, addend in struct.iter_unpack("<QQq", raw[: len(raw) // 24 * 24]):
                if info & 0xFFFFFFFF == R_X86_64_RELATIVE:
                    out[off] = addend
        return out

    def file_offset(self, va: int) -> int | None:
        for vaddr, off, filesz, _memsz, _fl in self.segments:
            if vaddr <= va < vaddr + filesz:
                return off + va - vaddr
        return None

    def is_exec(self, va: int) -> bool:
        return any(v <= va < v + fs and fl & 1 for v, _o, fs, _m, fl in self.segments)

    def exec_ranges(self) -> list[tuple[int, int, int]]:
        return [(v, o, fs) for v, o, fs, _m, fl in self.segments if fl & 1]

    def read(self, va: int, n: int) -> bytes:
        off = self.file_offset(va)
        if off is None:
            return b""
        for vaddr, seg_off, filesz, _m, _f in self.segments:
            if vaddr <= va < vaddr + filesz:
                n = min(n, seg_off + filesz - off)
        return self.data[off:off + n]

    def pointer_at(self, va: int) -> int | None:
        """The value the dynamic loader puts at ``va`` (minus the base), if it is a relocation."""
        return self.relative.get(va)

    def insn(self, va: int) -> CsInsn | None:
        if va in self._cache:
            return self._cache[va]
        got: CsInsn | None = None
        if self.is_exec(va):
            try:
                got = next(self.md.disasm(self.read(va, 16), va, 1), None)
            except CsError:
                got = None
        self._cache[va] = got
        return got

    def ref(self, ins: CsInsn) -> InsnRef:
        off = self.file_offset(ins.address)
        assert off is not None
        text = f"{ins.mnemonic} {ins.op_str}".strip()
        return InsnRef(ins.address, off, bytes(ins.bytes).hex(), text)


# --------------------------------------------------------------------------------------------
# x86 helpers

_FAMILIES: dict[str, str] = {}
for _base in ("a", "b", "c", "d"):
    for _n in (f"r{_base}x", f"e{_base}x", f"{_base}x", f"{_base}l", f"{_base}h"):
        _FAMILIES[_n] = f"r{_base}x"
for _base in ("si", "di", "bp", "sp"):
    for _n in (f"r{_base}", f"e{_base}", _base, f"{_base}l"):
        _FAMILIES[_n] = f"r{_base}"
for _i in range(8, 16):
    for _n in (f"r{_i}", f"r{_i}d", f"r{_i}w", f"r{_i}b"):
        _FAMILIES[_n] = f"r{_i}"
CALLER_SAVED = {"rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11"}


def fam(ins: CsInsn, reg: int) -> str:
    name = ins.reg_name(reg) if reg else ""
    return _FAMILIES.get(name or "", name or "")


def rip_target(ins: CsInsn, op: Any) -> int:
    return ins.address + ins.size + op.mem.disp


def mem_ops(ins: CsInsn) -> list[Any]:
    return [o for o in ins.operands if o.type == cx86.X86_OP_MEM]


def written_families(ins: CsInsn) -> set[str]:
    try:
        _r, w = ins.regs_access()
    except CsError:
        return set()
    return {fam(ins, r) for r in w}


def is_jcc(ins: CsInsn) -> bool:
    return ins.mnemonic.startswith("j") and ins.mnemonic != "jmp"


def direct_target(ins: CsInsn) -> int | None:
    if ins.operands and ins.operands[0].type == cx86.X86_OP_IMM:
        return ins.operands[0].imm
    return None


# --------------------------------------------------------------------------------------------
# Control flow


@dataclass
class JumpTable:
    jmp: int
    table: int
    kind: str
    index_reg: str
    count: int  # entries 0..count-1
    bias: int  # attribute = index + bias
    default: int | None
    entries: list[int]
    insns: list[CsInsn]


@dataclass
class Function:
    entry: int
    insns: dict[int, CsInsn]
    prev: dict[int, int]  # address -> address of the instruction that falls into it
    calls: list[tuple[int, int]]  # (call site, target)
    tails: list[int]  # indirect tail jumps through relocated pointers, and direct jumps out
    tables: list[JumpTable]
    truncated: bool


def walk_function(img: Image, entry: int, limit: int = MAX_FUNC_INSNS) -> Function:
    insns: dict[int, CsInsn] = {}
    prev: dict[int, int] = {}
    calls: list[tuple[int, int]] = []
    tails: list[int] = []
    tables: list[JumpTable] = []
    work = [entry]
    truncated = False
    while work:
        va = work.pop()
        while va not in insns:
            if len(insns) >= limit:
                truncated = True
                work.clear()
                break
            ins = img.insn(va)
            if ins is None:
                break
            insns[va] = ins
            nxt = va + ins.size
            m = ins.mnemonic
            if m in ("ret", "ud2", "hlt", "int3") or m.startswith("ret"):
                break
            if m == "call":
                t = direct_target(ins)
                if t is not None:
                    calls.append((va, t))
                else:
                    mo = mem_ops(ins)
                    if mo and fam(ins, mo[0].mem.base) == "rip":
                        p = img.pointer_at(rip_target(ins, mo[0]))
                        if p is not None:
                            calls.append((va, p))
                prev[nxt] = va
                va = nxt
                continue
            if m == "jmp":
                t = direct_target(ins)
                if t is not None:
                    work.append(t)
                    break
                mo = mem_ops(ins)
                if mo and fam(ins, mo[0].mem.base) == "rip" and not mo[0].mem.index:
                    p = img.pointer_at(rip_target(ins, mo[0]))
                    if p is not None:
                        tails.append(p)
                    break
                jt = _jump_table(img, ins, insns, prev)
                if jt is not None:
                    tables.append(jt)
                    work.extend(jt.entries)
                    if jt.default is not None:
                        work.append(jt.default)
                break
            if is_jcc(ins):
                t = direct_target(ins)
                if t is not None:
                    work.append(t)
            prev[nxt] = va
            va = nxt
    return Function(entry, insns, prev, calls, tails, tables, truncated)


def _back(insns: dict[int, CsInsn], prev: dict[int, int], va: int, n: int) -> list[CsInsn]:
    """Up to ``n`` instructions that fall through into ``va``, nearest first."""
    out = []
    cur = va
    while len(out) < n and cur in prev:
        cur = prev[cur]
        out.append(insns[cur])
    return out


def _jump_table(img: Image, jmp: CsInsn, insns: dict[int, CsInsn],
                prev: dict[int, int]) -> JumpTable | None:
    """Recognise ``movslq (base,idx,4),r; add base,r; jmp *r`` and ``jmp *(base,idx,8)``."""
    back = _back(insns, prev, jmp.address, 24)
    op = jmp.operands[0] if jmp.operands else None
    if op is None:
        return None
    used: list[CsInsn] = [jmp]
    kind = ""
    base_reg = idx_reg = ""
    if op.type == cx86.X86_OP_REG:
        target = fam(jmp, op.reg)
        add = load = None
        for b in back:
            if add is None and b.mnemonic == "add" and len(b.operands) == 2 \
                    and b.operands[0].type == cx86.X86_OP_REG \
                    and fam(b, b.operands[0].reg) == target \
                    and b.operands[1].type == cx86.X86_OP_REG:
                add = b
                base_reg = fam(b, b.operands[1].reg)
                continue
            if add is not None and load is None and b.mnemonic == "movsxd" \
                    and fam(b, b.operands[0].reg) in (target, base_reg):
                mo = mem_ops(b)
                if mo and mo[0].mem.scale == 4:
                    load = b
                    other = fam(b, b.operands[0].reg)
                    if other == base_reg:  # movslq (rax,rdx,4),rdx ; add rax? normalise
                        base_reg = target
                    if fam(b, mo[0].mem.base) != base_reg:
                        return None
                    idx_reg = fam(b, mo[0].mem.index)
                    break
        if add is None or load is None:
            # mov (base,idx,8),r; jmp *r
            for b in back:
                if b.mnemonic == "mov" and b.operands[0].type == cx86.X86_OP_REG \
                        and fam(b, b.operands[0].reg) == target:
                    mo = mem_ops(b)
                    if mo and mo[0].mem.scale == 8 and mo[0].mem.index:
                        base_reg, idx_reg = fam(b, mo[0].mem.base), fam(b, mo[0].mem.index)
                        used.append(b)
                        kind = "abs64"
                    break
            if not kind:
                return None
        else:
            used += [add, load]
            kind = "rel32"
    elif op.type == cx86.X86_OP_MEM and op.mem.scale == 8 and op.mem.index:
        base_reg, idx_reg = fam(jmp, op.mem.base), fam(jmp, op.mem.index)
        kind = "abs64"
    else:
        return None
    table = None
    for b in back:
        if b.mnemonic == "lea" and fam(b, b.operands[0].reg) == base_reg:
            mo = mem_ops(b)
            if mo and fam(b, mo[0].mem.base) == "rip" and not mo[0].mem.index:
                table = rip_target(b, mo[0])
                used.append(b)
            break
    if table is None:
        return None
    count = default = None
    bias = 0
    copies = {idx_reg}
    for i, b in enumerate(back):
        m = b.mnemonic
        if m == "mov" and len(b.operands) == 2 and b.operands[0].type == cx86.X86_OP_REG \
                and b.operands[1].type == cx86.X86_OP_REG \
                and fam(b, b.operands[0].reg) in copies:
            copies.add(fam(b, b.operands[1].reg))
            continue
        if m == "cmp" and b.operands[0].type == cx86.X86_OP_REG \
                and fam(b, b.operands[0].reg) in copies and b.operands[1].type == cx86.X86_OP_IMM:
            nxt = insns.get(b.address + b.size)
            if nxt is not None and nxt.mnemonic == "ja":
                count = b.operands[1].imm + 1
                default = direct_target(nxt)
                used += [b, nxt]
                # a bias applied before the compare: lea -K(%r),%idx / sub $K,%idx
                for c in back[i + 1:i + 6]:
                    if c.operands and c.operands[0].type == cx86.X86_OP_REG \
                            and fam(c, c.operands[0].reg) in copies:
                        if c.mnemonic == "sub" and c.operands[1].type == cx86.X86_OP_IMM:
                            bias = c.operands[1].imm
                            used.append(c)
                        elif c.mnemonic == "add" and c.operands[1].type == cx86.X86_OP_IMM:
                            bias = -c.operands[1].imm
                            used.append(c)
                        elif c.mnemonic == "lea":
                            mo = mem_ops(c)
                            if mo and not mo[0].mem.index:
                                bias = -mo[0].mem.disp
                                copies.add(fam(c, mo[0].mem.base))
                                used.append(c)
                        break
            break
    if count is None or count > MAX_CASES * 4:
        return None
    entries = []
    for i in range(count):
        if kind == "rel32":
            raw = img.read(table + 4 * i, 4)
            if len(raw) != 4:
                return None
            entries.append((table + struct.unpack("<i", raw)[0]) & 0xFFFFFFFFFFFFFFFF)
        else:
            p = img.pointer_at(table + 8 * i)
            if p is None:
                return None
            entries.append(p)
    if not all(img.is_exec(e) for e in entries):
        return None
    used.sort(key=lambda x: x.address)
    return JumpTable(jmp.address, table, kind, idx_reg, count, bias, default, entries, used)


# --------------------------------------------------------------------------------------------
# Discovery


def driver_version_of(path: Path) -> str | None:
    m = re.search(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)*)$", path.name)
    return m.group(1) if m else None


def _arg_copies(fn: Function, jt: JumpTable) -> bool:
    """Whether the jump table's index is the function's second argument (%esi) or a copy."""
    chain = _back(fn.insns, fn.prev, jt.jmp, 64)
    want = {jt.index_reg}
    for b in chain:
        if b.mnemonic in ("mov", "movsxd", "movzx") and len(b.operands) == 2 \
                and b.operands[0].type == cx86.X86_OP_REG \
                and fam(b, b.operands[0].reg) in want:
            if b.operands[1].type == cx86.X86_OP_REG:
                want.add(fam(b, b.operands[1].reg))
            continue
        if b.mnemonic == "lea" and b.operands[0].type == cx86.X86_OP_REG \
                and fam(b, b.operands[0].reg) in want:
            mo = mem_ops(b)
            if mo and mo[0].mem.base and not mo[0].mem.index and fam(b, mo[0].mem.base) != "rip":
                want.add(fam(b, mo[0].mem.base))
    return "rsi" in want and all(
        "rsi" not in written_families(b) for b in chain
        if b.address < min((i.address for i in jt.insns), default=jt.jmp)
    )


def _reader_candidate(fn: Function) -> JumpTable | None:
    for jt in fn.tables:
        if MIN_CASES <= jt.count <= MAX_CASES and _arg_copies(fn, jt):
            return jt
    return None


def _find_device_table(img: Image, caller: Function, site: int) -> DeviceTable | None:
    """At ``call reader``: ``lea T(%rip),%t; mov off(%t,%idx,8),%rdi``."""
    back = _back(caller.insns, caller.prev, site, 16)
    load = None
    for b in back:
        if "rdi" in written_families(b):
            if b.mnemonic == "mov" and b.operands[0].type == cx86.X86_OP_REG:
                mo = mem_ops(b)
                if mo and mo[0].mem.index and mo[0].mem.scale == 8:
                    load = b
            break
    if load is None:
        return None
    mem = mem_ops(load)[0].mem
    base_reg, idx = fam(load, mem.base), fam(load, mem.index)
    lea = None
    for b in _back(caller.insns, caller.prev, load.address, 16):
        if base_reg in written_families(b):
            if b.mnemonic == "lea":
                mo = mem_ops(b)
                if mo and fam(b, mo[0].mem.base) == "rip" and not mo[0].mem.index:
                    lea = b
            break
    if lea is None:
        return None
    table = rip_target(lea, mem_ops(lea)[0])
    used = [lea, load]
    count_vaddr = count_size = None
    for b in _back(caller.insns, caller.prev, lea.address, 12):
        if b.mnemonic == "cmp" and b.operands[0].type == cx86.X86_OP_REG \
                and fam(b, b.operands[0].reg) == idx:
            mo = mem_ops(b)
            if mo and fam(b, mo[0].mem.base) == "rip":
                count_vaddr, count_size = rip_target(b, mo[0]), mo[0].size
                used.append(b)
            break
        if idx in written_families(b):
            break
    attr_reg = result_reg = None
    for b in back:
        if b.address < lea.address and b.address < load.address:
            break
        if b.mnemonic == "mov" and len(b.operands) == 2 and b.operands[0].type == cx86.X86_OP_REG \
                and b.operands[1].type == cx86.X86_OP_REG:
            dst, src = fam(b, b.operands[0].reg), fam(b, b.operands[1].reg)
            if dst == "rsi" and attr_reg is None:
                attr_reg = src
            elif dst == "rdx" and result_reg is None:
                result_reg = src
    used.sort(key=lambda x: x.address)
    return DeviceTable(table, mem.disp, mem.scale, count_vaddr, count_size,
                       [img.ref(i) for i in used], caller.entry, site, idx, attr_reg, result_reg)


def _find_reader(img: Image, export: int) -> tuple[Function, JumpTable, DeviceTable, list[str]]:
    seen: set[int] = set()
    funcs: dict[int, Function] = {}
    how: dict[int, str] = {export: f"{EXPORT} {export:#x}"}
    parents: dict[int, int] = {}
    frontier = [export]
    found: list[tuple[Function, JumpTable]] = []
    for _depth in range(MAX_DEPTH + 1):
        nxt: list[int] = []
        for va in frontier:
            if va in seen or len(seen) >= MAX_FUNCTIONS or not img.is_exec(va):
                continue
            seen.add(va)
            fn = walk_function(img, va)
            funcs[va] = fn
            jt = _reader_candidate(fn)
            if jt is not None:
                found.append((fn, jt))
                continue
            for site, t in fn.calls:
                if t not in how:
                    how[t], parents[t] = f"call at {site:#x} -> {t:#x}", va
                nxt.append(t)
            for t in fn.tails:
                if t not in how:
                    how[t], parents[t] = f"jump through a relocated pointer -> {t:#x}", va
                nxt.append(t)
        if found:
            break
        frontier = nxt
    if not found:
        raise GateDiscoveryError(
            f"attribute reader not found: no function within {len(seen)} reachable from "
            f"{EXPORT} dispatches on its %esi argument through a jump table of "
            f">= {MIN_CASES} cases")
    for fn, jt in found:
        for caller in funcs.values():
            for site, t in caller.calls:
                if t != fn.entry:
                    continue
                table = _find_device_table(img, caller, site)
                if table is not None:
                    chain = []
                    cur: int | None = fn.entry
                    while cur is not None:
                        chain.append(how[cur])
                        cur = parents.get(cur)
                    return fn, jt, table, list(reversed(chain))
    raise GateDiscoveryError(
        "device table not found: no call to the attribute reader "
        f"({', '.join(hex(f.entry) for f, _ in found)}) loads %rdi as "
        "off(lea table(%rip), index, 8)")


class _CaseWalker:
    def __init__(self, img: Image, reader: Function, jt: JumpTable) -> None:
        self.img = img
        self.jt = jt
        # registers holding the device struct and the result pointer after the prologue
        self.dev0 = {"rdi"}
        self.res0 = {"rdx"}
        for b in sorted(_back(reader.insns, reader.prev, jt.jmp, 64), key=lambda x: x.address):
            if b.mnemonic == "mov" and len(b.operands) == 2 \
                    and b.operands[0].type == cx86.X86_OP_REG \
                    and b.operands[1].type == cx86.X86_OP_REG:
                dst, src = fam(b, b.operands[0].reg), fam(b, b.operands[1].reg)
                for s in (self.dev0, self.res0):
                    s.discard(dst)
                if src in self.dev0:
                    self.dev0.add(dst)
                elif src in self.res0:
                    self.res0.add(dst)
            else:
                for r in written_families(b):
                    self.dev0.discard(r)
                    self.res0.discard(r)

    def _gates_on(self, ins: CsInsn, test: CsInsn, dev: set[str], res: set[str],
                  known: dict[str, int]) -> bool:
        """Whether ``ins``, right after ``test``, sends the 'bit clear / byte zero' case to a 0.

        ``test $m,x; je L`` and ``cmp $0,x; je L`` take L when clear; ``jne L`` falls through
        when clear; ``cmp $0,x; setne %r8`` (with the rest of the register known to be 0) makes
        the value itself.
        """
        m = ins.mnemonic
        if test.mnemonic == "cmp":
            imm = [o for o in test.operands if o.type == cx86.X86_OP_IMM]
            if not imm or imm[0].imm != 0:
                return False
            if m == "setne" and ins.operands[0].type == cx86.X86_OP_REG:
                r = fam(ins, ins.operands[0].reg)
                return known.get(r) == 0 and self._zero_store(ins.address + ins.size, dev, res,
                                                            {**known, r: 0}, r)
        if m in ("je", "jz"):
            t = direct_target(ins)
            return t is not None and self._zero_store(t, dev, res, known, None)
        if m in ("jne", "jnz"):
            return self._zero_store(ins.address + ins.size, dev, res, known, None)
        return False

    def _zero_store(self, va: int, dev: set[str], res: set[str], known: dict[str, int],
                    value_reg: str | None) -> bool:
        """Whether straight-line code from ``va`` stores 0 (or ``value_reg``) through the result."""
        known = dict(known)
        for _ in range(12):
            ins = self.img.insn(va)
            if ins is None:
                return False
            m = ins.mnemonic
            mo = mem_ops(ins)
            if mo and fam(ins, mo[0].mem.base) in res and not mo[0].mem.index \
                    and mo[0].mem.disp == 0 and mo[0].access & CS_AC_WRITE:
                src = [o for o in ins.operands if o.type != cx86.X86_OP_MEM]
                if src and src[0].type == cx86.X86_OP_IMM:
                    return src[0].imm == 0 and value_reg is None
                if src and src[0].type == cx86.X86_OP_REG:
                    r = fam(ins, src[0].reg)
                    return r == value_reg if value_reg else known.get(r) == 0
                return False
            if m == "jmp":
                t = direct_target(ins)
                if t is None:
                    return False
                va = t
                continue
            if m == "call" or m.startswith("ret") or is_jcc(ins) or mo:
                return False
            if m == "xor" and ins.operands[0].type == ins.operands[1].type == cx86.X86_OP_REG \
                    and ins.operands[0].reg == ins.operands[1].reg:
                known[fam(ins, ins.operands[0].reg)] = 0
            elif m == "mov" and ins.operands[0].type == cx86.X86_OP_REG \
                    and ins.operands[1].type == cx86.X86_OP_IMM:
                known[fam(ins, ins.operands[0].reg)] = ins.operands[1].imm
            else:
                for r in written_families(ins):
                    if r == value_reg:
                        return False
                    known.pop(r, None)
            va += ins.size
        return False

    def decode(self, attribute: int, target: int) -> AttrCase:
        img = self.img
        fields: dict[tuple[int, str, int | None], FieldTest] = {}
        globs: dict[int, GlobalTest] = {}
        calls: list[int] = []
        notes: list[str] = []
        consts: set[int] = set()
        stored_regs: set[str] = set()
        incomplete = False
        visited: set[int] = set()
        work: list[tuple[int, frozenset[str], frozenset[str], dict[str, int]]] = [
            (target, frozenset(self.dev0), frozenset(self.res0), {})]
        count = 0
        stored = False
        while work:
            va, dev_s, res_s, const = work.pop()
            dev, res, known = set(dev_s), set(res_s), dict(const)
            last_test = None
            while va not in visited:
                count += 1
                if count > MAX_CASE_INSNS:
                    incomplete = True
                    notes.append("walk stopped at the instruction limit")
                    work.clear()
                    break
                ins = img.insn(va)
                if ins is None:
                    incomplete = True
                    notes.append(f"cannot decode at {va:#x}")
                    break
                visited.add(va)
                m = ins.mnemonic
                if m.startswith("ret"):
                    break
                this_test: tuple[str, Any, CsInsn] | None = None
                for op in mem_ops(ins):
                    base, idx = fam(ins, op.mem.base), op.mem.index
                    is_write = bool(op.access & CS_AC_WRITE)
                    if base == "rip" and not idx:
                        gva = rip_target(ins, op)
                        if m == "lea":
                            continue
                        kind = "test" if m == "test" else "cmp" if m == "cmp" else \
                            "store" if is_write else "load"
                        globs.setdefault(gva, GlobalTest(gva, op.size, kind, img.ref(ins)))
                        if kind in ("test", "cmp"):
                            this_test = ("g", gva, ins)
                    elif base in dev and not idx and m != "lea":
                        mask = None
                        kind = "store" if is_write else "load"
                        if m in ("test", "cmp"):
                            kind = m
                            imm = [o for o in ins.operands if o.type == cx86.X86_OP_IMM]
                            if m == "test" and imm:
                                mask = imm[0].imm & ((1 << (8 * op.size)) - 1)
                        fields.setdefault((op.mem.disp, kind, mask),
                                          FieldTest(op.mem.disp, op.size, mask, kind, img.ref(ins)))
                        if kind == "test" and mask:
                            this_test = ("f", (op.mem.disp, kind, mask), ins)
                    elif base in res and not idx and op.mem.disp == 0 and is_write:
                        stored = True
                        src = [o for o in ins.operands if o.type != cx86.X86_OP_MEM]
                        if src and src[0].type == cx86.X86_OP_IMM:
                            consts.add(src[0].imm)
                        elif src and src[0].type == cx86.X86_OP_REG:
                            r = fam(ins, src[0].reg)
                            if r in known:
                                consts.add(known[r])
                            else:
                                stored_regs.add(r)
                    elif base in ("rbp", "rsp") and m == "lea":
                        continue
                    elif m != "lea" and m != "nop" and not m.startswith("nop"):
                        incomplete = True
                        notes.append(f"reads other memory at {ins.address:#x}: {m} {ins.op_str}")
                if last_test is not None and self._gates_on(ins, last_test[2], dev, res, known):
                    kind_, key, _ = last_test
                    if kind_ == "f":
                        fields[key] = replace(fields[key], gating=True)
                    else:
                        globs[key] = replace(globs[key], gating=True)
                last_test = this_test
                if m == "call":
                    t = direct_target(ins)
                    if t is not None:
                        calls.append(t)
                    else:
                        notes.append(f"indirect call at {ins.address:#x}")
                    incomplete = True
                    for r in CALLER_SAVED:
                        dev.discard(r)
                        res.discard(r)
                        known.pop(r, None)
                    va += ins.size
                    continue
                # register effects
                w = written_families(ins)
                if m == "mov" and len(ins.operands) == 2 \
                        and ins.operands[0].type == cx86.X86_OP_REG:
                    dst = fam(ins, ins.operands[0].reg)
                    src = ins.operands[1]
                    dev.discard(dst)
                    res.discard(dst)
                    known.pop(dst, None)
                    if src.type == cx86.X86_OP_REG:
                        s = fam(ins, src.reg)
                        if s in dev:
                            dev.add(dst)
                        if s in res:
                            res.add(dst)
                        if s in known:
                            known[dst] = known[s]
                    elif src.type == cx86.X86_OP_IMM:
                        known[dst] = src.imm
                elif m == "xor" and len(ins.operands) == 2 \
                        and ins.operands[0].type == ins.operands[1].type == cx86.X86_OP_REG \
                        and ins.operands[0].reg == ins.operands[1].reg:
                    r = fam(ins, ins.operands[0].reg)
                    dev.discard(r)
                    res.discard(r)
                    known[r] = 0
                else:
                    for r in w:
                        if r == "rflags":
                            continue
                        dev.discard(r)
                        res.discard(r)
                        known.pop(r, None)
                if m == "jmp":
                    t = direct_target(ins)
                    if t is None:
                        incomplete = True
                        notes.append(f"indirect jump at {ins.address:#x}")
                        break
                    va = t
                    continue
                if is_jcc(ins):
                    t = direct_target(ins)
                    if t is not None:
                        work.append((t, frozenset(dev), frozenset(res), dict(known)))
                elif m not in ("test", "cmp", "xor", "mov", "movzx", "movsx", "movsxd", "sete",
                               "setne", "setb", "seta", "setae", "setbe", "setg", "setl", "setge",
                               "setle", "and", "or", "shr", "shl", "sar", "add", "sub", "lea",
                               "cmove", "cmovne", "nop", "push", "pop", "leave", "bt", "not",
                               "neg", "cmova", "cmovb", "cmovae", "cmovbe", "endbr64",
                               "cmovg", "cmovl", "cmovge", "cmovle", "sbb", "adc", "inc", "dec"):
                    if not m.startswith("nop") and not m.startswith("j"):
                        incomplete = True
                        notes.append(f"unhandled instruction at {ins.address:#x}: {m}")
                va += ins.size
        field_list = list(fields.values())
        glob_list = list(globs.values())
        tests = [f for f in field_list if f.op in ("test", "cmp")]
        gtests = [g for g in glob_list if g.op in ("test", "cmp")]
        other_loads = [f for f in field_list if f.op == "load"]
        constant = None
        if not stored:
            kind = "unknown"
            notes.append("no store through the result pointer seen")
        elif incomplete:
            kind = "computed" if (field_list or glob_list or calls) else "unknown"
        elif not field_list and not glob_list and len(consts) == 1 and not stored_regs:
            kind, constant = "constant", next(iter(consts))
        elif other_loads and not tests and not gtests:
            kind = "field-value"
        elif (tests or gtests) and not other_loads and not [g for g in glob_list if g.op == "load"]:
            kind = "field+global" if tests and gtests else "field" if tests else "global"
        elif field_list or glob_list:
            kind = "computed"
        else:
            kind = "unknown"
        complete = not incomplete and kind != "unknown"
        return AttrCase(attribute, target, kind, complete, field_list, glob_list, constant,
                        sorted(set(calls)), notes)


def _init_sites(img: Image, offset: int, mask: int) -> list[InitSite]:
    """Instructions in executable code that write ``byte[offset]`` of some struct."""
    pat = struct.pack("<i", offset)
    out: dict[int, InitSite] = {}
    for seg_va, seg_off, filesz in img.exec_ranges():
        blob = img.data[seg_off:seg_off + filesz]
        start = 0
        while True:
            hit = blob.find(pat, start)
            if hit < 0:
                break
            start = hit + 1
            hit_va = seg_va + hit
            for back in range(2, 5):
                ins = img.insn(hit_va - back)
                if ins is None or ins.address + ins.size <= hit_va:
                    continue
                site = _classify_write(img, ins, offset, mask)
                if site is not None:
                    out[ins.address] = site
                    break
    return sorted(out.values(), key=lambda s: s.insn.vaddr)


def _classify_write(img: Image, ins: CsInsn, offset: int, mask: int) -> InitSite | None:
    mo = [o for o in mem_ops(ins) if o.mem.disp == offset and not o.mem.index
          and fam(ins, o.mem.base) not in ("rip", "rsp", "")]
    if not mo:
        return None
    op = mo[0]
    if not op.access & CS_AC_WRITE or op.size != 1:
        return None
    m = ins.mnemonic
    imm = next((o.imm & 0xFF for o in ins.operands if o.type == cx86.X86_OP_IMM), None)
    if m == "or" and imm is not None:
        return InitSite(offset, "or-imm", imm, bool(imm & mask), img.ref(ins), None)
    if m == "and" and imm is not None:
        return InitSite(offset, "and-imm", imm, False, img.ref(ins), None)
    if m == "mov" and imm is not None:
        return InitSite(offset, "mov-imm", imm, bool(imm & mask), img.ref(ins), None)
    if m == "mov":
        src = next((o for o in ins.operands if o.type == cx86.X86_OP_REG), None)
        if src is None:
            return None
        reg = fam(ins, src.reg)
        or_ins = _or_before(img, ins, reg)
        if or_ins is not None:
            v = next(o.imm for o in or_ins.operands if o.type == cx86.X86_OP_IMM) & 0xFF
            return InitSite(offset, "store", v, bool(v & mask), img.ref(ins), img.ref(or_ins))
        return InitSite(offset, "store", None, False, img.ref(ins), None)
    return InitSite(offset, "other", imm, False, img.ref(ins), None)


def _or_before(img: Image, store: CsInsn, reg: str) -> CsInsn | None:
    """The ``or $imm,%reg`` that computes the stored byte, decoding forward from earlier starts."""
    for back in range(INIT_SEARCH_BACK, 0, -1):
        va = store.address - back
        seq: list[CsInsn] = []
        while va < store.address:
            ins = img.insn(va)
            if ins is None:
                break
            seq.append(ins)
            va += ins.size
        if va != store.address or not seq:
            continue
        for ins in reversed(seq):
            if reg in written_families(ins):
                if ins.mnemonic == "or" and ins.operands[1].type == cx86.X86_OP_IMM:
                    return ins
                return None
            if ins.mnemonic in ("call", "jmp") or ins.mnemonic.startswith("ret"):
                return None
        return None
    return None


def _gates(img: Image, cases: dict[int, AttrCase]) -> list[Gate]:
    gdr_case = cases.get(ATTR_GDR)
    if gdr_case is None:
        raise GateDiscoveryError(f"attribute {ATTR_GDR} has no case in the attribute reader")
    gdr_bits = gdr_case.bit_tests()
    if not gdr_bits:
        raise GateDiscoveryError(
            f"attribute {ATTR_GDR} (GPU_DIRECT_RDMA_SUPPORTED) tests no device-struct bit "
            f"(case kind {gdr_case.kind})")
    gdr_globals = gdr_case.gating_globals()
    out = [_gate(img, "gdr", gdr_bits, gdr_globals, cases)]
    dma_case = cases.get(ATTR_DMABUF)
    if dma_case is not None:
        extra = dma_case.bit_tests() - gdr_bits
        if extra:
            eglobs = dma_case.gating_globals() - gdr_globals
            out.append(_gate(img, "dmabuf", extra, eglobs, cases))
    return out


def _gate(img: Image, name: str, bits: set[tuple[int, int]], globs: set[tuple[int, int]],
          cases: dict[int, AttrCase]) -> Gate:
    attrs = sorted(a for a, c in cases.items() if c.bit_tests() & bits)
    sites: list[InitSite] = []
    for off, mask in sorted(bits):
        sites += _init_sites(img, off, mask)
    return Gate(name, attrs, [GateField(o, m) for o, m in sorted(bits)],
                [GateGlobal(v, s) for v, s in sorted(globs)], sites)


def discover(driver_path: str | Path) -> Profile:
    """Analyse one libcuda file; raise GateDiscoveryError when its layout is not understood."""
    path = Path(driver_path).resolve()
    img = Image(path)
    export = img.symbols.get(EXPORT)
    if export is None:
        raise GateDiscoveryError(f"{path.name} does not export {EXPORT}")
    fn, jt, table, chain = _find_reader(img, export)
    walker = _CaseWalker(img, fn, jt)
    cases: dict[int, AttrCase] = {}
    for i, t in enumerate(jt.entries):
        if t == jt.default:
            continue
        attr = i + jt.bias
        cases[attr] = walker.decode(attr, t)
    gates = _gates(img, cases)
    reader = Reader(fn.entry, jt.table, jt.kind, jt.bias, jt.bias + jt.count - 1,
                    jt.default if jt.default is not None else 0,
                    [img.ref(i) for i in jt.insns], chain)
    return Profile(path.name, driver_version_of(path), img.build_id, export, reader, table,
                   [cases[a] for a in sorted(cases)], gates)


# --------------------------------------------------------------------------------------------
# Output


def format_table(profile: Profile) -> str:
    r, t = profile.reader, profile.device_table
    assert r is not None and t is not None
    lines = [
        f"driver      {profile.driver_file} (version {profile.driver_version or 'unknown'})",
        f"build-id    {profile.build_id}",
        f"reader      {r.vaddr:#x}, jump table {r.table_vaddr:#x} ({r.table_kind}), "
        f"attributes {r.first_attribute}..{r.last_attribute}",
        f"device      *(base + {t.vaddr:#x} + {t.offset:#x} + ordinal*{t.stride})"
        + (f", count at base+{t.count_vaddr:#x}" if t.count_vaddr is not None else ""),
        "",
        "gate     attributes        fields                    globals",
    ]
    for g in profile.gates:
        fields = ", ".join(f"[{f.offset:#x}]&{f.mask:#x}" for f in g.fields)
        globs = ", ".join(f"base+{x.vaddr:#x}/{x.size}" for x in g.globals) or "-"
        lines.append(f"{g.name:<8} {','.join(map(str, g.attributes)):<17} {fields:<25} {globs}")
        for s in g.init_sites:
            extra = f" (after {s.or_insn.text} at {s.or_insn.vaddr:#x})" if s.or_insn else ""
            lines.append(f"         init {s.kind:<7} {s.insn.vaddr:#x} file {s.insn.file_offset:#x}"
                         f" {s.insn.hex:<16} {s.insn.text}{extra}"
                         f"{'  sets the bit' if s.sets_bit else ''}")
    lines += ["", "attr  kind          what the case reads (* = must be set / non-zero for a "
              "non-zero value)"]
    for c in profile.cases:
        if c.kind == "constant":
            what = f"= {c.constant}"
        else:
            parts = [f"[{f.offset:#x}]" + (f"&{f.mask:#x}" if f.mask is not None else "")
                     + ("*" if f.gating else "") + ("" if f.op == "test" else f" {f.op}")
                     for f in c.fields]
            parts += [f"g{g.vaddr:#x}/{g.size}" + ("*" if g.gating else "")
                      + ("" if g.op in ("cmp", "test") else f" {g.op}") for g in c.globals]
            parts += [f"call {x:#x}" for x in c.calls]
            what = " ".join(parts)
        name = f"  ({c.name})" if c.name else ""
        lines.append(f"{c.attribute:<5} {c.kind:<13} {what}{name}")
    if profile.proof is not None:
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shimgen.gates",
                                 description="Find libcuda's attribute gates.")
    ap.add_argument("driver", type=Path, help="path to libcuda.so.X.Y.Z")
    ap.add_argument("--json", type=Path, help="write the profile here (only if the proof passes)")
    ap.add_argument("--no-proof", action="store_true", help="skip the emulation proof")
    args = ap.parse_args(argv)
    try:
        profile = discover(args.driver)
    except GateDiscoveryError as e:
        print(f"shimgen gates: {e}", file=sys.stderr)
        return 2
    ok = True
    if not args.no_proof:
        from shimgen.emulate import prove

        result = prove(args.driver, profile)
        profile.proof = result.to_json()
        ok = result.ok
    print(format_table(profile))
    if not args.no_proof:
        print(result.summary())
    if not args.no_proof and not ok:
        print("shimgen gates: the emulation proof failed; no profile written", file=sys.stderr)
        return 1
    if args.json is not None:
        args.json.write_text(json.dumps(profile.to_json(), indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
