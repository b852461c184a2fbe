"""The light part of the ELF reader (elf.py re-exports all of it): what `shimgen run` needs on
its cached path, with nothing heavy imported (no pyelftools, no dataclasses): the check of a
path's text, the one opening and check of a driver file that every command makes
(open_library, check_driver), the ELF and program header layouts, the notes of a file read
from its program headers alone (a driver's GNU build-id, a cached shim's identity), the driver
version in a file name.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import struct
from pathlib import Path

from ..arches import BY_MACHINE
from ..errors import ShimgenError

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # the ELF header of a 64-bit little-endian file
# No libcuda comes near this (535 to 555: under 30 MiB): a larger file is no driver, and is
# refused before anything reads it (a sparse file can claim any size on a few KiB of disk).
MAX_LIBRARY_SIZE = 1 << 30
PHDR = struct.Struct("<IIQQQQQQ")  # a program header
#: The machines shimgen reads and builds for: e_machine -> the architecture's name.
ARCHES = {m: a.name for m, a in BY_MACHINE.items()}
NEEDED = "shimgen reads x86-64 and aarch64 libcuda"
ET_DYN = 3
PT_NOTE = 4
MACHINES = {2: "SPARC", 3: "i386", 8: "MIPS", 20: "PowerPC", 21: "ppc64", 22: "s390",
            40: "ARM", 43: "SPARC64", 50: "IA-64", 62: "x86-64", 183: "aarch64",
            243: "RISC-V", 258: "LoongArch"}
ELF_TYPES = {0: "no ELF file type, not a shared library",
             1: "a relocatable object file, not a shared library",
             2: "an executable, not a shared library", 4: "a core dump"}


def check_path_text(path: str | Path, what: str) -> None:
    """Refuse a path that cannot be written into the generated sources' banners and meson
    files as it is: control characters (a newline would end a comment) or bytes that are
    not UTF-8."""
    text = str(path)
    label = f"{what} {text!r}" if what else repr(text)
    for ch in text:
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            raise ShimgenError(f"{label}: the path contains a control character")
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise ShimgenError(f"{label}: the path is not valid UTF-8")


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a plain file"


def machine_name(e_machine: int) -> str:
    return MACHINES.get(e_machine, "another machine")


def check_header(head: bytes, size: int, name: str) -> int:
    """The e_machine of a file whose ELF header (its first EHDR.size bytes, `head`; the file
    has `size` bytes) is that of a 64-bit little-endian shared library for a machine of
    ARCHES; any other is refused. `name` starts each message ("driver P")."""
    def bad(why: str) -> ShimgenError:
        return ShimgenError(f"{name}: truncated or malformed ELF ({why})")

    if head[:4] != b"\x7fELF":
        raise ShimgenError(f"{name}: not an ELF file")
    if len(head) < 20:
        raise bad(f"the file ends inside the ELF header, at byte {size}")
    ei_class, ei_data = head[4], head[5]
    if ei_class == 1:
        raise ShimgenError(f"{name}: 32-bit ELF; {NEEDED}")
    if ei_class != 2:
        raise bad(f"ELF class {ei_class} is neither 32- nor 64-bit")
    if ei_data == 2:
        machine = struct.unpack(">H", head[18:20])[0]
        raise ShimgenError(f"{name}: built for {machine_name(machine)} (big-endian); {NEEDED}")
    if ei_data != 1:
        raise bad(f"byte order {ei_data} is neither little- nor big-endian")
    machine = struct.unpack("<H", head[18:20])[0]
    if machine not in ARCHES:
        raise ShimgenError(f"{name}: built for {machine_name(machine)} (e_machine {machine}); "
                           f"{NEEDED}")
    if len(head) < EHDR.size:
        raise bad(f"the file ends inside the ELF header, at byte {size}")
    e_type = EHDR.unpack_from(head)[1]
    if e_type != ET_DYN:
        kind = ELF_TYPES.get(e_type, f"ELF type {e_type}, not a shared library")
        raise ShimgenError(f"{name}: {kind}")
    return machine


def library_arch(path: Path | str) -> str:
    """The architecture (ARCHES) of a library this process built or checked already (a
    shim): read from its ELF header alone."""
    with open(path, "rb") as f:
        head = f.read(EHDR.size)
    return ARCHES.get(struct.unpack_from("<H", head, 18)[0], "unknown") if len(head) > 20 \
        else "unknown"


def _resolved(path: Path, name: str) -> Path:
    """`path` with its symlinks resolved, or one line saying why it cannot be reached."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        raise ShimgenError(f"{name}: no such file") from None
    except NotADirectoryError:
        raise ShimgenError(f"{name}: no such file (a part of the path is not a "
                           "directory)") from None
    except OSError as e:
        raise ShimgenError(f"{name}: cannot reach it ({e.strerror})") from None
    try:
        return path.resolve(strict=True)
    except RuntimeError:
        raise ShimgenError(f"{name}: symlink loop") from None
    except FileNotFoundError:
        raise ShimgenError(f"{name}: dangling symlink") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ShimgenError(f"{name}: symlink loop") from None
        raise ShimgenError(f"{name}: cannot reach it ({e.strerror})") from None


def open_library(path: Path | str, what: str = "driver") -> tuple[Path, Path, int, int]:
    """Open an x86-64 shared library to read it: (the path as given, made absolute; the real
    path, symlinks resolved; a file descriptor; its size), or a ShimgenError of one line that
    starts `<what> <path>:`. Every command opens its driver here, so each refusal is worded
    the same wherever it comes from.

    A symlink (libcuda.so.1) is followed; the file it ends at must be a regular file. That
    is checked with stat before the file is opened, so a device file is never opened (opening
    one can have effects); it is then opened without blocking (a FIFO put there meanwhile does
    not hang the open) and without following a link put in its place, and checked again on
    the descriptor, so the file read is the file checked. Readability is what open(2) says,
    not access(2): the same answer for root and for other users. The ELF header is checked
    too (check_header); the caller checks the rest."""
    path = Path(os.path.abspath(path))
    name = f"{what} {path}" if what else str(path)
    check_path_text(path, what)
    real = _resolved(path, name)
    check_path_text(real, what)
    try:
        st = os.stat(real)
    except OSError as e:
        raise ShimgenError(f"{name}: cannot reach it ({e.strerror})") from None
    _check_kind(st.st_mode, name)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
                     | os.O_NOCTTY)
    except PermissionError:
        raise ShimgenError(f"{name}: not readable (permission denied)") from None
    except OSError as e:
        raise ShimgenError(f"{name}: cannot open it ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        _check_kind(st.st_mode, name)
        if st.st_size == 0:
            raise ShimgenError(f"{name}: empty file")
        if st.st_size > MAX_LIBRARY_SIZE:
            raise ShimgenError(f"{name}: {st.st_size} bytes, larger than any libcuda could be "
                               f"(at most {MAX_LIBRARY_SIZE >> 20} MiB); not read")
        try:
            head = os.pread(fd, EHDR.size, 0)
        except OSError as e:
            raise ShimgenError(f"{name}: cannot read it ({e.strerror})") from None
        check_header(head, st.st_size, name)
    except BaseException:
        os.close(fd)
        raise
    return path, real, fd, st.st_size


def _check_kind(mode: int, name: str) -> None:
    if stat.S_ISDIR(mode):
        raise ShimgenError(f"{name}: is a directory, not a library")
    if not stat.S_ISREG(mode):
        raise ShimgenError(f"{name}: not a regular file ({file_kind(mode)})")


def check_driver(path: Path | str) -> Path:
    """The checks of open_library, for a command that reads the driver later or not at all
    (`shimgen run` with a cached shim): its real path, or the one line every command says."""
    _, real, fd, _ = open_library(path)
    os.close(fd)
    return real


def version_from_name(real: Path) -> str:
    """The driver version in a libcuda file name (libcuda.so.535.261.03), or "unknown"."""
    m = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)?)$", real.name)
    return m.group(1) if m else "unknown"



NT_GNU_BUILD_ID, MAX_NOTES = 3, 1 << 16  # a library's PT_NOTE segments: a few hundred bytes


def read_notes(path: Path | str) -> list[tuple[bytes, int, bytes]]:
    """(name, type, descriptor) of every note in the PT_NOTE segments of a 64-bit shared
    library, opened as every driver is (open_library). A ShimgenError of one line when it
    cannot be read or is not such a file."""
    path, _, fd, _ = open_library(path, "")
    with os.fdopen(fd, "rb", buffering=0):
        fields = EHDR.unpack(os.pread(fd, EHDR.size, 0).ljust(EHDR.size, b"\0"))
        phoff, phentsize, phnum = fields[5], fields[9], fields[10]
        if phentsize != PHDR.size or not 0 < phnum <= 256:
            raise ShimgenError(f"{path}: not a 64-bit ELF file with program headers")
        table = os.pread(fd, phnum * PHDR.size, phoff)
        if len(table) != phnum * PHDR.size:
            raise ShimgenError(f"{path}: truncated ELF file")
        notes = []
        for typ, _, off, _, _, size, _, _ in PHDR.iter_unpack(table):
            buf = os.pread(fd, size, off) if typ == PT_NOTE and size <= MAX_NOTES else b""
            if len(buf) != size and typ == PT_NOTE:
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
