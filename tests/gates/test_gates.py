"""Gate discovery and its emulation proof, on real Debian libcuda builds (no GPU needed)."""

from __future__ import annotations

import builtins
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from capstone import CS_ARCH_X86, CS_MODE_64, Cs

from shimgen import cli
from shimgen.driver.elf import read_image
from shimgen.errors import ShimgenError
from shimgen.gates import prove as proving
from shimgen.gates.discover import discover
from shimgen.gates.profile import GateDiscoveryError, GateField, load_profile
from shimgen.gates.prove import prove
from shimgen.gates.report import format_table

ROOT = Path(__file__).resolve().parents[2]

# Facts read by hand with objdump from each build (and found again by discover()): the device
# table lookup before the call to the attribute reader, the bit tested by attribute 116 and
# the extra bit tested by attribute 124, the global byte both also test, the highest case.
EXPECTED = {
    "535.261.03": dict(table=0x1C08960, offset=0x260, gdr=(0x3684, 0x20), dmabuf=(0x35FC, 0x8),
                       glob=0x1C0CAB8, last=134, reader=0x2133C0),
    "550.163.01": dict(table=0x1B64660, offset=0x288, gdr=(0x3C5C, 0x20), dmabuf=(0x3BCC, 0x8),
                       glob=0x1B6AA40, last=134, reader=0x1D17D0),
    "555.58.02": dict(table=0x1ACDB80, offset=0x288, gdr=(0x3DEC, 0x20), dmabuf=(0x3D5C, 0x8),
                      glob=0x1AD3D68, last=135, reader=0x1A27C0),
}


@pytest.fixture(scope="module")
def analysed(drivers):
    """(driver, profile, proof) for every fetched driver."""
    out = []
    for d in drivers:
        image = read_image(d.path)
        p = discover(image)
        out.append((d, p, prove(image, p)))
    return out


def _one(analysed, version: str):
    return next((d, p, r) for d, p, r in analysed if d.version == version)


def test_every_fetched_driver_is_expected(drivers):
    assert sorted(d.version for d in drivers) == sorted(EXPECTED)


def test_identity(analysed):
    for d, p, _ in analysed:
        assert p.driver_version == d.version
        assert p.driver_file == d.path.name
        raw = d.path.read_bytes()
        # the note's payload follows its "GNU\0" name
        assert b"GNU\x00" + bytes.fromhex(p.build_id) in raw
        assert len(p.build_id) == 40


def test_reader_and_device_table(analysed):
    for d, p, _ in analysed:
        exp = EXPECTED[d.version]
        assert p.reader.vaddr == exp["reader"]
        assert p.reader.last_attribute == exp["last"]
        assert p.reader.table_kind == "rel32"
        assert p.device_table.vaddr == exp["table"]
        assert p.device_table.offset == exp["offset"]
        assert p.device_table.stride == 8
        assert p.reader.chain[0].startswith("cuDeviceGetAttribute")


def test_gates(analysed):
    for d, p, _ in analysed:
        exp = EXPECTED[d.version]
        gdr, dmabuf = p.gate("gdr"), p.gate("dmabuf")
        assert gdr is not None and dmabuf is not None
        assert [(f.offset, f.mask) for f in gdr.fields] == [exp["gdr"]]
        assert [(g.vaddr, g.size) for g in gdr.globals] == [(exp["glob"], 1)]
        assert gdr.attributes == [110, 116, 124]
        assert [(f.offset, f.mask) for f in dmabuf.fields] == [exp["dmabuf"]]
        assert dmabuf.attributes == [124]
        assert [g.name for g in p.gates] == ["gdr", "dmabuf"]


def test_required_attribute_cases(analysed):
    for d, p, _ in analysed:
        exp = EXPECTED[d.version]
        c116, c124, c110 = p.case(116), p.case(124), p.case(110)
        assert c116.kind == "field+global" and c116.complete
        assert c116.bit_tests() == {exp["gdr"]}
        assert c124.kind == "field+global" and c124.complete
        assert c124.bit_tests() == {exp["gdr"], exp["dmabuf"]}
        # 110 also needs a helper (the VMM check): reported, not hidden
        assert c110.kind == "computed" and not c110.complete and len(c110.calls) == 1
        assert exp["gdr"] in c110.bit_tests()
        # attribute 146 is newer than these builds: no case, and none invented
        assert p.case(146) is None and p.reader.last_attribute < 146


def test_every_case_is_reported(analysed):
    kinds = {"constant", "field", "global", "field+global", "field-value", "computed", "unknown"}
    for _d, p, _ in analysed:
        attrs = [c.attribute for c in p.cases]
        assert attrs == sorted(set(attrs))
        assert len(attrs) > 100
        assert {c.kind for c in p.cases} <= kinds
        for c in p.cases:
            if c.kind == "constant":
                assert c.constant is not None and not c.fields and not c.globals


def test_recorded_bytes_are_the_files_bytes(analysed):
    md = Cs(CS_ARCH_X86, CS_MODE_64)
    for d, p, _ in analysed:
        raw = d.path.read_bytes()
        refs = proving._all_refs(p)
        assert len(refs) > 20
        for r in refs:
            code = bytes.fromhex(r.hex)
            assert raw[r.file_offset:r.file_offset + len(code)] == code
            ins = next(md.disasm(code, r.vaddr))
            assert f"{ins.mnemonic} {ins.op_str}".strip() == r.text
            assert ins.size == len(code)


def test_init_sites(analysed):
    for d, p, _ in analysed:
        gdr = p.gate("gdr")
        off, mask = EXPECTED[d.version]["gdr"]
        assert gdr.init_sites
        assert all(s.offset == off for s in gdr.init_sites)
        # the 590.48.01 shape: or $0x40,%edx ... mov %dl,off(%rdi) (bit 0x20 not set)
        stores = [s for s in gdr.init_sites if s.kind == "store" and s.or_insn is not None
                  and s.or_insn.text == "or edx, 0x40"]
        assert len(stores) == 1 and not stores[0].sets_bit
        # and at least one site that does set the bit: orb $0x20,off(reg)
        assert any(s.kind == "or-imm" and s.imm is not None and s.imm & mask and s.sets_bit
                   for s in gdr.init_sites)


def test_proof_passes(analysed):
    for d, _p, r in analysed:
        assert r.ok, f"{d.version}: {r.summary()}"
        assert r.build_id_matches and not r.bytes_mismatched
        by = {(a.gate, a.attribute): a for a in r.attributes}
        assert set(by) == {("gdr", 110), ("gdr", 116), ("gdr", 124), ("dmabuf", 124)}
        for a in by.values():
            assert a.set_value.value == 1 and a.clear_value.value == 0
            assert a.single_clears and all(x.value == 0 for _, x in a.single_clears)
        assert by[("gdr", 116)].assumptions == []
        assert len(by[("gdr", 110)].assumptions) == 1  # the helper call, said out loud
        assert r.device_table is not None and r.device_table.ok


def test_proof_rejects_a_wrong_bit(analysed):
    d, p, _ = _one(analysed, "535.261.03")
    gdr = p.gate("gdr")
    wrong = replace(gdr, fields=[GateField(gdr.fields[0].offset, 0x10)])
    case = p.case(116)
    field = case.fields[0]
    bad_case = replace(case, fields=[replace(field, mask=0x10)])
    bad = replace(p, gates=[wrong], cases=[bad_case if c.attribute == 116 else c
                                           for c in p.cases])
    bad.gates[0] = replace(wrong, attributes=[116])
    r = prove(read_image(d.path), bad)
    assert not r.ok
    assert r.attributes[0].set_value.value == 0


def test_proof_rejects_a_wrong_device_table(analysed):
    d, p, _ = _one(analysed, "550.163.01")
    bad = replace(p, device_table=replace(p.device_table, offset=p.device_table.offset + 8))
    r = prove(read_image(d.path), bad)
    assert not r.ok and not r.device_table.ok


def test_proof_fails_for_a_gate_no_attribute_of_which_it_proved(analysed):
    """Each gate must be proven by an attribute of its own: one that lists none (nothing run
    for it, no problem said) fails the proof as well."""
    d, p, _ = _one(analysed, "535.261.03")
    bad = replace(p, gates=[replace(g, attributes=[]) if g.name == "dmabuf" else g
                            for g in p.gates])
    r = prove(read_image(d.path), bad)
    assert not r.problems and {a.gate for a in r.attributes} == {"gdr"}
    assert not r.ok and r.to_json()["status"] == "failed"


def test_proof_rejects_another_build(analysed):
    (_d1, p1, _), (d2, _p2, _) = analysed[0], analysed[1]
    r = prove(read_image(d2.path), p1)
    assert not r.ok and not r.build_id_matches
    assert "build-id" in r.problems[0]


def _patched(src: Path, tmp_path: Path, at: int, new: bytes) -> Path:
    dst = tmp_path / src.name
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.seek(at)
        f.write(new)
    return dst


def test_unknown_binaries_give_a_clear_error(analysed, tmp_path):
    d, p, _ = _one(analysed, "535.261.03")
    raw = d.path.read_bytes()
    # 1. the reader's bounds check (cmp esi, N) replaced by NOPs: no jump table on %esi
    cmp = next(i for i in p.reader.insns if i.text.startswith("cmp"))
    f = _patched(d.path, tmp_path, cmp.file_offset, b"\x90" * (len(cmp.hex) // 2))
    with pytest.raises(GateDiscoveryError, match="attribute reader not found"):
        discover(read_image(f))
    # 2. case 116's bit test replaced by NOPs: GPU_DIRECT_RDMA_SUPPORTED tests no bit
    t = p.case(116).fields[0].insn
    f = _patched(d.path, tmp_path, t.file_offset, b"\x90" * (len(t.hex) // 2))
    with pytest.raises(GateDiscoveryError, match="116 .* tests no device-struct bit"):
        discover(read_image(f))
    # 3. the export renamed in .dynstr
    at = raw.index(b"cuDeviceGetAttribute\x00")
    f = _patched(d.path, tmp_path, at, b"cuDeviceGetAttributX")
    with pytest.raises(GateDiscoveryError, match="does not export cuDeviceGetAttribute"):
        discover(read_image(f))
    # 4. not an ELF file at all
    junk = tmp_path / "libcuda.so.1.2.3"
    junk.write_bytes(b"\x7fELF" + b"\x00" * 100)
    with pytest.raises(ShimgenError) as e:
        discover(read_image(junk))
    assert "\n" not in str(e.value)
    # 5. the device table load replaced: the call site no longer reads a table
    load = next(i for i in p.device_table.insns if i.text.startswith("mov rdi"))
    f = _patched(d.path, tmp_path, load.file_offset, b"\x90" * (len(load.hex) // 2))
    with pytest.raises(GateDiscoveryError, match="device table not found"):
        discover(read_image(f))


def test_profile_round_trip(analysed, tmp_path):
    _d, p, r = analysed[0]
    p.proof = r.to_json()
    out = tmp_path / "p.json"
    out.write_text(json.dumps(p.to_json()))
    back = load_profile(out)
    assert back.to_json() == p.to_json()
    assert back.gate("gdr").fields == p.gate("gdr").fields


@pytest.mark.parametrize("mutate, message", [
    (lambda j: "not json", "is not JSON"),
    (lambda j: [], "top level is not an object"),
    (lambda j: {**j, "schema": "other/1"}, "schema is 'other/1'"),
    (lambda j: {**j, "driver": {**j["driver"], "build_id": "xyz"}}, "build_id"),
    (lambda j: {**j, "gates": []}, "no gates"),
    (lambda j: {**j, "device_table": {**j["device_table"], "stride": 4}}, "stride is not 8"),
    (lambda j: {**j, "device_table": {**j["device_table"], "vaddr": 12}}, "device_table.vaddr"),
    (lambda j: {**j, "gates": [{**j["gates"][0], "fields": [{"offset": "0x10"}]}]},
     r"gates\[0\].fields\[0\] has no 'mask'"),
    (lambda j: {**j, "reader": {**j["reader"], "insns": [{"vaddr": "0x1", "file_offset": "0x1",
                                                           "bytes": "ZZ", "text": "x"}]}},
     "bytes is not lowercase hex"),
])
def test_load_profile_rejects_malformed(analysed, tmp_path, mutate, message):
    _d, p, _ = analysed[0]
    doc = mutate(p.to_json())
    f = tmp_path / "bad.json"
    f.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(GateDiscoveryError, match=message) as e:
        load_profile(f)
    assert "\n" not in str(e.value)


def test_format_table(analysed):
    d, p, _ = _one(analysed, "555.58.02")
    text = format_table(p)
    assert "build-id    ff5e1c8a6245a1eee77504aae2be3b6dfad0723d" in text
    assert "*(base + 0x1acdb80 + 0x288 + ordinal*8)" in text
    assert "gdr      110,116,124       [0x3dec]&0x20" in text
    assert "124   field+global  [0x3d5c]&0x8* [0x3dec]&0x20* g0x1ad3d68/1*" in text
    assert "(GPU_DIRECT_RDMA_SUPPORTED)" in text


def test_cli_writes_a_proven_profile(analysed, tmp_path):
    d, _p, _ = analysed[0]
    out = tmp_path / "profile.json"
    proc = subprocess.run([sys.executable, "-m", "shimgen", "gates", "--driver", str(d.path),
                           "--json", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "proof PASS" in proc.stdout
    prof = load_profile(out)
    assert prof.proof is not None and prof.proof["ok"] is True
    assert prof.build_id == _p.build_id


def test_cli_json_without_a_file_prints_the_profile_alone(analysed, tmp_path, capsys):
    """`gates --json` with no FILE: the profile on stdout, as the file would hold it, and
    nothing else there (no table), as `report --json` prints JSON alone."""
    d, _p, _ = analysed[0]
    out = tmp_path / "profile.json"
    assert cli.main(["gates", "--driver", str(d.path), "--json", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["gates", "--driver", str(d.path), "--json"]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed) == json.loads(out.read_text())
    assert printed == out.read_text()


def test_cli_writes_nothing_when_the_proof_fails(analysed, tmp_path, monkeypatch, capsys):
    d, _p, _ = analysed[0]
    out = tmp_path / "profile.json"
    monkeypatch.setattr(proving, "prove", lambda image, p: proving.ProofResult(False, True, 0))
    assert cli.main(["gates", "--driver", str(d.path), "--json", str(out)]) == 1
    assert not out.exists()
    assert "no profile written" in capsys.readouterr().err


def test_cli_unknown_binary(tmp_path):
    junk = tmp_path / "libcuda.so.9.9.9"
    junk.write_bytes(b"not an elf")
    out = tmp_path / "p.json"
    proc = subprocess.run([sys.executable, "-m", "shimgen", "gates", "--driver", str(junk),
                           "--json", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1
    assert proc.stderr.startswith("shimgen: error: ") and proc.stderr.count("\n") == 1
    assert not out.exists()


def _past_the_end(src: Path, tmp_path: Path) -> Path:
    """A copy whose first loadable segment ends far past the end of the file."""
    data = src.read_bytes()
    phoff = int.from_bytes(data[0x20:0x28], "little")
    i = next(i for i in range(int.from_bytes(data[0x38:0x3A], "little"))
             if int.from_bytes(data[phoff + 56 * i:phoff + 56 * i + 4], "little") == 1)
    return _patched(src, tmp_path, phoff + 56 * i + 32, (1 << 40).to_bytes(8, "little"))


def _no_section_headers(src: Path, tmp_path: Path) -> Path:
    """A copy without a section header table (e_shoff 0), as sstrip leaves it."""
    return _patched(src, tmp_path, 0x28, bytes(8))


@pytest.mark.parametrize("craft, needle", [
    (_past_the_end, "truncated or malformed ELF (loadable segment"),
    (_no_section_headers, "no section headers"),
])
def test_cli_refuses_a_bad_layout_in_one_line(analysed, tmp_path, craft, needle):
    """`shimgen gates` reads the driver through the one ELF reader, with its layout checks:
    a crafted file is refused in one line naming the problem, and nothing is written."""
    d, _p, _ = _one(analysed, "535.261.03")
    bad = craft(d.path, tmp_path)
    out = tmp_path / "p.json"
    proc = subprocess.run([sys.executable, "-m", "shimgen", "gates", "--driver", str(bad),
                           "--json", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"shimgen: error: driver {bad}: ") and needle in lines[0], lines
    assert proc.stdout == "" and not out.exists()


def test_the_driver_is_opened_and_parsed_once(analysed, tmp_path, monkeypatch):
    """`shimgen gates` and `shimgen build --gates auto` open the driver file once and parse it
    once; discovery, the proof and the plan's byte check all read that one image."""
    from elftools.elf.elffile import ELFFile

    from shimgen.driver import elf
    from shimgen.shim import build as build_mod

    d, _p, _ = _one(analysed, "550.163.01")
    real = d.path.resolve()
    opened: list[str] = []
    parsed: list[int] = []
    models: list = []

    def counting(opener):
        def wrapper(file, *args, **kwargs):
            if isinstance(file, (str, os.PathLike)) and Path(file).resolve() == real:
                opened.append(opener.__name__)
            return opener(file, *args, **kwargs)
        return wrapper

    def parse(*args, **kwargs):
        parsed.append(1)
        return ELFFile(*args, **kwargs)

    def stop_before_compiling(model, _out):
        models.append(model)
        raise ShimgenError("stopped before compiling")

    monkeypatch.setattr(os, "open", counting(os.open))
    monkeypatch.setattr(io, "open", counting(io.open))
    monkeypatch.setattr(builtins, "open", counting(builtins.open))
    monkeypatch.setattr(elf, "ELFFile", parse)
    monkeypatch.setattr(build_mod, "build", stop_before_compiling)

    profile = tmp_path / "p.json"
    assert cli.main(["gates", "--driver", str(d.path), "--json", str(profile)]) == 0
    assert load_profile(profile).proof["ok"] is True
    assert (len(opened), len(parsed)) == (1, 1), opened

    opened.clear()
    parsed.clear()
    assert cli.main(["build", "--driver", str(d.path), "--out", str(tmp_path / "out"),
                     "--gates", "auto"]) == 1
    assert models and [g.name for g in models[0].gates.gates] == ["gdr", "dmabuf", "p2p-mixed"]
    assert (len(opened), len(parsed)) == (1, 1), opened
