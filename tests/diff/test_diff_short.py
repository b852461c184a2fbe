"""`shimgen diff`'s text says a change that many names share once, with their count (535 ->
550: 21 names found from 12040 on), each name listed under it with -v; the JSON keeps every
span of every name; a variant that moves stays one line per name (the exports are the news).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.badinput import shimgen


@pytest.fixture(scope="module")
def pair(drivers):
    old, new = (next(d for d in drivers if d.version == v) for v in ("535.261.03",
                                                                     "550.163.01"))
    return str(old.path), str(new.path)


GROUPED = "  21 names  12040 and up: not found -> its export  (-v lists them)"


def test_a_change_many_names_share_is_one_line(pair):
    proc = shimgen("diff", "--no-gates", *pair)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert GROUPED in lines, proc.stdout
    found = lines[lines.index("newly found (25 names):") + 1:]
    found = found[:next(i for i, ln in enumerate(found) if not ln.startswith("  "))]
    assert len(found) == 1 + 25 - 21 + 1, found  # the group, 4 names (one in two lines)
    assert "  cuFuncGetName  12030 and up: not found -> cuFuncGetName" in found
    # moves are each name's own
    assert re.search(r"^  cuGraphAddNode  12030 and up: cuGraphAddNode -> cuGraphAddNode_v2$",
                     proc.stdout, re.M)


def test_verbose_lists_the_names_of_a_group_and_json_keeps_every_span(pair):
    short = shimgen("diff", "--no-gates", *pair).stdout.splitlines()
    proc = shimgen("diff", "--no-gates", "-v", *pair)
    lines = proc.stdout.splitlines()
    i = lines.index(GROUPED.replace("  (-v lists them)", ""))
    members = lines[i + 1:i + 22]
    assert all(re.fullmatch(r"      cu\w+  12040 and up: not found -> cu\w+", m)
               for m in members), members
    assert len(lines) == len(short) + 21
    got = json.loads(shimgen("diff", "--no-gates", "--json", *pair).stdout)
    names = {s["name"] for s in got["proc_address"] if (s["from"], s["to"]) == (12040, None)}
    assert {m.split()[0] for m in members} <= names and len(names) >= 21
