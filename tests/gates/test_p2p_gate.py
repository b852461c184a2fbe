"""The mixed-generation P2P gate (`p2p-mixed`, gates/p2p.py): the checks found from the peer
entry points on each Debian driver and proven in the emulator (two structs differing only in
the field: not compatible before the change, compatible after, equal fields compatible
either way), the finder's shape on synthetic code, the proof failing wrong changes, the
gate in `shimgen gates --json`, `shimgen patch --gates p2p-mixed` (a copy that loads, the
original untouched), `shimgen diff` naming its sites, and the shim's in-memory change."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.driver.elf import DriverImage, Segment, read_image
from shimgen.errors import ShimgenError
from shimgen.gates.emulator import Emulator
from shimgen.gates.p2p import _change, _checks, _compare_at, discover_p2p
from shimgen.gates.p2p_prove import STRUCT_SIZE, prove_check, prove_p2p
from shimgen.gates.patch import select_changes
from shimgen.gates.plan import load_plan, plan_from_profile
from shimgen.gates.profile import ByteChange, load_profile
from shimgen.gates.x86 import Code
from shimgen.runenv import SHIM_LIBRARY

# Per Debian driver: the field, and per check (compare, branch, its bytes, the changed
# bytes as (vaddr, old, new)). Text segment: vaddr == file offset.
EXPECTED = {
    "535.261.03": (0xC30, [
        (0x2737C3, 0x2737C6, "7454", [(0x2737C6, 0x74, 0xEB)]),
        (0x2738CE, 0x2738D1, "7451", [(0x2738D1, 0x74, 0xEB)]),
        (0x4FE1D8, 0x4FE1DB, "7441", [(0x4FE1DB, 0x74, 0xEB)]),
    ]),
    "550.163.01": (0xC40, [
        (0x229393, 0x229396, "7444", [(0x229396, 0x74, 0xEB)]),
        (0x229498, 0x22949B, "7453", [(0x22949B, 0x74, 0xEB)]),
        (0x22959E, 0x2295A1, "7445", [(0x2295A1, 0x74, 0xEB)]),
    ]),
    "555.58.02": (0xC40, [
        (0x1FD9F3, 0x1FD9F6, "7444", [(0x1FD9F6, 0x74, 0xEB)]),
        (0x1FDAF8, 0x1FDAFB, "7453", [(0x1FDAFB, 0x74, 0xEB)]),
        (0x1FDBFE, 0x1FDC01, "7445", [(0x1FDC01, 0x74, 0xEB)]),
    ]),
}
RUNS = {"driver, equal": "compatible",
        "driver, 0x170 vs 0x1b0": "not compatible", "driver, 0x1b0 vs 0x170": "not compatible",
        "changed, 0x170 vs 0x1b0": "compatible", "changed, 0x1b0 vs 0x170": "compatible",
        "changed, equal": "compatible"}


def shimgen(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shimgen", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def found(drivers):
    out = {}
    for d in drivers:
        image = read_image(d.path)
        code = Code(image)
        gate = discover_p2p(image, code)
        out[d.version] = (d, image, code, gate, prove_p2p(image, gate, code))
    return out


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_debian_driver_p2p_checks_found_and_proven(found, version):
    _, _, _, gate, proof = found[version]
    offset, checks = EXPECTED[version]
    assert gate.status == "found" and gate.offset == offset, gate.why
    assert gate.found_from[0].startswith("cuDeviceCanAccessPeer ")
    assert [(k.compare.vaddr, k.branch.vaddr, k.branch.hex,
             [(c.vaddr, c.old, c.new) for c in k.changes]) for k in gate.checks] == checks
    for k in gate.checks:
        assert all(c.file_offset == c.vaddr for c in k.changes)
        assert [ld.text.endswith(f"+ {offset:#x}]") for ld in k.loads] == [True, True]
        assert k.struct_regs[0] != k.struct_regs[1]
    # cuDeviceCanAccessPeer's own check is among them, reached by direct calls
    assert any("cuDeviceCanAccessPeer" in k.reached_from for k in gate.checks)
    assert proof["ok"] and gate.proven and not proof["problems"]
    for c in proof["checks"]:
        assert {k: v.split(" (")[0] for k, v in c["runs"].items()} == RUNS


def _wrong(check, raw: bytes):
    """`check` with its branch changed to `raw` instead of the chosen bytes."""
    old = bytes.fromhex(check.branch.hex)
    changes = [ByteChange(check.branch.vaddr + i, check.branch.file_offset + i, a, b)
               for i, (a, b) in enumerate(zip(old, raw, strict=True)) if a != b]
    return dataclasses.replace(check, changes=changes)


def test_the_proof_fails_a_branch_changed_the_wrong_way(found):
    _, image, code, gate, _ = found["535.261.03"]
    emu = Emulator(code, STRUCT_SIZE)
    k = gate.checks[1]
    assert prove_check(emu, k, gate.offset).ok
    target = bytes.fromhex(k.branch.hex)[1]
    for raw in (bytes([0x75, target]),  # je -> jne: equal fields now incompatible
                b"\x66\x90",  # the je dropped: every pair incompatible
                bytes([0xEB, target + 1])):  # a jump to the wrong place
        assert not prove_check(emu, _wrong(k, raw), gate.offset).ok, raw.hex()
    # a field the check does not compare: nothing the proof changes decides it
    assert not prove_check(emu, k, gate.offset + 8).ok


# ---- the finder's shape, on synthetic code ----

GOOD = bytes.fromhex(
    "488b87400c0000"  # mov 0xc40(%rdi),%rax
    "488b96400c0000"  # mov 0xc40(%rsi),%rdx
    "4889fb"  # mov %rdi,%rbx
    "4839d0"  # cmp %rdx,%rax
    "7410"  # je +0x10
    "c3")


def _code(code: bytes) -> Code:
    """`code` at 0x10 of a synthetic image, int3 around it."""
    size = len(code) + 0x100
    data = bytearray(b"\xcc" * size)
    data[0x10:0x10 + len(code)] = code
    image = DriverImage(path=Path("/synthetic"), real_path=Path("/synthetic/libcuda.so.1"),
                        arch="x86_64",
                        version="1", build_id="00" * 20, soname="libcuda.so.1", functions=(),
                        data=(), segments=(Segment(0, 0, size, size, 5),),
                        contents=bytes(data))
    return Code(image)


def _at(code: bytes):
    c = _code(code)
    return _compare_at(c, c.insn(0x10))


def test_the_finder_wants_two_structs_one_field_and_a_branch_on_it():
    got = _at(GOOD)
    assert got is not None and got.offset == 0xC40 and got.branch.mnemonic == "je"
    variants = {
        "one struct": GOOD.replace(bytes.fromhex("488b96400c0000"),
                                   bytes.fromhex("488b97400c0000")),  # 0xc40(%rdi),%rdx
        "two fields": GOOD.replace(bytes.fromhex("488b96400c0000"),
                                   bytes.fromhex("488b96480c0000")),  # 0xc48(%rsi)
        "4-byte loads": GOOD.replace(bytes.fromhex("488b87400c0000"),
                                     bytes.fromhex("908b87400c0000")),
        "no je/jne": GOOD.replace(bytes.fromhex("7410"), bytes.fromhex("7710")),  # ja
        "loaded value overwritten": GOOD.replace(bytes.fromhex("4889fb"),
                                                 bytes.fromhex("4889f8")),  # mov %rdi,%rax
    }
    for what, code in variants.items():
        assert _at(code) is None, what


def _changed(jcc: str) -> bytes:
    return {"7410": b"\xeb\x10", "7510": b"\x66\x90", "0f8410000000": b"\x90\xe9\x10\0\0\0",
            "0f8510000000": b"\x66\x0f\x1f\x44\0\0"}[jcc]


@pytest.mark.parametrize("jcc, equal", [("7410", 0x36), ("7510", 0x26),
                                         ("0f8410000000", 0x3A), ("0f8510000000", 0x2A)])
def test_a_jne_check_has_its_equal_side_after_the_branch(jcc, equal):
    """The branch (at 0x24) sends equal fields to its target for je, and on to the next
    instruction for jne: the side that the proof checks and the change takes."""
    (check,) = _checks(_code(GOOD.replace(bytes.fromhex("7410"), bytes.fromhex(jcc))), 0xC40,
                       {}, [])
    assert (check.branch.vaddr, check.equal_target) == (0x24, equal)
    pairs = zip(bytes.fromhex(jcc), _changed(jcc), strict=True)
    changed = [0x24 + i for i, (a, b) in enumerate(pairs) if a != b]
    assert [(c.vaddr, c.file_offset) for c in check.changes] == [(v, v) for v in changed]


def test_a_load_through_r12_is_found_as_well():
    """mov 0xc40(%r12),%rax: its displacement 4 bytes into the instruction (a SIB byte)."""
    code = GOOD.replace(bytes.fromhex("488b87400c0000"), bytes.fromhex("498b8424400c0000"))
    (check,) = _checks(_code(code), 0xC40, {}, [])
    assert check.loads[0].text == "mov rax, qword ptr [r12 + 0xc40]"


def test_a_check_whose_branch_cannot_be_changed_is_left_out_and_the_next_kept():
    code = GOOD.replace(bytes.fromhex("7410"), bytes.fromhex("3e7410")) + GOOD
    checks = _checks(_code(code), 0xC40, {}, [])
    assert [k.branch.vaddr for k in checks] == [0x3C]  # the second block's je


def test_a_load_is_looked_for_past_a_start_that_ends_before_its_displacement():
    """mov 0xc40(%r12),%rdx (``49 8b 94 24``): two bytes before the displacement starts
    ``94``, a one-byte xchg that ends before it; the load four bytes before is still tried."""
    code = bytes.fromhex("498b9424400c0000"  # mov 0xc40(%r12),%rdx
                         "488b86400c0000"  # mov 0xc40(%rsi),%rax
                         "4839c2"  # cmp %rax,%rdx
                         "7410"  # je +0x10
                         "c3")
    (check,) = _checks(_code(code), 0xC40, {}, [])
    assert (check.loads[0].text, check.branch.vaddr) == ("mov rdx, qword ptr [r12 + 0xc40]", 0x22)


def test_a_start_that_ends_before_the_displacement_is_not_taken_for_its_load():
    """The bytes of a displacement (here those of ``mov 0x8(%rsi),%rdx``) right after a
    4-byte load of another field: that load ends before them and is no load of them, though
    a compare of its own field follows it."""
    second = bytes.fromhex("488b5608")  # mov 0x8(%rsi),%rdx
    code = bytes.fromhex("488b4708") + second + bytes.fromhex("4839d0" "7410" "c3")
    assert _checks(_code(code), int.from_bytes(second, "little"), {}, []) == []
    assert _at(code).offset == 8  # the compare that is there


@pytest.mark.parametrize("raw", ["7710", "0f8710000000", "3e7410", "3e0f8510000000"])
def test_a_branch_of_another_form_is_not_changed(raw):
    """ja, and je/jne with a prefix: forms the change does not know, left as they are."""
    from capstone import CS_ARCH_X86, CS_MODE_64, Cs

    (branch,) = Cs(CS_ARCH_X86, CS_MODE_64).disasm(bytes.fromhex(raw), 0x1000)
    assert _change(branch) is None


@pytest.mark.parametrize("raw", ["7410", "0f8410000000", "7510", "0f8510000000"])
def test_the_change_always_takes_the_equal_side(raw):
    """je becomes a jmp to the same place (``74`` -> ``eb``; ``0f 84`` -> ``90 e9``, the
    rel32 unchanged); jne becomes a no-op of its own length: equal fields' way."""
    from capstone import CS_ARCH_X86, CS_MODE_64, Cs

    at = 0x1000
    old = bytes.fromhex(raw)
    md = Cs(CS_ARCH_X86, CS_MODE_64)
    md.detail = True
    (branch,) = md.disasm(old, at)
    new = bytearray(old)
    for i, _, b in _change(branch):
        new[i] = b
    got = list(md.disasm(bytes(new), at))
    assert sum(i.size for i in got) == len(old)
    if branch.mnemonic == "je":
        assert [i.mnemonic for i in got][-1] == "jmp"
        assert got[-1].operands[0].imm == branch.operands[0].imm
        assert all(i.mnemonic == "nop" for i in got[:-1])
    else:
        assert all(i.mnemonic == "nop" for i in got)


# ---- the gate in the profile, the plan, `shimgen patch`, `shimgen diff` ----

def test_gates_json_has_the_p2p_gate_and_a_changed_byte_is_proven_again(drivers, tmp_path):
    d = next(x for x in drivers if x.version == "535.261.03")
    out = tmp_path / "p.json"
    r = shimgen("gates", "--driver", str(d.path), "--json", str(out))
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    (g,) = [g for g in data["gates"] if g["name"] == "p2p-mixed"]
    assert g["kind"] == "branch" and g["offset"] == "0xc30" and g["proof"]["ok"] is True
    assert [c["compare"]["vaddr"] for c in g["checks"]] == ["0x2737c3", "0x2738ce", "0x4fe1d8"]
    profile = load_profile(out)
    assert profile.p2p.proven and [x.name for x in profile.gates] == ["gdr", "dmabuf"]
    assert json.loads(json.dumps(profile.to_json())) == data
    image = read_image(d.path)
    plan = load_plan(image, str(out))
    (pg,) = [x for x in plan.gates if x.name == "p2p-mixed"]
    assert [(b.vaddr, b.old, b.new) for b in pg.init_set] == [
        (0x2737C6, 0x74, 0xEB), (0x2738D1, 0x74, 0xEB), (0x4FE1DB, 0x74, 0xEB)]
    assert not pg.fields and not pg.globals and not pg.init_mask
    # its bytes are baked only when its own proof passed: not when it failed or never ran
    # (a plan made under --allow-unproven-gates still leaves them out)
    passed = profile.p2p.proof
    for proof, baked in (({**passed, "ok": False, "status": "failed"}, False), (None, False),
                         (passed, True)):
        profile.p2p.proof = proof
        assert profile.p2p.proven == baked
        assert ("p2p-mixed" in [x.name for x in plan_from_profile(profile).gates]) == baked
    g["checks"][0]["changes"][0]["new"] = "0x75"  # je -> jne: the file says proven
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(Exception, match="p2p-mixed gate failed its emulation proof"):
        load_plan(image, str(bad))
    # `shimgen patch` proves the gate again: its changes when it passes, refused when not
    assert [c.byte.new for c in select_changes(image, load_profile(out), ["p2p-mixed"], False,
                                               [])] == [0xEB] * 3
    with pytest.raises(ShimgenError, match="gate p2p-mixed: a check failed its emulation "
                                           "proof .*; nothing written"):
        select_changes(image, load_profile(bad), ["p2p-mixed"], False, [])


def cmp_l(a: Path, b: Path) -> list[tuple[int, int, int]]:
    out = subprocess.run(["cmp", "-l", str(a), str(b)], capture_output=True, text=True)
    assert out.returncode == 1, out.stderr
    return [(int(x), int(y, 8), int(z, 8)) for x, y, z in (ln.split() for ln in
                                                            out.stdout.splitlines())]


def test_patch_p2p_copy_changes_the_branches_and_loads(drivers, probes, tmp_path):
    for d in drivers:
        mine = tmp_path / f"orig-{d.version}" / d.path.name
        mine.parent.mkdir()
        shutil.copyfile(d.path, mine)
        original = mine.read_bytes()
        before = os.stat(mine)
        out = tmp_path / f"copy-{d.version}"
        r = shimgen("patch", "--driver", str(mine), "--gates", "p2p-mixed", "-o", str(out))
        assert r.returncode == 0, r.stderr
        m = json.loads((out / "shimgen-patch.json").read_text())
        copy = out / m["copy"]["file"]
        want = [c for _, _, _, cs in EXPECTED[d.version][1] for c in cs]
        assert [(int(c["vaddr"], 16), int(c["old"], 16), int(c["new"], 16))
                for c in m["changes"]] == want
        assert cmp_l(mine, copy) == [(va + 1, o, n) for va, o, n in want]
        assert {c["gate"] for c in m["changes"]} == {"p2p-mixed"}
        assert m["copy"]["sha256"] == hashlib.sha256(copy.read_bytes()).hexdigest()
        assert mine.read_bytes() == original
        after = os.stat(mine)
        assert (after.st_mtime_ns, after.st_ino) == (before.st_mtime_ns, before.st_ino)
        env = {**os.environ, "LD_LIBRARY_PATH": str(out)}
        env.pop("LD_PRELOAD", None)
        run = subprocess.run([str(probes / "routes"), str(out / "libcuda.so.1")], env=env,
                             capture_output=True, text=True, timeout=60)
        line = next(ln for ln in run.stdout.splitlines()
                    if ln.startswith("route dlopen_libcuda.so.1 "))
        assert line.split()[3] == "0" and int(line.split()[5]) > 0, run.stdout
        assert line.split()[7] == str(out / "libcuda.so.1")
        if d.version == "535.261.03":  # the copy's checks are named as changed already
            again = discover_p2p(read_image(copy))
            assert again.status == "none" and "already unconditional" in again.why
            assert "at 0x2738ce" in again.why
    d = drivers[0]
    r = shimgen("patch", "--driver", str(d.path), "--gates", "p2p-mixed", "--mask", "-o",
                str(tmp_path / "mask"))
    assert r.returncode == 1 and "nothing to mask" in r.stderr
    assert not (tmp_path / "mask").exists()
    # with an attribute gate after it: both gates' bytes, in the order asked
    r = shimgen("patch", "--driver", str(d.path), "--gates", "p2p-mixed,gdr", "-o",
                str(tmp_path / "both"))
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "both" / "shimgen-patch.json").read_text())
    assert [c["gate"] for c in m["changes"]] == ["p2p-mixed"] * 3 + ["gdr"] * 2, m["changes"]


def test_diff_names_the_p2p_sites_of_both_drivers(drivers):
    old = next(x for x in drivers if x.version == "535.261.03")
    new = next(x for x in drivers if x.version == "550.163.01")
    r = shimgen("diff", "--json", str(old.path), str(new.path))
    assert r.returncode == 1, r.stderr
    (g,) = [g for g in json.loads(r.stdout)["gates"]["gates"] if g["name"] == "p2p-mixed"]
    assert g["differs"] and "struct offset or bit" in g["what"]
    for side, d in (("old", old), ("new", new)):
        offset, checks = EXPECTED[d.version]
        assert g[side]["fields"] == [{"offset": hex(offset), "mask": "0x0"}]
        assert g[side]["proven"] is True
        (i,) = g[side]["init"]
        assert [int(x["file_offset"], 16) for x in i["insns"]] == [
            a for cmp, br, _, _ in checks for a in (cmp, br)]
        assert [(int(c["file_offset"], 16), int(c["old"], 16), int(c["new"], 16))
                for c in i["changes"]] == [c for _, _, _, cs in checks for c in cs]
    text = shimgen("diff", str(old.path), str(new.path)).stdout
    assert "p2p-mixed: struct offset or bit, set init site differ" in text
    assert "at file 0x2738d1: 7451 je 0x273924" in text
    assert "at file 0x22949b: 7453 je 0x2294f0" in text


# ---- the shim: SHIMGEN_GATES=p2p-mixed SHIMGEN_GATE_METHOD=init, in memory ----

CHILD = r"""
import ctypes, json, sys
real, segs = sys.argv[1], [tuple(int(x, 16) for x in s.split(":")) for s in sys.argv[2:]]
lib = ctypes.CDLL("libcuda.so.1")
v = ctypes.c_int(0)
rc = lib.cuDriverGetVersion(ctypes.byref(v))
maps = [m for m in (ln.rstrip("\n").split(None, 5) for ln in open("/proc/self/maps"))
        if m[5:] == [real]]
base = next(int(m[0].split("-")[0], 16) for m in maps if int(m[2], 16) == 0)
data = open(real, "rb").read()
diffs = []
with open("/proc/self/mem", "rb") as mem:
    for vaddr, off, size in segs:
        mem.seek(base + vaddr)
        got = mem.read(size)
        diffs += [[hex(vaddr + i), data[off + i], got[i]]
                  for i in range(size) if got[i] != data[off + i]]
print(json.dumps({"rc": rc, "version": v.value, "diffs": diffs}))
"""


def test_shim_changes_the_branches_in_memory_with_the_init_method_only(drivers, tmp_path):
    d = next(x for x in drivers if x.version == "535.261.03")
    r = shimgen("build", "--driver", str(d.path), "--gates", "auto", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    shim = next(tmp_path.glob(f"*/{SHIM_LIBRARY}"))
    image = read_image(d.path)
    segs = [f"{s.vaddr:x}:{s.offset:x}:{s.filesz:x}" for s in image.segments if s.executable]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHIMGEN_", "LD_"))}
    env.update(LD_PRELOAD=str(shim), LD_LIBRARY_PATH=str(d.libdir), SHIMGEN_GATES="p2p-mixed",
               SHIMGEN_GATE_METHOD="init")

    def child() -> tuple[dict, str]:
        p = subprocess.run([sys.executable, "-c", CHILD, str(d.path.resolve()), *segs],
                           env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout), p.stderr

    got, err = child()
    assert got["rc"] == 0 and got["version"] > 0
    want = [c for _, _, _, cs in EXPECTED[d.version][1] for c in cs]
    assert got["diffs"] == [[hex(va), o, n] for va, o, n in want]
    assert "p2p-mixed set at its init site (changed before cuInit)" in err
    env.pop("SHIMGEN_GATE_METHOD")  # the struct method has nothing to write for it
    got, err = child()
    assert got["diffs"] == [] and "changes the driver's code only" in err
    env.update(SHIMGEN_GATES="-p2p-mixed", SHIMGEN_GATE_METHOD="init")
    got, err = child()
    assert got["diffs"] == [] and "changes the driver's code only" in err
