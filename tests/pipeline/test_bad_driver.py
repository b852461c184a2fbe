"""Bad drivers given to `shimgen`: unreadable or special files, other architectures, a
stripped .dynsym or section headers, segments past the end of the file, and stub libraries.
Every error is one line `shimgen: error: ...`, a non-zero exit, no traceback, and nothing
half-written. docs/reliability.md lists each case with its test.

The tests run as root in CI. Where root would be let through (a file with mode 000, a
directory without search permission), the command runs without CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH (badinput.no_dac).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

import tests.badinput as badinput
from shimgen.driver.library import read_driver
from tests.badinput import (
    CC,
    assert_one_line_error,
    copy_of,
    entries,
    patch,
    shimgen,
)

no_dac = pytest.fixture(scope="module", name="no_dac")(badinput.no_dac)

# --------------------------------------------------------------------------------------------
# Root without the permission override


def test_unreadable_driver(drivers, tmp_path, no_dac):
    """Mode 000: open(2) refuses it; so does the check (which is open itself, not access)."""
    lib = copy_of(drivers[0].path, tmp_path / "libcuda.so.1")
    lib.chmod(0)
    for cmd in ("exports", "build"):
        proc = shimgen(cmd, "--driver", str(lib), *(["--out", str(tmp_path / "out")]
                                                   if cmd == "build" else []), prefix=no_dac)
        assert_one_line_error(proc, "not readable (permission denied)")
    assert not (tmp_path / "out").exists() or entries(tmp_path / "out") == []


def test_driver_behind_unsearchable_directory(drivers, tmp_path, no_dac):
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    copy_of(drivers[0].path, hidden / "libcuda.so.1")
    hidden.chmod(0)
    try:
        proc = shimgen("exports", "--driver", str(hidden / "libcuda.so.1"), prefix=no_dac)
    finally:
        hidden.chmod(0o755)
    assert_one_line_error(proc, "Permission denied")


def test_unreadable_for_root_too(tmp_path):
    """A write-only sysctl file: even full root cannot open it for reading."""
    f = Path("/proc/sys/vm/compact_memory")
    if not f.exists():
        pytest.skip("no /proc/sys/vm/compact_memory here")
    proc = shimgen("build", "--driver", str(f), "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, "not readable (permission denied)")
    assert entries(tmp_path / "out") == []


def test_special_files_are_never_opened(tmp_path):
    """A FIFO would block a reader and a device file can act when opened: both are refused
    from stat(2) alone, at once."""
    fifo = tmp_path / "fifo.so"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock.so"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        for path, kind in ((fifo, "a FIFO"), (sock_path, "a socket"),
                           (Path("/dev/null"), "a character device")):
            proc = shimgen("exports", "--driver", str(path), timeout=30)
            assert_one_line_error(proc, f"not a regular file ({kind})")
    finally:
        sock.close()


# --------------------------------------------------------------------------------------------
# Not an x86-64 shared library


@pytest.mark.parametrize("machine, name", [(21, "ppc64"), (40, "ARM"), (243, "RISC-V"),
                                           (0x1234, "another machine")])
def test_other_architecture(drivers, tmp_path, machine, name):
    """A copy of a real driver with e_machine patched, as a ppc64le or RISC-V driver would
    carry (aarch64's are read: tests/runtime/test_aarch64.py)."""
    lib = copy_of(drivers[0].path, tmp_path / "libcuda.so.1")
    patch(lib, 18, machine.to_bytes(2, "little"))
    proc = shimgen("exports", "--driver", str(lib))
    assert_one_line_error(proc, f"built for {name} (e_machine {machine}); shimgen reads x86-64 "
                                "and aarch64")


def test_big_endian(drivers, tmp_path):
    lib = copy_of(drivers[0].path, tmp_path / "libcuda.so.1")
    patch(lib, 5, b"\x02")
    patch(lib, 18, (22).to_bytes(2, "big"))  # s390x
    assert_one_line_error(shimgen("exports", "--driver", str(lib)),
                          "built for s390 (big-endian); shimgen reads x86-64 and aarch64")


@pytest.mark.parametrize("e_type, needle", [(2, "an executable, not a shared library"),
                                            (1, "a relocatable object file"),
                                            (4, "a core dump")])
def test_not_a_shared_library(drivers, tmp_path, e_type, needle):
    lib = copy_of(drivers[0].path, tmp_path / "libcuda.so.1")
    patch(lib, 16, e_type.to_bytes(2, "little"))
    assert_one_line_error(shimgen("exports", "--driver", str(lib)), needle)


# --------------------------------------------------------------------------------------------
# Stripped


def test_dynsym_removed(drivers, tmp_path):
    objcopy = shutil.which("objcopy")
    if objcopy is None:
        pytest.skip("no objcopy")
    src = copy_of(drivers[0].path, tmp_path / "in.so")
    lib = tmp_path / "libcuda.so.1"
    subprocess.run([objcopy, "--remove-section", ".dynsym", str(src), str(lib)], check=True)
    out = tmp_path / "out"
    proc = shimgen("build", "--driver", str(lib), "--out", str(out))
    assert_one_line_error(proc, "no .dynsym section (the dynamic symbol table was stripped")
    assert entries(out) == []


def test_dynsym_header_not_a_symbol_table(drivers, tmp_path):
    """.dynsym's section header retyped to PROGBITS: found by type, not by name."""
    lib = copy_of(drivers[0].path, tmp_path / "libcuda.so.1")
    with open(lib, "rb") as fh:
        from elftools.elf.elffile import ELFFile

        elf = ELFFile(fh)
        index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".dynsym")
        shoff = elf["e_shoff"]
    patch(lib, shoff + index * 64 + 4, (1).to_bytes(4, "little"))
    assert_one_line_error(shimgen("exports", "--driver", str(lib)), "no .dynsym section")


def test_section_headers_stripped(drivers, tmp_path):
    """sstrip-style: no section header table at all."""
    lib = copy_of(drivers[0].path, tmp_path / "libcuda.so.1")
    patch(lib, 0x28, bytes(8))  # e_shoff
    patch(lib, 0x3C, bytes(4))  # e_shnum, e_shstrndx
    assert_one_line_error(shimgen("exports", "--driver", str(lib)), "no section headers")


def test_strip_all_keeps_what_shimgen_needs(drivers, tmp_path):
    """`strip --strip-all` keeps .dynsym: such a driver is read exactly as the original."""
    objcopy = shutil.which("objcopy")
    if objcopy is None:
        pytest.skip("no objcopy")
    lib = tmp_path / "libcuda.so.1"
    subprocess.run([objcopy, "--strip-all", str(drivers[0].path), str(lib)], check=True)
    a, b = read_driver(drivers[0].path), read_driver(lib)
    assert (a.functions, a.data, a.soname, a.build_id) == (b.functions, b.data, b.soname,
                                                           b.build_id)


def test_segment_past_end_of_file(drivers, tmp_path):
    """A loadable segment that ends past the end of the file (a driver truncated after its
    section headers were moved, or a corrupt header): the loader would crash on it."""
    lib = copy_of(drivers[0].path, tmp_path / "libcuda.so.1")
    with open(lib, "rb") as fh:
        from elftools.elf.elffile import ELFFile

        elf = ELFFile(fh)
        phoff = elf["e_phoff"]
        i = next(i for i, s in enumerate(elf.iter_segments()) if s["p_type"] == "PT_LOAD")
    patch(lib, phoff + i * 56 + 32, (1 << 40).to_bytes(8, "little"))  # p_filesz
    assert_one_line_error(shimgen("exports", "--driver", str(lib)),
                          f"truncated or malformed ELF (loadable segment {i} ends at byte")


# --------------------------------------------------------------------------------------------
# Stub libraries (the rule: docs/reliability.md, "What counts as a real driver")


def _compile_library(tmp_path: Path, name: str, source: str, suffix: str = ".c",
                     flags: tuple[str, ...] = ("-O2",)) -> Path:
    if CC is None:
        pytest.skip("no C compiler")
    src = tmp_path / f"{name}{suffix}"
    src.write_text(source)
    lib = tmp_path / name / "libcuda.so.1"
    lib.parent.mkdir()
    subprocess.run([CC, "-shared", "-fPIC", *flags, "-Wl,-soname,libcuda.so.1", "-o", str(lib),
                    str(src)], check=True, capture_output=True)
    return lib


@pytest.fixture(scope="module")
def driver_names(drivers) -> list[str]:
    return read_driver(drivers[0].path).function_names()


def test_small_stub_is_refused(tmp_path):
    """A hand-made libcuda with only the three entry points."""
    lib = _compile_library(tmp_path, "tiny", """
        int cuInit(unsigned flags) { return flags ? 1 : 0; }
        int cuDriverGetVersion(int *v) { *v = 12020; return 0; }
        int cuGetProcAddress(const char *s, void **p, int v, unsigned long long f)
        { (void)s; (void)v; (void)f; *p = 0; return 500; }
    """)
    out = tmp_path / "out"
    proc = shimgen("build", "--driver", str(lib), "--out", str(out))
    assert_one_line_error(proc, "a stub, not a real CUDA driver: it exports 3 functions and "
                                "lacks cuGetExportTable")
    assert entries(out) == []


@pytest.mark.parametrize("flags", [("-O2",), ("-O0",), ("-O2", "-fcf-protection=full")])
def test_link_time_stub_is_refused(tmp_path, driver_names, flags):
    """Like the CUDA toolkit's stubs/libcuda.so: every name, each returning
    CUDA_ERROR_STUB_LIBRARY (34). cuInit's code gives it away, at any -O and with endbr64."""
    src = "".join(f"int {n}(void) {{ return 34; }}\n" for n in driver_names)
    lib = _compile_library(tmp_path, "linkstub", src, flags=flags)
    proc = shimgen("exports", "--driver", str(lib))
    assert_one_line_error(proc, "a link-time stub, not a real CUDA driver: cuInit only returns "
                                "CUDA_ERROR_STUB_LIBRARY")


def test_functions_without_code_are_refused(tmp_path, driver_names):
    """Every name, typed as a function, but placed in .data: no code to forward to."""
    asm = ".data\n" + "".join(f".globl {n}\n.type {n},@function\n{n}: .quad 0\n.size {n},8\n"
                              for n in driver_names)
    lib = _compile_library(tmp_path, "nocode", asm, suffix=".S", flags=("-nostdlib",))
    proc = shimgen("exports", "--driver", str(lib))
    assert_one_line_error(proc, "cuInit does not point into executable code")


def test_mock_driver_with_every_function_is_accepted(tmp_path, driver_names):
    """A test double that exports every function and whose cuInit succeeds is not a stub:
    shimgen reads it (a shim over it is the user's choice)."""
    src = "".join(f"int {n}(void) {{ return 0; }}\n" for n in driver_names)
    lib = _compile_library(tmp_path, "mock", src)
    img = read_driver(lib)
    assert img.function_names() == driver_names
    assert img.soname == "libcuda.so.1"
