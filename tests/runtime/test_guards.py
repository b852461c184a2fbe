"""Guards that no black-box test of the whole shim reaches, tested where they are: the
init-site writer (runtime/gates/gates_init.c: every byte compared before any store, every byte
written put back when a later store or a page's protection fails, no more bytes than it can
put back) and the cuGetProcAddress map (runtime/load/procaddr.c:
its first and last entries, and the addresses around them), each compiled as a unit with a
probe of tests/c/ and a build's generated headers; the trace file of a process that dies
while its exit folds the blocks (runtime/stats/stats.c: never marked complete); and the identity
of the driver the fallback search loaded after an upgrade (runtime/load/driver.c: a path to it
opens the shim). docs/validation.md, "Guards and the tests that catch their removal", lists
these with the rest."""

from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.driver.library import read_driver
from shimgen.shim.build import build
from shimgen.shim.model import build_model
from shimgen.shim.render import render
from shimgen.trace.binary import load
from tests.conftest import driver_cuda_version
from tests.faultkit import clean_env
from tests.gates.test_gate_init_fake import init_plan
from tests.gates.test_gate_runtime import CONSUMER, parse, run_probe, tampered_copy

ROOT = Path(__file__).resolve().parents[2]


# ---- runtime files compiled as units ----

@pytest.fixture(scope="module")
def unit_headers(drivers, tmp_path_factory) -> Path:
    """A build's source tree (rendered, not compiled): the generated shim.h and facts.h that
    runtime/base/base.h includes."""
    src = tmp_path_factory.mktemp("unitsrc")
    render(build_model(read_driver(drivers[0].path), ["shimgen", "build"]), src)
    return src


def compile_unit(probe: str, runtime_source: str | tuple[str, ...], headers: Path,
                 out: Path) -> Path:
    """tests/c/<probe> with runtime/<runtime_source> (one or several) of this checkout, as the
    shim compiles them (-Wall -Wextra -Werror)."""
    sources = (runtime_source,) if isinstance(runtime_source, str) else runtime_source
    exe = out / Path(probe).stem
    cc = shlex.split(os.environ.get("CC", "cc"))
    proc = subprocess.run([*cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror",
                           "-I", str(ROOT / "runtime"), "-I", str(headers), "-o", str(exe),
                           str(ROOT / "tests" / "c" / probe),
                           *(str(ROOT / "runtime" / s) for s in sources), "-ldl"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"compile failed: {probe} with {runtime_source}: {proc.stderr}"
    return exe


@pytest.fixture(scope="module")
def gates_init_unit(unit_headers, tmp_path_factory) -> Path:
    return compile_unit("gates_init_unit.c", "gates/gates_init.c", unit_headers,
                        tmp_path_factory.mktemp("gatesinit"))


def patch_init(unit: Path, case: str) -> dict:
    proc = subprocess.run([str(unit), case], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    return {"rc": int(re.search(r"^rc (-?\d+)$", out, re.M).group(1)),
            "why": re.search(r"^why (.*)$", out, re.M).group(1),
            "bytes": re.search(r"^bytes (.*)$", out, re.M).group(1).split(),
            "at_init": re.search(r"^at_init (.*)$", out, re.M).group(1).split(),
            "prot": re.findall(r"^prot (\S+)$", out, re.M)}


SHIPPED = ["8b", "ca", "40", "90", "11"]  # the site's first four bytes, the outside byte


def test_init_site_writer_writes_every_selected_byte_and_puts_the_protection_back(
        gates_init_unit):
    """The control of the cases below: both gates' bytes (a set and a mask) are written, and
    the code's page is r-x again, never left writable."""
    r = patch_init(gates_init_unit, "write")
    assert (r["rc"], r["why"]) == (2, "")
    assert r["bytes"] == ["8b", "cb", "60", "91", "11"]
    assert r["at_init"] == ["1", "1"]
    assert r["prot"] == ["r-xp"]


def test_init_site_bytes_are_compared_before_any_store(gates_init_unit):
    """A plan whose second byte is not the one the code holds: nothing is written, not even
    the first byte, which matched; the reason names the byte. This is the writer's own
    guard: shimgen_gates_verify and plan validation would refuse such a plan before, but
    gates/gates_init.c does not write a byte it has not just compared."""
    r = patch_init(gates_init_unit, "differs")
    assert r["rc"] == -1 and r["at_init"] == ["0", "0"]
    assert re.fullmatch(r"the init-site byte at 0x[0-9a-f]+ is not the profile's", r["why"])
    assert r["bytes"] == SHIPPED
    assert r["prot"] == ["r-xp"]


def test_a_failed_store_puts_back_every_byte_already_written(gates_init_unit):
    """Gate 0's two bytes are written, then gate 1's byte lies outside every loaded segment
    of the "driver" (an anonymous page): its store is refused, and the two bytes written
    before it hold their shipped values again."""
    r = patch_init(gates_init_unit, "rollback")
    assert r["rc"] == -1 and r["at_init"] == ["0", "0"]
    assert re.fullmatch(r"no loaded segment of the driver holds 0x[0-9a-f]+", r["why"])
    assert r["bytes"] == SHIPPED
    assert r["prot"] == ["r-xp"]


def test_a_protection_that_cannot_be_put_back_undoes_the_whole_selection(gates_init_unit):
    """The store of the second byte is made, then its page's protection cannot be put
    back: that byte is restored while the page is still writable, the protection is put
    back after all, and the first byte is put back too."""
    r = patch_init(gates_init_unit, "restore")
    assert r["rc"] == -1 and r["at_init"] == ["0", "0"]
    assert re.fullmatch(r"cannot restore the protection of the driver's code at 0x[0-9a-f]+ "
                        r"\(errno 13\)", r["why"])
    assert r["bytes"] == SHIPPED
    assert r["prot"] == ["r-xp"]


def test_more_bytes_than_a_selection_may_change_are_refused(gates_init_unit):
    r = patch_init(gates_init_unit, "toomany")
    assert (r["rc"], r["why"]) == (-1, "more init-site bytes (72) than one selection may change")
    assert r["bytes"] == SHIPPED


def test_a_gate_without_an_init_site_is_left_to_the_structs_unless_all_are_asked(
        gates_init_unit):
    """SHIMGEN_GATE_METHOD=init: the gate with a site is changed and marked, the other is
    left (unmarked) for the struct method; =init-all: neither, and the reason names it."""
    r = patch_init(gates_init_unit, "partial")
    assert (r["rc"], r["why"], r["at_init"]) == (1, "", ["1", "0"])
    assert r["bytes"] == ["8b", "cb", "40", "90", "11"]
    r = patch_init(gates_init_unit, "all")
    assert (r["rc"], r["at_init"], r["bytes"]) == (-1, ["0", "0"], SHIPPED)
    assert r["why"] == ("gate second has no proven init site to set on this driver (shimgen "
                        "gates says why)")


@pytest.fixture(scope="module")
def init_site_shim(probes, tmp_path_factory):
    """The fake driver's shim with the gates and their init sites
    (tests/gates/test_gate_init_fake.py)."""
    fake = probes / "libfake_libcuda_for_tests.so"
    plan = init_plan(fake)
    model = build_model(read_driver(fake, require_real=False),
                        ["shimgen", "build", "--driver", str(fake), "--gates", "PLAN"], gates=plan)
    return fake, build(model, tmp_path_factory.mktemp("initsiteshim")).library, plan


@pytest.mark.parametrize("case", ["init-method", "identity-refused"])
def test_an_attribute_hook_writes_no_gate_bit_unless_the_struct_method_is_on(
        probes, init_site_shim, tmp_path, case):
    """SHIMGEN_TRACE=attrs installs the cuDeviceGetAttribute hook, which applies the gates,
    without the struct method being on: with the init method (the driver sets the bit
    itself; no global is written), or on a driver the identity check refused (nothing is
    written). The struct writes happen only once the identity check activated them."""
    fake, shim, plan = init_site_shim
    if case == "init-method":
        out, err = run_probe(probes, shim, SHIMGEN_GATES="gdr", SHIMGEN_GATE_METHOD="init",
                             SHIMGEN_TRACE="attrs")
        r = parse(out)
        assert r["devs"][0]["b40"] == 0x78 and r["global"] == 0
        assert "at its init site (changed before cuInit)" in err
    else:
        other = tampered_copy(fake, tmp_path, plan, "bytes")
        out, err = run_probe(probes, shim, SHIMGEN_DRIVER=str(other), SHIMGEN_GATES="gdr",
                             SHIMGEN_TRACE="attrs")
        r = parse(out)
        assert r["devs"] == {0: CONSUMER, 1: CONSUMER} and r["global"] == 0
        assert "nothing is written" in err
    assert "shimgen attr: dev 0 116 GPU_DIRECT_RDMA_SUPPORTED" in err  # the hook did run


@pytest.fixture(scope="module")
def procaddr_unit(unit_headers, tmp_path_factory) -> Path:
    return compile_unit("procaddr_unit.c", ("load/procaddr.c", "base/loaded.c"), unit_headers,
                        tmp_path_factory.mktemp("procaddr"))


@pytest.mark.parametrize("n", [1, 2, 3, 64])
def test_proc_address_map_at_its_edges(procaddr_unit, n):
    """Every export's address, the first and the last included, gives its own slot's entry
    stub; an address between two exports, below the first, above the last, 0 and the
    highest address come back unchanged and are counted. (On the Debian drivers the
    highest-addressed export is cudbgMain, which cuGetProcAddress never hands out: the grid
    tests of tests/runtime/test_shim.py cannot see the last entry.)"""
    seed = random.randrange(1 << 30)
    proc = subprocess.run([str(procaddr_unit), str(n), str(seed)], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    exports = {int(a, 16): int(i) for a, i in re.findall(r"^export (\w+) (\d+)$", out, re.M)}
    hits = {int(a, 16): int(i) for a, i in re.findall(r"^hit (\w+) (\d+)$", out, re.M)}
    misses = [int(a, 16) for a in re.findall(r"^miss (\w+)$", out, re.M)]
    assert len(exports) == n and sorted(exports.values()) == list(range(n))
    assert hits == exports, (seed, out)
    first, last = min(exports), max(exports)
    assert sorted(misses) == sorted([0, first - 1, *(a + 8 for a in exports), last + 16,
                                     (1 << 64) - 1]), (seed, out)
    assert "wrong" not in out
    assert f"unmapped {len(misses)}\n" in out


# ---- the trace file of a process that dies while its exit folds the blocks ----

@pytest.mark.parametrize("how", ["exit", "die"])
def test_a_process_that_dies_while_its_exit_folds_the_blocks_is_never_complete(
        probes, fake_shim, tmp_path, how):
    """A thread is inside a call at exit (a callback that waits for ever). A normal exit
    counts that call from its frame and then marks the file complete. A process that dies
    while the exit folds the blocks (here: the blocks made unreadable, and SIGSEGV ends it
    with _exit) leaves a file that is not complete, so the reader says it died: a file
    marked complete must hold every call the exit counts."""
    d = tmp_path / "traces"
    env = dict(clean_env(), LD_PRELOAD=str(fake_shim), SHIMGEN_TRACE="time",
               SHIMGEN_TRACE_DIR=str(d), SHIMGEN_QUIET="1")
    proc = subprocess.run([str(probes / "exitfold"), "libcuda.so.1", how], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout == "ready\n", proc.stdout + proc.stderr
    (f,) = d.glob("*.shimtrace")
    t = load(f)
    assert t.functions["cuDriverGetVersion"].calls == 5
    if how == "exit":
        assert proc.returncode == 0, proc.stderr
        assert t.complete and t.end_ns is not None
        assert t.functions["cuLaunchHostFunc"].calls == 1  # in progress, counted at exit
    else:
        assert proc.returncode == 77, proc.stderr  # died in the fold, by the probe's handler
        assert not t.complete and t.end_ns is None
        assert "cuLaunchHostFunc" not in t.functions  # never returned, never counted


# ---- the identity of the driver the fallback search loaded ----

def test_after_a_driver_upgrade_a_path_to_the_new_driver_opens_the_shim(drivers, probes,
                                                                          tmp_path):
    """Built for 535 through a libcuda.so.1 link; then 535 is replaced by 550 and the link
    repointed (tests/runtime/test_shim.py's upgrade). The first driver call's fallback search loads
    the new driver, and the shim records that file's device and inode: from then on dlopen
    of its absolute path, or of another path to it, gets the shim, as every other route
    does. Without the record the path would give the real driver, and calls made through it
    would bypass the shim."""
    old, new = drivers[0], drivers[1]
    libdir = tmp_path / "lib"
    libdir.mkdir()
    shutil.copy2(old.path, libdir / old.path.name)
    (libdir / "libcuda.so.1").symlink_to(old.path.name)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "shimgen", "build", "--driver",
                           str(libdir / "libcuda.so.1"), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lib = next(out.glob("*/libcudashim.so"))
    (libdir / old.path.name).unlink()
    shutil.copy2(new.path, libdir / new.path.name)
    (libdir / "libcuda.so.1").unlink()
    (libdir / "libcuda.so.1").symlink_to(new.path.name)
    alias = tmp_path / "libdriver-alias.so"
    alias.symlink_to(libdir / new.path.name)
    env = dict(clean_env(), LD_PRELOAD=str(lib), LD_LIBRARY_PATH=str(libdir))
    # the first driver call loads the driver (the fallback); then each path is opened
    script = ("import ctypes,sys; so1=ctypes.CDLL('libcuda.so.1'); v=ctypes.c_int(); "
              "assert so1.cuDriverGetVersion(ctypes.byref(v)) == 0; print(v.value); "
              "print(*(ctypes.CDLL(p)._handle == so1._handle for p in sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", script, lib, libdir / new.path.name, alias],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"loaded {libdir / 'libcuda.so.1'} instead" in proc.stderr
    version, same = proc.stdout.splitlines()
    assert int(version) == driver_cuda_version(new.path)
    # the shim's own path, the new driver's path and another path to it: all the shim
    assert same.split() == ["True", "True", "True"], proc.stdout
