"""The house rules, checked on the code as it stands: the tests are one package (their
shared helpers imported by their whole name, `from tests.faultkit import ...`); shimgen/ is a
few shared modules and a package per command or concern, each package entered by its face
(its __init__.py) alone, with no circle of imports, no file over 400 lines (every line of it,
comments included; a table of data that says so in its first line excepted) and no function
over 60 lines (docs/design.md, "Layout")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIMGEN = ROOT / "shimgen"
MAX_TOP_MODULES = 12
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def test_the_tests_are_one_package():
    text = (ROOT / "pyproject.toml").read_text()  # tomllib is Python 3.11's
    listed = re.search(r"^pythonpath = \[(.*?)\]", text, re.M | re.S).group(1)
    assert re.findall(r'"([^"]+)"', listed) == ["."]
    folders = [d for d in (ROOT / "tests").iterdir() if d.is_dir() and any(d.glob("test_*.py"))]
    assert folders
    for d in [ROOT / "tests", *folders]:
        assert (d / "__init__.py").is_file(), f"{d} is no package"
    assert not list((ROOT / "tests").glob("test_*.py")), "tests live in the folders"


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(SHIMGEN.rglob("*.py")):
        parts = p.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


MODULES = _modules()
PACKAGES = {m for m, p in MODULES.items() if p.name == "__init__.py" and m != "shimgen"}


def _face_table(package: str) -> dict[str, str]:
    """The package's face as written: name -> "module", "module:attribute" or "module:"
    (shimgen.face's table); empty for a package without one."""
    tree = ast.parse(MODULES[package].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "face":
            return ast.literal_eval(node.args[1])
    return {}


def _face(package: str) -> dict[str, str]:
    """The package's face: name -> the inner module it comes from."""
    return {k: f"{package}.{v.partition(':')[0]}" for k, v in _face_table(package).items()}


FACES = {p: _face(p) for p in PACKAGES}


def _imports(module: str) -> list[tuple[str, str | None, int]]:
    """(module imported, name taken from it or None, line) for each import of shimgen's."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out += [(target, a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names]
    return [i for i in out if i[0].split(".")[0] == "shimgen"]


def _edges(module: str) -> list[tuple[str, int]]:
    """The modules `module` depends on: a name taken through a face counts as its module."""
    edges = []
    for target, name, line in _imports(module):
        if name and f"{target}.{name}" in MODULES:
            edges.append((f"{target}.{name}", line))
        elif name and name in FACES.get(target, {}):
            edges.append((FACES[target][name], line))
        elif target in MODULES:
            edges.append((target, line))
    return edges


def _package_of(module: str) -> str:
    """The package `module` lies in (shimgen for the shared modules at the top)."""
    return module if module in PACKAGES else module.rpartition(".")[0]


def test_few_shared_modules_at_the_top():
    top = sorted(p.name for p in SHIMGEN.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_a_package_is_entered_by_its_face_alone():
    """No module takes a package's inner module or one of its names but through the
    package's face (tests and tools may reach inside: they test the parts)."""
    wrong = []
    for module in MODULES:
        mine = _package_of(module)
        for target, name, line in _imports(module):
            if name in FACES.get(target, {}):
                continue  # through the face (a module it hands on too)
            inner = f"{target}.{name}" if name and f"{target}.{name}" in MODULES else target
            owner = _package_of(inner) if inner in MODULES else None
            if owner in PACKAGES and inner != owner and not (mine + ".").startswith(owner + "."):
                wrong.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {inner}")
    assert not wrong, wrong


def test_a_face_never_names_another_inner_module():
    """A face's name that is also an inner module's would be shadowed by that module once
    Python imports it (a package's attribute is set to each submodule)."""
    for package, face in FACES.items():
        for name, module in face.items():
            if f"{package}.{name}" in MODULES:
                assert module == f"{package}.{name}", (package, name, module)


def _defines(module: str, name: str) -> bool:
    """Whether `module` defines `name` at its top level (a def, a class or an assignment),
    not merely imports it."""
    for node in ast.parse(MODULES[module].read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return True
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names = t.elts if isinstance(t, ast.Tuple) else [t]
                if any(isinstance(n, ast.Name) and n.id == name for n in names):
                    return True
    return False


def test_a_face_names_the_module_that_defines_each_name():
    """Not one that merely imports it: taking the name would then import that module and
    all it brings (the light driver/notes.py's read_build_id through the heavy elf.py)."""
    wrong = []
    for package in FACES:
        for name, where in _face_table(package).items():
            module, colon, attr = where.partition(":")
            if colon and not attr:
                continue  # the module itself
            if not _defines(f"{package}.{module}", attr or name):
                wrong.append(f"{package}: {name} -> {where}")
    assert not wrong, wrong


def test_no_circle_of_imports():
    graph = {m: {t for t, _ in _edges(m) if t != m} for m in MODULES}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                raise AssertionError(" -> ".join(path[path.index(t):] + [m, t]))
            if t not in state:
                visit(t, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


DATA_TABLE = "a table of data"  # in a file's first line: it may be longer (docs/design.md)


def too_long(text: str) -> int | None:
    """The lines of a file over the limit (every line: code, comments, docstrings and blank
    lines alike), or None when within it or when its first line says it is a table of data."""
    lines = text.splitlines()
    if len(lines) <= MAX_FILE_LINES or DATA_TABLE in (lines[0].lower() if lines else ""):
        return None
    return len(lines)


def test_the_limit_counts_every_line_and_excepts_a_table_that_says_so():
    code = ["x = 1"] * 300
    assert too_long("\n".join(code + ["# a comment"] * 101)) == 401
    assert too_long("\n".join(code + [""] * 50 + ['"""', *["text"] * 50, '"""'])) == 402
    assert too_long("\n".join(code + ["# a comment"] * 100)) is None
    table = ['"""A table of data: the codes."""', *["    1: 'ONE',"] * 500]
    assert too_long("\n".join(table)) is None
    assert too_long("\n".join(["# the codes", *table])) == 502  # said after the first line


def test_no_file_over_400_lines_nor_function_over_60_lines():
    long = []
    for path in MODULES.values():
        text = path.read_text()
        n = too_long(text)
        if n is not None:
            long.append(f"{path.relative_to(ROOT)}: {n} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert not long, long


def test_the_mutation_check_runs_the_tests_of_the_second_tier(tmp_path):
    """An entry of devtools/mutations.py may name a test of tests/tiers.py: the check's
    pytest runs it all the same (the default run's `-m 'not slow'` would deselect it, and
    the entry would be reported broken)."""
    from devtools.mutants import pytest as mutants_pytest
    from tests.tiers import SLOW

    slow = sorted(SLOW)[0]
    proc = mutants_pytest([slow], ROOT, 120, "--collect-only")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert re.search(r"^1 tests? collected", proc.stdout, re.M), proc.stdout[-2000:]


# The C runtime (docs/design.md, "The runtime by concern"): folders by concern, each with one
# face, the only header another folder includes; arch/ has three (entry.h, cpu.h, layout.h).
RUNTIME = ROOT / "runtime"
RUNTIME_FACES = {"base": {"base.h"}, "output": {"output.h"}, "tracefile": {"tracefile.h"},
                 "gates": {"gates.h"}, "stats": {"stats.h"}, "memory": {"memory.h"},
                 "budget": {"budget.h", "view.h"},
                 "kernels": {"kernels.h"}, "hooks": {"hooks.h"}, "load": {"load.h"},
                 "arch": {"entry.h", "cpu.h", "layout.h"}, "nvml": {"nvml.h"}}
C_SUFFIXES = (".c", ".h", ".S")
# Files still over the limits, each to be split (docs/design.md, "Files over 400 lines,
# functions over 60"): the test fails once one is within them, so the list stays true.
C_SPLITS_PENDING: set[str] = set()
C_FUNCTION = re.compile(r"^[a-zA-Z_][^;{}()]*\b(\w+)\([^;{}]*\)\s*\n\{\n(?:.*\n)*?\}\n",
                        re.M)


def _runtime_files() -> list[Path]:
    return sorted(p for p in RUNTIME.rglob("*") if p.suffix in C_SUFFIXES)


def test_no_runtime_source_at_the_top():
    assert sorted(p.name for p in RUNTIME.iterdir() if p.is_file()) == []
    assert {p.name for p in RUNTIME.iterdir() if p.is_dir()} == set(RUNTIME_FACES)


def test_a_runtime_folder_includes_only_other_folders_faces():
    wrong = []
    for path in _runtime_files():
        folder = path.relative_to(RUNTIME).parts[0]
        for m in re.finditer(r'^#include "(\w+)/([\w.]+)"', path.read_text(), re.M):
            other, header = m.groups()
            if other in RUNTIME_FACES and other != folder and header not in RUNTIME_FACES[other]:
                wrong.append(f"{path.relative_to(ROOT)}: {other}/{header}")
    assert not wrong, wrong


def test_no_architecture_test_outside_runtime_arch():
    tests = [str(p.relative_to(ROOT)) for p in _runtime_files()
             if p.relative_to(RUNTIME).parts[0] != "arch"
             and re.search(r"__(x86_64|aarch64)__", p.read_text())]
    assert not tests, tests


def test_no_runtime_file_over_400_lines_nor_function_over_60_lines():
    long, short = [], []
    for path in _runtime_files():
        name = path.relative_to(RUNTIME).as_posix()
        text = path.read_text()
        over = too_long(text) is not None
        if path.suffix == ".c":
            over |= any(m.group(0).count("\n") > MAX_FUNCTION_LINES
                        for m in C_FUNCTION.finditer(text))
        if over and name not in C_SPLITS_PENDING:
            long.append(name)
        if not over and name in C_SPLITS_PENDING:
            short.append(name)
    assert not long, f"over the limits: {long}"
    assert not short, f"within the limits now, no longer pending: {short}"
