"""Pure-Python layers: reading the driver, the model and its hook table, rendering, and the
command line's handling of bad input. Run against the real Debian drivers where a driver
is needed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.driver.library import read_driver
from shimgen.errors import ShimgenError
from shimgen.runenv import SHIM_LIBRARY
from shimgen.shim.hooks import HOOKS, Hook
from shimgen.shim.model import build_model
from shimgen.shim.pipeline import build_command
from shimgen.shim.render import outputs, render

ROOT = Path(__file__).resolve().parents[2]
# Export counts of the Debian builds, as read with pyelftools (535.261.03 matches the
# count in background.md: 600 functions, 20 data objects).
EXPECTED = {"535.261.03": (600, 20), "550.163.01": (636, 20), "555.58.02": (643, 20)}


def test_read_driver_counts_and_identity(drivers):
    for d in drivers:
        img = read_driver(d.libdir / "libcuda.so.1")
        assert (len(img.functions), len(img.data)) == EXPECTED[d.version]
        assert img.version == d.version
        assert img.real_path == d.path.resolve()
        assert img.soname == "libcuda.so.1"
        assert len(img.build_id) == 40 and int(img.build_id, 16)
        names = img.function_names()
        assert names == sorted(names)
        assert {"cuInit", "cuGetProcAddress_v2", "cuMemAlloc_v2", "cuGetExportTable"} <= set(names)
        assert all(x.name.startswith("cudbg") for x in img.data)
        ptsz = [n for n in names if n.endswith("_ptsz")]
        assert len(ptsz) > 50


def test_newer_driver_exports_more(drivers):
    by = {d.version: set(read_driver(d.path).function_names()) for d in drivers}
    assert by["535.261.03"] < by["550.163.01"] | by["535.261.03"]
    assert len(by["555.58.02"] - by["535.261.03"]) > 0


def test_hook_table_names_only_driver_functions(drivers):
    img = read_driver(drivers[0].path)
    model = build_model(img, ["shimgen", "build"])
    names = set(img.function_names())  # (a newer driver's functions the ledger watches: not all)
    assert sorted(f.name for f in model.hooked) == sorted(h.name for h in HOOKS
                                                          if h.name in names)
    assert {h.name for h in model.predates} == {h.name for h in HOOKS if h.name not in names}
    assert [f.index for f in model.functions] == list(range(len(img.functions)))
    bad = HOOKS + (Hook("cuNoSuchThing", "hooks_proc_address.c", "test"),)
    with pytest.raises(ShimgenError, match="cuNoSuchThing, which driver .* does not export"):
        build_model(img, ["shimgen"], hooks=bad)
    with pytest.raises(ShimgenError, match="twice"):
        build_model(img, ["shimgen"], hooks=HOOKS + HOOKS[:1])


def test_render_writes_every_output_with_banner(drivers, tmp_path):
    img = read_driver(drivers[0].path)
    model = build_model(img, build_command(img.path))
    written = render(model, tmp_path)
    assert sorted(str(p.relative_to(tmp_path)) for p in written) == \
        sorted(name for _, name in outputs(model))
    listed = re.findall(r"^SHIMGEN_FUNCTION\((\d+), (\w+)\)$",
                        (tmp_path / "functions.inc").read_text(), re.M)
    assert listed == [(str(i), f.name) for i, f in enumerate(img.functions)]
    vs = (tmp_path / "libcudashim.map").read_text()
    exported = re.findall(r"^    (\w+);$", vs.split("local:")[0], re.M)
    assert exported == img.function_names() + ["dlopen"]
    # Rendering is reproducible: the same model gives the same bytes (no timestamps).
    again = tmp_path / "again"
    again.mkdir()
    render(model, again)
    for p in written:
        assert p.read_bytes() == (again / p.relative_to(tmp_path)).read_bytes()


def shimgen(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shimgen", *args], capture_output=True,
                          text=True, cwd=cwd or ROOT, timeout=300)


def assert_one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("shimgen: error:") and needle in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


def bad_inputs(tmp_path: Path, real: Path) -> list[tuple[Path, str]]:
    cases = []
    cases.append((tmp_path / "missing.so", "no such file"))
    cases.append((tmp_path, "is a directory"))
    dangling = tmp_path / "dangling.so"
    dangling.symlink_to(tmp_path / "nowhere")
    cases.append((dangling, "dangling symlink"))
    loop = tmp_path / "loop.so"
    loop.symlink_to(loop)
    cases.append((loop, "symlink loop"))
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    cases.append((empty, "empty file"))
    text = tmp_path / "text.so"
    text.write_text("not a library\n")
    cases.append((text, "not an ELF file"))
    trunc = tmp_path / "truncated.so"
    trunc.write_bytes(real.read_bytes()[:4096])
    cases.append((trunc, "malformed"))
    elf32 = tmp_path / "elf32.so"
    elf32.write_bytes(b"\x7fELF\x01\x01\x01" + bytes(45))
    cases.append((elf32, "32-bit"))
    libc = Path("/lib/x86_64-linux-gnu/libm.so.6")
    if libc.exists():
        cases.append((libc, "not a CUDA driver library"))
    return cases


def test_bad_driver_input_is_one_line(drivers, tmp_path):
    for path, needle in bad_inputs(tmp_path, drivers[0].path):
        proc = shimgen("build", "--driver", str(path), "--out", str(tmp_path / "out"))
        assert_one_line_error(proc, needle)
        assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_unwritable_output(drivers):
    """/proc refuses new directories even to root."""
    proc = shimgen("build", "--driver", str(drivers[0].path), "--out", "/proc/shimgen-out")
    assert_one_line_error(proc, "output directory /proc/shimgen-out")


def test_output_that_is_a_file(drivers, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    proc = shimgen("build", "--driver", str(drivers[0].path), "--out", str(f))
    assert proc.returncode == 1 and proc.stderr.startswith("shimgen: error: output directory")
    assert "Traceback" not in proc.stderr


def test_failed_build_keeps_previous_good_build(drivers, tmp_path, monkeypatch):
    """A compile failure (a C compiler that fails) leaves the earlier library in place."""
    out = tmp_path / "out"
    ok = shimgen("build", "--driver", str(drivers[0].path), "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    lib = next(out.glob(f"*/{SHIM_LIBRARY}"))
    before = lib.read_bytes()
    failing_cc = tmp_path / "failcc"
    failing_cc.write_text("#!/bin/sh\necho broken compiler >&2\nexit 1\n")
    failing_cc.chmod(0o755)
    env = dict(os.environ, CC=str(failing_cc))
    proc = subprocess.run([sys.executable, "-m", "shimgen", "build", "--driver",
                           str(drivers[0].path), "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 1
    announced, failed = proc.stderr.splitlines()  # the build began, then failed
    assert announced.startswith("shimgen: build: building the shim for driver ")
    assert failed.startswith("shimgen: error: meson setup failed")
    assert lib.read_bytes() == before
    assert [p.name for p in out.iterdir()] == [lib.parent.name]  # no staging left behind


def test_default_driver_missing_is_one_line(tmp_path):
    """With no libcuda anywhere the loader looks, `shimgen build` says so in one line."""
    if shutil.which("ldconfig") and "libcuda.so.1" in subprocess.run(
        ["ldconfig", "-p"], capture_output=True, text=True).stdout:
        pytest.skip("this machine has a libcuda installed")
    from shimgen.cuda import LIBCUDA_DIRS

    found = [d for d in LIBCUDA_DIRS if (Path(d) / "libcuda.so.1").exists()]
    if found:
        pytest.skip(f"this machine has a libcuda in {found[0]}")
    proc = shimgen("build", "--out", str(tmp_path))
    assert_one_line_error(proc, "no libcuda.so.1 found")


def test_path_with_comment_terminator_still_builds(drivers, tmp_path):
    """A driver path containing '*/' must not end the banner comment of generated C."""
    odd = tmp_path / "we*" / "ird"
    odd.mkdir(parents=True)
    copy = odd / drivers[0].path.name
    shutil.copy2(drivers[0].path, copy)
    proc = shimgen("build", "--driver", str(copy), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    runtime = next((tmp_path / "out").glob("*/src/table.c")).read_text()
    assert "we*\\/ird" in runtime.split("*/", 1)[0]
