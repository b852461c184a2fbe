"""Call records decoded after the fact, with the model of the prototypes (model.py): each
argument by its kind (integers, enums by name and flags as A|B, handles numbered per type
in order of first appearance, strings and structs as captured, pointers in hex), the
outputs of a successful call, the result by name. A function the headers do not know
gives its six argument registers in hex. Nothing is dropped for want of a prototype."""

from __future__ import annotations

from ..cuda import result_name, returns_result
from .model import SLOTS, _scalar, prototype

HEX_KINDS = ("addr", "ptr", "out", "string", "struct", "outstr")


class Decoder:
    """Decodes the calls of one driver's function table (names in slot order)."""

    def __init__(self, desc: dict | None, names: list[str]):
        self.desc = desc
        self.names = names
        self.protos = [prototype(desc, n) if desc else None for n in names]
        self.enums = desc["enums"] if desc else {}
        self.structs = desc["structs"] if desc else {}

    # ---- one value --------------------------------------------------------------------------
    def value(self, kind: str, info: str, raw: int, size: int, handles: dict):
        """(JSON value, text) of a raw word of this kind."""
        if kind in ("int", "uint"):
            bits = 8 * (size or 8)
            v = raw & ((1 << bits) - 1)
            if kind == "int" and v >> (bits - 1):
                v -= 1 << bits
            return v, str(v)
        if kind == "enum":
            v = raw & 0xFFFFFFFF
            text = self.enum_text(info, v)
            return (text if not text[0].isdigit() else v), text
        if kind == "handle":
            if raw == 0:
                return None, "NULL"
            key = (info, raw)
            n = handles.get(key)
            if n is None:
                n = handles[key] = sum(1 for t, _ in handles if t == info) + 1
            return f"{info}#{n}", f"{info}#{n}"
        return raw, (f"{raw:#x}" if raw else "NULL" if kind != "addr" else "0x0")

    def enum_text(self, enum: str, v: int) -> str:
        names = self.enums.get(enum, {})
        name = names.get(str(v))
        if name is not None:
            return name
        if "flag" in enum.lower() and v:
            parts, left = [], v
            for value, n in sorted(((int(k), n) for k, n in names.items()), reverse=True):
                if value > 0 and value & (value - 1) == 0 and left & value:
                    parts.append(n)
                    left &= ~value
            if parts:
                return "|".join(reversed(parts)) + (f"|{left:#x}" if left else "")
        return str(v)

    def struct_value(self, name: str, data: bytes, handles: dict) -> tuple[dict, str]:
        s = self.structs.get(name)
        out = {}
        for fname, off, size, d in (s["fields"] if s else []):
            kind, info, _ = _scalar(d)
            if kind == "other" or off + size > len(data) or size > 8:
                continue
            raw = int.from_bytes(data[off:off + size], "little")
            out[fname] = self.value(kind, info, raw, size, handles)
        return ({k: v for k, (v, _) in out.items()},
                "{" + ", ".join(f"{k}={t}" for k, (_, t) in out.items()) + "}")

    # ---- one call ---------------------------------------------------------------------------
    def decode(self, call, handles: dict) -> tuple[list, list]:
        """([(name, JSON value, text, is an address)] of the arguments, the same of the
        outputs of a successful call)."""
        p = self.protos[call.idx] if call.idx < len(self.protos) else None
        if p is None:
            return [(f"arg{i}", call.args[i], f"{call.args[i]:#x}", call.args[i] >> 32 != 0)
                    for i in range(6)], []
        args, outs = [], []
        ok = call.state == 2 and call.result & 0xFFFFFFFF == 0
        for a in p.args:
            if a.slot is None or a.slot >= SLOTS:
                args.append((a.name, None, "?", False))
                continue
            raw = call.args[a.slot]
            if a.kind in ("string", "struct") and a.capture and raw:
                _, size, off = a.capture
                data = call.capture[off:off + size]
                if a.kind == "string":
                    text = data.split(b"\0")[0].decode("utf-8", "replace")
                    args.append((a.name, text, _quote(text), False))
                else:
                    v, t = self.struct_value(a.info, data, handles)
                    args.append((a.name, v, t, False))
                continue
            if a.kind in ("string", "struct", "out", "outstr", "ptr"):
                args.append((a.name, raw, f"{raw:#x}" if raw else "NULL", True))
                if ok and a.capture and raw:
                    outs.append(self._output(a, call.capture, handles))
                continue
            v, t = self.value(a.kind, a.info, raw, a.size, handles)
            args.append((a.name, v, t, a.kind == "addr"))
        return args, outs

    def _output(self, a, capture: bytes, handles: dict):
        _, size, off = a.capture
        data = capture[off:off + size]
        if a.kind == "outstr":
            text = data.split(b"\0")[0].decode("utf-8", "replace")
            return a.name, text, _quote(text), False
        pk = a.pointee or {}
        if pk.get("kind") == "struct":
            v, t = self.struct_value(pk["info"], data, handles)
            return a.name, v, t, False
        raw = int.from_bytes(data, "little")
        v, t = self.value(pk.get("kind", "addr"), pk.get("info", ""), raw, size, handles)
        return a.name, v, t, pk.get("kind", "addr") == "addr"

    def result(self, call) -> tuple[int | None, str]:
        if call.state != 2:
            return None, "?"
        p = self.protos[call.idx] if call.idx < len(self.protos) else None
        if (p.returns_result if p else returns_result(call.name)):
            code = call.result & 0xFFFFFFFF
            return code, result_name(code)
        return call.result, f"{call.result:#x}"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
