"""The test folders: each is on pytest's path (pyproject.toml), so that a module's `from
test_x import ...` of another folder's helpers works whichever folder is collected first."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_folder_is_on_pytests_path():
    text = (ROOT / "pyproject.toml").read_text()  # tomllib is Python 3.11's
    listed = re.search(r"^pythonpath = \[(.*?)\]", text, re.M | re.S).group(1)
    path = set(re.findall(r'"([^"]+)"', listed))
    folders = {str(d.relative_to(ROOT)) for d in (ROOT / "tests").iterdir()
               if d.is_dir() and any(d.glob("test_*.py"))}
    assert folders and folders <= path, folders - path
    assert not list((ROOT / "tests").glob("test_*.py")), "tests live in the folders"


def test_the_second_tier_holds_no_test_a_mutation_names():
    """The mutation check runs the default tier: a test in tests/tiers.py that an entry of
    devtools/mutations.py names would never run there (its mistake reported as broken)."""
    from tiers import SLOW

    from devtools.mutations import MUTATIONS

    named = {t for m in MUTATIONS for t in m["tests"]}
    clash = sorted(t for t in SLOW if t in named or t.split("[")[0] in named
                   or t.split("::")[0] in named)
    assert not clash, clash
