"""`shimgen diff OLD NEW` on the real Debian drivers (535 -> 550, 550 -> 555), each finding
checked by an independent path: the exports against `nm -D --defined-only`, the
cuGetProcAddress answers against tests/c/procgrid.c run on each driver, the gates against
`shimgen gates --json` of each driver. A driver compared with itself has no differences
(exit 0); a bad path is trouble (exit 2, one line)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from shimgen import cli
from shimgen.diff import procaddr as pa
from shimgen.diff import query
from shimgen.diff.compare import hook_names
from shimgen.driver.library import read_driver
from tests.badinput import assert_one_line_error, shimgen

PAIRS = [("535.261.03", "550.163.01"), ("550.163.01", "555.58.02")]
FUNCTION_TYPES, OBJECT_TYPES = set("TWi"), set("BDRVGS")


def _driver(drivers, version):
    return next(d for d in drivers if d.version == version)


@pytest.fixture(scope="module", params=PAIRS, ids=lambda p: f"{p[0]}-{p[1]}")
def pair(request, drivers):
    """(OLD, NEW, the JSON of `shimgen diff --json OLD NEW`), gates compared by default."""
    old, new = (_driver(drivers, v) for v in request.param)
    proc = shimgen("diff", "--json", str(old.libdir), str(new.libdir / "libcuda.so.1"))
    assert proc.returncode == 1, proc.stderr  # these builds differ
    assert proc.stderr == ""
    return old, new, json.loads(proc.stdout)


def _nm(path: Path, types: set[str]) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return {p[2] for p in (ln.split() for ln in out.splitlines())
            if len(p) == 3 and p[1] in types}


def test_exports_added_and_removed_are_nm_s(pair):
    old, new, got = pair
    a, b = _nm(old.path, FUNCTION_TYPES), _nm(new.path, FUNCTION_TYPES)
    assert got["exports"]["added"] == sorted(b - a) and b - a
    assert got["exports"]["removed"] == sorted(a - b)
    a, b = _nm(old.path, OBJECT_TYPES), _nm(new.path, OBJECT_TYPES)
    assert got["exports"]["objects_added"] == sorted(b - a)
    assert got["exports"]["objects_removed"] == sorted(a - b)


def test_reversed_direction_swaps_added_and_removed(drivers):
    old, new = (_driver(drivers, v) for v in PAIRS[0])
    proc = shimgen("diff", "--json", "--no-gates", str(new.path), str(old.path))
    got = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert got["exports"]["removed"] == sorted(_nm(new.path, FUNCTION_TYPES)
                                               - _nm(old.path, FUNCTION_TYPES))
    assert got["exports"]["added"] == []


def _grid(driver, probes, names, versions) -> dict[tuple[str, int, int, int], tuple]:
    """procgrid's answers: (name, api, flags, version) -> (rc, status, symbol or None)."""
    proc = subprocess.run([str(probes / "procgrid"), str(driver.path), *map(str, versions)],
                          input="\n".join(names) + "\n", capture_output=True, text=True,
                          timeout=300, check=True)
    out = {}
    for line in proc.stdout.splitlines():
        name, v, fl, rc1, s1, rc2, st2, s2 = line.split()
        found = {"-", "null"}
        out[(name, 1, int(fl), int(v))] = (int(rc1), None, None if s1 in found else s1)
        out[(name, 2, int(fl), int(v))] = (int(rc2), int(st2), None if s2 in found else s2)
    return out


def _covering(spans, name, api, flags, version):
    api_name = query.APIS[api]
    return [s for s in spans if s["name"] == name and s["api"] == api_name
            and s["flags"] == flags and s["from"] <= version
            and (s["to"] is None or version <= s["to"])]


def test_proc_address_differences_are_the_drivers_own(pair, probes):
    """At versions on and off the grid of multiples of 10, each query that procgrid answers
    differently on OLD and NEW lies in exactly one span of the diff, with both answers; each
    query it answers alike lies in none."""
    old, new, got = pair
    names = query.query_names(sorted(_nm(old.path, FUNCTION_TYPES)),
                           sorted(_nm(new.path, FUNCTION_TYPES)))
    top = max(got["old"]["cuda_version"], got["new"]["cuda_version"])
    versions = sorted({0, 1999, 2000, 3020, 7000, 11000, 11035, 12000, 12029, 12030, 12035,
                       *range(12010, top + 11, 10), top + 1, 13005, 99999})
    a, b = _grid(old, probes, names, versions), _grid(new, probes, names, versions)
    spans = got["proc_address"]
    differing = 0
    for key in a:
        cover = _covering(spans, *key)
        if a[key] == b[key]:
            assert cover == [], (key, a[key], cover)
            continue
        differing += 1
        assert len(cover) == 1, (key, a[key], b[key], cover)
        s = cover[0]
        for side, want in (("old", a[key]), ("new", b[key])):
            rc, status, symbol = want
            assert (s[side]["rc"], s[side]["status"], s[side]["symbol"]) == \
                (rc, status, symbol), (key, side, s)
    assert differing > 0


def test_proc_address_names_a_variant_move(drivers):
    """535 -> 550: cuStreamGetCaptureInfo's newest variant moves from _v2 to _v3 at 12030,
    the per-thread one with it."""
    old, new = (_driver(drivers, v) for v in PAIRS[0])
    proc = shimgen("diff", "--no-gates", str(old.path), str(new.path))
    assert proc.returncode == 1
    text = proc.stdout
    assert re.search(r"^  cuStreamGetCaptureInfo  12030 and up: cuStreamGetCaptureInfo_v2 -> "
                     r"cuStreamGetCaptureInfo_v3 \[flags 0,1\]$", text, re.M)
    assert re.search(r"^  cuStreamGetCaptureInfo  12030 and up: cuStreamGetCaptureInfo_v2_ptsz"
                     r" -> cuStreamGetCaptureInfo_v3_ptsz \[flags 2\]$", text, re.M)
    assert "gates     not compared (--no-gates)" in text


@pytest.mark.parametrize("version", ["550.163.01", "555.58.02"])
def test_a_driver_against_itself_has_no_differences(drivers, version):
    """One build against itself: one line, at once (no query, no gate analysis); the JSON,
    whole as ever, finds no difference either."""
    d = _driver(drivers, version)
    proc = shimgen("diff", str(d.path), str(d.libdir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == (f"shimgen diff: {version} -> {version}: no differences (one build: "
                           f"build-id {read_driver(d.path).build_id})\n"), proc.stdout
    full = shimgen("diff", "--json", str(d.path), str(d.libdir))
    assert full.returncode == 0, full.stderr
    got = json.loads(full.stdout)
    assert got["proc_address"] == [] and got["gates"]["compared"], got.keys()


def test_gates_are_each_drivers_profile(pair, tmp_path):
    """Offsets, bits and init-site bytes on each side are those `shimgen gates --json`
    writes for that driver."""
    old, new, got = pair
    for side, d in (("old", old), ("new", new)):
        out = tmp_path / f"{side}.json"
        assert shimgen("gates", "--driver", str(d.path), "--json", str(out)).returncode == 0
        profile = json.loads(out.read_text())
        for g in profile["gates"]:
            if g.get("kind") == "branch":  # p2p-mixed: tests/gates/test_p2p_gate.py
                continue
            mine = next(x for x in got["gates"]["gates"] if x["name"] == g["name"])[side]
            assert mine["fields"] == [{"offset": f["offset"], "mask": f["mask"]}
                                      for f in g["fields"]]
            for p in g["init_patches"]:
                (i,) = [i for i in mine["init"] if i["direction"] == p["direction"]]
                assert i["status"] == p["status"]
                assert [c["file_offset"] for c in i["changes"]] == \
                    [c["file_offset"] for c in p["changes"]]
                assert [(int(c["old"], 16), int(c["new"], 16)) for c in i["changes"]] == \
                    [(int(c["old"], 16), int(c["new"], 16)) for c in p["changes"]]
    gdr = next(x for x in got["gates"]["gates"] if x["name"] == "gdr")
    assert gdr["old"]["fields"] != gdr["new"]["fields"]  # the struct moved in each upgrade
    assert "struct offset or bit" in gdr["what"] and got["gates"]["differ"]
    assert gdr["new"]["proven"] is True


HOOKS = """/* SHIMGEN_HOOK(CUresult, cuInComment, (void)) */
#define SHIMGEN_HOOK(ret, name, params) ret name params
// SHIMGEN_DECLARE(CUresult, cuInLineComment, (void))
static const char *s = "SHIMGEN_HOOK(CUresult, cuInString, (void))";
SHIMGEN_HOOK(CUresult, cuGraphAddNode_v2, (CUgraphNode *n))
SHIMGEN_DECLARE(CUresult, cuGraphAddNode, (CUgraphNode *n))
SHIMGEN_HOOK( const char * , cuMemAlloc_v2 ,
              (CUdeviceptr *p, size_t n))
SHIMGEN_HOOK(CUresult, cuNoSuchFunction, (void))
"""


def test_hook_scanner_reads_the_names_outside_comments():
    assert hook_names(HOOKS) == [("cuGraphAddNode_v2", "hook"), ("cuGraphAddNode", "declare"),
                                 ("cuMemAlloc_v2", "hook"), ("cuNoSuchFunction", "hook")]


def test_hooks_that_vanish_or_gain_variants(drivers, tmp_path):
    """550 -> 535 (a downgrade): cuGraphAddNode_v2 vanishes, cuGraphAddNode loses it and
    cuGetProcAddress answers cuGraphAddNode at 12030 and up instead; cuMemAlloc_v2 stays."""
    hooks = tmp_path / "hooks.c"
    hooks.write_text(HOOKS)
    new, old = (_driver(drivers, v) for v in PAIRS[0])
    proc = shimgen("diff", "--json", "--no-gates", "--hook", str(hooks), str(old.path),
                   str(new.path))
    assert proc.returncode == 1, proc.stderr
    got = {h["name"]: h for h in json.loads(proc.stdout)["hooks"][str(hooks)]}
    assert got["cuGraphAddNode_v2"]["what"][0] == "vanishes"
    assert got["cuGraphAddNode_v2"]["bypassed"][0]["new"]["symbol"] == "cuGraphAddNode"
    assert got["cuGraphAddNode"]["what"] == ["loses cuGraphAddNode_v2"]
    assert got["cuMemAlloc_v2"]["what"] == []
    assert got["cuNoSuchFunction"]["in_old"] is got["cuNoSuchFunction"]["in_new"] is False
    text = shimgen("diff", "--no-gates", "--hook", str(hooks), str(new.path), str(old.path))
    assert "  cuGraphAddNode (declare): gains cuGraphAddNode_v2; cuGetProcAddress gives " \
        "another answer" in text.stdout


@pytest.mark.parametrize("says,why", [
    ("", "the cuGetProcAddress querier said nothing"),
    ("v 12020\\ns cuInit 1 0\\n", "the querier wrote 's cuInit 1 0'"),
    ("v 12020\\n", "the cuGetProcAddress querier gave no answers for cu"),
    ("v 12020\\ns cuDriverGetVersion 1 0 0 500 -1 -\\n",
     "the cuGetProcAddress querier gave no answers for cu"),
], ids=["silent", "short-line", "no-answers", "one-answer"])
def test_a_querier_that_answers_wrongly_is_trouble(drivers, tmp_path, monkeypatch, capsys,
                                                   says, why):
    """The querier's output is checked before it is compared: nothing, a line that is not a
    step, a name asked and not answered (by each API, with each flags) are trouble (exit 2,
    one line), never an internal error or "no differences" (a querier that answered
    nothing, the same on both sides, was "no differences")."""
    fake = tmp_path / "query"
    fake.write_text(f"#!/bin/sh\ncat > /dev/null\nprintf '{says}'\n")
    fake.chmod(0o700)
    monkeypatch.setattr(pa, "querier", lambda _tmp, _arch: fake)
    # two builds: one build against itself is answered without a querier
    assert cli.main(["diff", "--no-gates", str(drivers[0].path), str(drivers[1].path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("shimgen: error: ") and why in err[0], err


def test_equal_exports_with_other_answers_are_differences(drivers, tmp_path, monkeypatch,
                                                           capsys):
    """Two drivers with the same exports whose cuGetProcAddress answers differ (here a copy
    of one driver whose querier is made to find cuDriverGetVersion from 3000, not 2020, by
    the first API with flags 0): exit 1, "differences", `"differences": true`, the span in
    the answers section."""

    old = drivers[0].path
    new = tmp_path / "new" / old.name
    new.parent.mkdir()
    # another build-id (one build against itself is answered without a querier): the
    # note's bytes are not code, so the copy exports and answers as the original does
    from shimgen.driver.notes import read_build_id

    build_id = bytes.fromhex(read_build_id(old))
    data = old.read_bytes()
    assert data.count(build_id) == 1
    new.write_bytes(data.replace(build_id, bytes(b ^ 0xFF for b in build_id)))
    real = pa.querier(tmp_path)
    wrapper = tmp_path / "query"
    wrapper.write_text(f'''#!/bin/sh
if [ "$1" = "{new}" ]; then
    "{real}" "$@" | sed "s/^s cuDriverGetVersion 1 0 2020 /s cuDriverGetVersion 1 0 3000 /"
else
    exec "{real}" "$@"
fi
''')
    wrapper.chmod(0o700)
    monkeypatch.setattr(pa, "querier", lambda _tmp, _arch: wrapper)
    assert cli.main(["diff", "--no-gates", str(old), str(new)]) == 1
    text = capsys.readouterr().out
    assert text.startswith(f"shimgen diff: {drivers[0].version} -> {drivers[0].version}: "
                           "differences\n"), text
    assert "  exports   +0 -0 functions, +0 -0 objects" in text, text
    assert re.search(r"^  cuDriverGetVersion  2020-2999: cuDriverGetVersion -> not found "
                     r"\[cuGetProcAddress only; flags 0\]$", text, re.M), text
    assert cli.main(["diff", "--json", "--no-gates", str(old), str(new)]) == 1
    got = json.loads(capsys.readouterr().out)
    assert got["differences"] is True and not any(got["exports"].values())
    assert [(s["name"], s["api"], s["flags"], s["from"], s["to"]) for s in
            got["proc_address"]] == [("cuDriverGetVersion", "cuGetProcAddress", 0, 2020, 2999)]


def test_bad_path_is_trouble(drivers, tmp_path):
    d = drivers[0]
    proc = shimgen("diff", str(tmp_path / "gone"), str(d.path))
    assert_one_line_error(proc, "no such file", code=2)
    assert proc.stdout == ""
    proc = shimgen("diff", str(d.path), str(tmp_path))  # a directory without a driver
    assert_one_line_error(proc, "a directory without libcuda.so.1", code=2)
    proc = shimgen("diff", "--hook", str(tmp_path / "none.c"), str(d.path), str(d.path))
    assert_one_line_error(proc, "hook file", code=2)


def test_a_driver_that_crashes_its_process_is_trouble(drivers, tmp_path, monkeypatch, capsys):
    crash = tmp_path / "crash"
    crash.write_text("#!/bin/sh\nkill -SEGV $$\n")
    crash.chmod(0o700)
    monkeypatch.setattr(pa, "querier", lambda _tmp, _arch: crash)
    d = drivers[0]  # against another build: one build against itself asks no process
    assert cli.main(["diff", "--no-gates", str(d.path), str(drivers[1].path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "died of signal 11" in err[0], err
