"""SHIMGEN_GATE_METHOD=init against a FAKE libcuda (tests/c/fake_libcuda.c): its cuInit builds
the gate byte with code shaped like the published init site (`movzbl; mov; or $0x40; cmpl;
mov %dl`) and, for a data-centre part, sets the bit with `orb $0x20`. The shim changes those
immediates in the loaded code before the driver's cuInit runs, only on the exact build with
every recorded byte in place, puts the page protection back, and never writes the structs.
A fake is needed because the effect shows only when the driver's own cuInit runs."""

from __future__ import annotations

import dataclasses
import random
import re
import shutil
from pathlib import Path

import pytest

from shimgen.driver.library import read_driver
from shimgen.errors import ShimgenError
from shimgen.gates.plan import GatePlan, PlanByte, PlanCheck
from shimgen.shim.build import build
from shimgen.shim.model import build_model
from shimgen.shim.pipeline import build_command
from tests.gates.test_gate_runtime import CONSUMER, DATACENTER, fake_plan, parse, run_probe, symbols

OR_IMM = 8  # fake_init_gate_byte: movzbl 0x40(%rdi),%eax (4); mov (2); or $0x40,%edx (83 ca 40)
ORB_IMM = 3  # fake_gdr_check_ok: orb $0x20,0x40(%rdi) (80 4f 40 20)


def init_plan(fake: Path) -> GatePlan:
    """The fake's plan, with the init-site changes of the gdr gate and their windows."""
    plan = fake_plan(fake)
    sym = symbols(fake)
    data = fake.read_bytes()
    init_va, init_off = sym["fake_init_gate_byte"]
    ok_va, ok_off = sym["fake_gdr_check_ok"]
    assert data[init_off + OR_IMM - 2:init_off + OR_IMM + 1] == bytes([0x83, 0xCA, 0x40])
    assert data[ok_off:ok_off + 4] == bytes([0x80, 0x4F, 0x40, 0x20])
    checks = (*plan.checks, PlanCheck(init_va, init_off, data[init_off:init_off + 16]),
              PlanCheck(ok_va, ok_off, data[ok_off:ok_off + 16]))
    gdr = dataclasses.replace(plan.gates[0], init_set=(PlanByte(init_va + OR_IMM, 0x40, 0x60),),
                              init_mask=(PlanByte(ok_va + ORB_IMM, 0x20, 0x00),))
    return dataclasses.replace(plan, gates=(gdr, *plan.gates[1:]), checks=checks)


@pytest.fixture(scope="module")
def init_shim(probes, tmp_path_factory):
    fake = probes / "libfake_libcuda_for_tests.so"
    img = read_driver(fake, require_real=False)
    plan = init_plan(fake)
    model = build_model(img, build_command(fake, gates="PLAN"), gates=plan)
    return fake, build(model, tmp_path_factory.mktemp("initshim")).library, plan


def driver_maps(out: str, driver: Path) -> list[str]:
    """The protections of the probe's "map" lines (GATEPROBE_MAPS=driver), each of which must
    be a mapping of exactly that file: the whole path compared, never a part of it."""
    lines = [ln.split(None, 6) for ln in out.splitlines() if ln.startswith("map ")]
    assert all(len(f) == 7 and f[6] == str(driver.resolve()) for f in lines), lines
    return [f[2] for f in lines]


def test_init_method_sets_the_bit_in_the_drivers_own_init(probes, init_shim):
    fake, shim, _ = init_shim
    out, err = run_probe(probes, shim, SHIMGEN_GATES="gdr", SHIMGEN_GATE_METHOD="init",
                         GATEPROBE_MAPS=str(fake))
    r = parse(out)
    for d in (0, 1):
        # the driver built 0x18 | 0x60: the bit is the driver's own; dmabuf byte untouched
        assert r["devs"][d]["b40"] == 0x78 and r["devs"][d]["b44"] == 0x04
    assert r["global"] == 0  # the init method writes code only, never the globals
    assert err.count("at its init site (changed before cuInit)") == 1
    maps = driver_maps(out, fake)
    assert maps and all("w" not in p or "x" not in p for p in maps)  # never left W+X
    assert any(p.startswith("r-x") for p in maps)  # the code's own protection is back


def test_driver_mappings_are_found_by_the_whole_path_wherever_the_files_lie(probes, init_shim,
                                                                          tmp_path):
    """The probe picks a file's mappings by its whole path, so where the repository or the
    files lie cannot change what a test sees: a copy of the driver in a directory named like
    the shim and the driver (a checkout such as .../shimgen/ is one) is found, with its
    protection back after the init-site change, and the shim's mappings are the shim's
    alone, however its own path is named."""
    fake, shim, _ = init_shim
    copy = tmp_path / "libcudashim-dir" / fake.name
    copy.parent.mkdir()
    shutil.copy2(fake, copy)
    out, err = run_probe(probes, shim, SHIMGEN_DRIVER=str(copy), SHIMGEN_GATES="gdr",
                         SHIMGEN_GATE_METHOD="init", GATEPROBE_MAPS=str(copy))
    assert parse(out)["devs"][0]["b40"] == 0x78
    assert "at its init site (changed before cuInit)" in err
    maps = driver_maps(out, copy)
    assert maps and all("w" not in p or "x" not in p for p in maps)
    assert any(p.startswith("r-x") for p in maps)
    out, _ = run_probe(probes, shim, SHIMGEN_DRIVER=str(copy), GATEPROBE_MAPS=str(shim))
    assert any(p.startswith("r-x") for p in driver_maps(out, shim))
    out, _ = run_probe(probes, shim, SHIMGEN_DRIVER=str(copy), GATEPROBE_MAPS=str(fake))
    assert driver_maps(out, fake) == []  # the original is not loaded: the copy is the driver


def test_init_method_mask_on_datacenter_part(probes, init_shim):
    _, shim, _ = init_shim
    out, err = run_probe(probes, shim, FAKE_LIBCUDA_DATACENTER="1", SHIMGEN_GATES="-gdr",
                         SHIMGEN_GATE_METHOD="init")
    r = parse(out)
    for d in (0, 1):
        assert r["devs"][d] == {**DATACENTER, 110: 0, 116: 0, 124: 0, "b40": 0x58}
    assert (r["global"], r["export"], r["alloc"]) == (1, 801, 801)
    assert "at its init site (changed before cuInit)" in err


def test_default_method_is_still_the_struct_one(probes, init_shim):
    _, shim, _ = init_shim
    out, err = run_probe(probes, shim, FAKE_LIBCUDA_DATACENTER="1", SHIMGEN_GATES="-gdr")
    r = parse(out)
    assert r["devs"][0]["b40"] == 0x58 and r["global"] == 0  # the struct method wrote both
    assert "changed before cuInit" not in err


@pytest.mark.parametrize("where", ["set-byte", "mask-byte", "other-window"])
def test_init_method_writes_nothing_unless_every_byte_matches(probes, init_shim, tmp_path,
                                                               where):
    """A copy of the fake with the same build-id and one byte changed: in the init site the
    shim would write, or in another recorded window. The shim must not touch the code: the
    driver's own (tampered) result shows."""
    fake, shim, plan = init_shim
    sym = symbols(fake)
    data = bytearray(fake.read_bytes())
    init_off, ok_off = sym["fake_init_gate_byte"][1], sym["fake_gdr_check_ok"][1]
    at = {"set-byte": init_off + OR_IMM, "mask-byte": ok_off + ORB_IMM,
          "other-window": plan.checks[0].file_offset + 1}[where]
    data[at] ^= 0x01
    other = tmp_path / "libcuda-tampered.so"
    other.write_bytes(bytes(data))
    sign = "-" if where == "mask-byte" else ""
    env = {"FAKE_LIBCUDA_DATACENTER": "1"} if sign else {}
    out, err = run_probe(probes, shim, SHIMGEN_DRIVER=str(other), SHIMGEN_GATES=f"{sign}gdr",
                         SHIMGEN_GATE_METHOD="init", **env)
    r = parse(out)
    want = {"set-byte": 0x18 | 0x41, "mask-byte": 0x58 | 0x21, "other-window": 0x58}[where]
    assert r["devs"][0]["b40"] == want
    assert err.count("nothing is written") == 1 and "differ from the profile" in err


def test_each_gate_goes_by_the_best_method_it_has(probes, init_shim):
    """SHIMGEN_GATE_METHOD=init with a gate that has no init site: gdr is changed at its init
    site (the driver sets its bit; the struct method writes none of gdr's), dmabuf goes to
    the device structs, and one line says which went which way."""
    _, shim, _ = init_shim
    out, err = run_probe(probes, shim, SHIMGEN_GATES="gdr,dmabuf", SHIMGEN_GATE_METHOD="init",
                         SHIMGEN_TRACE="attrs")
    r = parse(out)
    assert (r["devs"][0]["b40"], r["devs"][0]["b44"]) == (0x78, 0x0C)
    assert r["global"] == 0  # gdr's global is the struct method's, and gdr is not its
    lines = [ln for ln in err.splitlines() if "SHIMGEN_GATES=" in ln]
    assert len(lines) == 1 and lines[0].endswith(
        "gdr set at its init site (changed before cuInit), dmabuf set in the device structs "
        "once cuInit succeeds")


def test_init_all_refuses_the_whole_selection(probes, init_shim):
    _, shim, _ = init_shim
    out, err = run_probe(probes, shim, SHIMGEN_GATES="gdr,dmabuf",
                         SHIMGEN_GATE_METHOD="init-all")
    assert parse(out)["devs"][0] == CONSUMER  # gdr was not changed either
    assert "gate dmabuf has no proven init site to set" in err
    assert err.count("nothing is written") == 1


def test_unknown_method_is_refused(probes, init_shim):
    _, shim, _ = init_shim
    out, err = run_probe(probes, shim, SHIMGEN_GATES="gdr", SHIMGEN_GATE_METHOD="code")
    assert parse(out)["devs"][0] == CONSUMER
    assert "SHIMGEN_GATE_METHOD=code ignored" in err


def test_plan_with_an_unchecked_init_byte_is_refused(init_shim):
    """Every byte the init method writes must be among the bytes compared first, holding
    the old value."""
    fake, _, plan = init_shim
    gdr = plan.gates[0]
    for bad in (PlanByte(gdr.init_set[0].vaddr, 0x41, 0x60),  # old is not the checked byte
                PlanByte(0x10, 0x7F, 0x00)):  # outside every window
        g = dataclasses.replace(gdr, init_set=(bad,))
        with pytest.raises(ShimgenError, match="bad init-site change"):
            dataclasses.replace(plan, gates=(g, *plan.gates[1:])).validate()


def test_threads_racing_into_cuinit_all_see_the_patched_init(probes, init_shim):
    """Threads whose first driver call is cuInit, started together at random offsets: the
    code is changed once, inside the driver's load, before any of them runs the driver."""
    _, shim, _ = init_shim
    rng = random.Random(7)
    for _ in range(120):
        out, err = run_probe(probes, shim, SHIMGEN_GATES="gdr", SHIMGEN_GATE_METHOD="init",
                             GATEPROBE_THREADS=str(rng.randint(2, 16)),
                             GATEPROBE_JITTER_US=str(rng.randint(0, 300)))
        assert re.search(r"^threads \d+ init-ok \d+$", out, re.M), out
        assert parse(out)["devs"][0]["b40"] == 0x78, out
        assert err.count("at its init site (changed before cuInit)") == 1


def test_only_a_shim_with_init_sites_can_change_code(probes, init_shim, tmp_path):
    """mprotect is imported by a shim whose plan has init-site bytes, called only in
    runtime/gates/gates_init.c; a gate shim without them has no such import and refuses the
    all-or-nothing method in one line."""
    from tests.runtime.test_faults_files import imported_functions

    fake, shim, _ = init_shim
    assert "mprotect" in imported_functions(shim)
    root = Path(__file__).resolve().parents[2] / "runtime"
    callers = sorted(f.name for f in root.rglob("*.c") if re.search(r"\bmprotect\(", f.read_text()))
    assert callers == ["gates_init.c"]
    img = read_driver(fake, require_real=False)
    plain = build(build_model(img, ["shimgen"], gates=fake_plan(fake)), tmp_path).library
    assert "mprotect" not in imported_functions(plain)
    out, err = run_probe(probes, plain, SHIMGEN_GATES="gdr", SHIMGEN_GATE_METHOD="init-all")
    assert parse(out)["devs"][0] == CONSUMER
    assert "this shim has no init sites" in err and err.count("nothing is written") == 1
    # =init takes the best method each gate has: here the structs
    out, err = run_probe(probes, plain, SHIMGEN_GATES="gdr", SHIMGEN_GATE_METHOD="init")
    d = parse(out)["devs"][0]
    assert (d[110], d[116], d["b40"], d["b44"]) == (1, 1, 0x78, CONSUMER["b44"])
    assert err.count("gdr set in the device structs") == 1
