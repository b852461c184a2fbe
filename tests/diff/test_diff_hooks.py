"""diff's hook scanner (shimgen/diff/compare.py, hook_names): a function that a hook file both
hooks and declares, in either order, counts as hooked, so diff says what changes for a
hooked function."""

from __future__ import annotations

import json

import pytest

from shimgen.diff.compare import hook_names
from tests.badinput import shimgen

HOOKED = "SHIMGEN_HOOK(CUresult, cuGraphAddNode_v2, (CUgraphNode *n))\n{\n    return 0;\n}\n"
DECLARED = "SHIMGEN_DECLARE(CUresult, cuGraphAddNode_v2, (CUgraphNode *n));\n"
ORDERS = {"hooked-first": HOOKED + DECLARED, "declared-first": DECLARED + HOOKED}


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_a_name_hooked_and_declared_counts_as_hooked(order):
    assert hook_names(ORDERS[order]) == [("cuGraphAddNode_v2", "hook")]


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_diff_says_the_hooked_function_vanishes(drivers, tmp_path, order):
    """550 -> 535: cuGraphAddNode_v2 vanishes; the file hooks it (and declares it)."""
    hook = tmp_path / "hook.c"
    hook.write_text("#include <shimgen/hook.h>\n" + ORDERS[order])
    new, old = (next(d for d in drivers if d.version == v) for v in ("535.261.03",
                                                                     "550.163.01"))
    env_free = ("--no-gates", "--hook", str(hook), str(old.path), str(new.path))
    proc = shimgen("diff", "--json", *env_free)
    assert proc.returncode == 1, proc.stderr
    (got,) = json.loads(proc.stdout)["hooks"][str(hook)]
    assert (got["name"], got["kind"], got["what"][0]) == ("cuGraphAddNode_v2", "hook",
                                                          "vanishes")
    text = shimgen("diff", *env_free).stdout
    assert "  cuGraphAddNode_v2 (hook): vanishes" in text
