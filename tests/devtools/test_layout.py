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


def test_the_mutation_check_runs_the_tests_of_the_second_tier(tmp_path):
    """An entry of devtools/mutations.py may name a test of tests/tiers.py: the check's
    pytest runs it all the same (the default run's `-m 'not slow'` would deselect it, and
    the entry would be reported broken)."""
    from tiers import SLOW

    from devtools.mutants import pytest as mutants_pytest

    slow = sorted(SLOW)[0]
    proc = mutants_pytest([slow], ROOT, 120, "--collect-only")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert re.search(r"^1 tests? collected", proc.stdout, re.M), proc.stdout[-2000:]
