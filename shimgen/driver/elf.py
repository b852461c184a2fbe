"""The one ELF reader: a libcuda file, checked and parsed once into a `DriverImage`.

Every consumer (the shim model, the libcuda rules of driver/library.py, gate discovery, its proof
and the gate plan) receives the image this module returns; nothing else opens the driver.
The file is opened with care, by elfnotes.open_library, the opening every command makes
(never a device file, never blocking, the descriptor read is the file checked, no larger
than any libcuda could be), mapped (only what is looked at is read), and its layout is
checked by hand before pyelftools parses anything: every table must lie inside the file and
have the x86-64 entry size. The exports come from the dynamic symbol table only: it is what
the dynamic loader and `dlsym` see. Every refusal is a ShimgenError of one line naming the
file. The layout's check is driver/layout.py.
"""

from __future__ import annotations

import io
import mmap
import os
import struct
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..arches import ARCHES as ARCH_FACTS
from ..errors import ShimgenError
from .layout import (
    MAX_DYNAMIC_SYMBOLS,
    MAX_SMALL_SECTION,
    SHT_DYNAMIC,
    SHT_DYNSYM,
    SHT_NOTE,
    SHT_RELA,
    SHT_STRTAB,
    Layout,
    Section,
    Segment,
    check_layout,
)
from .notes import (
    ARCHES,
    check_driver,
    check_path_text,
    open_library,
    read_build_id,
    read_notes,
    version_from_name,
)

__all__ = ["DriverImage", "Export", "Section", "Segment", "check_driver", "check_path_text",
           "read_build_id", "read_image", "read_notes", "version_from_name"]

# pyelftools is imported by the functions that parse with it, never at module import. The
# light part of the reader (path text, the opening and header check of the file, the headers'
# layout, notes and build-id, the version in a file name) is driver/notes.py, re-exported here:
# the cached path of `shimgen run` imports only that part.


@dataclass(frozen=True)
class Export:
    name: str
    address: int
    size: int
    weak: bool


@dataclass(frozen=True)
class DriverImage:
    """One libcuda file, parsed: what the shim is built from and what gates are read from."""

    path: Path  # as given, made absolute
    real_path: Path  # symlinks resolved: the file the shim will load
    version: str  # e.g. 535.261.03 (from the file name), or "unknown"
    arch: str  # notes.ARCHES: "x86_64" or "aarch64"
    build_id: str  # GNU build-id in hex, or "" when the file has none
    soname: str
    functions: tuple[Export, ...]  # sorted by name
    data: tuple[Export, ...]  # exported objects (cudbg* variables), sorted by name
    sections: tuple[Section, ...] = field(default=(), repr=False, compare=False)
    segments: tuple[Segment, ...] = field(default=(), repr=False, compare=False)
    # the whole file, mapped read-only (bytes where an image is made by hand)
    contents: bytes | mmap.mmap = field(default=b"", repr=False, compare=False)
    # where PT_GNU_EH_FRAME puts .eh_frame_hdr (its table of function starts), if anywhere
    eh_frame_hdr: int | None = field(default=None, repr=False, compare=False)

    def function_names(self) -> list[str]:
        return [f.name for f in self.functions]

    def function(self, name: str) -> Export | None:
        return next((f for f in self.functions if f.name == name), None)

    def file_offset(self, vaddr: int) -> int | None:
        """Where in the file the byte loaded at `vaddr` comes from (None: not from the file)."""
        seg = self._segment(vaddr)
        return None if seg is None else seg.offset + vaddr - seg.vaddr

    def is_exec(self, vaddr: int) -> bool:
        return any(s.executable and s.holds(vaddr) for s in self.segments)

    def read(self, vaddr: int, n: int) -> bytes:
        """Up to `n` bytes loaded from the file at `vaddr`, within one segment; b"" if none."""
        seg = self._segment(vaddr)
        if seg is None:
            return b""
        off = seg.offset + vaddr - seg.vaddr
        return self.contents[off:off + min(n, seg.offset + seg.filesz - off)]

    def code_at(self, vaddr: int, n: int) -> bytes | None:
        """Up to `n` bytes of executable code at `vaddr`, or None when no executable segment
        holds that address."""
        seg = next((s for s in self.segments if s.executable and s.holds(vaddr)), None)
        if seg is None:
            return None
        off = seg.offset + vaddr - seg.vaddr
        return self.contents[off:off + min(n, seg.offset + seg.filesz - off)]

    @cached_property
    def relative(self) -> dict[int, int]:
        """The relative relocations (`R_X86_64_RELATIVE`, `R_AARCH64_RELATIVE`): address ->
        the value the loader puts there (minus the load base). Read from every SHT_RELA
        section, on first use."""
        relative = ARCH_FACTS[self.arch].relative
        out: dict[int, int] = {}
        for s in self.sections:
            if s.type != SHT_RELA:
                continue
            raw = self.contents[s.offset:s.offset + s.size // 24 * 24]
            for where, info, addend in struct.iter_unpack("<QQq", raw):
                if info & 0xFFFFFFFF == relative:
                    out[where] = addend
        return out

    def pointer_at(self, vaddr: int) -> int | None:
        """The pointer the dynamic loader writes at `vaddr` (minus the base), if relocated."""
        return self.relative.get(vaddr)

    def _segment(self, vaddr: int) -> Segment | None:
        return next((s for s in self.segments if s.holds(vaddr)), None)


def _build_id(elf, layout: Layout) -> str:
    for s in layout.sections:
        if s.type != SHT_NOTE or s.size > MAX_SMALL_SECTION:
            continue
        for note in elf.get_section(s.index).iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID":
                desc = note["n_desc"]
                return desc if isinstance(desc, str) else ""
    return ""


def read_image(path: Path | str) -> DriverImage:
    """Open, check and parse one ELF file. Raises ShimgenError with one line naming the
    problem. The file is mapped once, read-only and private to this process: the bytes
    checked are the bytes every consumer reads, and only what is looked at is read."""
    from elftools.common.exceptions import ELFError

    path, real, fd, size = open_library(path)
    try:
        # mapped, not read: only the pages that are looked at are read, so the memory used
        # is what is read (a file with holes costs its data, not its size)
        contents = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    except (OSError, ValueError) as e:
        raise ShimgenError(f"driver {path}: cannot read it "
                           f"({getattr(e, 'strerror', None) or e})") from None
    finally:
        os.close(fd)
    try:
        # a stream over the mapping of its own: pyelftools keeps some of its objects, which
        # hold the stream, and moves its position
        with _MappedStream(contents) as fh:
            layout = check_layout(fh, size, path)
            functions, data, soname, build_id = _read_dynamic(fh, layout, path)
    except ShimgenError:
        raise
    except (ELFError, ValueError, KeyError, IndexError, AssertionError, EOFError, OSError,
            struct.error) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ShimgenError(f"driver {path}: truncated or malformed ELF ({msg})") from None
    except Exception as e:  # pyelftools raises assorted errors on corrupt input
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ShimgenError(
            f"driver {path}: malformed ELF ({type(e).__name__}: {msg})") from None
    return DriverImage(
        path=path,
        real_path=real,
        version=version_from_name(real),
        arch=ARCHES[layout.machine],
        build_id=build_id,
        soname=soname,
        functions=tuple(sorted(functions.values(), key=lambda e: e.name)),
        data=tuple(sorted(data.values(), key=lambda e: e.name)),
        sections=layout.sections,
        segments=layout.segments,
        contents=contents,
        eh_frame_hdr=layout.eh_frame_hdr,
    )


class _MappedStream(io.RawIOBase):
    """A read-only stream over a mapped file that copies only what is read."""

    def __init__(self, m: mmap.mmap) -> None:
        self._m, self._pos = m, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, len(self._m))[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = len(self._m) if n is None or n < 0 else min(self._pos + n, len(self._m))
        out = self._m[self._pos:end] if self._pos < end else b""
        self._pos += len(out)
        return out

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)


ELFFile = None  # pyelftools' ELFFile once first used (a test counts the parses through it)


def _elffile():
    global ELFFile
    if ELFFile is None:
        from elftools.elf.elffile import ELFFile
    return ELFFile


def _read_dynamic(fh, layout: Layout, path: Path
                  ) -> tuple[dict[str, Export], dict[str, Export], str, str]:
    """Exported functions and objects, SONAME and build-id, with pyelftools."""
    dynsym = next((s for s in layout.sections if s.type == SHT_DYNSYM), None)
    if dynsym is None:
        raise ShimgenError(f"driver {path}: no .dynsym section (the dynamic symbol table was "
                           "stripped, or this is not a shared library)")

    def bad(why: str) -> ShimgenError:
        return ShimgenError(f"driver {path}: truncated or malformed ELF ({why})")

    if dynsym.entsize != 24:
        raise bad(f".dynsym entry size {dynsym.entsize}, not 24")
    if dynsym.size // 24 > MAX_DYNAMIC_SYMBOLS:
        raise bad(f".dynsym holds {dynsym.size // 24} symbols")
    if not 0 < dynsym.link < len(layout.sections) or \
            layout.sections[dynsym.link].type != SHT_STRTAB:
        raise bad(".dynsym does not link to a string table")
    strtab_size = layout.sections[dynsym.link].size

    elf = _elffile()(fh)
    functions: dict[str, Export] = {}
    data: dict[str, Export] = {}
    for i, sym in enumerate(elf.get_section(dynsym.index).iter_symbols()):
        if sym["st_name"] >= strtab_size and sym["st_name"] != 0:
            raise bad(f"the name of dynamic symbol {i} lies outside .dynstr")
        if sym["st_shndx"] == "SHN_UNDEF" or not sym.name:
            continue
        bind = sym["st_info"]["bind"]
        if bind not in ("STB_GLOBAL", "STB_WEAK"):
            continue
        if sym["st_other"]["visibility"] not in ("STV_DEFAULT", "STV_PROTECTED"):
            continue
        kind = sym["st_info"]["type"]
        exp = Export(sym.name, sym["st_value"], sym["st_size"], bind == "STB_WEAK")
        if kind in ("STT_FUNC", "STT_GNU_IFUNC"):
            functions[sym.name] = exp
        elif kind in ("STT_OBJECT", "STT_TLS", "STT_COMMON"):
            data[sym.name] = exp

    soname = ""
    dynamic = next((s for s in layout.sections if s.type == SHT_DYNAMIC), None)
    if dynamic is not None:
        if dynamic.size > MAX_SMALL_SECTION:
            raise bad(f".dynamic is {dynamic.size} bytes")
        for tag in elf.get_section(dynamic.index).iter_tags():
            if tag.entry.d_tag == "DT_SONAME":
                soname = str(tag.soname)
    return functions, data, soname, _build_id(elf, layout)
