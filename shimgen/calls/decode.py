"""Call records decoded after the fact, with the model of the prototypes (model.py): each
argument by its kind (integers, enums by name and flags as A|B, handles numbered per type
in order of first appearance, strings and structs as captured, pointers in hex), the
outputs of a successful call, the result by name. A function the headers do not know
gives its six argument registers in hex. Nothing is dropped for want of a prototype.

A record is the tuple records.py reads; each function's decoding is worked out once (a list
of argument specs), so that a million records decode in seconds."""

from __future__ import annotations

from .. import runenv
from ..cuda import result_name, returns_result
from .model import POINTED, SLOTS, _scalar, prototype
from .records import ARGS, CAPTURE, IDX, RESULT, STATE

RETURNED = 2
# The handles dict's entry of the kernels' names (report/calls.py fills it from the trace
# file's kernel table): a CUfunction or CUkernel handle shown by its kernel's name.
NAMED = ("#kernels",)
KERNEL_HANDLES = ("func", "kernel")
UNREAD = ARGS + runenv.CALLS_UNREAD_WORD  # which captures were not read (runtime/arch/layout.h)


def unread_of(r, bit: int) -> tuple[str, str] | None:
    """(JSON key, text word) of a capture the record says was not read: its address could
    not be read ("unreadable"), or the process died while its arguments were being read
    ("not read"); None when it was read."""
    mask = r[UNREAD]
    if mask == runenv.CALLS_UNREAD_TAKING:
        return "not_read", "not read"
    return ("unreadable", "unreadable") if mask >> bit & 1 else None


def unread_value(why: tuple[str, str], raw: int) -> tuple[dict, str]:
    """(JSON value, text) of a capture not read, at address raw: {"unreadable": 16} and
    `<unreadable 0x10>`."""
    return {why[0]: raw}, f"<{why[1]} {raw:#x}>"


def _hex(v: int) -> str:
    return f"{v:#x}" if v else "NULL"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class Decoder:
    """Decodes the calls of one driver's function table (names in slot order)."""

    def __init__(self, desc: dict | None, names: list[str]):
        self.desc = desc
        self.names = names
        self.protos = [prototype(desc, n) if desc else None for n in names]
        self.enums = {k: {int(v): n for v, n in vals.items()}
                      for k, vals in (desc["enums"] if desc else {}).items()}
        self.structs = desc["structs"] if desc else {}
        self.results = [p.returns_result if p else returns_result(n)
                        for n, p in zip(names, self.protos, strict=True)]
        self._texters: dict = {}
        self._names: dict = {}
        # per function, each captured argument's bit in the record's unread word
        self.bits = [{a.name: k for k, a in enumerate(x for x in p.args if x.capture)}
                     if p else {} for p in self.protos]
        self.handled = [bool(p) and any(a.kind == "handle" or (a.pointee or {}).get(
            "kind") == "handle" for a in p.args) for p in self.protos]

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
                n = handles[key] = handles.get(info, 0) + 1
                handles[info] = n
            named = handles[NAMED].get(raw) if (info in KERNEL_HANDLES
                                                 and NAMED in handles) else None
            return f"{info}#{n}", named or f"{info}#{n}"
        return raw, (f"{raw:#x}" if raw or kind == "addr" else "NULL")

    def kernel_handle(self, r) -> int | None:
        """The raw CUfunction (or CUkernel) a record's function is given, None when it takes
        none (a launch's kernel, for its JSON's `kernel`)."""
        p = self.protos[r[IDX]]
        for a in (p.args if p else ()):
            if a.kind == "handle" and a.info in KERNEL_HANDLES and a.slot is not None \
                    and a.slot < SLOTS:
                return r[ARGS + a.slot]
        return None

    def enum_text(self, enum: str, v: int) -> str:
        names = self.enums.get(enum, {})
        name = names.get(v)
        if name is not None:
            return name
        if "flag" in enum.lower() and v:
            parts, left = [], v
            for value, n in sorted(names.items(), reverse=True):
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
    def ok(self, r) -> bool:
        return r[STATE] == RETURNED and r[RESULT] & 0xFFFFFFFF == 0

    def failed(self, r) -> bool:
        """A call that returned a failure (a non-zero CUresult)."""
        return r[STATE] == RETURNED and self.results[r[IDX]] and r[RESULT] & 0xFFFFFFFF != 0

    def decode(self, r, handles: dict) -> tuple[list, list]:
        """([(name, JSON value, text, is an address)] of the arguments, the same of the
        outputs of a successful call)."""
        p = self.protos[r[IDX]]
        if p is None:
            return [(f"arg{i}", r[ARGS + i], f"{r[ARGS + i]:#x}", r[ARGS + i] >> 32 != 0)
                    for i in range(6)], []
        args, outs = [], []
        ok = self.ok(r)
        cap = r[CAPTURE]
        bits = self.bits[r[IDX]]
        for a in p.args:
            if a.slot is None or a.slot >= SLOTS:
                args.append((a.name, None, "?", False))
                continue
            raw = r[ARGS + a.slot]
            why = unread_of(r, bits[a.name]) if a.capture and raw else None
            if a.kind in ("string", "struct") and why:
                args.append((a.name, *unread_value(why, raw), False))
                continue
            if a.kind in ("string", "struct") and a.capture and raw:
                _, size, off = a.capture
                data = cap[off:off + size]
                if a.kind == "string":
                    text = data.split(b"\0")[0].decode("utf-8", "replace")
                    args.append((a.name, text, _quote(text), False))
                else:
                    v, t = self.struct_value(a.info, data, handles)
                    args.append((a.name, v, t, False))
                continue
            if a.kind in ("string", "struct", "out", "outstr", "ptr"):
                args.append((a.name, raw, _hex(raw), True))
                if ok and a.capture and raw:
                    outs.append((a.name, *unread_value(why, raw), False) if why
                                else self._output(a, cap, handles))
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
        if pk.get("kind") in POINTED:
            v, t = self.pointed(pk["kind"], data)
            return a.name, v, t, False
        raw = int.from_bytes(data, "little")
        v, t = self.value(pk.get("kind", "addr"), pk.get("info", ""), raw, size, handles)
        return a.name, v, t, pk.get("kind", "addr") == "addr"

    def pointed(self, kind: str, data: bytes) -> tuple:
        """(JSON value, text) of a pointer the driver wrote (model.POINTED): the string it
        points to (NULL: None), or the name of the shim's export it is (`cuMemAlloc_v2`;
        the pointer in hex when it is none of them)."""
        p = int.from_bytes(data[:8], "little")
        if kind == "function":
            slot = int.from_bytes(data[8:12], "little")
            if 0 < slot <= len(self.names):
                return self.names[slot - 1], self.names[slot - 1]
            return p, (f"{p:#x}" if p else "NULL")
        if not p:
            return None, "NULL"
        text = data[8:].split(b"\0")[0].decode("utf-8", "replace")
        return text, _quote(text)

    def result(self, r) -> tuple[int | None, str]:
        if r[STATE] != RETURNED:
            return None, "?"
        if self.results[r[IDX]]:
            code = r[RESULT] & 0xFFFFFFFF
            return code, result_name(code)
        return r[RESULT], f"{r[RESULT]:#x}"

    def text(self, r, handles: dict) -> str:
        """`name(arg=value, ...) = RESULT {output=value}`: each function's converters made
        once (_texter), the same text as decode() gives."""
        return self.texter(r[IDX])(r, handles)

    def texter(self, idx: int):
        """The function (record, handles) -> text of the function of slot idx, made once."""
        f = self._texters.get(idx)
        if f is None:
            f = self._texters[idx] = self._texter(idx)
        return f

    def _rname(self, r) -> str:
        """The result as text, each code's name found once."""
        if r[STATE] != RETURNED:
            return "?"
        if not self.results[r[IDX]]:
            return f"{r[RESULT]:#x}"
        code = r[RESULT] & 0xFFFFFFFF
        name = self._names.get(code)
        if name is None:
            name = self._names[code] = result_name(code)
        return name

    def _texter(self, idx: int):
        p, name = self.protos[idx], self.names[idx]
        rname = self._rname
        if p is None:
            def unknown(r, handles):
                return (f"{name}({r[ARGS]:#x}, {r[ARGS + 1]:#x}, {r[ARGS + 2]:#x}, "
                        f"{r[ARGS + 3]:#x}, {r[ARGS + 4]:#x}, {r[ARGS + 5]:#x}) = "
                        f"{rname(r)}")
            return unknown
        bits = self.bits[idx]
        outs = [(ARGS + a.slot, self._out_conv(a), bits[a.name], a.name) for a in p.args
                if a.capture and a.kind in ("out", "outstr")]
        # One function per prototype, its text a single f-string: the integers, addresses,
        # pointers and enums inline, every other argument through its converter (_conv).
        env = {"rname": rname, "outs": outs, "STATE": STATE, "RETURNED": RETURNED,
               "RESULT": RESULT, "CAPTURE": CAPTURE, "enum_text": self.enum_text,
               "unread_of": unread_of, "unread_value": unread_value}
        parts = [self._piece(a, i, env) for i, a in enumerate(p.args)]
        env["NAME"], env["RN"] = name, self._names
        result = "{rname(r)}"
        if self.results[idx]:  # a CUresult: its name, found once (_rname), looked up inline
            result = ("{(RN[c] if (c := r[RESULT] & 0xFFFFFFFF) in RN else rname(r)) "
                      "if r[STATE] == RETURNED else '?'}")
        src = ("def known(r, handles):\n"
               f"    text = f\"{{NAME}}({', '.join(parts)}) = {result}\"\n"
               "    if outs and r[STATE] == RETURNED and not r[RESULT] & 0xFFFFFFFF:\n"
               "        got = [f'{n}={unread_value(w, r[s])[1]}' if (w := unread_of(r, b))\n"
               "               else c(r[CAPTURE], handles) for s, c, b, n in outs if r[s]]\n"
               "        if got:\n"
               "            text += ' {' + ', '.join(got) + '}'\n"
               "    return text\n")
        exec(compile(src, f"<decoder of {name}>", "exec"), env)  # noqa: S102 (our own text)
        return env["known"]

    def _piece(self, a, i: int, env: dict) -> str:
        """The f-string piece of argument `a` (the i-th): `name={expression}`, the same text
        as its converter (_conv) gives."""
        s = ARGS + a.slot if a.slot is not None and a.slot < SLOTS else None
        simple_int = a.kind in ("int", "uint")
        if s is not None and simple_int:
            bits = 8 * (a.size or 8)
            mask, top = (1 << bits) - 1, 1 << (bits - 1)
            if a.kind == "uint":
                return f"{a.name}={{r[{s}] & {mask}}}"
            return f"{a.name}={{(r[{s}] & {mask}) - ((r[{s}] & {top}) << 1)}}"
        if s is not None and a.kind == "addr":
            return f"{a.name}={{r[{s}]:#x}}"
        if s is not None and (a.kind in ("out", "outstr", "ptr") or (
                a.kind in ("string", "struct") and not a.capture)):
            return f"{a.name}={{format(r[{s}], '#x') if r[{s}] else 'NULL'}}"
        if s is not None and a.kind == "enum":
            env[f"N{i}"], env[f"I{i}"] = self.enums.get(a.info, {}), a.info
            return (f"{a.name}={{N{i}[v] if (v := r[{s}] & 0xFFFFFFFF) in N{i} "
                    f"else enum_text(I{i}, v)}}")
        env[f"C{i}"] = self._conv(a)
        return f"{{C{i}(r, handles)}}"

    def _out_conv(self, a):
        """A function (capture bytes, handles) -> "name=text" of one output (an `out` or an
        `outstr`: only an `out` has a pointee kind)."""
        label, (_, size, off) = a.name + "=", a.capture
        pk = a.pointee or {}
        kind = pk.get("kind")
        end = off + size
        if kind in ("int", "uint"):
            signed = kind == "int"
            return lambda cap, h: label + str(int.from_bytes(cap[off:end], "little",
                                                             signed=signed))
        if kind == "addr":
            return lambda cap, h: f"{label}{int.from_bytes(cap[off:end], 'little'):#x}"
        if kind == "enum":
            names, enum_text, info = self.enums.get(pk["info"], {}), self.enum_text, pk["info"]

            def enum(cap, h):
                v = int.from_bytes(cap[off:end], "little") & 0xFFFFFFFF
                n = names.get(v)
                return label + (n if n is not None else enum_text(info, v))
            return enum
        output = self._output
        return lambda cap, h: label + output(a, cap, h)[2]

    def _conv(self, a):
        """A function (record, handles) -> "name=text" of an argument _piece does not write
        inline (a handle, a captured string or struct, one without a word in the record):
        its text as decode() gives it."""
        label, dec = a.name + "=", self.decode

        def general(r, h, a=a):
            return label + next(t for n, _, t, _ in dec(r, h)[0] if n == a.name)
        return general
