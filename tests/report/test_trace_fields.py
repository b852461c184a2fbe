"""One list of the trace's fields (shimgen/runenv.py, TRACE_PROCESS_FIELDS and
TRACE_FUNCTION_FIELDS): both readers held to it on one real process's two traces (the exit
JSON and the binary file), and the C layout of a block's struct fstats to its rendered
header (templates/tracefields.h.j2)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest

from shimgen import runenv
from shimgen.driver.library import read_driver
from shimgen.shim.model import build_model
from shimgen.shim.render import render, tracefields_context
from shimgen.trace import binary, jsonfile
from shimgen.trace.model import FunctionStats, ProcessTrace
from tests.faultkit import run

ROOT = Path(__file__).resolve().parents[2]


def test_the_list_names_fields_the_readers_and_the_header_have():
    header = {name for name, _, _ in runenv.TRACE_HEADER}
    for name, _key, where in runenv.TRACE_PROCESS_FIELDS:
        assert name in ProcessTrace.__slots__, name
        if where is not None and where.startswith("block:"):  # a word the header places
            assert f"off_{where.removeprefix('block:')}" in header, where
        elif where is not None:
            assert where in header, where
    listed = {name for name, _, _ in runenv.TRACE_FUNCTION_FIELDS if name}
    assert listed == set(FunctionStats.__slots__) - {"errors", "injected"}
    words = [w for _, _, w in runenv.TRACE_FUNCTION_FIELDS if w]
    assert sorted(words) == sorted(runenv.TRACE_FSTATS)


@pytest.fixture(scope="module")
def both(shims, probes, tmp_path_factory):
    """One timed process, traced both ways at once."""
    tmp = tmp_path_factory.mktemp("fields")
    d, trace = tmp / "traces", tmp / "trace.json"
    run([probes / "tracekill", "libcuda.so.1", "rounds", "2", "3", "0"],
        shims[0].env(SHIMGEN_TRACE="time", SHIMGEN_TRACE_DIR=str(d),
                     SHIMGEN_TRACE_FILE=str(trace)))
    (f,) = d.glob("*" + runenv.TRACE_SUFFIX)
    return json.loads(trace.read_text()), jsonfile.load(trace), binary.load(f)


def test_the_json_has_every_listed_key_and_no_other(both):
    raw, _, _ = both
    keys = {key for _, key, _ in runenv.TRACE_PROCESS_FIELDS}
    assert set(raw) == keys | set(runenv.TRACE_JSON_OTHER)
    function_keys = {key for _, key, _ in runenv.TRACE_FUNCTION_FIELDS if key}
    assert raw["time"] and all(set(e) == function_keys for e in raw["time"].values())


def test_both_readers_read_every_listed_field_alike(both):
    _, j, b = both
    for name, _key, _where in runenv.TRACE_PROCESS_FIELDS:
        got = getattr(j, name), getattr(b, name)
        if name == "ns_per_tick":
            # two measurements of one rate (runtime/base/calib.c): the JSON's from the reading
            # at its exit, the binary file's from the readings its header keeps; each within
            # its readings' widths against their span, a few parts in 10^5 on a loaded machine
            assert got[0] == pytest.approx(got[1], rel=1e-4), (name, got)
        else:
            assert got[0] == got[1], (name, got)
    assert set(j.functions) == set(b.functions) and j.functions
    for fn, fj in j.functions.items():
        fb = b.functions[fn]
        for name, _key, _word in runenv.TRACE_FUNCTION_FIELDS:
            if name in ("total_ns", "max_ns"):  # written to the ns ("%.0f") in the JSON
                assert getattr(fj, name) == pytest.approx(getattr(fb, name), abs=1), (fn, name)
            elif name:
                assert getattr(fj, name) == getattr(fb, name), (fn, name)


def test_the_rendered_header_is_the_blocks_c_layout(drivers, tmp_path):
    """arch/layout.h takes struct fstats' offsets from the rendered tracefields.h;
    tracefile/block.h's asserts hold the struct to them: a header rendered from another list
    fails them."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROOT / "templates"),
                             trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    (tmp_path / "tracefields.h").write_text(env.get_template("tracefields.h.j2").render(
        **tracefields_context()))
    src = tmp_path / "src"  # rendered, not built: a layout that differs is said by field
    render(build_model(read_driver(drivers[0].path), ["shimgen", "build"]), src)
    rendered = (src / "tracefields.h").read_text().strip()
    assert rendered == (tmp_path / "tracefields.h").read_text().strip()
    (tmp_path / "check.c").write_text('#include "tracefile/tracefile.h"\n')
    proc = subprocess.run([cc, "-std=gnu11", "-fsyntax-only", "-Wall", "-Werror",
                           "-I", str(tmp_path), "-I", str(ROOT / "runtime"),
                           "-I", str(ROOT / "runtime" / "arch" / "x86_64"), "-I", str(src),
                           str(tmp_path / "check.c")], capture_output=True, text=True)
    differ = re.findall(r'static assertion failed: "fstats\.?(\w*)"', proc.stderr)
    assert not differ, f"the header and struct fstats differ in: {differ}"
    assert proc.returncode == 0, proc.stderr
