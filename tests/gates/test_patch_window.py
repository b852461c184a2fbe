"""Which instruction a changed byte of `shimgen patch` belongs to (shimgen/gates/patch.py):
the one whose bytes hold it, even where the patch's instructions lie next to each other.
The profile is made here, not discovered: on the drivers tested, a patch's instructions
lie far apart."""

from __future__ import annotations

from shimgen.gates import patch
from shimgen.gates.profile import Gate, GateField, InitPatch, Profile
from shimgen.gates.records import ByteChange, InsnRef

A = InsnRef(0x1000, 0x1000, "800f40", "orb $0x40,(%rdi)")  # 3 bytes: 0x1000-0x1002
B = InsnRef(0x1003, 0x1003, "804f0840", "orb $0x40,0x8(%rdi)")  # 4 bytes: 0x1003-0x1006


def _profile(changes: list[ByteChange]) -> Profile:
    p = InitPatch("set", 0x8, 0x40, "chosen", "", [A, B], changes, proven=True)
    gate = Gate("gdr", [1], [GateField(0x8, 0x40)], [], [], [p])
    return Profile("libcuda.so.1", None, "ab" * 10, 0, None, None, [], [gate])


def test_a_changed_byte_belongs_to_the_instruction_that_holds_it():
    """A byte of B, within four lengths of A (listed first), is B's; A's own byte is A's."""
    changes = [ByteChange(0x1002, 0x1002, 0x40, 0x00), ByteChange(0x1006, 0x1006, 0x40, 0x00)]
    got = patch._gate_changes(None, _profile(changes), "gdr", False, "")
    assert [(c.insn_vaddr, c.insn, c.byte.vaddr) for c in got] == [
        (A.vaddr, A.text, 0x1002), (B.vaddr, B.text, 0x1006)]
