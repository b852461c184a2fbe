"""Read the real driver: every exported function and data object, its version and build-id.

This is the first stage of the pipeline (read -> model -> render -> build). The exports come
from the ELF's dynamic symbol table only: it is what the dynamic loader and `dlsym` see.
Before that, the file's layout is checked (every table inside the file), and after it, the
library is checked to be a real driver and not a stub (the rules: docs/reliability.md, "What
counts as a real driver"). Every refusal is a ShimgenError of one line.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from .cuda import CUDA_ERROR_STUB_LIBRARY, LIBCUDA_DIRS
from .errors import ShimgenError

# Functions a library must export for us to call it a CUDA driver.
REQUIRED_DRIVER_FUNCTIONS = ("cuInit", "cuGetProcAddress", "cuDriverGetVersion")
# ... and, to be a real driver rather than a stub, these too, among at least
# MIN_DRIVER_FUNCTIONS functions. Every driver that has cuGetProcAddress (CUDA 11.3, driver
# 465, on) exports all of them and more than 450 functions; 535.261.03 exports 600.
REAL_DRIVER_FUNCTIONS = ("cuGetExportTable", "cuDeviceGet", "cuCtxCreate_v2", "cuMemAlloc_v2",
                         "cuModuleLoadData", "cuLaunchKernel")
MIN_DRIVER_FUNCTIONS = 200
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Export:
    name: str
    address: int
    size: int
    weak: bool


@dataclass(frozen=True)
class DriverImage:
    """What shimgen knows about one libcuda file."""

    path: Path  # as given, made absolute
    real_path: Path  # symlinks resolved: the file the shim will load
    version: str  # e.g. 535.261.03 (from the file name), or "unknown"
    build_id: str  # GNU build-id in hex, or "" when the file has none
    soname: str
    functions: tuple[Export, ...]  # sorted by name
    data: tuple[Export, ...]  # exported objects (cudbg* variables), sorted by name

    def function_names(self) -> list[str]:
        return [f.name for f in self.functions]


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


def _open_driver(path: Path) -> tuple[Path, int, int]:
    """Resolve `path` and open it: (real path, file descriptor, size), or a one-line error.

    The file is checked with stat before it is opened (a device file is never opened: opening
    one can have effects), then opened without blocking and checked again on the descriptor,
    so the file read is the file checked. Readability is what open(2) says, not access(2): the
    same answer for root and for other users.
    """
    try:
        os.lstat(path)
    except FileNotFoundError:
        raise ShimgenError(f"driver {path}: no such file") from None
    except NotADirectoryError:
        raise ShimgenError(f"driver {path}: no such file (a part of the path is not a "
                           "directory)") from None
    except OSError as e:
        raise ShimgenError(f"driver {path}: cannot reach it ({e.strerror})") from None
    try:
        real = path.resolve(strict=True)
    except RuntimeError:
        raise ShimgenError(f"driver {path}: symlink loop") from None
    except FileNotFoundError:
        raise ShimgenError(f"driver {path}: dangling symlink") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ShimgenError(f"driver {path}: symlink loop") from None
        raise ShimgenError(f"driver {path}: cannot reach it ({e.strerror})") from None
    check_path_text(real, "driver")
    try:
        st = os.stat(real)
    except OSError as e:
        raise ShimgenError(f"driver {path}: cannot reach it ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ShimgenError(f"driver {path}: is a directory, not a library")
    if not stat.S_ISREG(st.st_mode):
        raise ShimgenError(f"driver {path}: not a regular file ({_file_kind(st.st_mode)})")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except PermissionError:
        raise ShimgenError(f"driver {path}: not readable (permission denied)") from None
    except OSError as e:
        raise ShimgenError(f"driver {path}: cannot open it ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ShimgenError(f"driver {path}: not a regular file ({_file_kind(st.st_mode)})")
        if st.st_size == 0:
            raise ShimgenError(f"driver {path}: empty file")
    except BaseException:
        os.close(fd)
        raise
    return real, fd, st.st_size


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a plain file"


def _version_from_name(real: Path) -> str:
    m = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)?)$", real.name)
    return m.group(1) if m else "unknown"


# ---------------------------------------------------------------------------------------------
# ELF layout, checked by hand before pyelftools reads anything: pyelftools trusts the header's
# counts and sizes, so a corrupt file could make it loop for a very long time or read far past
# the end. Every table must lie inside the file and have the x86-64 entry size.

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_PHDR = struct.Struct("<IIQQQQQQ")
_MACHINES = {2: "SPARC", 3: "i386", 8: "MIPS", 20: "PowerPC", 21: "ppc64", 22: "s390",
             40: "ARM", 43: "SPARC64", 50: "IA-64", 62: "x86-64", 183: "aarch64",
             243: "RISC-V", 258: "LoongArch"}
_ELF_TYPES = {0: "no ELF file type, not a shared library",
              1: "a relocatable object file, not a shared library",
              2: "an executable, not a shared library", 4: "a core dump"}
EM_X86_64 = 62
SHT_NULL, SHT_STRTAB, SHT_DYNAMIC, SHT_NOTE, SHT_NOBITS, SHT_DYNSYM = 0, 3, 6, 7, 8, 11
PT_LOAD, PF_X = 1, 1
MAX_SECTIONS = 0x10000
MAX_DYNAMIC_SYMBOLS = 200_000  # a real libcuda has about 700
MAX_SMALL_SECTION = 1 << 20  # .dynamic and build-id notes are a few hundred bytes


@dataclass(frozen=True)
class _Section:
    index: int
    type: int
    offset: int
    size: int
    link: int
    entsize: int


@dataclass(frozen=True)
class _Load:
    vaddr: int
    offset: int
    filesz: int
    executable: bool


@dataclass(frozen=True)
class _Layout:
    sections: tuple[_Section, ...]
    loads: tuple[_Load, ...]


def _machine(e_machine: int) -> str:
    return _MACHINES.get(e_machine, "another machine")


def _check_layout(fh, size: int, path: Path) -> _Layout:
    def bad(why: str) -> ShimgenError:
        return ShimgenError(f"driver {path}: truncated or malformed ELF ({why})")

    ident = fh.read(64)
    if ident[:4] != b"\x7fELF":
        raise ShimgenError(f"driver {path}: not an ELF file")
    if len(ident) < 20:
        raise bad(f"the file ends inside the ELF header, at byte {size}")
    ei_class, ei_data = ident[4], ident[5]
    if ei_class == 1:
        raise ShimgenError(f"driver {path}: 32-bit ELF; shimgen needs x86-64 libcuda")
    if ei_class != 2:
        raise bad(f"ELF class {ei_class} is neither 32- nor 64-bit")
    if ei_data == 2:
        machine = struct.unpack(">H", ident[18:20])[0]
        raise ShimgenError(f"driver {path}: built for {_machine(machine)} (big-endian); "
                           "shimgen needs x86-64 libcuda")
    if ei_data != 1:
        raise bad(f"byte order {ei_data} is neither little- nor big-endian")
    machine = struct.unpack("<H", ident[18:20])[0]
    if machine != EM_X86_64:
        raise ShimgenError(f"driver {path}: built for {_machine(machine)} (e_machine {machine}); "
                           "shimgen needs x86-64 libcuda")
    if len(ident) < _EHDR.size:
        raise bad(f"the file ends inside the ELF header, at byte {size}")
    (_, e_type, _, _, _, e_phoff, e_shoff, _, _, e_phentsize, e_phnum, e_shentsize, e_shnum,
     e_shstrndx) = _EHDR.unpack(ident)
    if e_type != 3:
        kind = _ELF_TYPES.get(e_type, f"ELF type {e_type}, not a shared library")
        raise ShimgenError(f"driver {path}: {kind}")

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
        sections.append(_Section(i, typ, off, sz, link, entsize))

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
    for i in range(e_phnum):
        typ, flags, off, vaddr, _, filesz, _, _ = _PHDR.unpack_from(table, i * _PHDR.size)
        if typ != PT_LOAD:
            continue
        if off + filesz > size:
            raise bad(f"loadable segment {i} ends at byte {off + filesz}, "
                      f"the file has {size} bytes")
        loads.append(_Load(vaddr, off, filesz, bool(flags & PF_X)))
    fh.seek(0)
    return _Layout(tuple(sections), tuple(loads))


def _build_id(elf: ELFFile, layout: _Layout) -> str:
    for s in layout.sections:
        if s.type != SHT_NOTE or s.size > MAX_SMALL_SECTION:
            continue
        for note in elf.get_section(s.index).iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID":
                desc = note["n_desc"]
                return desc if isinstance(desc, str) else ""
    return ""


def _code_at(fh, layout: _Layout, vaddr: int, n: int) -> bytes | None:
    """Up to `n` bytes of executable code at `vaddr`, or None when no executable segment
    holds that address."""
    for seg in layout.loads:
        if seg.executable and seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
            fh.seek(seg.offset + vaddr - seg.vaddr)
            return fh.read(min(n, seg.vaddr + seg.filesz - vaddr))
    return None


def _constant_return(code: bytes, vaddr: int) -> int | None:
    """The value a function returns if its code does nothing but return a constant in %eax
    (a link-time stub: `mov $34,%eax; ret`, at any optimisation level), else None."""
    from capstone import CS_ARCH_X86, CS_MODE_64, Cs

    eax: int | None = None
    for ins in Cs(CS_ARCH_X86, CS_MODE_64).disasm(code, vaddr):
        op = ins.op_str
        if ins.mnemonic in ("endbr64", "nop") or (ins.mnemonic, op) in (
                ("push", "rbp"), ("pop", "rbp"), ("mov", "rbp, rsp"), ("leave", "")):
            continue
        if ins.mnemonic == "mov" and op.startswith(("dword ptr [rbp - ", "qword ptr [rbp - ")) \
                and not op.endswith("]"):
            continue  # -O0 spills the arguments
        if ins.mnemonic == "mov" and op.startswith("eax, "):
            try:
                eax = int(op[5:], 0)
            except ValueError:
                return None
            continue
        if ins.mnemonic == "xor" and op == "eax, eax":
            eax = 0
            continue
        if ins.mnemonic == "ret":
            return eax
        return None
    return None


def read_driver(path: Path | str, *, require_real: bool = True) -> DriverImage:
    """Read a libcuda file. Raises ShimgenError with one line naming the problem.

    `require_real=False` skips only the stub rule (enough functions, cuInit that does more
    than return an error); the tests use it for their small fake drivers."""
    path = Path(os.path.abspath(path))
    check_path_text(path, "driver")
    real, fd, size = _open_driver(path)
    with os.fdopen(fd, "rb") as fh:
        try:
            layout = _check_layout(fh, size, path)
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

        missing = [n for n in REQUIRED_DRIVER_FUNCTIONS if n not in functions]
        if missing:
            raise ShimgenError(
                f"driver {path}: not a CUDA driver library (does not export {', '.join(missing)})"
            )
        odd = [n for n in functions if not _C_IDENTIFIER.match(n)]
        if odd:
            raise ShimgenError(
                f"driver {path}: exports a name that is not a C identifier: {odd[0]!r}")
        if require_real:
            _check_real_driver(fh, layout, path, functions)
    return DriverImage(
        path=path,
        real_path=real,
        version=_version_from_name(real),
        build_id=build_id,
        soname=soname,
        functions=tuple(sorted(functions.values(), key=lambda e: e.name)),
        data=tuple(sorted(data.values(), key=lambda e: e.name)),
    )


def _read_dynamic(fh, layout: _Layout, path: Path
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

    elf = ELFFile(fh)
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


def _check_real_driver(fh, layout: _Layout, path: Path, functions: dict[str, Export]) -> None:
    """Refuse a stub: a library named libcuda that exports the entry points but is not the
    driver. Two kinds are told apart from a real driver (see docs/reliability.md):

    - a hand-made stand-in with a handful of functions: a real driver exports several hundred
      (600 in 535.261.03), including every function of REAL_DRIVER_FUNCTIONS;
    - a link-time stub such as the CUDA toolkit's stubs/libcuda.so, which exports every name
      but whose functions only return CUDA_ERROR_STUB_LIBRARY: cuInit's code is read.
    """
    lacking = [n for n in REAL_DRIVER_FUNCTIONS if n not in functions]
    if len(functions) < MIN_DRIVER_FUNCTIONS or lacking:
        why = f"exports {len(functions)} functions"
        if lacking:
            why += f" and lacks {', '.join(lacking)}"
        raise ShimgenError(
            f"driver {path}: a stub, not a real CUDA driver: it {why} (a real driver exports "
            f"at least {MIN_DRIVER_FUNCTIONS}, among them {', '.join(REAL_DRIVER_FUNCTIONS)})")
    for name in REQUIRED_DRIVER_FUNCTIONS:
        code = _code_at(fh, layout, functions[name].address, 64)
        if not code:
            raise ShimgenError(f"driver {path}: {name} does not point into executable code "
                               "(a stub or a malformed library)")
    code = _code_at(fh, layout, functions["cuInit"].address, 64) or b""
    value = _constant_return(code, functions["cuInit"].address)
    if value is not None and value != 0:
        what = ("CUDA_ERROR_STUB_LIBRARY, like the CUDA toolkit's stubs/libcuda.so"
                if value == CUDA_ERROR_STUB_LIBRARY else f"error {value}")
        raise ShimgenError(
            f"driver {path}: a link-time stub, not a real CUDA driver: cuInit only returns "
            f"{what}; pass the driver's own libcuda.so.1")


def _ldconfig_candidates() -> list[Path]:
    import shutil
    import subprocess

    exe = shutil.which("ldconfig")
    if exe is None and os.path.exists("/sbin/ldconfig"):
        exe = "/sbin/ldconfig"
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.splitlines():
        m = re.match(r"\s*libcuda\.so\.1\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
        if m and "x86-64" in m.group(1):
            found.append(Path(m.group(2)))
    return found


def default_driver() -> Path:
    """The libcuda the dynamic loader would pick: `ldconfig -p`, then usual NVIDIA places."""
    for cand in _ldconfig_candidates() + [Path(d) / "libcuda.so.1" for d in LIBCUDA_DIRS]:
        if cand.exists():
            return cand
    raise ShimgenError(
        "no libcuda.so.1 found (ldconfig -p and the usual NVIDIA locations); pass --driver PATH"
    )
