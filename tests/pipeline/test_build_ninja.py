"""The build runs ninja itself on the configured directory (`meson compile` starts Python
and meson only to run it): the ninja on the build's PATH, or $NINJA as meson reads it; with
neither (a system whose ninja is named samu or ninja-build, which meson setup finds),
`meson compile`."""

import os
import stat
import sys
from pathlib import Path

from shimgen.shim import build


def _tool(d, name):
    p = d / name
    p.write_text("#!/bin/sh\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def test_the_ninja_on_the_build_path_compiles(tmp_path):
    bdir = tmp_path / "b"
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    _tool(second, "ninja")
    got = build._compile_command(bdir, {"PATH": os.pathsep.join(map(str, (first, second)))})
    assert got == [str(second / "ninja"), "-C", str(bdir)]
    named = _tool(first, "samu")
    env = {"PATH": str(first), "NINJA": "samu"}
    assert build._compile_command(bdir, env) == [str(named), "-C", str(bdir)]


def test_without_ninja_meson_compiles(tmp_path):
    bdir = tmp_path / "b"
    (tmp_path / "empty").mkdir()
    got = build._compile_command(bdir, {"PATH": str(tmp_path / "empty")})
    assert got == [sys.executable, "-m", "mesonbuild.mesonmain", "compile", "-C", str(bdir)]


def test_the_build_environment_finds_the_ninja_we_depend_on():
    """`pip install` puts the ninja this package depends on beside the interpreter: the
    build's PATH has it first, so a shim is compiled by ninja directly."""
    got = build._compile_command(Path("b"), build._tool_env())
    assert os.path.basename(got[0]) == "ninja" and got[1:] == ["-C", "b"], got
