"""Bad input to `shimgen` (issue 5), beyond what tests/test_units.py covers: unreadable files,
other architectures, a stripped .dynsym, stub libraries, unwritable output, interrupted and
concurrent builds, stale staging directories, gate profiles, and the command line's own
edge cases. Every error is one line `shimgen: error: ...`, a non-zero exit, no traceback, and
nothing half-written. docs/reliability.md lists each case with its test.

The tests run as root in CI. Where root would be let through (a file with mode 000, a
read-only directory), the command runs as root without CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH (setpriv), so the kernel checks permissions as it would for a user.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from shimgen import build as build_mod
from shimgen import cli
from shimgen.errors import ShimgenError
from shimgen.exports import read_driver
from shimgen.model import build_model

ROOT = Path(__file__).resolve().parent.parent
CC = shutil.which("cc") or shutil.which("gcc")


def shimgen(*args: str, env: dict[str, str] | None = None, prefix: list[str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*(prefix or []), sys.executable, "-m", "shimgen", *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


def assert_one_line_error(proc: subprocess.CompletedProcess, needle: str, code: int = 1) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("shimgen: error: ") and needle in lines[0], lines[0]
    return lines[0]


def entries(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def copy_of(src: Path, dest: Path) -> Path:
    shutil.copyfile(src, dest)
    return dest


def patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


# --------------------------------------------------------------------------------------------
# Root without the permission override


def _no_dac_prefix() -> list[str] | None:
    """A command prefix that runs without the capabilities that let root past file
    permissions; [] when not root; None when that cannot be done here."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        return None
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "print('ok')"], capture_output=True,
                           text=True, cwd=ROOT)
    return prefix if probe.returncode == 0 and probe.stdout.strip() == "ok" else None


@pytest.fixture(scope="module")
def no_dac() -> list[str]:
    prefix = _no_dac_prefix()
    if prefix is None:
        pytest.skip("cannot drop CAP_DAC_OVERRIDE here (no setpriv, or not allowed)")
    return prefix


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


@pytest.mark.parametrize("machine, name", [(183, "aarch64"), (21, "ppc64"), (40, "ARM"),
                                           (0x1234, "another machine")])
def test_other_architecture(drivers, tmp_path, machine, name):
    """A copy of a real driver with e_machine patched, as an aarch64 or ppc64le driver
    would carry."""
    lib = copy_of(drivers[0].path, tmp_path / "libcuda.so.1")
    patch(lib, 18, machine.to_bytes(2, "little"))
    proc = shimgen("exports", "--driver", str(lib))
    assert_one_line_error(proc, f"built for {name} (e_machine {machine}); shimgen needs x86-64")


def test_big_endian(drivers, tmp_path):
    lib = copy_of(drivers[0].path, tmp_path / "libcuda.so.1")
    patch(lib, 5, b"\x02")
    patch(lib, 18, (22).to_bytes(2, "big"))  # s390x
    assert_one_line_error(shimgen("exports", "--driver", str(lib)),
                          "built for s390 (big-endian); shimgen needs x86-64")


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


# --------------------------------------------------------------------------------------------
# Output


def test_read_only_output_root(drivers, tmp_path, no_dac):
    """A read-only output root: refused before any work, and an earlier build in it stays."""
    out = tmp_path / "out"
    ok = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    lib = next(out.glob("*/libcudashim.so"))
    before = lib.read_bytes()
    out.chmod(0o555)
    try:
        proc = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out),
                       prefix=no_dac)
        assert_one_line_error(proc, f"output directory {out}: not writable")
        proc = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out / "sub"),
                       prefix=no_dac)
        assert_one_line_error(proc, f"output directory {out / 'sub'}: Permission denied")
    finally:
        out.chmod(0o755)
    assert lib.read_bytes() == before
    assert entries(out) == [lib.parent.name]


def test_output_name_taken_by_a_file(drivers, tmp_path):
    out = tmp_path / "out"
    img = read_driver(drivers[0].path)
    from shimgen.model import output_name

    out.mkdir()
    (out / output_name(img)).write_text("mine")
    proc = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out))
    assert_one_line_error(proc, "exists and is not a directory")
    assert (out / output_name(img)).read_text() == "mine"
    assert entries(out) == [output_name(img)]


def _model(driver_path: Path):
    img = read_driver(driver_path)
    return build_model(img, ["shimgen", "build", "--driver", str(img.path)])


def test_disk_full_during_build_keeps_previous(drivers, tmp_path, monkeypatch):
    """An OSError in the middle of a build (ENOSPC while the library is copied): one line,
    the earlier build untouched, no staging directory."""
    model = _model(drivers[0].path)
    out = tmp_path / "out"
    first = build_mod.build(model, out)
    before = first.library.read_bytes()

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out / "x"))

    monkeypatch.setattr(build_mod.shutil, "copy2", full)
    with pytest.raises(ShimgenError, match="No space left on device") as e:
        build_mod.build(model, out)
    assert "\n" not in str(e.value)
    assert first.library.read_bytes() == before
    assert entries(out) == [first.out_dir.name]


def test_install_without_directory_swap(drivers, tmp_path, monkeypatch):
    """Where renameat2(RENAME_EXCHANGE) is not supported, files are moved one by one, the
    library last, and the result is the same."""
    model = _model(drivers[0].path)
    out = tmp_path / "out"
    build_mod.build(model, out)
    monkeypatch.setattr(build_mod, "_exchange", lambda a, b: False)
    second = build_mod.build(model, out)
    assert entries(second.out_dir) == sorted(build_mod.INSTALLED)
    assert entries(out) == [second.out_dir.name]
    manifest = json.loads((second.out_dir / "shim.json").read_text())
    assert manifest["functions"] == len(model.functions)


def test_rebuild_swaps_the_whole_directory(drivers, tmp_path):
    """A rebuild replaces the build as a whole: a file left in the old directory by hand goes
    with it, and the directory keeps a normal mode (not mkdtemp's 0700)."""
    model = _model(drivers[0].path)
    out = tmp_path / "out"
    first = build_mod.build(model, out)
    (first.out_dir / "stray").write_text("x")
    second = build_mod.build(model, out)
    assert entries(second.out_dir) == sorted(build_mod.INSTALLED)
    assert second.out_dir.stat().st_mode & 0o755 == 0o755


def test_stale_staging_is_removed_live_one_kept(drivers, tmp_path):
    """A staging directory left by a killed build is removed by the next build; one that a
    running build holds (its lock is taken) is left alone."""
    out = tmp_path / "out"
    out.mkdir()
    stale = out / f"{build_mod.STAGING_PREFIX}cudashim-x-dead"
    (stale / "meson").mkdir(parents=True)
    (stale / "meson" / "junk.o").write_bytes(b"x")
    live = out / f"{build_mod.STAGING_PREFIX}cudashim-x-live"
    live.mkdir()
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        proc = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        assert not stale.exists()
        assert live.is_dir()
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# Interrupted builds


SLOW_CC = """#!/bin/sh
# Compiles as cc does, but stops for a long time on driver.c, after saying so.
for a in "$@"; do
  case "$a" in
    *driver.c) echo $$ > "{marker}"; sleep 300 ;;
  esac
done
exec "{cc}" "$@"
"""


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"shimgen ended early: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the compiler was never reached")
        time.sleep(0.05)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize("how, sig", [("process", signal.SIGINT), ("group", signal.SIGINT),
                                      ("process", signal.SIGTERM), ("process", signal.SIGHUP)])
def test_interrupted_build_keeps_previous(drivers, tmp_path, how, sig):
    """Ctrl-C (SIGINT to shimgen, or to its whole process group as a terminal sends it),
    SIGTERM or SIGHUP while meson compiles: exit 128+signal with one line, the earlier build
    byte for byte as it was, no staging directory, and no compiler left running."""
    if CC is None:
        pytest.skip("no C compiler")
    out = tmp_path / "out"
    ok = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    lib = next(out.glob("*/libcudashim.so"))
    before = {p.name: p.read_bytes() for p in lib.parent.iterdir() if p.is_file()}

    marker = tmp_path / "compiling"
    slow = tmp_path / "slowcc"
    slow.write_text(SLOW_CC.format(marker=marker, cc=CC))
    slow.chmod(0o755)
    env = dict(os.environ, CC=str(slow))
    proc = subprocess.Popen([sys.executable, "-m", "shimgen", "build", "--driver",
                             str(drivers[0].path), "--out", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    _wait_for(marker, proc, 240)
    if how == "group":
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert_one_line_error(result, f"interrupted by {signal.Signals(sig).name}; nothing was "
                                  "installed", code=128 + sig)
    assert stdout == ""
    after = {p.name: p.read_bytes() for p in lib.parent.iterdir() if p.is_file()}
    assert after == before
    assert entries(out) == [lib.parent.name]
    pid = int(marker.read_text())
    deadline = time.monotonic() + 10
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid), "the compiler started by meson is still running"


def test_signal_during_install_is_held_back(drivers, tmp_path, monkeypatch, capsys):
    """SIGTERM that lands while the build is being put in place waits for the install to
    finish: the new build is complete, no staging is left, and the line says so."""
    out = tmp_path / "out"
    real_install = build_mod._install
    calls = []

    def install_with_signal(new, final, staging):
        os.kill(os.getpid(), signal.SIGTERM)  # blocked here: delivered after the install
        time.sleep(0.05)
        calls.append(final)
        real_install(new, final, staging)

    monkeypatch.setattr(build_mod, "_install", install_with_signal)
    code = cli.main(["build", "--driver", str(drivers[0].path), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 128 + signal.SIGTERM, err
    assert err == "shimgen: error: interrupted by SIGTERM, after the new build was installed\n"
    assert len(calls) == 1
    assert entries(out) == [calls[0].name]
    assert entries(calls[0]) == sorted(build_mod.INSTALLED)


# --------------------------------------------------------------------------------------------
# Concurrent builds


def _complete_elf(data: bytes) -> bool:
    """The file is a whole ELF: its section header table (written last) is all there."""
    if data[:4] != b"\x7fELF" or len(data) < 64:
        return False
    shoff = int.from_bytes(data[0x28:0x30], "little")
    shnum = int.from_bytes(data[0x3C:0x3E], "little")
    return len(data) >= shoff + shnum * 64 > 64


def test_concurrent_builds_into_one_place(drivers, tmp_path):
    """Three builds of the same driver into the same --out at once, while a reader watches
    the installed library: every build succeeds, the reader never sees a partial file or
    manifest, nothing is left over, and the library that remains loads and forwards."""
    d = drivers[0]
    out = tmp_path / "out"
    ok = shimgen("build", "--driver", str(d.path), "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    final = next(out.glob("*/libcudashim.so")).parent
    seen, bad = [0], []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                data = (final / "libcudashim.so").read_bytes()
                manifest = (final / "shim.json").read_text()
            except FileNotFoundError:
                continue  # between the swap's two names on a fallback install
            seen[0] += 1
            if not _complete_elf(data):
                bad.append(f"partial library ({len(data)} bytes)")
            try:
                json.loads(manifest)
            except ValueError:
                bad.append("partial shim.json")

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        procs = [subprocess.Popen([sys.executable, "-m", "shimgen", "build", "--driver",
                                   str(d.path), "--out", str(out)], cwd=ROOT, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(3)]
        results = [p.communicate(timeout=600) for p in procs]
    finally:
        stop.set()
        watcher.join()
    for p, (_stdout, stderr) in zip(procs, results, strict=True):
        assert p.returncode == 0, stderr
        assert stderr == ""
    assert bad == [] and seen[0] > 0
    assert entries(out) == [final.name]
    assert entries(final) == sorted(build_mod.INSTALLED)

    code = ("import ctypes; l = ctypes.CDLL('libcuda.so.1'); v = ctypes.c_int(0); "
            "assert l.cuDriverGetVersion(ctypes.byref(v)) == 0; print(v.value)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    env.update(LD_LIBRARY_PATH=str(d.libdir))
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True)
    env.update(LD_PRELOAD=str(final / "libcudashim.so"), SHIMGEN_TRACE="1")
    shimmed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True)
    assert shimmed.stdout == plain.stdout and int(plain.stdout) > 0
    assert "cuDriverGetVersion" in shimmed.stderr  # the call went through the shim


# --------------------------------------------------------------------------------------------
# The command line itself


def test_paths_with_control_characters(drivers, tmp_path):
    """A newline in a path would end a comment line in the generated sources."""
    link = tmp_path / "bad\nname.so"
    link.symlink_to(drivers[0].path)
    assert_one_line_error(shimgen("exports", "--driver", str(link)),
                          "the path contains a control character")
    assert_one_line_error(shimgen("build", "--driver", str(drivers[0].path), "--out",
                                  str(tmp_path / "o\nut")),
                          "the path contains a control character")
    target = tmp_path / "real\tdir"
    target.mkdir()
    copy_of(drivers[0].path, target / "libcuda.so.1")
    (tmp_path / "ok.so").symlink_to(target / "libcuda.so.1")
    assert_one_line_error(shimgen("exports", "--driver", str(tmp_path / "ok.so")),
                          "the path contains a control character")


def test_empty_arguments():
    assert_one_line_error(shimgen("build", "--driver", ""), "--driver: empty path")
    assert_one_line_error(shimgen("exports", "--driver", ""), "--driver: empty path")
    assert_one_line_error(shimgen("build", "--driver", "/x", "--out", ""), "--out: empty path")


def test_usage_errors_are_one_line():
    assert_one_line_error(shimgen("build", "--no-such-option"),
                          "unrecognized arguments: --no-such-option", code=2)
    assert_one_line_error(shimgen(), "the following arguments are required", code=2)
    assert_one_line_error(shimgen("frobnicate"), "invalid choice", code=2)


def test_closed_stdout_is_not_a_traceback(drivers):
    """`shimgen exports | head -1`: the reader goes away, shimgen exits quietly."""
    proc = subprocess.run(f"{sys.executable} -m shimgen exports --driver {drivers[0].path} "
                          "| head -1; echo \"rc=${PIPESTATUS[0]}\"", shell=True,
                          executable="/bin/bash", capture_output=True, text=True, cwd=ROOT)
    assert proc.stdout.splitlines() == ["cuArray3DCreate", "rc=141"]
    assert proc.stderr == ""


def test_internal_error_is_one_line(monkeypatch, capsys, tmp_path):
    """A bug in shimgen still ends in one line (exit 70); SHIMGEN_DEBUG=1 shows it."""
    from shimgen import exports

    def boom(_path):
        raise RuntimeError("something shimgen did not expect\nsecond line")

    monkeypatch.setattr(exports, "read_driver", boom)
    monkeypatch.delenv("SHIMGEN_DEBUG", raising=False)
    assert cli.main(["exports", "--driver", str(tmp_path)]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("shimgen: error: internal error, please report it: RuntimeError: "
                          "something shimgen did not expect; second line")
    monkeypatch.setenv("SHIMGEN_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli.main(["exports", "--driver", str(tmp_path)])


def test_signal_handlers_restored_and_ignored_signals_left_alone(monkeypatch):
    """`main` turns SIGINT/SIGTERM/SIGHUP into a clean exit while it runs, restores the
    handlers after, and leaves an ignored signal ignored (`nohup shimgen build` must survive
    a hang-up)."""
    from shimgen import exports

    seen = {}

    def look(_path):
        seen.update({s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGHUP)})
        raise ShimgenError("stop here")

    monkeypatch.setattr(exports, "read_driver", look)
    before = signal.getsignal(signal.SIGINT)
    old_hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert cli.main(["exports", "--driver", "/x"]) == 1
    finally:
        signal.signal(signal.SIGHUP, old_hup)
    assert seen[signal.SIGHUP] is signal.SIG_IGN
    assert seen[signal.SIGINT] is cli._raise_interrupted
    assert signal.getsignal(signal.SIGINT) is before


# --------------------------------------------------------------------------------------------
# Gate profiles given to `shimgen build --gates`


@pytest.fixture(scope="module")
def gates_option() -> None:
    proc = shimgen("build", "--help")
    if "--gates" not in proc.stdout:
        pytest.skip("`shimgen build` has no --gates option yet")


def test_malformed_or_foreign_gate_profile(drivers, tmp_path, gates_option):
    """Each bad profile: one line, exit 1, nothing built. A foreign one is a valid profile
    of another driver (another build-id)."""
    out = tmp_path / "out"
    base, other = drivers[0], drivers[1]
    profile = tmp_path / "other.json"
    made = shimgen("gates", "--driver", str(other.path), "--json", str(profile), "--no-proof")
    assert made.returncode == 0, made.stderr
    good = json.loads(profile.read_text())
    cases: list[tuple[str, str]] = []

    def case(name: str, content: str | bytes | None, needle: str) -> None:
        p = tmp_path / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        elif content is not None:
            p.write_text(content)
        cases.append((str(p), needle))

    case("missing.json", None, "cannot read")
    case("empty.json", "", "is not JSON")
    case("binary.json", b"\x00\xff\xfe garbage", "is not JSON")
    case("list.json", "[]", "top level is not an object")
    case("manifest.json", json.dumps({"shimgen_command": "shimgen build", "functions": 600}),
         "top level has no 'schema'")
    case("schema.json", json.dumps({**good, "schema": "shimgen.gates/99"}),
         "schema is 'shimgen.gates/99'")
    case("types.json", json.dumps({**good, "gates": "gdr"}), "gates is not a list")
    cases.append((str(profile), f"gate profile is for build-id {read_driver(other.path).build_id}"))
    dirp = tmp_path / "dir.json"
    dirp.mkdir()
    cases.append((str(dirp), "cannot read"))
    for path, needle in cases:
        proc = shimgen("build", "--driver", str(base.path), "--out", str(out), "--gates", path)
        assert_one_line_error(proc, needle)
        assert entries(out) == []
