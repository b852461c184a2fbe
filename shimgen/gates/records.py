"""The JSON form of the gate profile's records, derived from their dataclass fields: a
field's metadata says how an integer is written ("hex": a string like 0x1f; "signed": any
integer; otherwise a non-negative integer), whether it may be left out ("optional") and
under which key, when it is not the field's name ("key"). Reading checks every value and
names the first one that is wrong, as `profile: <where> ...` (GateDiscoveryError). Also the
two records all others are made of, an instruction (InsnRef) and a byte change (ByteChange):
profile.py and p2p_profile.py both build on them."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from .facts import GateDiscoveryError


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


# The two records every other is made of: an instruction of the driver and a byte of it.

def _hex(**more: Any) -> Any:
    return field(metadata={"json": "hex", **more})


@dataclass(frozen=True)
class InsnRef:
    """One instruction of the driver, as it must appear in the loaded image."""

    vaddr: int = _hex()
    file_offset: int = _hex()
    hex: str = field(metadata={"key": "bytes", "json": "bytes"})
    text: str


@dataclass(frozen=True)
class ByteChange:
    """One byte of the driver's code, as shipped (``old``) and as patched (``new``)."""

    vaddr: int = _hex()
    file_offset: int = _hex()
    old: int = _hex()
    new: int = _hex()
