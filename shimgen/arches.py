"""The architectures shimgen reads drivers of and builds shims for, kept here once: each
one's ELF machine number, the relocation type of a relative pointer there, what building
and running code for it takes on a machine of another (the cross compiler's GNU triplet,
the Debian packages that bring it, the qemu-user program that runs it and the directory of
its C library), what its shim supports (calls mode, gates), its system call numbers and its
entry code's folder in runtime/. Imports nothing: it is on `shimgen run`'s path."""

from __future__ import annotations


class Arch:
    """One architecture (a plain class: no dataclasses import on `run`'s path)."""

    __slots__ = ("name", "e_machine", "relative", "triplet", "packages", "qemu", "calls",
                 "gates", "sys_renameat2")

    def __init__(self, name: str, e_machine: int, relative: int, triplet: str,
                 packages: str, qemu: str, calls: bool, gates: bool,
                 sys_renameat2: int) -> None:
        self.name = name  # as `uname -m` says it
        self.e_machine = e_machine
        self.relative = relative  # R_X86_64_RELATIVE, R_AARCH64_RELATIVE
        self.triplet = triplet  # the cross compiler is <triplet>-gcc
        self.packages = packages  # Debian's packages of that compiler and its C library
        self.qemu = qemu  # qemu-user's program for it
        self.calls = calls  # calls mode (runtime/arch/<name>/calls.S): facts.h's SHIMGEN_ARCH_CALLS
        self.gates = gates  # the gate analysis and patches read its code
        self.sys_renameat2 = sys_renameat2  # where libc has no renameat2()

    @property
    def runtime(self) -> str:
        """Its entry code's folder under runtime/, taken whole by its shims alone."""
        return f"arch/{self.name}"

    @property
    def cc(self) -> str:
        """Its cross compiler."""
        return f"{self.triplet}-gcc"

    @property
    def sysroot(self) -> str:
        """Where Debian's cross C library lies (qemu-user's -L)."""
        return f"/usr/{self.triplet}"


ARCHES = {a.name: a for a in (
    Arch("x86_64", 62, 8, "x86_64-linux-gnu", "gcc-x86-64-linux-gnu libc6-dev-amd64-cross",
         "qemu-x86_64", calls=True, gates=True, sys_renameat2=316),
    Arch("aarch64", 183, 1027, "aarch64-linux-gnu",
         "gcc-aarch64-linux-gnu libc6-dev-arm64-cross", "qemu-aarch64", calls=False,
         gates=False, sys_renameat2=276),
)}
BY_MACHINE = {a.e_machine: a for a in ARCHES.values()}


def host() -> str:
    """This machine's architecture, as `uname -m` says it."""
    import os

    return os.uname().machine
