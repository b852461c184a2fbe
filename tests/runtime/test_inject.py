"""Fault injection (SHIMGEN_INJECT, `shimgen run --inject`; docs/inject.md), on the CPU
against the real Debian drivers: without a GPU cuDriverGetVersion still succeeds, so each
injected failure is observable exactly. tests/c/injectcalls.c calls it through every route
(linked, dlsym, cuGetProcAddress and cuGetProcAddress_v2 with several versions and flags)
and prints each result code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from shimgen.errors import ShimgenError
from shimgen.shim import inject
from shimgen.trace import binary as tracefile
from shimgen.trace import blocks
from shimgen.trace import jsonfile as tracejson

OOM = 2  # CUDA_ERROR_OUT_OF_MEMORY
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def one(shims):
    return shims[0]


def calls(probes, shim, spec: str | None, *routes: str, **env: str) -> list[str]:
    """injectcalls' lines under the shim with SHIMGEN_INJECT=spec; the notices in env's
    SHIMGEN_NOTICE_FILE or on stderr come back as the last item."""
    extra = dict(env)
    if spec is not None:
        extra["SHIMGEN_INJECT"] = spec
    proc = subprocess.run([str(probes / "injectcalls"), *routes], env=shim.env(**extra),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines() + [proc.stderr]


def codes(line: str) -> list[int]:
    return [int(c) for c in line.split(":", 1)[1].split()]


@pytest.mark.parametrize("rule,want", [
    ("cuDriverGetVersion=2", [OOM] * 8),
    ("cuDriverGetVersion=2,nth=3", [0, 0, OOM, 0, 0, 0, 0, 0]),
    ("cuDriverGetVersion=2,every=3", [0, 0, OOM, 0, 0, OOM, 0, 0]),
    ("cuDriverGetVersion=2,after=5", [0, 0, 0, 0, 0, OOM, OOM, OOM]),
    ("cuDriverGetVersion=2,times=2", [OOM, OOM, 0, 0, 0, 0, 0, 0]),
    ("cuDriverGetVersion=2,every=2,times=3", [0, OOM, 0, OOM, 0, OOM, 0, 0]),
    ("cuDriverGetVersion=2,after=2,every=3", [0, 0, OOM, 0, 0, OOM, 0, 0]),
    ("cuDriverGetVersion=CUDA_ERROR_LAUNCH_FAILED,nth=1", [719, 0, 0, 0, 0, 0, 0, 0]),
    ("cuDriverGetVer*=999,nth=8", [0] * 7 + [999]),
    ("cuDriver?etVersion=2,nth=2", [0, OOM, 0, 0, 0, 0, 0, 0]),
    ("cuDriverGetVersion=2,p=1", [OOM] * 8),
    ("cuDriverGetVersion=2,p=0", [0] * 8),
    ("cuDriverGetVersion=2,nth=2;cuDriverGetVersion=3,every=2",
     [0, OOM, 0, 3, 0, 3, 0, 3]),
    ("cuDriverGetVersion=2,rank=0", [OOM] * 8),
    # leading zeros are no digits of the number: 00000000002 is 2
    ("cuDriverGetVersion=00000000002,nth=000000000000000000003", [0, 0, OOM, 0, 0, 0, 0, 0]),
    ("cuDriverGetVersion=2,rank=1", [0] * 8),
])
def test_every_key(probes, one, rule, want):
    out = calls(probes, one, rule, "dlsym:8", RANK="0")
    assert codes(out[0]) == want, out
    assert f"SHIMGEN_INJECT armed: '{rule.split(';')[0]}' on 1 function" in out[-1], out[-1]


def _rankless_env(one, **extra: str) -> dict[str, str]:
    """The shim's environment with none of the launchers' rank variables (runenv.RANK_VARS)."""
    from shimgen.runenv import RANK_VARS

    env = one.env()
    for name in RANK_VARS:
        env.pop(name, None)
    return {**env, **extra}


@pytest.mark.parametrize("rank_env,fires", [
    ({}, False), ({"RANK": ""}, False), ({"RANK": "x0"}, False), ({"RANK": "0"}, True),
    ({"SLURM_PROCID": "0"}, True), ({"RANK": "1"}, False),
], ids=["no-rank", "empty", "not-a-number", "RANK-0", "SLURM_PROCID-0", "RANK-1"])
def test_a_rank_rule_fires_only_in_the_process_of_that_rank(probes, one, rank_env, fires):
    """rank=0 is the process whose launcher says rank 0: a process with no rank at all (the
    launcher itself, the torchrun agent, a job that is not distributed) is no rank, and the
    rule is not armed there (the notice says so)."""
    env = _rankless_env(one, SHIMGEN_INJECT="cuDriverGetVersion=2,rank=0", **rank_env)
    proc = subprocess.run([str(probes / "injectcalls"), "dlsym:3"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert codes(proc.stdout) == ([OOM] * 3 if fires else [0] * 3), (rank_env, proc.stdout)
    assert ("another rank's: not armed here" in proc.stderr) is not fires, proc.stderr


@pytest.mark.parametrize("key", ["nth", "every", "times"])
def test_the_shims_parser_refuses_a_zero_where_the_least_is_one(probes, one, key):
    """A hand-set SHIMGEN_INJECT (no `shimgen run` to check it first) with nth, every or
    times at 0: the shim refuses the rule in its one notice and runs the program untouched
    (every=0 taken would divide by zero at the first matching call: SIGFPE)."""
    rule = f"cuDriverGetVersion=2,{key}=0"
    with pytest.raises(ShimgenError, match=f"{key}='0' is not a whole number from 1"):
        inject.parse(rule)
    out = calls(probes, one, rule, "dlsym:4")
    assert codes(out[0]) == [0] * 4, out
    assert out[-1] == f"shimgen: SHIMGEN_INJECT rule '{rule}' refused: {key}=0 is not a " \
        f"whole number from 1 to {inject.NUMBER_MAX}; no fault is injected\n", out[-1]
    ok = calls(probes, one, f"cuDriverGetVersion=2,{key}=1", "dlsym:2")
    assert codes(ok[0])[0] == OOM and "armed" in ok[-1], ok


def test_without_rules_nothing_fails(probes, one):
    out = calls(probes, one, None, "dlsym:4", "linked:2")
    assert codes(out[0]) == [0] * 4 and codes(out[1]) == [0] * 2 and "SHIMGEN_INJECT" not in out[-1]


# cuGetProcAddress(_v2) at several versions and flags: every address it hands out for
# cuDriverGetVersion is the shim's, so every route reaches the injection, and one counter.
ROUTES = ["linked:1", "dlsym:1", "gpa3000.0:1", "gpa12000.0:1", "gpa12000.1:1",
          "gpa12000.2:1", "gpa23000.0:1", "gpa212000.0:1", "gpa212020.2:1"]


def test_every_route_is_injected_and_counted_once(probes, one):
    out = calls(probes, one, "cuDriverGetVersion=2", *ROUTES)
    assert [codes(line) for line in out[:-1]] == [[OOM]] * len(ROUTES), out
    out = calls(probes, one, "cuDriverGetVersion=2,every=2", *ROUTES)
    assert [codes(line)[0] for line in out[:-1]] == [OOM if k % 2 else 0
                                                     for k in range(len(ROUTES))], out


def test_seed_decides_and_python_predicts(probes, one):
    """p draws from (seed, rule, call number) alone: the same seed gives the same failures,
    and those shimgen/shim/inject.py predicts; another seed gives others."""
    got = {}
    for seed in (7, 7, 8):
        rule = f"cuDriverGetVersion=2,p=0.5,seed={seed}"
        seen = codes(calls(probes, one, rule, "dlsym:48")[0])
        r = inject.parse(rule)
        assert seen == [OOM if inject.fires(r, 0, n) else 0 for n in range(1, 49)]
        assert seen == got.setdefault(seed, seen)
    assert got[7] != got[8] and 0 < got[7].count(OOM) < 48
    default = codes(calls(probes, one, "cuDriverGetVersion=2,p=0.5", "dlsym:48")[0])
    assert default == [OOM if inject.fires(inject.parse("x=2,p=0.5"), 0, n) else 0
                       for n in range(1, 49)]


def test_a_forked_child_counts_afresh(probes, one):
    out = calls(probes, one, "cuDriverGetVersion=2,nth=2", "dlsym:1", "fork", "dlsym:2")
    assert out[:-1] == ["dlsym: 0", "in child:", "dlsym: 0 2", "child: exit 0", "dlsym: 2 0"]


# ---- the rules' grammar: Python refuses, and the shim's parser agrees ----

BAD = [
    ("", "empty rule"), ("cuDriverGetVersion", "PATTERN=RESULT"), ("=2", "PATTERN=RESULT"),
    ("cuDriverGetVersion=", "PATTERN=RESULT"), ("cu[D]riverGetVersion=2", "pattern"),
    ("cuDriverGetVersion=CUDA_ERROR_NOPE", "not a CUresult"),
    ("cuDriverGetVersion=CUDA_SUCCESS", "no failure"), ("cuDriverGetVersion=0", "CUDA_SUCCESS"),
    ("cuDriverGetVersion=2,when=3", "unknown key"), ("cuDriverGetVersion=2,nth=1,nth=2", "twice"),
    ("cuDriverGetVersion=2,nth=0", "nth="), ("cuDriverGetVersion=2,nth=-1", "nth="),
    ("cuDriverGetVersion=2,every=x", "every="), ("cuDriverGetVersion=2,p=1.5", "outside"),
    ("cuDriverGetVersion=2,p=5.", "probability"), ("cuDriverGetVersion=2,p=1e-3", "probability"),
    ("cuDriverGetVersion=2,nth=2,every=2", "cannot go with it"),
    ("cuDriverGetVersion=2,nth=2,times=1", "cannot go with it"),
    ("cuDriverGetVersion=2,seed=3", "seed goes with p"), ("cuDriverGetVersion=2,nth", "no value"),
    ("cuDriverGetVersion=2,", "unknown key"), ("cuNoSuchFunction=2", "matches no function"),
    ("cuMemGetAttribute=2", "does not return a CUresult"),
    ("cuMemGetAttribut?=2", "return no CUresult"),
    ("cuDriverGetVersion=000000000004294967296", "not a CUresult"),
    ("cuDriverGetVersion=000000000000", "CUDA_SUCCESS"),
    ("cuDriverGetVersion=2,nth=00000000000000000000", "nth="),
    ("cuDriverGetVersion=2147483648", "not a CUresult"),
]
GOOD = ["cuMemAlloc=2", "cuMemAlloc_v2=2", "cuMemAlloc*=2", "cuMemcpyHtoD_v2=2",
        "cuMemcpyHtoD=2", "cuMemcpy*Async=2", "cuStreamSynchronize=2", "cuLaunchKernel=719",
        "cuMemGetAttribute*=2", "cu*=2", "cudbg*=2", "cuGraph*Node*=2,p=.25,seed=9",
        "cuMemAlloc_v2=CUDA_ERROR_OUT_OF_MEMORY,nth=3", "cuDriverGetVersion=2,after=0",
        "cuDriverGetVersion=2,rank=3,every=2,after=1,times=4",
        "cuDriverGetVersion=00000000002,every=000000000000000000002"]


def exports_of(shim) -> list[str]:
    return inject.exports_of(shim.out_dir)


@pytest.mark.parametrize("rule,words", BAD)
def test_python_refuses_in_one_line(one, rule, words):
    with pytest.raises(ShimgenError) as e:
        inject.check([rule], exports_of(one))
    assert words in str(e.value) and "\n" not in str(e.value) and repr(rule) in str(e.value)


def test_c_and_python_agree(probes, one):
    """Each rule: accepted by both (and on as many functions), or refused by both, and then
    nothing is injected."""
    names = exports_of(one)
    assert len(names) > 500 and "cuDriverGetVersion" in names
    for rule in [r for r, _ in BAD if r] + GOOD:
        try:
            want = len(inject.check([rule], names)[0][1])
        except ShimgenError:
            want = None
        out = calls(probes, one, rule, "dlsym:2")
        if want is None:
            assert f"rule '{rule}' refused" in out[-1] and codes(out[0]) == [0, 0], (rule, out)
        else:
            m = re.search(r"armed: '(.*)' on (\d+) functions?", out[-1])
            assert m and m.group(1) == rule and int(m.group(2)) == want, (rule, out[-1])


def test_leading_zeros_are_no_digits_of_the_number():
    """00000000002 is 2: a length limit counts the digits that matter."""
    rule = inject.parse("cuDriverGetVersion=00000000002,every=000000000000000000007")
    assert (rule.code, rule.every) == (2, 7)


def test_a_refused_rule_is_said_on_one_line_escaped(probes, one):
    """A newline or an escape sequence in SHIMGEN_INJECT is shown escaped in the notice,
    which stays one line (nothing forged after it, no terminal sequence run)."""
    out = calls(probes, one, "cuDriverGetVersion=2,ev\nery=1\x1b[2J;x\ry=\t2", "dlsym:1")
    assert codes(out[0]) == [0]
    assert out[-1].count("\n") == 1 and "\x1b" not in out[-1] and "\r" not in out[-1], out
    assert ("rule 'cuDriverGetVersion=2,ev\\nery=1\\x1b[2J' refused: unknown key "
            "'ev\\nery'") in out[-1], out[-1]


def test_variants_match_as_documented(one):
    names = exports_of(one)

    def hit(p):
        return [n for n in names if inject.matches(p, n)]

    assert hit("cuMemAlloc") == ["cuMemAlloc", "cuMemAlloc_v2"]
    assert hit("cuMemAlloc_v2") == ["cuMemAlloc_v2"]
    assert set(hit("cuMemcpyHtoD_v2")) == {"cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"}
    assert "cuStreamSynchronize_ptsz" in hit("cuStreamSynchronize")


def test_a_refused_spec_arms_nothing_and_says_so_once(probes, one):
    out = calls(probes, one, "cuDriverGetVersion=2;cuFoo=2", "dlsym:3")
    assert codes(out[0]) == [0, 0, 0]
    assert out[-1].count("\n") == 1 and "rule 'cuFoo=2' refused" in out[-1]


def _long_rule(nth: int, size: int) -> str:
    """A rule of `size` bytes on cuDriverGetVersion alone (its pattern padded with '*')."""
    tail = f"DriverGetVersion=2,nth={nth}"
    return "cu" + "*" * (size - 2 - len(tail)) + tail


def test_the_shims_parser_takes_32_rules_and_refuses_33(probes, one):
    """A hand-set SHIMGEN_INJECT: 32 rules are armed (the longest that fit in 4095 bytes:
    each fires, and the armed notice is one line, cut short), 33 refused in the notice
    (the shim keeps each function's rules in a 32-bit mask and 32 rules' state)."""
    rules = [_long_rule(n, 126) for n in range(1, 33)]
    spec = ";".join(rules)
    assert len(spec) == 4063 and len(inject.check(rules, exports_of(one))) == 32
    out = calls(probes, one, spec, "dlsym:33")
    assert codes(out[0]) == [OOM] * 32 + [0], out
    notice = out[-1]
    assert notice.startswith(f"shimgen: SHIMGEN_INJECT armed: '{rules[0]}' on 1 function; "), \
        notice
    assert notice.count("\n") == 1 and len(notice) < 1100, notice
    many = ";".join(f"cuDriverGetVersion=2,nth={n}" for n in range(1, 34))
    out = calls(probes, one, many, "dlsym:2")
    assert codes(out[0]) == [0, 0], out
    assert out[-1] == ("shimgen: SHIMGEN_INJECT rule 'cuDriverGetVersion=2,nth=33' refused: "
                       "more than 32 rules; no fault is injected\n"), out[-1]


def test_the_shims_parser_takes_4095_bytes_and_refuses_more(probes, one):
    """SHIMGEN_INJECT of 4095 bytes is armed; one byte more is refused whole in the notice,
    never cut to a shorter spec and armed (`run` refuses it before the command starts)."""
    names = exports_of(one)
    at, over = _long_rule(1, 4095), _long_rule(1, 4096)
    assert len(inject.check([at], names)) == 1
    with pytest.raises(ShimgenError, match="the rules take 4096 bytes, more than the 4095"):
        inject.check([over], names)
    out = calls(probes, one, at, "dlsym:2")
    assert codes(out[0]) == [OOM, 0] and "armed" in out[-1], out
    for spec in (over, "cuDriverGetVersion=2;" + _long_rule(1, 5000)):
        out = calls(probes, one, spec, "dlsym:2")
        assert codes(out[0]) == [0, 0], out
        assert out[-1].endswith(" refused: SHIMGEN_INJECT is longer than 4095 bytes; no fault "
                                "is injected\n") and out[-1].count("\n") == 1, out[-1]


# ---- the trace keeps injected failures apart from the driver's errors ----

@pytest.mark.parametrize("mode", ["counts", "time"])
def test_trace_file_and_json_record_injected(probes, one, tmp_path, mode):
    tdir, js = tmp_path / "traces", tmp_path / "trace.json"
    calls(probes, one, "cuDriverGetVersion=2,every=2", "dlsym:7", SHIMGEN_TRACE=mode,
          SHIMGEN_TRACE_DIR=str(tdir), SHIMGEN_TRACE_FILE=str(js), SHIMGEN_QUIET="1")
    (trace,) = [tracefile.load(p) for p in tdir.iterdir()]
    for t in (trace, tracejson.load(js)):
        fs = t.functions["cuDriverGetVersion"]
        assert fs.calls == 7 and fs.injected == {OOM: 3} and fs.errors == {}, t.path
    report = subprocess.run([sys.executable, "-m", "shimgen", "report", str(tdir)], cwd=ROOT,
                            capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    head = next(line for line in report.stdout.splitlines() if "function" in line)
    row = next(line for line in report.stdout.splitlines()
               if line.endswith(" cuDriverGetVersion") and line.split()[0] != "cuDriverGetVersion")
    assert head.split()[-2] == "injected" and row.split()[-2] == "3", report.stdout
    assert re.search(r"^cuDriverGetVersion +2 +CUDA_ERROR_OUT_OF_MEMORY +3$", report.stdout,
                     re.M), report.stdout
    data = json.loads(subprocess.run([sys.executable, "-m", "shimgen", "report", "--json",
                                      str(tdir)], cwd=ROOT, capture_output=True,
                                     text=True).stdout)
    (g,) = data["groups"]
    assert g["injected"] == [{"function": "cuDriverGetVersion", "code": OOM,
                              "name": "CUDA_ERROR_OUT_OF_MEMORY", "count": 3}]
    assert g["errors"] == [] and g["functions"][0]["injected"] == 3


def test_reader_keeps_driver_errors_apart(tmp_path):
    """A time-mode slot counts every non-success return, injected ones too: the reader
    gives the driver's own as the rest (never below 0) and the injected ones apart."""
    errors = {0: {OOM: 5, 1: 2}, 1: {OOM: 1}}
    injected = {0: {OOM: 3}, 1: {OOM: 2}}
    blocks._less_injected(errors, injected)
    assert errors == {0: {OOM: 2, 1: 2}}


# ---- shimgen run --inject: checked before anything runs, recorded, reported ----

def _run(drivers, tmp_path, probes, *args: str, cmd=None):
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("SHIMGEN_")}
    env["XDG_CACHE_HOME"] = str(tmp_path.parent / "inject-xdg")  # shared by this module's runs
    env["LD_LIBRARY_PATH"] = str(drivers[0].libdir)
    argv = [sys.executable, "-m", "shimgen", "run", "--driver",
            str(drivers[0].libdir / "libcuda.so.1"), *args, "--",
            *(cmd or [str(probes / "injectcalls"), "dlsym:5"])]
    return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_run_inject_records_and_reports(drivers, probes, tmp_path):
    out = tmp_path / "run"
    proc = _run(drivers, tmp_path, probes, "--inject", "cuDriverGetVersion=2,nth=2",
                "--inject", "cuDriverGetVer*=CUDA_ERROR_LAUNCH_FAILED,nth=4", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["dlsym: 0 2 0 719 0"]
    record = json.loads((out / "run.json").read_text())
    assert record["inject"] == ["cuDriverGetVersion=2,nth=2",
                                "cuDriverGetVer*=CUDA_ERROR_LAUNCH_FAILED,nth=4"]
    assert record["environment"]["SHIMGEN_INJECT"] == ";".join(record["inject"])
    assert "SHIMGEN_INJECT armed" in (out / "notices.log").read_text()
    text = proc.stderr
    assert "inject     cuDriverGetVersion=2,nth=2; cuDriverGetVer*=" in text, text
    assert re.search(r"^cuDriverGetVersion +719 +CUDA_ERROR_LAUNCH_FAILED +1$", text, re.M), text
    assert "errors: none" in text, text  # the driver's own: none


@pytest.mark.parametrize("rule,words", [("cuNoSuch*=2", "matches no function"),
                                        ("cuDriverGetVersion=2,p=2", "outside")],
                         ids=["no-match", "p-range"])
def test_run_refuses_a_bad_rule_before_anything_runs(drivers, probes, tmp_path, rule, words):
    out = tmp_path / "run"
    proc = _run(drivers, tmp_path, probes, "--inject", rule, "-o", str(out))
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    # (a cold cache builds the shim first, whose exports the names are checked against, and
    # says so first)
    (line,) = [ln for ln in proc.stderr.splitlines()
               if not ln.startswith("shimgen: run: building the shim ")]
    assert line.startswith("shimgen: error: --inject ") and words in line
    assert not out.exists()


def test_run_refuses_more_rules_than_the_shim_takes_before_the_command_starts(
        drivers, probes, tmp_path):
    """33 rules: one more than the shim arms (it would refuse them all at the load, and the
    job would run for hours with nothing injected, only notices.log saying why). `run`
    refuses them in one line before anything runs; 32 are taken."""
    many = [f"cuDriverGetVersion=2,nth={n}" for n in range(1, 34)]
    out = tmp_path / "run"
    marker = tmp_path / "ran"
    proc = _run(drivers, tmp_path, probes, *(a for r in many for a in ("--inject", r)),
                "-o", str(out), cmd=["sh", "-c", f"touch {marker}"])
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    said = [ln for ln in proc.stderr.splitlines()  # the first build of the cache says so
            if not ln.startswith("shimgen: run: building the shim ")]
    assert said == ["shimgen: error: --inject: 33 rules, more than the 32 the shim takes"], \
        proc.stderr
    assert not marker.exists() and not out.exists()
    proc = _run(drivers, tmp_path, probes, *(a for r in many[:32] for a in ("--inject", r)),
                "-o", str(tmp_path / "run32"), cmd=[str(probes / "injectcalls"), "dlsym:3"])
    assert proc.returncode == 0 and proc.stdout == "dlsym: 2 2 2\n", proc.stderr


def test_run_does_not_pass_an_inherited_rule_on(drivers, probes, tmp_path):
    os.environ["SHIMGEN_INJECT"] = "cuDriverGetVersion=2"
    try:
        env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path.parent / "inject-xdg"),
                   LD_LIBRARY_PATH=str(drivers[0].libdir))
        proc = subprocess.run([sys.executable, "-m", "shimgen", "run", "--driver",
                               str(drivers[0].libdir / "libcuda.so.1"), "-o",
                               str(tmp_path / "r"), "--", str(probes / "injectcalls"),
                               "dlsym:2"], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
    finally:
        del os.environ["SHIMGEN_INJECT"]
    assert proc.returncode == 0 and proc.stdout == "dlsym: 0 0\n", proc.stderr
    assert "SHIMGEN_INJECT from the environment is not passed on" in proc.stderr


# ---- cost: nothing changes without rules; unmatched functions pay nothing ----

def test_unmatched_and_unset_cost_nothing(one, tmp_path):
    """callgrind's exact instruction count per call (benchmarks/native.py): the shim without
    SHIMGEN_INJECT, and with a rule for another function, adds what it always did."""
    from benchmarks import native

    why = native.callgrind_available()
    if why:
        pytest.skip(why)
    progs = native.compile_programs(tmp_path / "bench")

    def per_call(lib: str = "libcuda.so.1", env: dict | None = None, **extra: str) -> float:
        env = env or one.env(**extra)
        a = native.callgrind_instructions(progs, lib, "cuDriverGetVersion", 2000, env, tmp_path)
        b = native.callgrind_instructions(progs, lib, "cuDriverGetVersion", 4000, env, tmp_path)
        return (b - a) / 2000

    plain = per_call()
    assert plain == per_call(str(one.driver.path), one.env_without_shim()) + 1  # jmp *slot
    assert per_call(SHIMGEN_INJECT="cuCtxGetCurrent=2") == plain
    assert per_call(SHIMGEN_INJECT="cuDriverGetVersion=2,nth=99999999") > plain + 10


def test_compare_view_shows_injected_of_both(probes, one, tmp_path):
    for name, rule in (("a", "cuDriverGetVersion=2,nth=1"), ("b", "cuDriverGetVersion=2,every=2")):
        (tmp_path / name).mkdir()
        calls(probes, one, rule, "dlsym:6", SHIMGEN_TRACE="time",
              SHIMGEN_TRACE_DIR=str(tmp_path / name / "traces"), SHIMGEN_QUIET="1")
    proc = subprocess.run([sys.executable, "-m", "shimgen", "report", str(tmp_path / "a"),
                           str(tmp_path / "b")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^cuDriverGetVersion +2 +CUDA_ERROR_OUT_OF_MEMORY +1 +3 +\+2$",
                     proc.stdout, re.M), proc.stdout
    assert "errors: none in either run" in proc.stdout
    data = json.loads(subprocess.run([sys.executable, "-m", "shimgen", "report", "--json",
                                      str(tmp_path / "a"), str(tmp_path / "b")], cwd=ROOT,
                                     capture_output=True, text=True).stdout)
    (row,) = data["functions"]
    assert (row["injected_a"], row["injected_b"], row["errors_a"], row["errors_b"]) == (1, 3, 0, 0)
