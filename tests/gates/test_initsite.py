"""The init site: chosen by analysis and proven by emulation on the real Debian drivers, the
published 590.48.01 sequence assembled into a synthetic image, and `shimgen patch` (the
patched copy: exactly the manifest's bytes differ, it loads and answers through
LD_LIBRARY_PATH, and a foreign or already patched file is refused)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from capstone import CS_ARCH_X86, CS_MODE_64, Cs

from shimgen.driver.elf import DriverImage, Segment, read_image
from shimgen.gates.discover import _init_sites, discover
from shimgen.gates.initsite import MASK, SET, choose, prove_patch
from shimgen.gates.profile import ByteChange
from shimgen.gates.prove import Emulator, prove
from shimgen.gates.x86 import Code
from shimgen.runenv import SHIM_LIBRARY

# What each Debian driver's gdr bit gets: (vaddr, old, new) per direction. The mask changes
# the `or $0x20` after the driver's check and the merge of a bit computed at run time
# (`or %edx,%eax` -> `or %eax,%eax`). dmabuf has none: its byte is only ever stored from
# values built in registers from other data.
EXPECTED = {
    "535.261.03": {SET: [(0x42D41B, 0x40, 0x60), (0x42D440, 0xC0, 0xE0)],
                   MASK: [(0x3CD99E, 0xD0, 0xC0), (0x431437, 0x20, 0x00)]},
    "550.163.01": {SET: [(0x3F763B, 0x40, 0x60), (0x3F7660, 0xC0, 0xE0)],
                   MASK: [(0x39732E, 0xD0, 0xC0), (0x3F9B97, 0x20, 0x00)]},
    "555.58.02": {SET: [(0x3B497B, 0x40, 0x60), (0x3B49A0, 0xC0, 0xE0)],
                  MASK: [(0x35691E, 0xD0, 0xC0), (0x3B63C7, 0x20, 0x00)]},
}


@pytest.fixture(scope="module")
def proven(drivers):
    out = {}
    for d in drivers:
        image = read_image(d.path)
        profile = discover(image)
        out[d.version] = (d, image, profile, prove(image, profile))
    return out


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_debian_driver_init_sites_chosen_and_proven(proven, version):
    _, _, profile, result = proven[version]
    assert result.ok, result.problems
    gdr, dmabuf = profile.gate("gdr"), profile.gate("dmabuf")
    for direction, want in EXPECTED[version].items():
        (p,) = [p for p in gdr.init_patches if p.direction == direction]
        assert p.status == "chosen" and p.proven, p.why
        assert [(c.vaddr, c.old, c.new) for c in p.changes] == want
        assert all(c.file_offset == c.vaddr for c in p.changes)  # text: vaddr == offset
    for p in dmabuf.init_patches:
        assert p.status == "none" and not p.changes and not p.proven
    assert "the bit is computed from run-time data at" in gdr.init_patches[0].why  # set
    assert "drops the merged register" in gdr.init_patches[1].why  # mask


# ---- the published sequence of 590.48.01, at 0x42d690 (background.md) ----
AT = 0x42D690
PUBLISHED = bytes.fromhex(
    "0fb687145f0000"  # movzbl 0x5f14(%rdi),%eax
    "89c2"  # mov %eax,%edx
    "83ca40"  # or $0x40,%edx
    "83bf600c000008"  # cmpl $0x8,0xc60(%rdi)
    "8897145f0000"  # mov %dl,0x5f14(%rdi)
    "c3")
PUBLISHED_TEXT = ["movzx eax, byte ptr [rdi + 0x5f14]", "mov edx, eax", "or edx, 0x40",
                  "cmp dword ptr [rdi + 0xc60], 8", "mov byte ptr [rdi + 0x5f14], dl", "ret"]
SETTER = bytes.fromhex("808b145f000020c3")  # orb $0x20,0x5f14(%rbx); ret


def synthetic(pieces: dict[int, bytes]) -> DriverImage:
    """An image whose one executable segment (vaddr == file offset) holds `pieces`."""
    size = max(a + len(b) for a, b in pieces.items()) + 0x100
    data = bytearray(b"\xcc" * size)
    for a, b in pieces.items():
        data[a:a + len(b)] = b
    return DriverImage(path=Path("/synthetic"), real_path=Path("/synthetic/libcuda.so.590.48.01"),
                       arch="x86_64",
                       version="590.48.01", build_id="00" * 20, soname="libcuda.so.1",
                       functions=(), data=(), segments=(Segment(0, 0, size, size, 5),),
                       contents=bytes(data))


def chosen(image: DriverImage, direction: str):
    code = Code(image)
    sites = _init_sites(code, 0x5F14, 0x20)
    return code, sites, choose(code, sites, 0x5F14, 0x20, direction)


def test_published_sequence_gives_the_published_byte():
    md = Cs(CS_ARCH_X86, CS_MODE_64)
    assert [f"{i.mnemonic} {i.op_str}".strip() for i in md.disasm(PUBLISHED, AT)] == PUBLISHED_TEXT
    image = synthetic({AT: PUBLISHED})
    code, sites, p = chosen(image, SET)
    assert p.status == "chosen", p.why
    # file offset 0x42d69b, 0x40 -> 0x60: `83 ca 40` -> `83 ca 60`, as published
    assert p.changes == [ByteChange(0x42D69B, 0x42D69B, 0x40, 0x60)]
    assert [r.hex for r in p.insns] == ["83ca40"]
    assert prove_patch(Emulator(code, 0x7000), code, p, sites) == []


def test_the_gates_own_bit_is_the_one_added():
    """The same sequence read for another bit of the byte (0x08): the change is 0x40 -> 0x48,
    and the mask of an `orb $0x28` keeps its 0x20."""
    image = synthetic({AT: PUBLISHED, 0x431430: bytes.fromhex("808b145f000028c3")})
    code = Code(image)
    sites = _init_sites(code, 0x5F14, 0x08)
    p = choose(code, sites, 0x5F14, 0x08, SET)
    assert p.changes == [ByteChange(0x42D69B, 0x42D69B, 0x40, 0x48)]
    assert prove_patch(Emulator(code, 0x7000), code, p, sites) == []
    p = choose(code, sites, 0x5F14, 0x08, MASK)
    assert p.changes == [ByteChange(0x431436, 0x431436, 0x28, 0x20)]
    assert prove_patch(Emulator(code, 0x7000), code, p, sites) == []


def test_the_proof_catches_a_change_that_sets_another_bit_too():
    code, sites, p = chosen(synthetic({AT: PUBLISHED}), SET)
    for new in (0x61, 0x40 | 0x10, 0x20):
        wrong = type(p)(**{**p.__dict__, "changes": [ByteChange(0x42D69B, 0x42D69B, 0x40, new)]})
        assert prove_patch(Emulator(code, 0x7000), code, wrong, sites), hex(new)


def test_mask_takes_the_bit_out_of_every_setter():
    image = synthetic({AT: PUBLISHED, 0x431430: SETTER})
    code, sites, p = chosen(image, MASK)
    assert p.status == "chosen", p.why
    assert p.changes == [ByteChange(0x431436, 0x431436, 0x20, 0x00)]
    assert prove_patch(Emulator(code, 0x7000), code, p, sites) == []
    assert chosen(synthetic({AT: PUBLISHED}), MASK)[2].status == "none"


# a bitfield assigned from run-time data: movzbl 0x5f14(%rbx),%eax; and $~BITS,%eax;
# or %edx,%eax; mov %al,0x5f14(%rbx); then what follows the store
def computed(and_imm: int, after: str) -> bytes:
    return bytes.fromhex(f"0fb683145f000083e0{and_imm:02x}09d08883145f0000{after}c3")


def test_mask_drops_the_merge_of_a_computed_bit_only_when_exact():
    code, sites, p = chosen(synthetic({0x431430: computed(0xDF, "31c0")}), MASK)
    assert p.status == "chosen", p.why
    assert p.changes == [ByteChange(0x43143B, 0x43143B, 0xD0, 0xC0)]  # or %eax,%eax
    assert prove_patch(Emulator(code, 0x7000), code, p, sites) == []
    # the and also clears another bit: the merged register may carry it, not changed
    p = chosen(synthetic({0x431430: computed(0xCF, "31c0")}), MASK)[2]
    assert p.status == "none" and "computed from run-time data at 0x43143c" in p.why
    # a jne after the store reads the flags the merge set: not changed
    p = chosen(synthetic({0x431430: computed(0xDF, "7500")}), MASK)[2]
    assert p.status == "none" and not p.changes


def test_two_init_sequences_are_ambiguous_and_none_is_none():
    _, _, p = chosen(synthetic({AT: PUBLISHED, 0x500000: PUBLISHED}), SET)
    assert p.status == "ambiguous" and not p.changes
    assert "0x42d690" in p.why and "0x500000" in p.why
    _, _, p = chosen(synthetic({0x431430: SETTER}), SET)
    assert p.status == "none" and not p.changes


# ---- shimgen patch ----

def shimgen(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shimgen", *args], capture_output=True,
                          text=True, timeout=300)


def cmp_l(a: Path, b: Path) -> list[tuple[int, int, int]]:
    """`cmp -l`: (1-based offset, old, new) for every differing byte."""
    out = subprocess.run(["cmp", "-l", str(a), str(b)], capture_output=True, text=True)
    assert out.returncode == 1, out.stderr
    return [(int(x), int(y, 8), int(z, 8)) for x, y, z in (ln.split() for ln in
                                                            out.stdout.splitlines())]


@pytest.mark.parametrize("mask", [False, True], ids=["set", "mask"])
def test_patch_copy_differs_in_exactly_the_manifest_bytes_and_loads(drivers, probes, tmp_path,
                                                                     mask):
    for d in drivers:
        # the original is a private copy, so that a mistake that writes it cannot harm the
        # cached driver the other tests use
        mine = tmp_path / f"orig-{d.version}" / d.path.name
        mine.parent.mkdir()
        shutil.copyfile(d.path, mine)
        original = mine.read_bytes()
        before = os.stat(mine)
        out = tmp_path / f"copy-{d.version}"
        r = shimgen("patch", "--driver", str(mine), "--gates", "gdr", "-o", str(out),
                    *(["--mask"] if mask else []))
        assert r.returncode == 0, r.stderr
        m = json.loads((out / "shimgen-patch.json").read_text())
        copy = out / m["copy"]["file"]
        want = [(int(c["file_offset"], 16) + 1, int(c["old"], 16), int(c["new"], 16))
                for c in m["changes"]]
        assert cmp_l(mine, copy) == want
        assert [(v, o, n) for v, o, n in EXPECTED[d.version][MASK if mask else SET]] == [
            (int(c["vaddr"], 16), int(c["old"], 16), int(c["new"], 16)) for c in m["changes"]]
        assert m["original"]["sha256"] == hashlib.sha256(original).hexdigest()
        assert m["copy"]["sha256"] == hashlib.sha256(copy.read_bytes()).hexdigest()
        assert mine.read_bytes() == original  # the original is never written
        after = os.stat(mine)
        assert (after.st_mtime_ns, after.st_ino) == (before.st_mtime_ns, before.st_ino)
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(copy).st_mode) == 0o600
        assert os.readlink(out / "libcuda.so.1") == copy.name
        assert os.readlink(out / "libcuda.so") == "libcuda.so.1"
        env = {**os.environ, "LD_LIBRARY_PATH": str(out)}
        env.pop("LD_PRELOAD", None)
        run = subprocess.run([str(probes / "routes"), str(out / "libcuda.so.1")], env=env,
                             capture_output=True, text=True, timeout=60)
        line = next(ln for ln in run.stdout.splitlines() if ln.startswith("route dlopen_libcuda"
                                                                           ".so.1 "))
        assert line.split()[3] == "0" and int(line.split()[5]) > 0, run.stdout
        assert line.split()[7] == str(out / "libcuda.so.1")


def test_patch_refuses_foreign_and_already_patched_files(drivers, tmp_path):
    a, b = drivers[0], drivers[1]
    profile = tmp_path / "a.json"
    assert shimgen("gates", "--driver", str(a.path), "--json", str(profile)).returncode == 0
    out = tmp_path / "out"
    r = shimgen("patch", "--driver", str(b.path), "--gates", "gdr", "-o", str(out),
                "--profile", str(profile))
    assert r.returncode == 1 and "is not the profiled build (build-id" in r.stderr
    assert r.stderr.count("\n") == 1 and not out.exists()
    assert shimgen("patch", "--driver", str(a.path), "--gates", "gdr", "-o",
                   str(out)).returncode == 0
    copy = out / "libcuda.so.1"
    again = tmp_path / "again"
    r = shimgen("patch", "--driver", str(copy), "--gates", "gdr", "-o", str(again),
                "--profile", str(profile))
    assert r.returncode == 1 and "is already patched" in r.stderr and not again.exists()
    r = shimgen("patch", "--driver", str(copy), "--gates", "gdr", "-o", str(again))
    assert r.returncode == 1 and "is already patched" in r.stderr and not again.exists()
    # a copy moved away from its manifest: with the profile, its bytes say it
    moved = tmp_path / "moved" / a.path.name
    moved.parent.mkdir()
    shutil.copyfile(copy, moved)
    r = shimgen("patch", "--driver", str(moved), "--gates", "gdr", "-o", str(again),
                "--profile", str(profile))
    assert r.returncode == 1 and "is already patched" in r.stderr and not again.exists()
    # the same directory again: nothing replaced
    listing = sorted(os.listdir(out))
    r = shimgen("patch", "--driver", str(a.path), "--gates", "gdr", "--mask", "-o", str(out))
    assert r.returncode == 1 and "already exists" in r.stderr
    assert sorted(os.listdir(out)) == listing
    r = shimgen("patch", "--driver", str(a.path), "--gates", "gdr,dmabuf", "-o",
                str(tmp_path / "both"))
    assert r.returncode == 1 and "gate dmabuf has no init site to set" in r.stderr
    assert not (tmp_path / "both").exists()


def test_patch_site_selects_one_instruction(drivers, tmp_path):
    d = next(x for x in drivers if x.version in EXPECTED)
    out = tmp_path / "one"
    r = shimgen("patch", "--driver", str(d.path), "--gates", "gdr", "-o", str(out), "--site",
                hex(EXPECTED[d.version][SET][0][0] - 2))
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "shimgen-patch.json").read_text())
    assert [int(c["vaddr"], 16) for c in m["changes"]] == [EXPECTED[d.version][SET][0][0]]
    r = shimgen("patch", "--driver", str(d.path), "--gates", "gdr", "-o", str(tmp_path / "x"),
                "--site", "0x1000")
    assert r.returncode == 1 and "is not an instruction the chosen changes touch" in r.stderr


def test_patch_refuses_an_output_that_is_not_its_own_directory(drivers, tmp_path):
    d = drivers[0]
    afile = tmp_path / "afile"
    afile.write_text("x")
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    group = tmp_path / "group"
    group.mkdir()
    group.chmod(0o770)
    for out, why in ((afile, "not a directory this command can write into"),
                     (link, "not a directory this command can write into"),
                     (shared, "writable by others"), (group, "writable by others")):
        r = shimgen("patch", "--driver", str(d.path), "--gates", "gdr", "-o", str(out))
        assert r.returncode == 1 and why in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert afile.read_text() == "x" and os.listdir(real) == [] and os.listdir(shared) == []
    assert os.listdir(group) == []
    # one of this user's that others may read and enter, not write: written into
    readable = tmp_path / "readable"
    readable.mkdir()
    readable.chmod(0o755)
    r = shimgen("patch", "--driver", str(d.path), "--gates", "gdr", "-o", str(readable))
    assert r.returncode == 0, r.stderr
    assert "shimgen-patch.json" in os.listdir(readable)


def test_a_profile_files_init_change_is_proven_again_at_build(drivers, tmp_path):
    """`shimgen build --gates FILE` does not take the file's "proven" on trust: a change
    that sets another bit as well is refused in one line, nothing built; `shimgen patch`
    refuses it too, no copy written."""
    d = next(x for x in drivers if x.version == "535.261.03")
    good = tmp_path / "good.json"
    assert shimgen("gates", "--driver", str(d.path), "--json", str(good)).returncode == 0
    data = json.loads(good.read_text())
    (p,) = [p for p in data["gates"][0]["init_patches"] if p["direction"] == SET]
    p["changes"][0]["new"] = "0x61"  # 0x40 | 0x20 | 0x01
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    r = shimgen("build", "--driver", str(d.path), "--gate-profile", str(bad), "--out",
                str(tmp_path / "out"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "an init-site change failed its emulation proof" in r.stderr
    assert not list((tmp_path / "out").glob(f"*/{SHIM_LIBRARY}"))
    # nor does `shimgen patch`: the gate's change is refused, no copy written
    r = shimgen("patch", "--driver", str(d.path), "--gates", "gdr", "--gate-profile", str(bad),
                "-o", str(tmp_path / "copy"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "gate gdr: the init-site change failed its emulation proof" in r.stderr, r.stderr
    assert not (tmp_path / "copy").exists()


# ---- SHIMGEN_GATE_METHOD=init on a real driver: no GPU is needed to see the code change ----

CHILD = r"""
import ctypes, json, sys
real, segs = sys.argv[1], [tuple(int(x, 16) for x in s.split(":")) for s in sys.argv[2:]]
lib = ctypes.CDLL("libcuda.so.1")
v = ctypes.c_int(0)
rc = lib.cuDriverGetVersion(ctypes.byref(v))  # the driver's load: the code changed there
maps = [m for m in (ln.rstrip("\n").split(None, 5) for ln in open("/proc/self/maps"))
        if m[5:] == [real]]  # the whole path, never a part of it
base = next(int(m[0].split("-")[0], 16) for m in maps if int(m[2], 16) == 0)
data = open(real, "rb").read()
diffs = []
with open("/proc/self/mem", "rb") as mem:
    for vaddr, off, size in segs:
        mem.seek(base + vaddr)
        got = mem.read(size)
        diffs += [[hex(vaddr + i), data[off + i], got[i]]
                  for i in range(size) if got[i] != data[off + i]]
print(json.dumps({"rc": rc, "version": v.value, "diffs": diffs, "perms": [m[1] for m in maps]}))
"""


@pytest.fixture(scope="module")
def real_init_shim(drivers, tmp_path_factory):
    d = next(x for x in drivers if x.version == "535.261.03")
    out = tmp_path_factory.mktemp("realinit")
    r = shimgen("build", "--driver", str(d.path), "--gates", "auto", "--out", str(out))
    assert r.returncode == 0, r.stderr
    return d, next(out.glob(f"*/{SHIM_LIBRARY}"))


@pytest.mark.parametrize("spec", ["gdr", "-gdr"])
def test_init_method_changes_exactly_the_chosen_bytes_of_a_real_driver(real_init_shim, spec):
    d, shim = real_init_shim
    image = read_image(d.path)
    segs = [f"{s.vaddr:x}:{s.offset:x}:{s.filesz:x}" for s in image.segments if s.executable]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHIMGEN_", "LD_"))}
    env.update(LD_PRELOAD=str(shim), LD_LIBRARY_PATH=str(d.libdir), SHIMGEN_GATES=spec,
               SHIMGEN_GATE_METHOD="init")
    r = subprocess.run([sys.executable, "-c", CHILD, str(d.path.resolve()), *segs], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["rc"] == 0 and got["version"] > 0
    want = EXPECTED[d.version][MASK if spec.startswith("-") else SET]
    assert got["diffs"] == [[hex(va), old, new] for va, old, new in want]
    assert "at its init site (changed before cuInit)" in r.stderr
    assert all(not ("w" in p and "x" in p) for p in got["perms"])
    # without the method: the code is exactly the file's
    env.pop("SHIMGEN_GATE_METHOD")
    r = subprocess.run([sys.executable, "-c", CHILD, str(d.path.resolve()), *segs], env=env,
                       capture_output=True, text=True, timeout=120)
    assert json.loads(r.stdout)["diffs"] == []
