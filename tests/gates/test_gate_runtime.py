"""The shim's gate run time against a FAKE libcuda built by the tests (tests/c/fake_libcuda.c),
whose per-device structs and global are laid out like the real driver's. The gate plan is
made from the fake's own symbols here; discovery on real drivers is tested in
tests/gates/test_gates.py. Covers: set and mask, writes only with a matching identity (build-id
and instruction bytes), SHIMGEN_ATTR_OVERRIDE and SHIMGEN_TRACE=attrs."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from shimgen.driver.library import read_driver
from shimgen.errors import ShimgenError
from shimgen.gates.plan import GatePlan, PlanCheck, PlanField, PlanGate, PlanGlobal
from shimgen.shim.build import build
from shimgen.shim.model import build_model
from shimgen.shim.pipeline import build_command


def symbols(path: Path) -> dict[str, tuple[int, int]]:
    """name -> (vaddr, file offset) for the fake's dynamic symbols."""
    out = {}
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        for s in elf.get_section_by_name(".dynsym").iter_symbols():
            if s["st_shndx"] == "SHN_UNDEF" or not s.name:
                continue
            off = next(iter(elf.address_offsets(s["st_value"])), None)
            out[s.name] = (s["st_value"], off)
    return out


def fake_plan(fake: Path) -> GatePlan:
    sym = symbols(fake)
    data = fake.read_bytes()
    checks = []
    for fn in ("cuDeviceGetAttribute", "cuInit"):
        vaddr, off = sym[fn]
        checks.append(PlanCheck(vaddr, off, data[off:off + 16]))
    img = read_driver(fake, require_real=False)
    return GatePlan(
        build_id=img.build_id,
        driver_version="fake",
        table_vaddr=sym["fake_device_table"][0],
        table_offset=0x10,
        table_stride=8,
        count_vaddr=sym["fake_device_count"][0],
        count_size=4,
        gates=(
            PlanGate("gdr", (110, 116, 124), (PlanField(0x40, 0x20),),
                     (PlanGlobal(sym["fake_gdr_global"][0], 1),)),
            PlanGate("dmabuf", (124,), (PlanField(0x44, 0x08),), ()),
        ),
        checks=tuple(checks),
    )


@pytest.fixture(scope="module")
def gate_shim(probes, tmp_path_factory):
    fake = probes / "libfake_libcuda_for_tests.so"
    img = read_driver(fake, require_real=False)
    plan = fake_plan(fake)
    model = build_model(img, build_command(fake, gates="PLAN"), gates=plan)
    result = build(model, tmp_path_factory.mktemp("gateshim"))
    return fake, result.library, plan


def run_probe(probes, shim: Path | None, **env_extra: str) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHIMGEN_", "LD_", "FAKE_"))}
    if shim:
        env["LD_PRELOAD"] = str(shim)
    env.update(env_extra)
    proc = subprocess.run([str(probes / "gateprobe")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr


def parse(out: str) -> dict:
    devs = {}
    for m in re.finditer(r"^dev (\d) attr110 (-?\d+) attr116 (-?\d+) attr124 (-?\d+) attr1 "
                         r"(-?\d+) byte40 (0x\w+) byte44 (0x\w+)$", out, re.M):
        devs[int(m.group(1))] = {
            110: int(m.group(2)), 116: int(m.group(3)), 124: int(m.group(4)),
            1: int(m.group(5)), "b40": int(m.group(6), 16), "b44": int(m.group(7), 16)}
    g = re.search(r"^global (\d+) dmabuf_export (\d+) gdr_alloc (\d+)$", out, re.M)
    return {"devs": devs, "global": int(g.group(1)), "export": int(g.group(2)),
            "alloc": int(g.group(3))}


CONSUMER = {110: 0, 116: 0, 124: 0, 1: 1024, "b40": 0x58, "b44": 0x04}
DATACENTER = {110: 1, 116: 1, 124: 1, 1: 1024, "b40": 0x78, "b44": 0x0c}


def test_without_gates_nothing_changes(probes, gate_shim):
    _, shim, _ = gate_shim
    out, err = run_probe(probes, shim)
    r = parse(out)
    assert r["devs"] == {0: CONSUMER, 1: CONSUMER}
    assert (r["global"], r["export"], r["alloc"]) == (0, 801, 801)
    assert err == ""


def test_set_gates_on_consumer_part(probes, gate_shim):
    _, shim, _ = gate_shim
    out, err = run_probe(probes, shim, SHIMGEN_GATES="gdr,dmabuf")
    r = parse(out)
    for d in (0, 1):
        assert r["devs"][d] == {110: 1, 116: 1, 124: 1, 1: 1024, "b40": 0x78, "b44": 0x0c}
    assert (r["global"], r["export"], r["alloc"]) == (1, 0, 0)
    assert err.count("SHIMGEN_GATES=gdr,dmabuf armed on ") == 1
    assert "nothing applied" not in err  # the fake's cuInit succeeds


def test_gdr_alone_leaves_dmabuf_off(probes, gate_shim):
    _, shim, _ = gate_shim
    r = parse(run_probe(probes, shim, SHIMGEN_GATES="gdr")[0])
    assert r["devs"][0][116] == 1 and r["devs"][0][124] == 0
    assert (r["export"], r["alloc"]) == (801, 0)


def test_mask_gates_on_datacenter_part(probes, gate_shim):
    _, shim, _ = gate_shim
    r = parse(run_probe(probes, shim, FAKE_LIBCUDA_DATACENTER="1")[0])
    assert r["devs"][0] == DATACENTER and r["export"] == 0
    out, err = run_probe(probes, shim, FAKE_LIBCUDA_DATACENTER="1", SHIMGEN_GATES="-gdr,-dmabuf")
    r = parse(out)
    for d in (0, 1):
        assert r["devs"][d] == {110: 0, 116: 0, 124: 0, 1: 1024, "b40": 0x58, "b44": 0x04}
    assert (r["global"], r["export"], r["alloc"]) == (0, 801, 801)
    assert "SHIMGEN_GATES=-gdr,-dmabuf armed on " in err


def tampered_copy(fake: Path, tmp: Path, plan: GatePlan, what: str) -> Path:
    data = bytearray(fake.read_bytes())
    if what == "bytes":
        c = plan.checks[0]
        data[c.file_offset + 1] ^= 0x01  # one instruction byte differs, same build-id
    else:
        bid = bytes.fromhex(plan.build_id)
        at = data.find(bid)
        assert at > 0
        data[at] ^= 0xff  # another build-id, same code
    out = tmp / f"libcuda-{what}.so"
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("what", ["bytes", "build-id"])
def test_mismatched_driver_writes_nothing(probes, gate_shim, tmp_path, what):
    fake, shim, plan = gate_shim
    other = tampered_copy(fake, tmp_path, plan, what)
    out, err = run_probe(probes, shim, SHIMGEN_DRIVER=str(other), SHIMGEN_GATES="gdr,dmabuf")
    r = parse(out)
    assert r["devs"] == {0: CONSUMER, 1: CONSUMER}  # no byte was written
    assert (r["global"], r["export"]) == (0, 801)
    assert err.count("ignored") == 1 and "nothing is written" in err
    assert ("differ from the profile" in err) if what == "bytes" else ("build-id" in err)


def test_unknown_gate_name_is_refused(probes, gate_shim):
    _, shim, _ = gate_shim
    out, err = run_probe(probes, shim, SHIMGEN_GATES="gdr,p2p")
    assert parse(out)["devs"][0] == CONSUMER
    assert "unknown gate 'p2p' (this shim has: gdr dmabuf)" in err


def test_attr_override_reports_without_touching_state(probes, gate_shim):
    _, shim, _ = gate_shim
    out, err = run_probe(probes, shim, SHIMGEN_ATTR_OVERRIDE="124=1,116=0,1=7")
    r = parse(out)
    assert r["devs"][0][124] == 1 and r["devs"][0][1] == 7
    assert r["devs"][0]["b40"] == 0x58 and r["devs"][0]["b44"] == 0x04  # state untouched
    assert r["export"] == 801  # the driver itself still says no
    assert err.count("SHIMGEN_ATTR_OVERRIDE in effect: 124=1 116=0 1=7") == 1


def test_attrs_trace_names_attribute_value_and_caller(probes, gate_shim):
    _, shim, _ = gate_shim
    out, err = run_probe(probes, shim, SHIMGEN_TRACE="attrs", SHIMGEN_ATTR_OVERRIDE="124=1")
    lines = [ln for ln in err.splitlines() if ln.startswith("shimgen attr:")]
    assert "shimgen attr: dev 0 116 GPU_DIRECT_RDMA_SUPPORTED = 0 rc 0 from gateprobe" in lines
    assert ("shimgen attr: dev 1 124 DMA_BUF_SUPPORTED = 1 (driver said 0; overridden) rc 0 "
            "from gateprobe") in lines
    assert len(lines) == 8  # 4 attributes x 2 devices from the program itself


def test_attrs_trace_under_time_mode_finds_the_caller(probes, gate_shim):
    _, shim, _ = gate_shim
    _, err = run_probe(probes, shim, SHIMGEN_TRACE="time,attrs")
    assert "GPU_DIRECT_RDMA_SUPPORTED = 0 rc 0 from gateprobe" in err


def test_plan_for_another_file_is_refused_at_build(gate_shim, drivers, tmp_path):
    _, _, plan = gate_shim
    from shimgen.gates.plan import verify_against_image

    real = read_driver(drivers[0].path)
    with pytest.raises(ShimgenError, match="gate profile is for build-id"):
        verify_against_image(plan, real)


def test_shim_without_gates_refuses_selection(probes, drivers, tmp_path):
    fake = probes / "libfake_libcuda_for_tests.so"
    img = read_driver(fake, require_real=False)
    lib = build(build_model(img, ["shimgen"]), tmp_path).library
    out, err = run_probe(probes, lib, SHIMGEN_GATES="gdr")
    assert parse(out)["devs"][0] == CONSUMER
    assert "built without gates" in err
    shutil.rmtree(tmp_path, ignore_errors=True)


# The identity check covers every recorded window, and every byte of each: a plan with three
# windows (the fake's two code windows, then 8 bytes of the ELF header that nothing executes:
# e_shoff, which the loader does not read), tampered in a window other than the first.
HEADER_WINDOW = (0x28, 8)


@pytest.fixture(scope="module")
def three_window_shim(probes, tmp_path_factory):
    fake = probes / "libfake_libcuda_for_tests.so"
    plan = fake_plan(fake)
    at, size = HEADER_WINDOW
    header = PlanCheck(at, at, fake.read_bytes()[at:at + size])
    plan = dataclasses.replace(plan, checks=(*plan.checks, header))
    img = read_driver(fake, require_real=False)
    model = build_model(img, build_command(fake, gates="PLAN"), gates=plan)
    return fake, build(model, tmp_path_factory.mktemp("gateshim3")).library, plan


@pytest.mark.parametrize("where", ["last-byte-of-last-window", "first-byte-of-last-window"])
def test_a_window_other_than_the_first_is_checked(probes, three_window_shim, tmp_path, where):
    fake, shim, plan = three_window_shim
    c = plan.checks[-1]
    data = bytearray(fake.read_bytes())
    data[c.file_offset + (len(c.data) - 1 if where.startswith("last") else 0)] ^= 0x01
    other = tmp_path / "libcuda-window.so"
    other.write_bytes(bytes(data))
    out, err = run_probe(probes, shim, SHIMGEN_DRIVER=str(other), SHIMGEN_GATES="gdr,dmabuf")
    r = parse(out)
    assert r["devs"] == {0: CONSUMER, 1: CONSUMER}  # no byte was written
    assert (r["global"], r["export"]) == (0, 801)
    assert f"instruction bytes at 0x{c.vaddr:x} differ from the profile" in err
    assert err.count("nothing is written") == 1
    # the control: the untampered fake under the same shim takes the gates
    out, _ = run_probe(probes, shim, SHIMGEN_GATES="gdr,dmabuf")
    assert parse(out)["global"] == 1


@pytest.mark.parametrize("window", [0, -1])
def test_profile_with_one_byte_changed_is_refused_at_build(gate_shim, window):
    """The build-id matches, one recorded instruction byte does not: refused at build time,
    by the byte comparison itself (verify_against_image, shimgen/gates/plan.py)."""
    fake, _, plan = gate_shim
    from shimgen.gates.plan import verify_against_image

    img = read_driver(fake, require_real=False)
    verify_against_image(plan, img)  # the plan as made matches
    checks = list(plan.checks)
    c = checks[window]
    checks[window] = dataclasses.replace(c, data=c.data[:-1] + bytes([c.data[-1] ^ 0x01]))
    bad = dataclasses.replace(plan, checks=tuple(checks))
    with pytest.raises(ShimgenError, match=rf"does not match .*: bytes at 0x{c.vaddr:x} differ"):
        verify_against_image(bad, img)


@pytest.mark.parametrize("which", ["checked", "init-site"])
def test_real_profile_with_one_byte_changed_is_refused_by_build(drivers, tmp_path, which):
    """End to end on a real driver: `shimgen gates --json`, one recorded instruction byte
    changed in the profile (its build-id still right), `shimgen build --gates FILE`: one
    line naming the bytes, exit 1, nothing built. Every recorded instruction counts: one of
    the windows the shim checks again at run time, or one the profile only reports (the
    last init site of a gate)."""
    import json
    import sys

    d = drivers[0]
    profile = tmp_path / "profile.json"
    cmd = [sys.executable, "-m", "shimgen"]
    made = subprocess.run([*cmd, "gates", "--driver", str(d.path), "--json", str(profile),
                           "--no-proof"], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    data = json.loads(profile.read_text())

    def insns(node):
        if isinstance(node, dict):
            if isinstance(node.get("bytes"), str) and "vaddr" in node:
                yield node
            for v in node.values():
                yield from insns(v)
        elif isinstance(node, list):
            for v in node:
                yield from insns(v)

    found = list(insns(data))
    # the reader's and the device table's instructions are always among the checked
    # windows; the last of them by address is not the first window
    checked = data["reader"]["insns"] + data["device_table"]["insns"]
    assert len({i["vaddr"] for i in checked}) >= 3, checked
    if which == "init-site":
        checked = [site["insn"] for g in data["gates"] for site in g.get("init_sites", [])]
        assert checked, "the profile lists init sites"
    vaddr = max((i["vaddr"] for i in checked), key=lambda v: int(v, 16))
    for i in found:
        if i["vaddr"] == vaddr:
            raw = bytearray.fromhex(i["bytes"])
            raw[0] ^= 0x01
            i["bytes"] = raw.hex()
    profile.write_text(json.dumps(data))
    out = tmp_path / "out"
    proc = subprocess.run([*cmd, "build", "--driver", str(d.path), "--out", str(out),
                           "--gate-profile", str(profile)], capture_output=True, text=True)
    want = int(vaddr, 16)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"shimgen: error: gate profile does not match {d.path.resolve()}: bytes at "
        f"0x{want:x} differ"]
    assert not out.exists() or not any(out.iterdir())
