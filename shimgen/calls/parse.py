"""The preprocessed headers parsed by pycparser into a plain description (JSON-ready):
each function's arguments with their types resolved for x86-64, each enum's names by
value, each struct's size and fields. Every type is described as a small dict:
{"k": "int", "size", "signed"}, {"k": "enum", "name"}, {"k": "float"}, {"k": "void"},
{"k": "struct", "name"}, {"k": "ptr", "to", "const"}, {"k": "func"}, with "typedef" the
outermost typedef name where there is one (CUcontext, CUdeviceptr)."""

from __future__ import annotations

import re

_INTS = {"char": 1, "short": 2, "int": 4, "long": 8, "_Bool": 1}
_FLOATS = {"float": 4, "double": 8}
_PFN = re.compile(r"^PFN_(\w+?)_v\d+(_ptds|_ptsz)?$")


class _Types:
    def __init__(self, ast):
        from pycparser import c_ast

        self.c = c_ast
        self.typedefs, self.enums, self.structs, self.enum_of = {}, {}, {}, {}
        self.struct_nodes = {}
        for e in ast.ext:
            self._collect(e)

    def _collect(self, e):
        c = self.c
        if isinstance(e, c.Typedef):
            self.typedefs[e.name] = e.type
        for node in self._walk(e):
            if isinstance(node, c.Enum) and node.values is not None:
                self._enum(node)
            elif isinstance(node, (c.Struct, c.Union)) and node.decls is not None and node.name:
                self.struct_nodes[node.name] = node

    def _walk(self, n):
        yield n
        for _, child in n.children():
            yield from self._walk(child)

    def _enum(self, node):
        values, v = {}, -1
        for en in node.values.enumerators:
            try:
                v = self.const(en.value) if en.value is not None else v + 1
            except (KeyError, ValueError, TypeError):
                continue  # a value not worked out here (sizeof) is not printed by name
            values.setdefault(v, en.name)
            self.enum_of[en.name] = v
        self.enums[node.name or f"anon{len(self.enums)}"] = values

    def const(self, n) -> int:
        c = self.c
        if isinstance(n, c.Constant):
            return int(n.value.rstrip("uUlL"), 0)
        if isinstance(n, c.ID):
            return self.enum_of[n.name]
        if isinstance(n, c.UnaryOp) and n.op == "sizeof" and isinstance(n.expr, c.Typename):
            return self.layout(self._field(n.expr.type))[0]
        if isinstance(n, c.UnaryOp):
            v = self.const(n.expr)
            return {"-": -v, "~": ~v, "+": v}[n.op]
        if isinstance(n, c.BinaryOp):
            a, b = self.const(n.left), self.const(n.right)
            return {"<<": a << b, ">>": a >> b, "|": a | b, "&": a & b, "+": a + b,
                    "-": a - b, "*": a * b}[n.op]
        if isinstance(n, c.Cast):
            return self.const(n.expr)
        raise ValueError(f"constant {type(n).__name__}")

    def describe(self, t, typedef=None) -> dict:
        c = self.c
        if isinstance(t, c.TypeDecl):
            d = self._base(t.type)
            if typedef and "typedef" not in d:
                d = dict(d, typedef=typedef)
            return d
        if isinstance(t, c.PtrDecl):
            to = t.type
            const = isinstance(to, c.TypeDecl) and "const" in to.quals
            return {"k": "ptr", "to": self.describe(to), "const": const,
                    **({"typedef": typedef} if typedef else {})}
        if isinstance(t, c.ArrayDecl):
            return {"k": "ptr", "to": self.describe(t.type), "const": False}
        return {"k": "func"}


    def _base(self, b) -> dict:
        c = self.c
        if isinstance(b, c.IdentifierType):
            names = b.names
            if len(names) == 1 and names[0] in self.typedefs:
                return self.describe(self.typedefs[names[0]], typedef=names[0])
            if names == ["void"]:
                return {"k": "void"}
            if any(n in _FLOATS for n in names):
                return {"k": "float"}
            size = 8 if names.count("long") else max((_INTS.get(n, 4) for n in names), default=4)
            return {"k": "int", "size": size, "signed": "unsigned" not in names}
        if isinstance(b, c.Enum):
            return {"k": "enum", "name": b.name or ""}
        if isinstance(b, (c.Struct, c.Union)):
            return {"k": "struct", "name": b.name or ""}
        return {"k": "func"}

    def layout(self, d) -> tuple[int, int]:
        """(size, alignment) of a described type on x86-64."""
        k = d["k"]
        if k in ("ptr", "func"):
            return 8, 8
        if k == "int":
            return d["size"], d["size"]
        if k == "enum":
            return 4, 4
        if k == "float":
            return 8, 8
        if k == "struct":
            s = self.struct(d["name"])
            return (s["size"], s["align"]) if s else (0, 1)
        if k == "array":
            size, align = self.layout(d["of"])
            return size * d["n"], align
        return 0, 1

    def _field(self, t) -> dict:
        c = self.c
        if isinstance(t, c.ArrayDecl):
            n = self.const(t.dim) if t.dim is not None else 0
            return {"k": "array", "of": self._field(t.type), "n": n}
        if isinstance(t, c.TypeDecl) and isinstance(t.type, (c.Struct, c.Union)) \
                and t.type.decls is not None and not t.type.name:
            name = f"anon{id(t.type)}"
            self.struct_nodes[name] = t.type
            return {"k": "struct", "name": name}
        return self.describe(t)

    def struct(self, name):
        if name in self.structs:
            return self.structs[name]
        node = self.struct_nodes.get(name)
        if node is None:
            return None
        self.structs[name] = None  # a recursive struct is no known struct
        union = isinstance(node, self.c.Union)
        off = size = 0
        align, fields = 1, []
        for decl in node.decls:
            d = self._field(decl.type)
            fs, fa = self.layout(d)
            if fs == 0:
                return None
            at = 0 if union else (off + fa - 1) // fa * fa
            fields.append([decl.name or "", at, fs, d])
            off = max(off, at + fs) if union else at + fs
            align = max(align, fa)
        size = (max(off, size) + align - 1) // align * align
        self.structs[name] = {"size": size, "align": align, "fields": fields}
        return self.structs[name]


def _function(types: _Types, fdecl) -> dict:
    c = types.c
    args, varargs = [], False
    for p in (fdecl.args.params if fdecl.args else []):
        if isinstance(p, c.EllipsisParam):
            varargs = True
            break
        d = types.describe(p.type)
        if d["k"] == "void" and not getattr(p, "name", None):
            continue
        args.append([p.name or f"arg{len(args)}", d])
    out = {"args": args, "ret": types.describe(fdecl.type)}
    if varargs:  # (the timing entry keeps rax for it: model.timing_kind)
        out["varargs"] = True
    return out


def parse_declarations(text: str) -> dict:
    from pycparser import CParser, c_ast

    ast = CParser().parse(text)
    types = _Types(ast)
    functions, pfns = {}, {}
    for e in ast.ext:
        if isinstance(e, c_ast.Decl) and isinstance(e.type, c_ast.FuncDecl):
            functions[e.name] = _function(types, e.type)
        elif isinstance(e, c_ast.Typedef) and isinstance(e.type, c_ast.PtrDecl) \
                and isinstance(e.type.type, c_ast.FuncDecl):
            m = _PFN.match(e.name)
            if m:
                pfns[e.name[4:]] = _function(types, e.type.type)
    structs = {}
    for fn in list(functions.values()) + list(pfns.values()):
        for _, d in fn["args"]:
            to = d.get("to") or {}
            if to.get("k") == "struct" and to["name"] and types.struct(to["name"]):
                _keep_struct(types, to["name"], structs)
    return {"functions": functions, "pfn": pfns,
            "enums": {k: {str(v): n for v, n in vals.items()} for k, vals in types.enums.items()},
            "structs": structs}


def _keep_struct(types: _Types, name: str, out: dict) -> None:
    if name in out or not types.struct(name):
        return
    s = types.struct(name)
    out[name] = s
    for _, _, _, d in s["fields"]:
        while d["k"] == "array":
            d = d["of"]
        if d["k"] == "struct":
            _keep_struct(types, d["name"], out)
