"""What counts as a libcuda: the rules a parsed ELF image must meet to be built for.

A CUDA driver exports cuInit, cuGetProcAddress and cuDriverGetVersion under C names; a real
one, not a stub, exports several hundred functions and its cuInit does more than return an
error (the rules and why: docs/reliability.md, "What counts as a real driver"). Also where
the driver is found when none is named: the one the dynamic loader would pick.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..cuda import CUDA_ERROR_STUB_LIBRARY, LIBCUDA_DIRS
from ..cudaversions import OLDEST_CUDA, cuda_of_driver, cuda_text, first_driver, since_text
from ..errors import ShimgenError

if TYPE_CHECKING:  # driver/elf.py is imported where a driver is read: default_driver() needs none
    from .elf import DriverImage

# Functions a library must export for us to call it a CUDA driver.
REQUIRED_DRIVER_FUNCTIONS = ("cuInit", "cuGetProcAddress", "cuDriverGetVersion")
# ... and, to be a real driver rather than a stub, these too, among at least
# MIN_DRIVER_FUNCTIONS functions. Every driver that has cuGetProcAddress (CUDA 11.3, driver
# 465, on) exports all of them and more than 450 functions; 535.261.03 exports 600.
REAL_DRIVER_FUNCTIONS = ("cuGetExportTable", "cuDeviceGet", "cuCtxCreate_v2", "cuMemAlloc_v2",
                         "cuModuleLoadData", "cuLaunchKernel")
MIN_DRIVER_FUNCTIONS = 200
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Every libcuda names the application-profiles file of its own version (each Debian build
# from 418 to 555 does, and 580): where its version is found when its file name lacks it.
_PROFILES_FILE = re.compile(rb"nvidia-application-profiles-(\d+\.\d+(?:\.\d+)?)-rc")


def read_driver(path: Path | str, *, require_real: bool = True) -> DriverImage:
    """Read a libcuda file (elf.read_image) and check it is one. Raises ShimgenError with one
    line naming the problem.

    `require_real=False` skips only the stub rule (enough functions, cuInit that does more
    than return an error); the tests use it for their small fake drivers."""
    from .elf import read_image

    return check_libcuda(read_image(path), require_real=require_real)


def check_libcuda(image: DriverImage, *, require_real: bool = True) -> DriverImage:
    """read_driver's checks of an image already read (the rules above)."""
    path = image.path
    names = set(image.function_names())
    refuse_older(image)
    missing = [n for n in REQUIRED_DRIVER_FUNCTIONS if n not in names]
    if missing:
        soname = f" {image.soname}" if image.soname else ""
        raise ShimgenError(
            f"driver {path}: a shared library{soname} that exports no {', '.join(missing)}: "
            "not a CUDA driver library")
    odd = [n for n in image.function_names() if not _C_IDENTIFIER.match(n)]
    if odd:
        raise ShimgenError(
            f"driver {path}: exports a name that is not a C identifier: {odd[0]!r}")
    if require_real:
        _check_real_driver(image, path)
    return image


def refuse_older(image: DriverImage) -> None:
    """Refuse a CUDA driver older than cuGetProcAddress (it exports the other required
    functions, not that one), saying which it is: every command that reads a driver."""
    names = set(image.function_names())
    missing = [n for n in REQUIRED_DRIVER_FUNCTIONS if n not in names]
    if missing == ["cuGetProcAddress"]:
        raise ShimgenError(predates_message(image))


def known_version(image: DriverImage) -> str:
    """The driver's version: its file name's (libcuda.so.470.256.02), else the one its
    contents name (a copy called libcuda.so.1), else "unknown". What its CUDA version is
    told from (cudaversions.cuda_of_driver)."""
    if image.version != "unknown":
        return image.version
    m = _PROFILES_FILE.search(image.contents)
    return m.group(1).decode() if m else "unknown"


def predates_message(image: DriverImage) -> str:
    """What shimgen says of a CUDA driver older than cuGetProcAddress: which driver it is,
    its CUDA version, and the oldest one shimgen supports."""
    version = known_version(image)
    cuda = cuda_of_driver(version)
    what = (f"driver {version} (CUDA {cuda_text(cuda)})" if cuda is not None
            else f"driver {image.path} (version {version})")
    return (f"{what} predates cuGetProcAddress ({since_text(OLDEST_CUDA)}): "
            f"shimgen supports drivers from {first_driver(OLDEST_CUDA)} on")


def _check_real_driver(image: DriverImage, path: Path) -> None:
    """Refuse a stub: a library named libcuda that exports the entry points but is not the
    driver. Two kinds are told apart from a real driver (see docs/reliability.md):

    - a hand-made stand-in with a handful of functions: a real driver exports several hundred
      (600 in 535.261.03), including every function of REAL_DRIVER_FUNCTIONS;
    - a link-time stub such as the CUDA toolkit's stubs/libcuda.so, which exports every name
      but whose functions only return CUDA_ERROR_STUB_LIBRARY: cuInit's code is read.
    """
    functions = {f.name: f for f in image.functions}
    lacking = [n for n in REAL_DRIVER_FUNCTIONS if n not in functions]
    if len(functions) < MIN_DRIVER_FUNCTIONS or lacking:
        why = f"exports {len(functions)} functions"
        if lacking:
            why += f" and lacks {', '.join(lacking)}"
        raise ShimgenError(
            f"driver {path}: a stub, not a real CUDA driver: it {why} (a real driver exports "
            f"at least {MIN_DRIVER_FUNCTIONS}, among them {', '.join(REAL_DRIVER_FUNCTIONS)})")
    for name in REQUIRED_DRIVER_FUNCTIONS:
        code = image.code_at(functions[name].address, 64)
        if not code:
            raise ShimgenError(f"driver {path}: {name} does not point into executable code "
                               "(a stub or a malformed library)")
    code = image.code_at(functions["cuInit"].address, 64) or b""
    value = (_constant_return_aarch64 if image.arch == "aarch64" else _constant_return)(
        code, functions["cuInit"].address)
    if value is not None and value != 0:
        what = ("CUDA_ERROR_STUB_LIBRARY, like the CUDA toolkit's stubs/libcuda.so"
                if value == CUDA_ERROR_STUB_LIBRARY else f"error {value}")
        raise ShimgenError(
            f"driver {path}: a link-time stub, not a real CUDA driver: cuInit only returns "
            f"{what}; pass the driver's own libcuda.so.1")


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


def _constant_return_aarch64(code: bytes, vaddr: int) -> int | None:
    """_constant_return for AArch64 code: `mov w0, #34; ret`, with or without a frame."""
    from capstone import CS_ARCH_ARM64, CS_MODE_ARM, Cs

    w0: int | None = None
    for ins in Cs(CS_ARCH_ARM64, CS_MODE_ARM).disasm(code, vaddr):
        op = ins.op_str
        if ins.mnemonic in ("nop", "paciasp", "autiasp", "bti", "hint") or \
                op.startswith(("sp, sp, ", "x29, x30, [sp", "x29, sp")) or \
                (ins.mnemonic in ("str", "stur") and "[sp" in op):
            continue  # the frame, and -O0's spills of the arguments
        if ins.mnemonic in ("mov", "movz") and op.startswith("w0, #"):
            try:
                w0 = int(op[5:].split(",")[0], 0)
            except ValueError:
                return None
            continue
        if ins.mnemonic == "ret":
            return w0
        return None
    return None


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

