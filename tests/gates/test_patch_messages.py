"""What `shimgen patch` says when it cannot do what was asked: a copy it wrote is "already
patched", with or without --gate-profile (said from the manifest beside it, before any
analysis), naming the original to patch instead; a gate without an init site (Debian's
DMA-BUF gate) is refused with the command that works, the shim's struct method."""

from __future__ import annotations

import json
import shlex

from tests.badinput import assert_one_line_error, shimgen


def test_a_patched_copy_is_already_patched_with_or_without_a_profile(drivers, tmp_path):
    a = drivers[0]
    out = tmp_path / "out"
    assert shimgen("patch", "--driver", str(a.path), "--gates", "gdr", "-o",
                   str(out)).returncode == 0
    profile = tmp_path / "a.json"
    assert shimgen("gates", "--driver", str(a.path), "--json", str(profile)).returncode == 0
    for extra in ([], ["--gate-profile", str(profile)]):
        again = tmp_path / "again"
        said = assert_one_line_error(
            shimgen("patch", "--driver", str(out / "libcuda.so.1"), "--gates", "gdr", "-o",
                    str(again), *extra),
            f"{out / a.path.name} is already patched (set gdr: the copy `shimgen patch` "
            f"wrote, {out / 'shimgen-patch.json'}); nothing written; patch the original, "
            f"{a.path}")
        assert not again.exists(), said


def test_a_gate_without_an_init_site_names_the_way_that_works(drivers, tmp_path):
    a = drivers[0]
    d = f"--driver {shlex.quote(str(a.path))}"
    for mask, verb, sel in (([], "sets", "dmabuf"), (["--mask"], "masks", "-dmabuf")):
        said = assert_one_line_error(
            shimgen("patch", "--driver", str(a.path), "--gates", "dmabuf", *mask, "-o",
                    str(tmp_path / "x")),
            "gate dmabuf has no init site to ")
        assert said.endswith(f"; nothing written; the shim {verb} it instead (the struct "
                             f"method): shimgen run {d} --gates {sel} -- COMMAND"), said
        assert not (tmp_path / "x").exists()


def test_a_profile_without_the_gates_init_changes_is_refused_naming_the_way_that_works(
        drivers, tmp_path):
    """A profile that records no init-site change of the gate at all (one of an older
    shimgen) is refused as a gate without an init site is, with the struct method."""
    a = drivers[0]
    profile = tmp_path / "a.json"
    assert shimgen("gates", "--driver", str(a.path), "--json", str(profile)).returncode == 0
    doc = json.loads(profile.read_text())
    for g in doc["gates"]:
        g.pop("init_patches", None)
    profile.write_text(json.dumps(doc))
    d = f"--driver {shlex.quote(str(a.path))}"
    said = assert_one_line_error(
        shimgen("patch", "--driver", str(a.path), "--gates", "gdr", "--gate-profile",
                str(profile), "-o", str(tmp_path / "x")),
        "gate gdr has no init site to set in this profile; nothing written; the shim sets it "
        f"instead (the struct method): shimgen run {d} --gates gdr -- COMMAND")
    assert not (tmp_path / "x").exists(), said


def test_a_p2p_proof_that_failed_refuses_the_p2p_gate_alone(drivers, monkeypatch):
    """When the P2P gate's own proof fails, `patch` refuses that gate, and still writes an
    attribute gate's init changes, which their own proofs passed."""
    import pytest

    from shimgen.driver import read_driver
    from shimgen.errors import ShimgenError
    from shimgen.gates import prove as proving
    from shimgen.gates.discover import discover
    from shimgen.gates.patch import select_changes

    image = read_driver(drivers[0].path)
    profile = discover(image)

    def failed(img, code, prof, result):
        prof.p2p.proof = {"status": "failed", "ok": False}
        result.problems.append("gate p2p-mixed: a check made to fail by the test")
    monkeypatch.setattr(proving, "_prove_p2p", failed)
    changes = select_changes(image, profile, ["gdr"], False, [])
    assert [c.gate for c in changes] == ["gdr", "gdr"], changes
    with pytest.raises(ShimgenError, match="gate p2p-mixed: a check failed its emulation "
                                           "proof .gate p2p-mixed: a check made to fail"):
        select_changes(image, profile, ["p2p-mixed"], False, [])
