"""The NVML shim's commands on Debian's real libnvidia-ml (libnvidia-ml1): `build --nvml`,
`exports` and `diff` of NVML files, and each bad input as one line, nothing built."""

from __future__ import annotations

import json

from shimgen.driver import read_image
from tests.badinput import assert_one_line_error, entries, shimgen


def test_build_nvml_builds_the_nvml_shim_alone(nvml_libraries, tmp_path):
    real = nvml_libraries[0]
    proc = shimgen("build", "--nvml", str(real.path), "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    count = len(read_image(real.path).function_names())
    assert f"forwarded  {count} functions (5 answered when a limit is set" in proc.stdout
    (built,) = tmp_path.glob("nvmlshim-*/libnvmlshim.so")
    assert f"shim       {built}" in proc.stdout
    manifest = json.loads((built.parent / "shim.json").read_text())
    assert manifest["soname"] == "libnvidia-ml.so.1" and manifest["functions"] == count


def test_build_nvml_refuses_what_is_not_nvml_in_one_line(drivers, probes, tmp_path):
    out = tmp_path / "out"
    libcuda = drivers[0].path
    assert_one_line_error(shimgen("build", "--nvml", str(libcuda), "-o", str(out)),
                          "exports no nvmlInit_v2")
    fake = probes / "libfake_nvml_libnvidia_ml.so"
    assert_one_line_error(shimgen("build", "--nvml", str(fake), "-o", str(out)),
                          "a stub, not the real libnvidia-ml")
    assert_one_line_error(shimgen("build", "--nvml", str(tmp_path / "none"), "-o", str(out)),
                          "none")
    assert_one_line_error(shimgen("build", "--nvml", "", "-o", str(out)), "--nvml: empty path")
    assert_one_line_error(shimgen("build", "--nvml", str(fake), "--driver", str(libcuda),
                                  "-o", str(out)), "--driver is the libcuda shim's")
    assert entries(out) == []


def test_exports_lists_an_nvml_librarys_functions(nvml_libraries):
    real = nvml_libraries[0].path
    proc = shimgen("exports", "--driver", str(real))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == read_image(real).function_names()


def test_diff_of_two_nvml_libraries_says_the_exports_added_and_removed(nvml_libraries,
                                                                       drivers):
    old, new = nvml_libraries[0].path, nvml_libraries[2].path
    a, b = (set(read_image(p).function_names()) for p in (old, new))
    proc = shimgen("diff", str(old), str(new), "--json")
    assert proc.returncode == 1, proc.stderr
    d = json.loads(proc.stdout)
    assert set(d["added"]) == b - a and set(d["removed"]) == a - b and d["added"]
    same = shimgen("diff", str(old), str(old))
    assert same.returncode == 0 and "0 removed, 0 added" in same.stdout, same.stderr
    assert_one_line_error(shimgen("diff", str(old), str(drivers[0].path)),
                          "diff compares two libraries of one kind", code=2)
