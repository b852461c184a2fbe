"""`shimgen gates` and `shimgen build --gate-profile` at the command line, on the real Debian
drivers:
a profile records its proof status and an unproven or failed one is never baked without
--allow-unproven-gates; an empty --gates is a usage error; the build summary says what was
asked; `shimgen gates` fails like every other command (one `shimgen: error:` line, exit 1) and
checks its --json path before the analysis, replacing only an earlier profile."""

from __future__ import annotations

import json
import os

import pytest

from shimgen import cli
from shimgen.gates import prove as proving
from shimgen.gates import report
from shimgen.gates.profile import load_profile
from shimgen.runenv import SHIM_MANIFEST
from tests.badinput import assert_one_line_error, entries, no_dac, shimgen

no_dac = pytest.fixture(scope="module", name="no_dac")(no_dac)


@pytest.fixture(scope="module")
def driver(drivers):
    return drivers[0]


@pytest.fixture(scope="module")
def proven(driver, tmp_path_factory):
    """A profile written by `shimgen gates --json` with its proof (which passes)."""
    out = tmp_path_factory.mktemp("proven") / "profile.json"
    proc = shimgen("gates", "--driver", str(driver.path), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def unproven(driver, tmp_path_factory):
    """A profile written by `shimgen gates --no-proof --json`."""
    out = tmp_path_factory.mktemp("unproven") / "profile.json"
    proc = shimgen("gates", "--driver", str(driver.path), "--json", str(out), "--no-proof")
    assert proc.returncode == 0, proc.stderr
    assert "--allow-unproven-gates" in proc.stdout
    return out


def test_profiles_record_their_proof_status(proven, unproven):
    assert json.loads(proven.read_text())["proof"]["status"] == "passed"
    assert load_profile(proven).proof_status == "passed"
    doc = json.loads(unproven.read_text())
    assert doc["proof"]["status"] == "not run" and doc["proof"]["ok"] is False
    assert load_profile(unproven).proof_status == "not run"


def _variant(src, tmp_path, name, change):
    doc = json.loads(src.read_text())
    change(doc)
    out = tmp_path / name
    out.write_text(json.dumps(doc))
    return out


def test_unproven_or_failed_profiles_are_refused(driver, proven, unproven, tmp_path):
    """Not run, failed, or with no proof at all (an older or hand-made profile): one line
    naming the profile, what is unproven and the flag; exit 1; nothing built."""
    def fail(doc):
        doc["proof"].update(status="failed", ok=False)

    def absent(doc):
        del doc["proof"]

    def bare_fail(doc):  # no status: the ok it records decides
        doc["proof"] = {"ok": False}

    cases = [(unproven, "was not run"),
             (_variant(proven, tmp_path, "failed.json", fail), "failed"),
             (_variant(proven, tmp_path, "absent.json", absent), "was not run"),
             (_variant(proven, tmp_path, "bare.json", bare_fail), "failed")]
    out = tmp_path / "out"
    for profile, how in cases:
        proc = shimgen("build", "--driver", str(driver.path), "--out", str(out),
                       "--gate-profile", str(profile))
        line = assert_one_line_error(proc, f"gate profile {profile}: its emulation proof {how};")
        assert "--allow-unproven-gates" in line
        assert entries(out) == []


def test_a_profile_without_the_p2p_gate_is_baked_with_its_attribute_gates(driver, proven,
                                                                          tmp_path):
    """A profile of an older shimgen (no branch gate in its list) is proven again and baked
    as it is: its attribute gates, their init-site changes, no P2P gate; so is one whose
    every init change recorded is a chosen one (dmabuf's, none found, left out)."""
    from shimgen.driver import read_image
    from shimgen.gates.plan import load_plan

    def older(doc):
        doc["gates"] = [g for g in doc["gates"] if g.get("kind") != "branch"]

    def chosen_only(doc):
        older(doc)
        for g in doc["gates"]:
            g["init_patches"] = [p for p in g["init_patches"] if p["status"] == "chosen"]

    image = read_image(driver.path)
    for change in (older, chosen_only):
        plan = load_plan(image, str(_variant(proven, tmp_path, f"{change.__name__}.json",
                                             change)))
        assert [g.name for g in plan.gates] == ["gdr", "dmabuf"], change
        assert plan.gates[0].init_set and plan.gates[0].init_mask, change


@pytest.mark.parametrize("status, ok", [("passed", False), ("failed", True), ("maybe", False)])
def test_a_proof_status_that_contradicts_itself_is_malformed(proven, tmp_path, status, ok):
    def change(doc):
        doc["proof"].update(status=status, ok=ok)

    bad = _variant(proven, tmp_path, "bad.json", change)
    with pytest.raises(Exception, match="proof.status"):
        load_profile(bad)


def test_allow_unproven_gates_bakes_and_says_so(driver, unproven, tmp_path):
    proc = shimgen("build", "--driver", str(driver.path), "--out", str(tmp_path / "out"),
                   "--gate-profile", str(unproven), "--allow-unproven-gates")
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("gates "))
    assert "gdr (attributes" in line and f"from profile {unproven}, proof not run" in line
    manifest = next((tmp_path / "out").glob(f"*/{SHIM_MANIFEST}")).read_text()
    assert "--allow-unproven-gates" in manifest


def test_auto_with_a_failed_proof_is_refused(driver, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(proving, "prove", lambda image, p: proving.ProofResult(False, True, 0))
    out = tmp_path / "out"
    assert cli.main(["build", "--driver", str(driver.path), "--out", str(out),
                     "--gate-profile", "auto"]) == 1
    err = capsys.readouterr().err.splitlines()  # the build announced, then refused
    assert len(err) == 2 and err[0].startswith("shimgen: build: building the shim "), err
    assert "(--gate-profile auto): its emulation proof failed" in err[1], err
    assert entries(out) == []


def test_flag_without_gates_is_refused():
    assert_one_line_error(shimgen("build", "--driver", "/x", "--allow-unproven-gates"),
                          "--allow-unproven-gates goes with --gate-profile")


@pytest.mark.parametrize("option", ["--gate-profile", "--gates"])
@pytest.mark.parametrize("value", ["", "  "])
def test_empty_gates_is_a_usage_error(driver, tmp_path, value, option):
    out = tmp_path / "out"
    proc = shimgen("build", "--driver", str(driver.path), "--out", str(out), option, value)
    assert_one_line_error(proc, f"argument {option}: empty", code=2)
    assert entries(out) == []


class _Built:
    library = "LIB"
    seconds = 0.0


def _summary_line(monkeypatch, capsys, argv) -> str:
    """The build summary's gates line, the compile itself skipped."""
    from shimgen.shim import build as build_mod

    monkeypatch.setattr(build_mod, "build", lambda model, out: _Built())
    assert cli.main(argv) == 0
    return next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("gates "))


def test_summary_without_gates_says_not_asked(driver, tmp_path, monkeypatch, capsys):
    line = _summary_line(monkeypatch, capsys, ["build", "--driver", str(driver.path), "--out",
                                               str(tmp_path)])
    assert line == ("gates      not asked (--gate-profile auto or --gate-profile PROFILE bakes "
                    "them in)")


def test_summary_with_auto_says_what_was_found(driver, tmp_path, monkeypatch, capsys):
    line = _summary_line(monkeypatch, capsys, ["build", "--driver", str(driver.path), "--out",
                                               str(tmp_path), "--gate-profile", "auto"])
    assert line.startswith("gates      gdr (attributes 110, 116, 124; init site: set/mask), "
                           "dmabuf (attributes 124; init site: none), "
                           "p2p-mixed (code only, SHIMGEN_GATE_METHOD=init: 3 bytes) from "
                           "--gate-profile auto, proof passed;"), line


# --------------------------------------------------------------------------------------------
# `shimgen gates`: errors like every other command, its output path checked first


def test_gates_errors_are_like_every_other_command(tmp_path):
    junk = tmp_path / "libcuda.so.9.9.9"
    junk.write_bytes(b"not an elf")
    out = tmp_path / "p.json"
    for cmd in ("gates", "exports", "build"):
        args = [cmd, "--driver", str(junk)] + (["--json", str(out)] if cmd == "gates" else [])
        assert_one_line_error(shimgen(*args), f"driver {junk}")
    assert not out.exists()


def test_failed_proof_is_one_error_line(driver, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(proving, "prove", lambda image, p: proving.ProofResult(False, True, 0))
    out = tmp_path / "p.json"
    assert cli.main(["gates", "--driver", str(driver.path), "--json", str(out)]) == cli.EXIT_ERROR
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert captured.out == ""  # a failure prints nothing on stdout, as for every command
    assert len(err) == 1 and err[0].startswith("shimgen: error: gates of ")
    assert "the emulation proof failed (no gate proven); no profile written" in err[0]
    assert entries(tmp_path) == []


@pytest.fixture
def no_analysis(monkeypatch):
    """Discovery fails the test: the output path must be refused before it runs."""
    def analyse(image):
        raise AssertionError("the analysis ran before the output path was checked")
    monkeypatch.setattr(report, "discover", analyse)


def _gates_json(driver, out, capsys) -> str:
    rc = cli.main(["gates", "--driver", str(driver.path), "--json", str(out)])
    err = capsys.readouterr().err.splitlines()
    assert rc == cli.EXIT_ERROR and len(err) == 1, err
    return err[0]


def test_json_into_a_missing_or_wrong_directory_fails_first(driver, tmp_path, no_analysis,
                                                            capsys):
    missing = tmp_path / "no" / "p.json"
    assert "directory " + str(missing.parent) + " does not exist" in _gates_json(
        driver, missing, capsys)
    (tmp_path / "file").write_text("x")
    assert "is not a directory" in _gates_json(driver, tmp_path / "file" / "p.json", capsys)
    (tmp_path / "d.json").mkdir()
    assert "is a directory" in _gates_json(driver, tmp_path / "d.json", capsys)
    (tmp_path / "link.json").symlink_to(tmp_path / "elsewhere.json")
    assert "symbolic link" in _gates_json(driver, tmp_path / "link.json", capsys)
    assert not (tmp_path / "elsewhere.json").exists()


def test_json_never_clobbers_a_file_that_is_not_a_profile(driver, tmp_path, no_analysis, capsys):
    for name, content in (("notes.json", "my notes\n"), ("other.json", '{"schema": "x"}')):
        f = tmp_path / name
        f.write_text(content)
        assert "not overwriting it" in _gates_json(driver, f, capsys)
        assert f.read_text() == content


def test_json_into_an_unwritable_directory_fails_first(driver, tmp_path, no_dac):
    d = tmp_path / "ro"
    d.mkdir(mode=0o500)
    proc = shimgen("gates", "--driver", str(driver.path), "--json", str(d / "p.json"),
                   prefix=no_dac)
    assert_one_line_error(proc, f"directory {d} is not writable")
    assert proc.stdout == ""  # nothing analysed, nothing printed


def test_json_replaces_an_earlier_profile_whole_and_owner_only(driver, proven, tmp_path):
    out = tmp_path / "p.json"
    out.write_text(proven.read_text().replace('"passed"', '"passed" '))
    os.chmod(out, 0o644)
    proc = shimgen("gates", "--driver", str(driver.path), "--json", str(out), "--no-proof")
    assert proc.returncode == 0, proc.stderr
    assert load_profile(out).proof_status == "not run"
    assert os.stat(out).st_mode & 0o777 == 0o600
    assert entries(tmp_path) == ["p.json"]  # no temporary file left
