"""Fuzz the ELF reading with hypothesis, over mutated real drivers.

Each input is a real Debian libcuda with one to four mutations: a field of the ELF header, of
a section or program header, of a .dynsym symbol, a .dynamic entry or the build-id note set to
a boundary value; a run of random bytes written over the headers, .dynsym/.dynstr, .dynamic,
the section-name table or cuInit's code; or the file cut short. The drivers are 29 MB, so each
is copied once (to /dev/shm where there is one) and mutated in place; every mutation is undone
after its input has been read.

For every input:
- `read_driver` returns or raises ShimgenError with a one-line message, nothing else, and
  within a few seconds (no loop on corrupt counts or sizes);
- `shimgen exports` (the command line's `main`, in process) exits 0, or 1 with one line
  `shimgen: error: ...` and no traceback.
Then one input of each kind of error is written out whole and given to the real command,
`python -m shimgen build`, in a subprocess: one line, exit 1, nothing in the output directory.

The number of inputs is printed. CI runs SHIMGEN_FUZZ_EXAMPLES (default 1200, about 35 s) with
a fixed seed; set it higher for a longer, random run (docs/reliability.md records one).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shimgen import cli
from shimgen.driver.library import read_driver
from shimgen.errors import ShimgenError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("SHIMGEN_FUZZ_EXAMPLES", "300"))
LONG_RUN = "SHIMGEN_FUZZ_EXAMPLES" in os.environ
SECONDS_PER_INPUT = 10


@dataclass(frozen=True)
class Field:
    what: str
    offset: int
    width: int  # bytes, little-endian


@dataclass
class Target:
    """One driver: its original bytes, a working copy, and where its structures are."""

    name: str
    original: bytes
    path: Path
    fields: list[Field]
    regions: list[tuple[str, int, int]]  # (what, start, end) for random bytes
    cut_points: list[int]


_EHDR_FIELDS = [(f"e_ident[{i}]", i, 1) for i in range(4, 16)] + [
    ("e_type", 16, 2), ("e_machine", 18, 2), ("e_version", 20, 4), ("e_entry", 24, 8),
    ("e_phoff", 32, 8), ("e_shoff", 40, 8), ("e_flags", 48, 4), ("e_ehsize", 52, 2),
    ("e_phentsize", 54, 2), ("e_phnum", 56, 2), ("e_shentsize", 58, 2), ("e_shnum", 60, 2),
    ("e_shstrndx", 62, 2)]
_SHDR_FIELDS = [("sh_name", 0, 4), ("sh_type", 4, 4), ("sh_flags", 8, 8), ("sh_addr", 16, 8),
                ("sh_offset", 24, 8), ("sh_size", 32, 8), ("sh_link", 40, 4),
                ("sh_info", 44, 4), ("sh_addralign", 48, 8), ("sh_entsize", 56, 8)]
_PHDR_FIELDS = [("p_type", 0, 4), ("p_flags", 4, 4), ("p_offset", 8, 8), ("p_vaddr", 16, 8),
                ("p_paddr", 24, 8), ("p_filesz", 32, 8), ("p_memsz", 40, 8), ("p_align", 48, 8)]
_SYM_FIELDS = [("st_name", 0, 4), ("st_info", 4, 1), ("st_other", 5, 1), ("st_shndx", 6, 2),
               ("st_value", 8, 8), ("st_size", 16, 8)]


def _target(src: Path, workdir: Path) -> Target:
    original = src.read_bytes()
    path = workdir / src.name
    path.write_bytes(original)
    fields = [Field(n, o, w) for n, o, w in _EHDR_FIELDS]
    regions = [("ELF and program headers", 0, 0x300)]
    cuts = [0, 1, 4, 16, 20, 63, 64, 65, len(original) - 1]
    with open(src, "rb") as fh:
        elf = ELFFile(fh)
        shoff, phoff = elf["e_shoff"], elf["e_phoff"]
        regions.append(("section headers", shoff, shoff + 64 * elf.num_sections()))
        for i, sec in enumerate(elf.iter_sections()):
            base = shoff + 64 * i
            fields += [Field(f"{sec.name}.{n}", base + o, w) for n, o, w in _SHDR_FIELDS]
            start, size = sec["sh_offset"], sec["sh_size"]
            cuts += [start, start + size // 2, start + size - 1]
            if sec.name in (".dynsym", ".dynstr", ".dynamic", ".shstrtab", ".gnu.hash",
                            ".hash", ".note.gnu.build-id"):
                regions.append((sec.name, start, start + size))
            if sec.name == ".dynsym":
                for k in range(sec.num_symbols()):
                    fields += [Field(f".dynsym[{k}].{n}", start + 24 * k + o, w)
                               for n, o, w in _SYM_FIELDS]
                cuinit = sec.get_symbol_by_name("cuInit")[0]["st_value"]
            if sec.name == ".dynamic":
                for k in range(size // 16):
                    fields += [Field(f".dynamic[{k}].d_tag", start + 16 * k, 8),
                               Field(f".dynamic[{k}].d_val", start + 16 * k + 8, 8)]
            if sec["sh_type"] == "SHT_NOTE":
                fields += [Field(f"{sec.name}.n_namesz", start, 4),
                           Field(f"{sec.name}.n_descsz", start + 4, 4),
                           Field(f"{sec.name}.n_type", start + 8, 4)]
        for j, seg in enumerate(elf.iter_segments()):
            fields += [Field(f"phdr[{j}].{n}", phoff + 56 * j + o, w) for n, o, w in _PHDR_FIELDS]
            if seg["p_type"] == "PT_LOAD" and seg["p_flags"] & 1 and \
                    seg["p_vaddr"] <= cuinit < seg["p_vaddr"] + seg["p_filesz"]:
                code = seg["p_offset"] + cuinit - seg["p_vaddr"]
                regions.append(("cuInit's code", code, code + 32))
        cuts += [shoff, shoff + 64, shoff + 64 * elf.num_sections() - 1]
    cuts = sorted({c for c in cuts if 0 <= c < len(original)})
    return Target(src.name, original, path, fields, regions, cuts)


@pytest.fixture(scope="module")
def targets(drivers, tmp_path_factory) -> list[Target]:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        work = Path(tempfile.mkdtemp(prefix="shimgen-fuzz-", dir=shm))
    else:
        work = tmp_path_factory.mktemp("fuzz")
    try:
        yield [_target(d.path, work) for d in drivers]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _interesting(width: int, original: int, size: int) -> st.SearchStrategy[int]:
    top = (1 << (8 * width)) - 1
    specials = {0, 1, 2, 3, 7, 8, 11, 24, 56, 64, 0x7F, 0x80, 0xFF, 0xFFFF, top, top >> 1,
                (top >> 1) + 1, size, size - 1, size + 1, original + 1, original - 1,
                original * 2, original // 2}
    specials = sorted(v & top for v in specials if v >= 0)
    return st.one_of(st.sampled_from(specials), st.integers(0, top))


@st.composite
def mutation(draw, target: Target):
    size = len(target.original)
    kind = draw(st.sampled_from(["field", "field", "field", "bytes", "bytes", "cut"]))
    if kind == "field":
        f = draw(st.sampled_from(target.fields))
        old = int.from_bytes(target.original[f.offset:f.offset + f.width], "little")
        value = draw(_interesting(f.width, old, size))
        return ("field", f.what, f.offset, value.to_bytes(f.width, "little"))
    if kind == "bytes":
        what, start, end = draw(st.sampled_from(target.regions))
        at = draw(st.integers(start, max(start, end - 1)))
        data = draw(st.binary(min_size=1, max_size=16))
        return ("bytes", what, at, data)
    cut = draw(st.one_of(st.sampled_from(target.cut_points), st.integers(0, size - 1)))
    return ("cut", "end of file", cut, b"")


@st.composite
def case(draw, targets: list[Target]):
    t = draw(st.sampled_from(range(len(targets))))
    muts = draw(st.lists(mutation(targets[t]), min_size=1, max_size=4))
    return t, muts


class _Hang(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int):
    def alarm(_signum, _frame):
        raise _Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _apply(target: Target, muts) -> list[tuple[int, bytes]]:
    """Mutate the working copy; return what undoes it."""
    undo: list[tuple[int, bytes]] = []
    cut = None
    with open(target.path, "r+b") as fh:
        for kind, _what, at, data in muts:
            if kind == "cut":
                cut = at if cut is None else min(cut, at)
                continue
            undo.append((at, target.original[at:at + len(data)]))
            fh.seek(at)
            fh.write(data)
        if cut is not None:
            fh.truncate(cut)
            undo.append((cut, target.original[cut:]))
    return undo


def _undo(target: Target, undo: list[tuple[int, bytes]]) -> None:
    with open(target.path, "r+b") as fh:
        for at, data in reversed(undo):
            fh.seek(at)
            fh.write(data)


def _error_kind(message: str) -> str:
    """The message with paths and numbers taken out: what kind of error it is."""
    text = re.sub(r"driver \S+: ", "driver X: ", message)
    return re.sub(r"0x[0-9a-f]+|\d+|'[^']*'|\.[a-z][\w.]*", "N", text)


def test_fuzz_elf_reading(targets, tmp_path, capsys):
    tried = {"inputs": 0, "read": 0, "refused": 0}
    kinds: dict[str, tuple[int, list]] = {}
    started = time.monotonic()

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not LONG_RUN,
              suppress_health_check=list(HealthCheck))
    @given(case(targets))
    def one(example) -> None:
        t, muts = example
        target = targets[t]
        undo = _apply(target, muts)
        try:
            tried["inputs"] += 1
            with _time_limit(SECONDS_PER_INPUT):
                try:
                    read_driver(target.path)
                    tried["read"] += 1
                except ShimgenError as e:
                    message = str(e)
                    assert "\n" not in message and message.startswith("driver "), message
                    tried["refused"] += 1
                    kinds.setdefault(_error_kind(message), (t, muts))
                out, err = io.StringIO(), io.StringIO()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = cli.main(["exports", "--driver", str(target.path)])
            assert code in (0, 1), (code, err.getvalue())
            if code == 1:
                lines = err.getvalue().splitlines()
                assert len(lines) == 1 and lines[0].startswith("shimgen: error: driver "), lines
            else:
                assert err.getvalue() == "" and out.getvalue().count("\n") > 0
        finally:
            _undo(target, undo)

    one()
    seconds = time.monotonic() - started

    # One input of each kind of error, through the real command in a subprocess.
    out = tmp_path / "out"
    checked = 0
    for t, muts in list(kinds.values())[:25]:
        target = targets[t]
        undo = _apply(target, muts)
        try:
            proc = subprocess.run([sys.executable, "-m", "shimgen", "build", "--driver",
                                   str(target.path), "--out", str(out)], capture_output=True,
                                  text=True, cwd=ROOT, timeout=120)
        finally:
            _undo(target, undo)
        assert "Traceback" not in proc.stderr
        assert proc.returncode == 1, proc.stderr
        assert len(proc.stderr.splitlines()) == 1
        assert proc.stderr.startswith("shimgen: error: driver ")
        assert not out.exists() or not any(out.iterdir())
        checked += 1
    for target in targets:  # every mutation was undone
        assert target.path.read_bytes() == target.original

    with capsys.disabled():
        print(f"\nfuzz: {tried['inputs']} mutated drivers in {seconds:.0f} s: "
              f"{tried['read']} read, {tried['refused']} refused with one line; "
              f"{len(kinds)} kinds of error, {checked} of them through `shimgen build`")
    assert tried["inputs"] >= min(EXAMPLES, 100)
    assert tried["refused"] > 0 and len(kinds) >= 5


def test_fuzz_struct_sizes_match_reader():
    """The fuzzer's field tables are the ELF64 layouts the reader checks against."""
    assert struct.calcsize("<16sHHIQQQIHHHHHH") == 64
    assert _SHDR_FIELDS[-1][1] + _SHDR_FIELDS[-1][2] == 64
    assert _PHDR_FIELDS[-1][1] + _PHDR_FIELDS[-1][2] == 56
    assert _SYM_FIELDS[-1][1] + _SYM_FIELDS[-1][2] == 24
