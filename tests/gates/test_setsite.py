"""The set site read as a compiler could write it: the published 590.48.01 snippet assembled
at any address, in other orders and registers, across branches (the value traced through
the blocks of its function, gates/stored.py), and the shapes that must not be taken for one.
Functions get an unwind table as a real driver has one (gates/unwind.py); without one, the
straight run of code before the store is read."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from shimgen.driver.elf import DriverImage, Segment
from shimgen.gates.discover import _init_sites
from shimgen.gates.initsite import MASK, SET, choose, prove_patch
from shimgen.gates.prove import Emulator
from shimgen.gates.unwind import function_bounds
from shimgen.gates.x86 import Code

OFF, BIT = 0x5F14, 0x20
HDR = 0x100  # where the synthetic .eh_frame_hdr lies


def assemble(text: str, tmp: Path) -> bytes:
    """AT&T assembly -> the bytes of its .text (as and objcopy, from binutils)."""
    if shutil.which("as") is None or shutil.which("objcopy") is None:
        pytest.fail("as and objcopy (binutils) are needed", pytrace=False)
    src, obj, raw = tmp / "f.s", tmp / "f.o", tmp / "f.bin"
    src.write_text(".text\n" + text + "\n")
    subprocess.run(["as", "--64", "-o", str(obj), str(src)], check=True, capture_output=True)
    subprocess.run(["objcopy", "-O", "binary", "-j", ".text", str(obj), str(raw)], check=True,
                   capture_output=True)
    return raw.read_bytes()


def image(functions: dict[int, bytes], unwind: bool = True) -> DriverImage:
    """One executable segment (vaddr == file offset) holding each function at its address,
    int3 between them, and an unwind table that names them (as the toolchain writes one:
    `.eh_frame_hdr` with datarel sdata4 pairs, each FDE's start pcrel sdata4)."""
    size = max(a + len(b) for a, b in functions.items()) + 0x100
    data = bytearray(b"\xcc" * size)
    for a, b in functions.items():
        data[a:a + len(b)] = b
    hdr = None
    if unwind:
        hdr = HDR
        rows = sorted(functions.items())
        table = bytes([1, 0x1B, 0x03, 0x3B]) + struct.pack("<iI", 0, len(rows))
        fde_at = HDR + 0x100
        for start, body in rows:
            table += struct.pack("<ii", start - HDR, fde_at - HDR)
            data[fde_at:fde_at + 16] = struct.pack("<IIiI", 12, 0x10, start - (fde_at + 8),
                                                   len(body))
            fde_at += 16
        data[HDR:HDR + len(table)] = table
    return DriverImage(path=Path("/synthetic"), real_path=Path("/synthetic/libcuda.so.590.48.01"),
                       arch="x86_64",
                       version="590.48.01", build_id="00" * 20, soname="libcuda.so.1",
                       functions=(), data=(), segments=(Segment(0, 0, size, size, 5),),
                       contents=bytes(data), eh_frame_hdr=hdr)


def set_patch(img: DriverImage, direction: str = SET):
    code = Code(img)
    sites = _init_sites(code, OFF, BIT)
    p = choose(code, sites, OFF, BIT, direction)
    return code, sites, p


def changes(p) -> list[tuple[int, int, int]]:
    return [(c.vaddr, c.old, c.new) for c in p.changes]


PUBLISHED = """
    movzbl 0x5f14(%rdi),%eax
    mov %eax,%edx
    or $0x40,%edx
    cmpl $0x8,0xc60(%rdi)
    mov %dl,0x5f14(%rdi)
    ret
"""


@pytest.mark.parametrize("unwind", [True, False], ids=["unwind", "no-unwind"])
@pytest.mark.parametrize("at", [0x42D690, 0x1001, 0x7FFF3])
def test_published_snippet_anywhere_is_the_published_change(tmp_path, at, unwind):
    body = assemble(PUBLISHED, tmp_path)
    assert body[9:12] == bytes.fromhex("83ca40")
    code, sites, p = set_patch(image({at: body}, unwind))
    assert p.status == "chosen", p.why
    assert changes(p) == [(at + 11, 0x40, 0x60)]  # `83 ca 40` -> `83 ca 60`
    assert [r.hex for r in p.insns] == ["83ca40"]
    assert prove_patch(Emulator(code, 0x7000), code, p, sites) == []


# The same initialisation as a compiler could order and allocate it. Each: the assembly, and
# the `or` instructions (by their text) whose immediate gains the bit.
VARIANTS = {
    "cmp-first": ("""
        movzbl 0x5f14(%rdi),%eax
        mov %eax,%edx
        cmpl $0x8,0xc60(%rdi)
        or $0x40,%edx
        mov %dl,0x5f14(%rdi)
        ret""", [0x40]),
    "store-before-cmp": ("""
        movzbl 0x5f14(%rdi),%eax
        mov %eax,%edx
        or $0x40,%edx
        mov %dl,0x5f14(%rdi)
        cmpl $0x8,0xc60(%rdi)
        seta %al
        ret""", [0x40]),
    "other-registers": ("""
        movzbl 0x5f14(%rsi),%ecx
        mov %ecx,%r9d
        or $0x40,%r9d
        cmpl $0x8,0xc60(%rsi)
        mov %r9b,0x5f14(%rsi)
        ret""", [0x40]),
    "in-place": ("""
        movzbl 0x5f14(%r13),%eax
        or $0x40,%eax
        mov %al,0x5f14(%r13)
        ret""", [0x40]),
    # 580.159.04: a second store of the same load, past two conditional branches
    "two-stores-580": ("""
        movzbl 0x5f14(%rdi),%eax
        mov %eax,%edx
        or $0x40,%edx
        cmpl $0x8,0xc50(%rdi)
        mov %dl,0x5f14(%rdi)
        jbe 1f
        testb $0x1,0x5f49(%rdi)
        je 1f
        movl $0xc8,0x5ee0(%rdi)
        or $0xffffffc0,%eax
        mov %al,0x5f14(%rdi)
    1:  xor %eax,%eax
        ret""", [0x40, 0xC0]),
    # both ways into the store bring the same register: the blocks join
    "across-a-jump": ("""
        movzbl 0x5f14(%rdi),%eax
        mov %eax,%edx
        or $0x40,%edx
        test %esi,%esi
        je 2f
        movl $1,0x10(%rdi)
        jmp 1f
    2:  movl $2,0x10(%rdi)
    1:  mov %dl,0x5f14(%rdi)
        ret""", [0x40]),
    # the store is reached by a taken branch only: the proof runs the path as decoded,
    # whatever the flags of the synthetic registers would say (%esi is zero there)
    "taken-branch": ("""
        movzbl 0x5f14(%rdi),%eax
        mov %eax,%edx
        or $0x40,%edx
        test %esi,%esi
        jne 1f
        ud2
    1:  mov %dl,0x5f14(%rdi)
        ret""", [0x40]),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_compiler_variants_are_set_sites(tmp_path, name):
    text, imms = VARIANTS[name]
    at = 0x3B4970
    code, sites, p = set_patch(image({at: assemble(text, tmp_path)}))
    assert p.status == "chosen", p.why
    assert [(old, new) for _, old, new in changes(p)] == [(i, i | BIT) for i in imms]
    assert prove_patch(Emulator(code, 0x7000), code, p, sites) == []


def test_a_jump_over_code_needs_the_function(tmp_path):
    """Without the unwind table the straight run before the store is all there is, and a jmp
    ends it: the store is then not traced, and says why."""
    body = assemble(VARIANTS["across-a-jump"][0], tmp_path)
    p = set_patch(image({0x3B4970: body}, unwind=False))[2]
    assert p.status == "none" and "straight run of code before it does not load" in p.why


# Shapes that are not a set site: the value differs by path, a call may change the
# register, the struct pointer changes between load and store.
NOT_SET = {
    "paths-disagree": ("""
        movzbl 0x5f14(%rdi),%eax
        mov %eax,%edx
        test %esi,%esi
        je 1f
        or $0x40,%edx
    1:  mov %dl,0x5f14(%rdi)
        ret""", "the paths into it bring different values"),
    "call-between": ("""
        movzbl 0x5f14(%rdi),%eax
        mov %eax,%edx
        or $0x40,%edx
        call 0x10
        mov %dl,0x5f14(%rdi)
        ret""", "not built from the byte's own load"),
    "other-struct": ("""
        movzbl 0x5f14(%rdi),%eax
        mov %eax,%edx
        or $0x40,%edx
        mov 0x8(%rdi),%rdi
        mov %dl,0x5f14(%rdi)
        ret""", "not built from the byte's own load"),
}


@pytest.mark.parametrize("name", sorted(NOT_SET))
def test_shapes_that_are_not_set_sites(tmp_path, name):
    text, why = NOT_SET[name]
    p = set_patch(image({0x3B4970: assemble(text, tmp_path)}))[2]
    assert p.status == "none" and not p.changes, p.why
    assert why in p.why


def test_paths_that_agree_only_in_part_keep_what_they_share(tmp_path):
    """A loop back into the store's block with the same value keeps it traced."""
    text = """
        movzbl 0x5f14(%rdi),%eax
        mov %eax,%edx
        or $0x40,%edx
    1:  mov %dl,0x5f14(%rdi)
        dec %esi
        jne 1b
        ret"""
    code, sites, p = set_patch(image({0x3B4970: assemble(text, tmp_path)}))
    assert p.status == "chosen", p.why
    assert prove_patch(Emulator(code, 0x7000), code, p, sites) == []


def test_a_prefixed_writer_is_read_where_its_function_puts_it(tmp_path):
    """`or $0x18,0x5f14(%r13)` begins with a REX prefix: decoded from a guessed start one byte
    on, it reads as `or ...(%rbp)` at the wrong address. The function's own decode has it
    right."""
    body = assemble("""
        xor %eax,%eax
        orb $0x18,0x5f14(%r13)
        ret""", tmp_path)
    at = 0x3B4970
    for unwind, want in ((True, (at + 2, "r13")), (False, None)):
        sites = _init_sites(Code(image({at: body}, unwind)), OFF, BIT)
        got = [(s.insn.vaddr, s.insn.text) for s in sites]
        if want is not None:
            assert [(a, "r13" in t) for a, t in got] == [(want[0], True)], got
        else:
            assert got and "r13" not in got[0][1]  # what the guess gives, for contrast


def test_unwind_bounds_are_read_and_checked(tmp_path):
    body = assemble(PUBLISHED, tmp_path)
    img = image({0x2000: body, 0x3000: body})
    assert function_bounds(img, 0x2000) == (0x2000, 0x2000 + len(body))
    assert function_bounds(img, 0x3000 + len(body) - 1) == (0x3000, 0x3000 + len(body))
    assert function_bounds(img, 0x2000 + len(body)) is None  # between the functions
    assert function_bounds(img, 0x1FFF) is None
    # an FDE whose start does not match the table's is not believed
    raw = bytearray(img.contents)
    raw[HDR + 0x100 + 8] ^= 1
    bad = DriverImage(**{**img.__dict__, "contents": bytes(raw)})
    assert function_bounds(bad, 0x2000) is None


def test_mask_of_the_580_shape_is_unchanged_by_the_set_sites(tmp_path):
    """The set site's two ors do not set the bit: the mask has nothing to take out there."""
    body = assemble(VARIANTS["two-stores-580"][0], tmp_path)
    p = set_patch(image({0x3B4970: body}), MASK)[2]
    assert p.status == "none" and not p.changes


def test_a_merge_into_the_other_register_is_not_dropped_by_the_mask(tmp_path):
    """`or %edx,%ecx` with the field's byte in %edx: the run-time register is the
    destination, so `or %ecx,%ecx` would drop the field, not the run-time bit. The store is
    read as computed, and the mask leaves it (and says so)."""
    text = """
        movzbl 0x5f14(%rdi),%edx
        and $0xffffffdf,%edx
        or %edx,%ecx
        mov %cl,0x5f14(%rdi)
        ret"""
    p = set_patch(image({0x3B4970: assemble(text, tmp_path)}), MASK)[2]
    assert p.status == "none" and not p.changes, p.why
    assert "computed from run-time data at 0x3b497c" in p.why  # the store
