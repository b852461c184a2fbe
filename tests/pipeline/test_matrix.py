"""Every libcuda build Debian ships that shimgen supports (devtools/driverfetch.DRIVERS):
the CUDA version each carries, the hooks a driver too old for some of them gets, gates and
their proofs on each, and the driver older than cuGetProcAddress refused in one line. The
build, exports, routes and the cuGetProcAddress grid on each: tests/runtime/test_shim.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from shimgen.cudaversions import (
    ATTRIBUTE_SINCE,
    FUNCTION_SINCE,
    OLDEST_CUDA,
    cuda_of_driver,
    cuda_text,
    first_driver,
)
from shimgen.driver.elf import read_image
from shimgen.driver.library import known_version, read_driver
from shimgen.errors import ShimgenError
from shimgen.gates.discover import discover
from shimgen.gates.prove import prove
from shimgen.gates.report import format_table
from shimgen.shim.hooks import HOOKS, Hook
from shimgen.shim.model import build_model
from tests.conftest import driver_cuda_version

ROOT = Path(__file__).resolve().parents[2]

# What discovery finds in the builds that test_gates.py's table does not hold (the gdr bit,
# its global, the highest attribute case, the device table), each proven by emulation below.
GATES = {
    "470.256.02": dict(gdr=(0x2E54, 0x20), glob=0x1716CA8, last=119, table=(0x1713020, 0x230)),
    "535.274.02": dict(gdr=(0x3684, 0x20), glob=0x1C0CAB8, last=134, table=(0x1C08960, 0x260)),
    "550.54.15": dict(gdr=(0x3C5C, 0x20), glob=0x1B1C7E0, last=134, table=(0x1B16620, 0x288)),
}


def shimgen(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shimgen", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def _needed_stand_in(driver: Path, tmp_path: Path) -> Path:
    """A library in place of what 418's libcuda needs and its package does not hold
    (libnvidia-fatbinaryloader): every function the driver imports that libc does not have,
    doing nothing, so that cuDriverGetVersion can be asked."""
    with open(driver, "rb") as fh:
        elf = ELFFile(fh)
        dyn = elf.get_section_by_name(".dynamic")
        needed = [t.needed for t in dyn.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
        wanted = sorted({s.name for s in elf.get_section_by_name(".dynsym").iter_symbols()
                         if s["st_shndx"] == "SHN_UNDEF" and s.name
                         and s["st_info"]["bind"] == "STB_GLOBAL"
                         and s.name.startswith(("elf", "fatBinary", "gpu"))})
    (name,) = [n for n in needed if n.startswith("libnvidia-fatbinaryloader")]
    src = tmp_path / "standin.c"
    src.write_text("".join(f"void {n}(void) {{}}\n" for n in wanted))
    out = tmp_path / name
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-o", str(out),
                    f"-Wl,-soname,{name}", str(src)], check=True)
    return tmp_path


def test_the_cuda_version_of_every_driver_is_what_it_reports(matrix_drivers, refused_driver,
                                                              tmp_path):
    """cudaversions.CUDA_DRIVER_BRANCHES against each build's own cuDriverGetVersion."""
    for d in matrix_drivers:
        assert cuda_of_driver(d.version) == driver_cuda_version(d.path), d.version
    libdir = _needed_stand_in(refused_driver.path, tmp_path)
    code = ("import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); v=ctypes.c_int(0); "
            "assert l.cuDriverGetVersion(ctypes.byref(v))==0; print(v.value)")
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    out = subprocess.run([sys.executable, "-c", code, str(refused_driver.path)], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert int(out) == cuda_of_driver(refused_driver.version) == 10010


def test_a_driver_older_than_cu_get_proc_address_is_refused_in_one_line(refused_driver,
                                                                         tmp_path):
    driver = str(refused_driver.libdir / "libcuda.so.1")
    for args in (["build", "--driver", driver, "--out", str(tmp_path / "out")],
                 ["gates", "--driver", driver], ["exports", "--driver", driver],
                 ["diff", driver, driver]):
        proc = shimgen(*args)
        assert proc.returncode == (2 if args[0] == "diff" else 1), args
        assert proc.stdout == "", args
        assert proc.stderr == (
            "shimgen: error: driver 418.226.00 (CUDA 10.1) predates cuGetProcAddress (CUDA "
            "11.3, driver 465): shimgen supports drivers from 465 on\n"), args
    assert not (tmp_path / "out").exists()
    # the facts said are cudaversions.py's: the oldest CUDA version is the one that added it
    assert (cuda_text(OLDEST_CUDA), first_driver(OLDEST_CUDA)) == ("11.3", 465)


# The hooks 470.256.02 (CUDA 11.4) is too old for, in the hook table's order: the gates' and
# cuGetProcAddress_v2, then the memory ledger's watches of functions CUDA 12 added.
PREDATES_470 = ["cuGetProcAddress_v2", "cuMemGetHandleForAddressRange", "cuCtxCreate_v4",
                "cuGreenCtxDestroy", "cuStreamBeginCaptureToGraph",
                "cuStreamBeginCaptureToGraph_ptsz", "cuCtxSynchronize_v2", "cuLibraryGetKernel",
                "cuKernelGetFunction", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
                "cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams_ptsz"]


def test_a_hook_is_absent_only_from_a_driver_older_than_its_function(matrix_drivers):
    """470.256.02 is CUDA 11.4: a hook of a function CUDA 11.5 added is absent from its
    shim; one of a function CUDA 11.4 added, or of one with no CUDA version, or of any
    function on a driver whose CUDA version is unknown, fails generation."""
    d470 = next(d for d in matrix_drivers if d.version == "470.256.02")
    image = read_driver(d470.path)
    model = build_model(image, ["shimgen"])
    assert [h.name for h in model.predates] == PREDATES_470
    assert {f.name for f in model.hooked} == {h.name for h in HOOKS} - set(PREDATES_470)
    newer = Hook("cuNewInCuda115", "hooks_gates.c", "test", since=11050)
    assert build_model(image, ["shimgen"], hooks=HOOKS + (newer,)).predates[-1] == newer
    for hook, why in [(replace(newer, since=11040), "CUDA 11.4 added it; driver 470.256.02 is"),
                      (replace(newer, since=0), "does not export$")]:
        with pytest.raises(ShimgenError, match=why):
            build_model(image, ["shimgen"], hooks=HOOKS + (hook,))
    with pytest.raises(ShimgenError, match="cuGetProcAddress_v2, which driver .* says no CUDA"):
        build_model(replace(image, version="unknown", contents=b""), ["shimgen"])


def test_a_driver_copied_under_another_name_is_told_by_its_contents(matrix_drivers,
                                                                   refused_driver, tmp_path):
    """A copy named libcuda.so.1 (no version in its name) is still 470.256.02, CUDA 11.4, or
    418.226.00, CUDA 10.1: the version its contents name."""
    d470 = next(d for d in matrix_drivers if d.version == "470.256.02")
    for d in (d470, refused_driver):
        (tmp_path / d.version).mkdir()
        shutil.copyfile(d.path, tmp_path / d.version / "libcuda.so.1")
    copy = read_driver(tmp_path / "470.256.02" / "libcuda.so.1")
    assert copy.version == "unknown" and known_version(copy) == "470.256.02"
    assert [h.name for h in build_model(copy, ["shimgen"]).predates] == PREDATES_470
    with pytest.raises(ShimgenError) as e:
        read_driver(tmp_path / "418.226.00" / "libcuda.so.1")
    assert str(e.value).startswith("driver 418.226.00 (CUDA 10.1) predates cuGetProcAddress")
    for d in matrix_drivers:  # every build names its own version
        assert known_version(replace(read_driver(d.path), version="unknown")) == d.version


def test_a_misspelt_hook_fails_on_a_driver_new_enough(matrix_drivers):
    """Every hook marked with a CUDA version is exported by each driver that new: the
    table's versions are cudaversions.FUNCTION_SINCE's, and a misspelt name still fails."""
    for d in matrix_drivers:
        names = set(read_driver(d.path).function_names())
        for h in HOOKS:
            if h.since:
                assert h.since == FUNCTION_SINCE[h.name]
            assert (h.name in names) == (h.since <= cuda_of_driver(d.version)), (d, h)
        for name, since in FUNCTION_SINCE.items():  # the facts against each build
            assert (name in names) == (since <= cuda_of_driver(d.version)), (d, name)
    d535 = read_driver(matrix_drivers[0].path)
    typo = Hook("cuGetProcAddres_v2", "hooks_proc_address.c", "test", since=12000)
    with pytest.raises(ShimgenError, match="cuGetProcAddres_v2, which driver .* which has it"):
        build_model(d535, ["shimgen"], hooks=HOOKS + (typo,))


@pytest.fixture(scope="module")
def analysed(matrix_drivers):
    out = {}
    for d in matrix_drivers:
        image = read_image(d.path)
        profile = discover(image)
        out[d.version] = (d, profile, prove(image, profile))
    return out


def test_gates_and_their_proofs_on_every_driver(analysed):
    for version, (_d, profile, result) in analysed.items():
        assert result.ok, (version, result.problems)
        gdr = profile.gate("gdr")
        last = profile.reader.last_attribute
        has_dmabuf_attribute = cuda_of_driver(version) >= ATTRIBUTE_SINCE[124]
        assert (last >= 124) == has_dmabuf_attribute, version
        assert gdr.attributes == [a for a in (110, 116, 124) if a <= last], version
        assert (profile.gate("dmabuf") is not None) == has_dmabuf_attribute, version
        if version in GATES:
            exp = GATES[version]
            assert [(f.offset, f.mask) for f in gdr.fields] == [exp["gdr"]]
            assert [(g.vaddr, g.size) for g in gdr.globals] == [(exp["glob"], 1)]
            assert last == exp["last"]
            assert (profile.device_table.vaddr, profile.device_table.offset) == exp["table"]


def test_gates_says_what_an_older_driver_lacks(analysed):
    lines = format_table(analysed["470.256.02"][1]).splitlines()
    (lacks,) = [x for x in lines if x.startswith("lacks")]
    assert lacks.startswith("lacks       attribute 124 (DMA_BUF_SUPPORTED, CUDA 11.7), 146 ")
    assert lacks.endswith("this driver (CUDA 11.4) reads attributes up to 119; no dmabuf gate")
    newer = format_table(analysed["535.274.02"][1])
    assert "dmabuf gate" not in newer and "attribute 124" not in newer
