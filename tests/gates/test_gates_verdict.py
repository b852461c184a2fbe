"""`shimgen gates` says its verdict first and briefly: the driver, whether the proof passed,
each gate with the attributes it controls (numbers and names) and what its init site allows,
then the commands to run next, with the --driver given. The instruction listing, the
attribute table and each check of the proof come with -v/--detail, after the verdict;
--json keeps everything."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from tests.badinput import shimgen


@pytest.fixture(scope="module")
def driver(drivers):
    return drivers[0]  # 535.261.03: gdr with a proven init site, dmabuf without one


@pytest.fixture(scope="module")
def verdict(driver) -> str:
    """What `shimgen gates --driver D` prints (run once for the module)."""
    proc = shimgen("gates", "--driver", str(driver.path))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_verdict_first_and_short(driver, verdict):
    proc = subprocess.CompletedProcess([], 0, verdict, "")
    lines = proc.stdout.splitlines()
    assert lines[0] == (f"driver 535.261.03 ({driver.path.name}, build-id "
                        "1a992e76d262)"), lines
    assert lines[1].startswith("proof PASS: the driver's own code run in an emulator ("), lines
    text = proc.stdout
    assert ("\n3 gates:\n"
            "  gdr        controls   110 GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,\n"
            "                        116 GPU_DIRECT_RDMA_SUPPORTED, 124 DMA_BUF_SUPPORTED\n"
            "             init site  set and mask, proven: `shimgen patch` can change it\n"
            "  dmabuf     controls   124 DMA_BUF_SUPPORTED\n"
            "             init site  none: the shim sets it instead (`shimgen run --gates "
            "dmabuf`)\n"
            "  p2p-mixed  allows     peer access between two GPU generations (3 checks of "
            "field [0xc30])\n"
            "             checks     the branches, proven: `shimgen patch` can change them\n"
            ) in text, text
    d = f"--driver {shlex.quote(str(driver.path))}"
    assert f"    shimgen run {d} --gates gdr,dmabuf -- COMMAND\n" in text, text
    assert f"    shimgen patch {d} --gates gdr -o DIR\n" in text, text  # gdr only
    assert f"    shimgen patch {d} --gates p2p-mixed -o DIR\n" in text, text
    assert f"    shimgen gates {d} --detail" in text, text
    assert "jump table" not in text and " init or-imm " not in text and "attr  kind" not in text
    assert len(lines) < 25, len(lines)


def test_the_count_is_the_gates_listed_and_diff_counts_the_same(driver, verdict):
    """"N gates:" counts every gate the verdict lists (the P2P gate too), each name in a
    column wide enough for the longest, and `shimgen diff` counts and names the same."""
    from shimgen.diff.gates import analyse
    from shimgen.driver import read_image

    lines = verdict.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.endswith(" gates:"))
    listed = [ln.split()[0] for ln in lines[head + 1:lines.index("next:")]
              if ln.startswith("  ") and not ln.startswith("   ")]
    assert lines[head] == f"{len(listed)} gates:" and "p2p-mixed" in listed, lines
    rows = [ln for ln in lines[head + 1:lines.index("next:")] if ln]
    column = {ln.index(" " + ln.split()[1]) + 1 if ln in listed_lines(rows) else
              len(ln) - len(ln.lstrip()) for ln in rows if not ln.lstrip()[0].isdigit()}
    assert len(column) == 1, lines  # each row's word (controls, allows, ...) in one column
    assert analyse(read_image(driver.path)).found == listed


def listed_lines(rows: list[str]) -> list[str]:
    return [ln for ln in rows if ln.startswith("  ") and not ln.startswith("   ")]


@pytest.mark.parametrize("flag", ["-v", "--detail"])
def test_detail_adds_the_listing_after_the_verdict(driver, verdict, flag):
    short = verdict
    proc = shimgen("gates", "--driver", str(driver.path), flag)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(short), proc.stdout[:400]
    rest = proc.stdout[len(short):]
    for needle in ("jump table", "gate     attributes        fields", " init or-imm ",
                   "attr  kind", "\nproof PASS\n", "  init site: gdr set "):
        assert needle in rest, needle


@pytest.fixture(scope="module")
def profile_json(driver) -> dict:
    """What `shimgen gates --driver D --json` prints (run once for the module)."""
    proc = shimgen("gates", "--driver", str(driver.path), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_json_keeps_everything(profile_json):
    profile = profile_json
    gdr = next(g for g in profile["gates"] if g["name"] == "gdr")
    assert gdr["attributes"] == [110, 116, 124] and len(gdr["init_sites"]) > 10
    assert profile["attributes"] and profile["proof"]["ok"] is True
    assert profile["proof"]["attributes"]


def test_the_p2p_checks_are_said_proven_by_their_own_proof_alone(profile_json):
    """The P2P gate's line says "proven" only when its own proof passed: not when another
    proof ran and its failed (`shimgen patch` then refuses its branches)."""
    from types import SimpleNamespace

    from shimgen.gates.profile import profile_from_json
    from shimgen.gates.report import format_verdict

    ran = SimpleNamespace(ok=True, attributes=[], device_table=None, init_sites=[])
    profile = profile_from_json(json.loads(json.dumps(profile_json)))
    assert profile.p2p.proven
    said = "             checks     {}\n"
    assert said.format("the branches, proven: `shimgen patch` can change them") in \
        format_verdict(profile, ran)
    profile.p2p.proof = dict(profile.p2p.proof, status="failed", ok=False)
    text = format_verdict(profile, ran)
    assert said.format("not proven: a check failed its emulation proof; `shimgen patch` "
                       "refuses them") in text, text
    profile.p2p.proof = None
    assert said.format("not proven (--no-proof): `shimgen patch` proves them itself") in \
        format_verdict(profile, None)


def test_no_proof_says_so_first(driver):
    proc = shimgen("gates", "--driver", str(driver.path), "--no-proof")
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.splitlines()[1]
    assert line.startswith("proof NOT RUN (--no-proof)") and "--allow-unproven-gates" in line
