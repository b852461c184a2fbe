"""The mutation audit of one Python or C file: every operator mutation of it that a rule makes,
each run against the tests named; what no test fails on is a survivor, to be given a test
or said to be equivalent (docs/testing.md, "The mutation audit").

    python -m devtools.opmutate FILE [--list] [--lines A-B] [-j N] [--timeout S] -- TEST...

The rules, on the file's syntax tree (docstrings, strings and annotations are left alone):
a comparison's operator by its neighbour (`<` `<=`, `>` `>=`, `==` `!=`, `in` `not in`, `is`
`is not`), `and` by `or` and back, an arithmetic or bitwise operator by its counterpart
(`+` `-`, `*` `/`, `//` `*`, `%` `//`, `<<` `>>`, `&` `|`, `^` `&`, `**` `*`, the same in
`+=` and the like), `not` and unary `-` dropped, a whole number n by n + 1, `True` by `False`
and back, `break` by `continue` and back. Each mutation changes the file's text at the one
place only (the rest of the file byte for byte as it was), and is kept only when the result
parses. The repository's files are copied once to a scratch directory (as devtools/mutants.py
copies them; one copy per job with `-j`); each mutant is written there, its tests run with
`pytest -x -m ""`, and the file restored. A mutant is killed when the tests fail (or run
past the timeout), survived when they pass. Prints a line per survivor and the score; exit
status 0. `--list` prints the mutants without running anything, and their count.

A C file (`.c`, `.h`) takes the rules of devtools/opmutate_c.py instead; the scratch copy's
runtime file changes, so each test that builds a shim builds it again per mutant (its key
holds every source file's size and time): narrow `--lines` and quick tests keep a run short.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from devtools.mutants import ROOT, copy_repo
from devtools.opmutant import Mutant

COMPARE = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="),
           ast.GtE: (">=", ">"), ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="),
           ast.In: ("in", "not in"), ast.NotIn: ("not in", "in"), ast.Is: ("is", "is not"),
           ast.IsNot: ("is not", "is")}
BINARY = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "/"), ast.Div: ("/", "*"),
          ast.FloorDiv: ("//", "*"), ast.Mod: ("%", "//"), ast.LShift: ("<<", ">>"),
          ast.RShift: (">>", "<<"), ast.BitAnd: ("&", "|"), ast.BitOr: ("|", "&"),
          ast.BitXor: ("^", "&"), ast.Pow: ("**", "*")}
BOOL = {ast.And: ("and", "or"), ast.Or: ("or", "and")}


def _offsets(text: str) -> list[int]:
    out, at = [0], 0
    for line in text.splitlines(keepends=True):
        at += len(line.encode())
        out.append(at)
    return out


class _Finder(ast.NodeVisitor):
    def __init__(self, text: str) -> None:
        self.raw = text.encode()
        self.starts = _offsets(text)
        self.found: list[tuple[int, int, int, bytes, str]] = []  # line, start, end, new, what

    def at(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def start(self, n: ast.AST) -> int:
        return self.at(n.lineno, n.col_offset)

    def end(self, n: ast.AST) -> int:
        return self.at(n.end_lineno, n.end_col_offset)

    def between(self, line: int, lo: int, hi: int, old: str, new: str) -> None:
        """The operator `old`, alone (but for brackets and spaces) in [lo, hi), as `new`."""
        seg = self.raw[lo:hi].decode()
        core = " ".join(seg.replace("(", " ").replace(")", " ").replace("\\", " ").split())
        if core != old:
            return  # a comment or something else between the operands: left alone
        first = old.split()[0]
        i = seg.index(first)
        j = i + len(first) if " " not in old else seg.index(old.split()[-1], i) + len(
            old.split()[-1])
        self.found.append((line, lo + i, lo + j, new.encode(), f"{old} -> {new}"))

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(
                    getattr(body[0], "value", None), ast.Constant) and isinstance(
                    body[0].value.value, str):
                body = body[1:]  # the docstring
            for field, value in ast.iter_fields(node):
                if field in ("returns", "decorator_list"):
                    continue
                if field == "body":
                    value = body
                if field == "args":
                    continue  # annotations and defaults of parameters
                for v in value if isinstance(value, list) else [value]:
                    if isinstance(v, ast.AST):
                        self.visit(v)
            return
        if isinstance(node, (ast.AnnAssign,)):
            for v in (node.target, node.value):
                if v is not None:
                    self.visit(v)
            return
        super().generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        left = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            old, new = COMPARE[type(op)]
            self.between(node.lineno, self.end(left), self.start(right), old, new)
            left = right
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) in BINARY and not (isinstance(node.op, ast.Mod) and isinstance(
                node.left, (ast.Constant, ast.JoinedStr))):  # % formatting
            old, new = BINARY[type(node.op)]
            self.between(node.lineno, self.end(node.left), self.start(node.right), old, new)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if type(node.op) in BINARY:
            old, new = BINARY[type(node.op)]
            self.between(node.lineno, self.end(node.target), self.start(node.value),
                         old + "=", new + "=")
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        old, new = BOOL[type(node.op)]
        for a, b in zip(node.values, node.values[1:], strict=False):
            self.between(node.lineno, self.end(a), self.start(b), old, new)
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        token = {ast.Not: "not", ast.USub: "-"}.get(type(node.op))
        if token is not None:
            lo, hi = self.start(node), self.start(node.operand)
            seg = self.raw[lo:hi].decode()
            if seg.replace("(", " ").split() == [token]:
                i = seg.index(token)
                self.found.append((node.lineno, lo + i, lo + i + len(token), b"",
                                   f"{token} dropped"))
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        lo, hi = self.start(node), self.end(node)
        src = self.raw[lo:hi].decode()
        if isinstance(node.value, bool):
            new = "False" if node.value else "True"
            self.found.append((node.lineno, lo, hi, new.encode(), f"{src} -> {new}"))
        elif isinstance(node.value, int) and src.replace("_", "").isalnum():
            new = str(node.value + 1)
            self.found.append((node.lineno, lo, hi, new.encode(), f"{src} -> {new}"))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return  # a message's text and the values it shows are left alone

    def visit_Break(self, node: ast.Break) -> None:
        self.found.append((node.lineno, self.start(node), self.end(node), b"continue",
                           "break -> continue"))

    def visit_Continue(self, node: ast.Continue) -> None:
        self.found.append((node.lineno, self.start(node), self.end(node), b"break",
                           "continue -> break"))


def mutants(text: str) -> list[Mutant]:
    """Every mutant of `text` the rules make that parses, in the order of the text."""
    f = _Finder(text)
    f.visit(ast.parse(text))
    raw = text.encode()
    out = []
    for line, lo, hi, new, what in sorted(set(f.found), key=lambda x: (x[1], x[2], x[3])):
        mutated = (raw[:lo] + new + raw[hi:]).decode()
        try:
            ast.parse(mutated)
        except SyntaxError:
            continue
        # offsets in characters for Mutant.apply
        a, b = len(raw[:lo].decode()), len(raw[:hi].decode())
        out.append(Mutant(line, a, b, new.decode(), what))
    return out


def run_one(m: Mutant, rel: str, scratch: Path, tests: list[str], timeout: float) -> str:
    path = scratch / rel
    text = path.read_text()
    st = path.stat()
    path.write_text(m.apply(text))
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p",
                               "no:cacheprovider", "-n", "0", "-m", "", *tests], cwd=scratch,
                              capture_output=True, text=True, timeout=timeout)
        return "survived" if proc.returncode == 0 else "killed"
    except subprocess.TimeoutExpired:
        return "timeout"
    finally:
        path.write_text(text)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devtools.opmutate")
    p.add_argument("file")
    p.add_argument("--list", action="store_true")
    p.add_argument("--lines", help="only mutants on lines A-B")
    p.add_argument("-j", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300)
    argv = sys.argv[1:] if argv is None else argv
    tests = argv[argv.index("--") + 1:] if "--" in argv else []
    a = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    a.tests = tests
    rel = os.path.relpath(Path(a.file).resolve(), ROOT)
    text = (ROOT / rel).read_text()
    if rel.endswith((".c", ".h")):
        from devtools.opmutate_c import mutants as c_mutants
        found = c_mutants(text)
    else:
        found = mutants(text)
    if a.lines:
        lo, hi = map(int, a.lines.split("-"))
        found = [m for m in found if lo <= m.line <= hi]
    if a.list or not a.tests:
        for m in found:
            print(f"{rel}:{m.line}: {m.what}")
        print(f"{len(found)} mutants")
        return 0
    verdicts: dict[int, str] = {}
    todo = list(enumerate(found))
    lock = threading.Lock()

    def worker(scratch: Path) -> None:
        while True:
            with lock:
                if not todo:
                    return
                k, m = todo.pop(0)
            v = run_one(m, rel, scratch, a.tests, a.timeout)
            with lock:
                verdicts[k] = v
                if v == "survived":
                    shown = m.apply(text).splitlines()[m.line - 1].strip()
                    print(f"survived  {rel}:{m.line}: {m.what}: {shown}", flush=True)

    with tempfile.TemporaryDirectory(prefix="opmutate-") as tmp:
        scratches = []
        for i in range(max(1, a.j)):
            d = Path(tmp) / str(i)
            copy_repo(ROOT, d)
            scratches.append(d)
        threads = [threading.Thread(target=worker, args=(d,)) for d in scratches]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    killed = sum(v != "survived" for v in verdicts.values())
    print(f"{rel}: {killed} of {len(found)} mutants killed "
          f"({100 * killed / max(len(found), 1):.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
