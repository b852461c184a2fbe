"""The instructions a forwarded call runs in a built shim's entry code, counted from its
disassembly (capstone), for either architecture: no hardware needed, no timing noise.

    python -m benchmarks.entrycode SHIM [FUNCTION]

- passthrough: the exported trampoline, up to its indirect branch (SHIMGEN_TRACE unset:
  the slot is the driver's function);
- counting: the trampoline, then the function's counting stub on its fast path (the
  thread's counters already there), up to its branch to the target (SHIMGEN_TRACE=1);
- time: the trampoline, the function's timing stub and the common entry up to its call of
  the target, then the return path that call returns to up to its return to the caller
  (SHIMGEN_TRACE=time), on its usual path: the thread's block and a free frame there, no
  new maximum, 64 ticks or more, the fine bucket's slot found at the first probe (its key
  there already), a successful call.

Each is the instructions a call runs on top of calling the driver's function directly.
"""

from __future__ import annotations

import sys
from pathlib import Path

from shimgen.driver import read_image

BRANCHES = {"x86_64": ("jmp",), "aarch64": ("br",)}
# A conditional branch to the slow path (not taken on the fast path) is counted and passed.
SKIPPED = {"x86_64": ("jz", "je"), "aarch64": ("cbz",)}
# The time path: direct jumps followed; the calls that end its entry; the conditional
# branches its return path takes on the usual path (no new maximum: jbe, b.ls; the fine
# key found: je, b.eq), every other one not taken.
JUMPS = {"x86_64": ("jmp",), "aarch64": ("b",)}
CALLS = {"x86_64": ("call",), "aarch64": ("blr",)}
TAKEN_ON_RETURN = {"x86_64": ("jbe", "je"), "aarch64": ("b.ls", "b.eq")}


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


def _direct(ins) -> int | None:
    """The target of a direct branch (its last operand an address), else None."""
    last = ins.op_str.split(",")[-1].strip().lstrip("#")
    try:
        return int(last, 16) if last.startswith("0x") else None
    except ValueError:  # a memory operand
        return None


def _walk(image, vaddr: int, stop: tuple[str, ...], taken: tuple[str, ...] = (),
          after: list[int] | None = None) -> list[str]:
    """The instructions run from `vaddr` to the first of `stop`, following direct jumps and
    the conditional branches named in `taken`; `after` gets the address that follows the
    stop."""
    md, out, pc = _disassembler(image.arch), [], vaddr
    while len(out) < 200:
        ins = next(md.disasm(image.code_at(pc, 16) or b"", pc, count=1), None)
        if ins is None:
            break
        out.append(f"{ins.mnemonic} {ins.op_str}".strip())
        if ins.mnemonic in stop:
            if after is not None:
                after.append(ins.address + ins.size)
            return out
        follow = ins.mnemonic in JUMPS[image.arch] + taken
        target = _direct(ins) if follow else None
        pc = target if target is not None else ins.address + ins.size
    raise ValueError(f"no {'/'.join(stop)} on the path from {vaddr:#x}")


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
    """{"passthrough": [...], "counting": [...], "time": [...]}: the instructions of each
    path."""
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
    timed = image.pointer_at(_symbol(image, "shimgen_time_stubs") + 8 * index)
    # The return path is the one the entry's call returns to (x86-64: the CUresult
    # entry's, shimgen_time_cu_return, or shimgen_time_return's, by the function).
    back: list[int] = []
    time = (trampoline + _walk(image, timed, CALLS[image.arch], after=back)
            + _walk(image, back[0], ("ret",), TAKEN_ON_RETURN[image.arch]))
    return {"passthrough": trampoline, "counting": trampoline + _run_to_branch(image, stub),
            "time": time}


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
