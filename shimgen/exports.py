"""Read the real driver: every exported function and data object, its version and build-id.

This is the first stage of the pipeline (read -> model -> render -> build). Only the ELF's
dynamic symbol table is consulted: it is what the dynamic loader and `dlsym` see.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from .errors import ShimgenError

# Functions a library must export for us to call it a CUDA driver.
REQUIRED_DRIVER_FUNCTIONS = ("cuInit", "cuGetProcAddress", "cuDriverGetVersion")
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


def _check_file(path: Path) -> Path:
    """Resolve `path` to a regular, readable, non-empty file, or raise a one-line error."""
    if not os.path.lexists(path):
        raise ShimgenError(f"driver {path}: no such file")
    try:
        real = path.resolve(strict=True)
    except RuntimeError:
        raise ShimgenError(f"driver {path}: symlink loop") from None
    except FileNotFoundError:
        raise ShimgenError(f"driver {path}: dangling symlink") from None
    except OSError as e:
        raise ShimgenError(f"driver {path}: {e.strerror}") from None
    st = real.stat()
    if stat.S_ISDIR(st.st_mode):
        raise ShimgenError(f"driver {path}: is a directory, not a library")
    if not stat.S_ISREG(st.st_mode):
        raise ShimgenError(f"driver {path}: not a regular file")
    if not os.access(real, os.R_OK):
        raise ShimgenError(f"driver {path}: not readable (permission denied)")
    if st.st_size == 0:
        raise ShimgenError(f"driver {path}: empty file")
    return real


def _version_from_name(real: Path) -> str:
    m = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)?)$", real.name)
    return m.group(1) if m else "unknown"


def _build_id(elf: ELFFile) -> str:
    for sec in elf.iter_sections():
        if sec["sh_type"] != "SHT_NOTE":
            continue
        for note in sec.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID":
                return str(note["n_desc"])
    return ""


def read_driver(path: Path | str) -> DriverImage:
    """Read a libcuda file. Raises ShimgenError with one line naming the problem."""
    path = Path(os.path.abspath(path))
    real = _check_file(path)
    try:
        with open(real, "rb") as fh:
            magic = fh.read(4)
            if magic != b"\x7fELF":
                raise ShimgenError(f"driver {path}: not an ELF file")
            fh.seek(0)
            elf = ELFFile(fh)
            if elf.elfclass != 64:
                raise ShimgenError(f"driver {path}: 32-bit ELF; shimgen needs x86-64 libcuda")
            if elf["e_machine"] != "EM_X86_64":
                raise ShimgenError(
                    f"driver {path}: built for {elf['e_machine']}; shimgen needs x86-64"
                )
            if elf["e_type"] != "ET_DYN":
                raise ShimgenError(f"driver {path}: not a shared library ({elf['e_type']})")
            dynsym = elf.get_section_by_name(".dynsym")
            if dynsym is None:
                raise ShimgenError(f"driver {path}: no .dynsym section (stripped or not a library)")
            functions: dict[str, Export] = {}
            data: dict[str, Export] = {}
            for sym in dynsym.iter_symbols():
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
            dynamic = elf.get_section_by_name(".dynamic")
            if dynamic is not None:
                for tag in dynamic.iter_tags():
                    if tag.entry.d_tag == "DT_SONAME":
                        soname = tag.soname
            build_id = _build_id(elf)
    except ShimgenError:
        raise
    except (ELFError, ValueError, KeyError, IndexError, AssertionError, EOFError, OSError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ShimgenError(f"driver {path}: truncated or malformed ELF ({msg})") from None
    except Exception as e:  # pyelftools raises assorted errors on corrupt input
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ShimgenError(f"driver {path}: malformed ELF ({type(e).__name__}: {msg})") from None

    missing = [n for n in REQUIRED_DRIVER_FUNCTIONS if n not in functions]
    if missing:
        raise ShimgenError(
            f"driver {path}: not a CUDA driver library (does not export {', '.join(missing)})"
        )
    odd = [n for n in functions if not _C_IDENTIFIER.match(n)]
    if odd:
        raise ShimgenError(f"driver {path}: exports a name that is not a C identifier: {odd[0]!r}")
    return DriverImage(
        path=path,
        real_path=real,
        version=_version_from_name(real),
        build_id=build_id,
        soname=soname,
        functions=tuple(sorted(functions.values(), key=lambda e: e.name)),
        data=tuple(sorted(data.values(), key=lambda e: e.name)),
    )


_KNOWN_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/lib/wsl/lib",
    "/lib/x86_64-linux-gnu",
    "/lib64",
)


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
    for cand in _ldconfig_candidates() + [Path(d) / "libcuda.so.1" for d in _KNOWN_DIRS]:
        if cand.exists():
            return cand
    raise ShimgenError(
        "no libcuda.so.1 found (ldconfig -p and the usual NVIDIA locations); pass --driver PATH"
    )
