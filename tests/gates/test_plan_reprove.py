"""`--gate-profile auto` with an init-site change that fails its proof
(shimgen/gates/plan.py): the whole proof, just run, has failed; the profile is refused as
unproven, or with --allow-unproven-gates baked without that change. It is not proven a
second time, which would refuse it with a profile file's message under any flag. No driver
tested has such a change: discovery's result is made to have one here."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from shimgen.driver import read_image
from shimgen.errors import ShimgenError
from shimgen.gates import discover as discovering
from shimgen.gates.initsite import SET
from shimgen.gates.plan import load_plan


@pytest.fixture(scope="module")
def found(drivers):
    """535.261.03's image and its profile, gdr's set change made to set another bit too."""
    d = next(x for x in drivers if x.version == "535.261.03")
    image = read_image(d.path)
    profile = discovering.discover(image)
    (p,) = [p for p in profile.gate("gdr").init_patches if p.direction == SET]
    p.changes[0] = dataclasses.replace(p.changes[0], new=0x61)  # 0x40 | 0x20 | 0x01
    return image, profile


def test_auto_with_an_init_change_that_failed_is_refused_or_baked_without_it(found,
                                                                             monkeypatch):
    image, profile = found
    monkeypatch.setattr(discovering, "discover", lambda img: copy.deepcopy(profile))
    with pytest.raises(ShimgenError) as e:
        load_plan(image, "auto")
    assert str(e.value) == (
        f"the gates found in {image.real_path} (--gate-profile auto): its emulation proof "
        "failed; not baking unproven gates (give --allow-unproven-gates to bake them "
        "anyway, at your risk)")
    plan = load_plan(image, "auto", allow_unproven=True)
    assert plan.proof == "failed"
    gdr = next(g for g in plan.gates if g.name == "gdr")
    assert gdr.init_set == () and gdr.init_mask  # the failed change left out, the other baked
