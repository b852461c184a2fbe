"""The instructions a forwarded call runs in a built shim's entry code, counted from its
disassembly (capstone), for either architecture: no hardware needed, no timing noise.

    python -m benchmarks.entrycode SHIM [FUNCTION]

- passthrough: the exported trampoline, up to its indirect branch (SHIMGEN_TRACE unset:
  the slot is the driver's function);
- counting: the trampoline, then the function's counting stub on its fast path (the
  thread's counters already there), up to its branch to the target (SHIMGEN_TRACE=1).

Both are the instructions a call runs on top of calling the driver's function directly.
"""

from __future__ import annotations

import sys
from pathlib import Path

from shimgen.driver import read_image

BRANCHES = {"x86_64": ("jmp",), "aarch64": ("br",)}
# A conditional branch to the slow path (not taken on the fast path) is counted and passed.
SKIPPED = {"x86_64": ("jz", "je"), "aarch64": ("cbz",)}


def _disassembler(arch: str):
    import capstone

    if arch == "aarch64":
        return capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    return capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)


def _run_to_branch(image, vaddr: int) -> list[str]:
    """The instructions from `vaddr` to the first indirect branch, each as text."""
    out = []
    for ins in _disassembler(image.arch).disasm(image.code_at(vaddr, 256) or b"", vaddr):
        out.append(f"{ins.mnemonic} {ins.op_str}".strip())
        if ins.mnemonic in BRANCHES[image.arch]:
            return out
    raise ValueError(f"no indirect branch within 256 bytes of {vaddr:#x}")


def _symbol(image, name: str) -> int:
    """A symbol's address from the full symbol table (the stub tables are hidden)."""
    from elftools.elf.elffile import ELFFile

    with open(image.real_path, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        found = symtab.get_symbol_by_name(name) if symtab else None
        if not found:
            raise ValueError(f"{image.real_path} has no symbol {name} (stripped?)")
        return found[0]["st_value"]


def entry_code(shim: Path | str, function: str = "cuDriverGetVersion") -> dict[str, list[str]]:
    """{"passthrough": [...], "counting": [...]}: the instructions of each path."""
    image = read_image(shim)
    export = image.function(function)
    if export is None:
        raise ValueError(f"{shim} exports no {function}")
    names = sorted(f.name for f in image.functions if f.name != "dlopen")
    index = names.index(function)
    table = _symbol(image, "shimgen_count_stubs") + 8 * index
    stub = image.pointer_at(table)
    if stub is None:
        raise ValueError(f"{shim}: no relocated pointer at shimgen_count_stubs[{index}]")
    trampoline = _run_to_branch(image, export.address)
    return {"passthrough": trampoline, "counting": trampoline + _run_to_branch(image, stub)}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    paths = entry_code(*args[:2])
    for path, insns in paths.items():
        print(f"{path:12} {len(insns):3} instructions: {'; '.join(insns)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
