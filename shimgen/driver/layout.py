"""The driver file's layout, checked by hand before pyelftools reads anything: pyelftools
trusts the header's counts and sizes, so a corrupt file could make it loop for a very long time
or read far past the end. Every table must lie inside the file and have the x86-64 entry size.
The sections and loadable segments found are what a `DriverImage` keeps."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from ..arches import ARCHES as ARCH_FACTS
from ..errors import ShimgenError
from .notes import EHDR as _EHDR
from .notes import PHDR as _PHDR
from .notes import check_header


@dataclass(frozen=True)
class Segment:
    """A loadable (PT_LOAD) segment: `filesz` bytes at file `offset` are mapped at `vaddr`."""

    vaddr: int
    offset: int
    filesz: int
    memsz: int
    flags: int  # PF_X 1, PF_W 2, PF_R 4

    @property
    def executable(self) -> bool:
        return bool(self.flags & PF_X)

    @property
    def writable(self) -> bool:
        return bool(self.flags & PF_W)

    def holds(self, vaddr: int) -> bool:
        return self.vaddr <= vaddr < self.vaddr + self.filesz


@dataclass(frozen=True)
class Section:
    index: int
    type: int
    offset: int
    size: int
    link: int
    entsize: int


_SHDR = struct.Struct("<IIQQQQIIQQ")
(SHT_NULL, SHT_STRTAB, SHT_RELA, SHT_DYNAMIC, SHT_NOTE, SHT_NOBITS,
 SHT_DYNSYM) = 0, 3, 4, 6, 7, 8, 11
PT_LOAD, PT_GNU_EH_FRAME, PF_X, PF_W = 1, 0x6474E550, 1, 2
MAX_SECTIONS = 0x10000
MAX_DYNAMIC_SYMBOLS = 200_000  # a real libcuda has about 700
MAX_SMALL_SECTION = 1 << 20  # .dynamic and build-id notes are a few hundred bytes


@dataclass(frozen=True)
class Layout:
    sections: tuple[Section, ...]
    segments: tuple[Segment, ...]
    eh_frame_hdr: int | None = None
    machine: int = ARCH_FACTS["x86_64"].e_machine


def _program_headers(fh, size: int, path: Path, e_phoff: int, e_phentsize: int,
                     e_phnum: int) -> tuple[list[Segment], int | None]:
    """The loadable segments, each inside the file, and the .eh_frame_hdr's address."""
    def bad(why: str) -> ShimgenError:
        return ShimgenError(f"driver {path}: truncated or malformed ELF ({why})")

    if e_phnum == 0:
        raise ShimgenError(f"driver {path}: no program headers; not a loadable library")
    if e_phentsize != _PHDR.size:
        raise bad(f"program header size {e_phentsize}, not {_PHDR.size}")
    end = e_phoff + e_phnum * _PHDR.size
    if end > size:
        raise bad(f"the program headers end at byte {end}, the file has {size} bytes")
    fh.seek(e_phoff)
    table = fh.read(e_phnum * _PHDR.size)
    loads = []
    eh_frame_hdr = None
    for i in range(e_phnum):
        typ, flags, off, vaddr, _, filesz, memsz, _ = _PHDR.unpack_from(table, i * _PHDR.size)
        if typ == PT_GNU_EH_FRAME:
            eh_frame_hdr = vaddr
        if typ != PT_LOAD:
            continue
        if off + filesz > size:
            raise bad(f"loadable segment {i} ends at byte {off + filesz}, "
                      f"the file has {size} bytes")
        loads.append(Segment(vaddr, off, filesz, memsz, flags))
    return loads, eh_frame_hdr


def check_layout(fh, size: int, path: Path) -> Layout:
    def bad(why: str) -> ShimgenError:
        return ShimgenError(f"driver {path}: truncated or malformed ELF ({why})")

    ident = fh.read(_EHDR.size)
    machine = check_header(ident, size, f"driver {path}")
    (_, _, _, _, _, e_phoff, e_shoff, _, _, e_phentsize, e_phnum, e_shentsize, e_shnum,
     e_shstrndx) = _EHDR.unpack(ident)

    if e_shoff == 0:
        raise ShimgenError(f"driver {path}: no section headers (stripped with sstrip or "
                           "similar); shimgen reads the .dynsym section")
    if e_shentsize != _SHDR.size:
        raise bad(f"section header size {e_shentsize}, not {_SHDR.size}")
    if e_shoff + _SHDR.size > size:
        raise bad(f"section headers at byte {e_shoff}; the file has {size} bytes")
    fh.seek(e_shoff)
    first = _SHDR.unpack(fh.read(_SHDR.size))
    count = e_shnum or first[5]  # more than 0xff00 sections: the count is in section 0
    if count > MAX_SECTIONS:
        raise bad(f"{count} sections")
    end = e_shoff + count * _SHDR.size
    if end > size:
        raise bad(f"the section headers end at byte {end}, the file has {size} bytes")
    shstrndx = first[6] if e_shstrndx == 0xFFFF else e_shstrndx
    if shstrndx >= count:
        raise bad(f"section-name table index {shstrndx}, but {count} sections")
    fh.seek(e_shoff + shstrndx * _SHDR.size)
    if _SHDR.unpack(fh.read(_SHDR.size))[1] != SHT_STRTAB:
        raise bad(f"section {shstrndx}, the section-name table, is not a string table")
    fh.seek(e_shoff)
    table = fh.read(count * _SHDR.size)
    sections = []
    for i in range(count):
        _, typ, _, _, off, sz, link, _, _, entsize = _SHDR.unpack_from(table, i * _SHDR.size)
        if typ not in (SHT_NULL, SHT_NOBITS) and off + sz > size:
            raise bad(f"section {i} ends at byte {off + sz}, the file has {size} bytes")
        sections.append(Section(i, typ, off, sz, link, entsize))

    loads, eh_frame_hdr = _program_headers(fh, size, path, e_phoff, e_phentsize, e_phnum)
    fh.seek(0)
    return Layout(tuple(sections), tuple(loads), eh_frame_hdr, machine)
