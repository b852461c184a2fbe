"""The light part of the ELF reader (elf.py re-exports all of it): what `shimgen run` needs on
its cached path, with nothing heavy imported (no pyelftools, no dataclasses): the check of a
path's text, the ELF and program header layouts, the notes of a file read from its program
headers alone (a driver's GNU build-id, a cached shim's identity), the driver version in a
file name.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from pathlib import Path

from .errors import ShimgenError

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # the ELF header, x86-64
PHDR = struct.Struct("<IIQQQQQQ")  # a program header
EM_X86_64 = 62
PT_NOTE = 4


def check_path_text(path: str | Path, what: str) -> None:
    """Refuse a path that cannot be written into the generated sources' banners and meson
    files as it is: control characters (a newline would end a comment) or bytes that are
    not UTF-8."""
    text = str(path)
    for ch in text:
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            raise ShimgenError(f"{what} {text!r}: the path contains a control character")
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise ShimgenError(f"{what} {text!r}: the path is not valid UTF-8")


def version_from_name(real: Path) -> str:
    """The driver version in a libcuda file name (libcuda.so.535.261.03), or "unknown"."""
    m = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)?)$", real.name)
    return m.group(1) if m else "unknown"



NT_GNU_BUILD_ID, MAX_NOTES = 3, 1 << 16  # a library's PT_NOTE segments: a few hundred bytes


def read_notes(path: Path | str) -> list[tuple[bytes, int, bytes]]:
    """(name, type, descriptor) of every note in the PT_NOTE segments of an x86-64 ELF file.
    A ShimgenError of one line when it cannot be read or is not such a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        raise ShimgenError(f"{path}: cannot open it ({e.strerror})") from None
    with os.fdopen(fd, "rb", buffering=0) as fh:
        head = fh.read(EHDR.size) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        fields = EHDR.unpack(head) if len(head) == EHDR.size else (b"",) * 14
        phoff, phentsize, phnum = fields[5], fields[9], fields[10]
        if fields[0][:6] != b"\x7fELF\x02\x01" or fields[2] != EM_X86_64 or \
                phentsize != PHDR.size or not 0 < phnum <= 256:
            raise ShimgenError(f"{path}: not an x86-64 ELF file with program headers")
        table = os.pread(fd, phnum * PHDR.size, phoff)
        notes = []
        for typ, _, off, _, _, size, _, _ in PHDR.iter_unpack(table):
            buf = os.pread(fd, size, off) if typ == PT_NOTE and size <= MAX_NOTES else b""
            if len(table) != phnum * PHDR.size or len(buf) != size and typ == PT_NOTE:
                raise ShimgenError(f"{path}: truncated ELF file")
            at = 0
            while at + 12 <= len(buf):
                namesz, descsz, ntype = struct.unpack_from("<III", buf, at)
                desc_at = at + 12 + (namesz + 3 & ~3)
                if desc_at + descsz > len(buf):
                    raise ShimgenError(f"{path}: malformed ELF note")
                notes.append((buf[at + 12:at + 12 + namesz].rstrip(b"\0"), ntype,
                              buf[desc_at:desc_at + descsz]))
                at = desc_at + (descsz + 3 & ~3)
        return notes


def read_build_id(path: Path | str) -> str:
    """The GNU build-id of an ELF file in hex ("" when it has none), from its notes only."""
    return next((desc.hex() for name, typ, desc in read_notes(path)
                 if name == b"GNU" and typ == NT_GNU_BUILD_ID), "")
