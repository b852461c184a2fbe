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
