"""The mutation check itself (devtools/mutants.py) on a tiny repository made here: a mutation
its test catches, one that survives, and broken entries (old text missing or twice, a test
id that does not exist) must each be reported as such, with the right exit status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CALC = '''def add(a, b):
    return a + b


def unused(a):
    return a * 2  # twice: a * 2
'''

TEST = '''from calc import add


def test_add():
    assert add(2, 3) == 5
'''

LIST = '''MUTATIONS = [
    {"name": "caught", "file": "calc.py", "old": "return a + b", "new": "return a - b",
     "tests": ["test_calc.py::test_add"], "why": "add adds"},
    {"name": "survives", "file": "calc.py", "old": "return a * 2", "new": "return a * 3",
     "tests": ["test_calc.py::test_add"], "why": "nothing tests unused()"},
    {"name": "twice", "file": "calc.py", "old": "a * 2", "new": "a * 4",
     "tests": ["test_calc.py::test_add"], "why": "an ambiguous entry"},
    {"name": "missing", "file": "calc.py", "old": "return a / b", "new": "return 0",
     "tests": ["test_calc.py::test_add"], "why": "text that is not there"},
    {"name": "no-such-test", "file": "calc.py", "old": "return a + b", "new": "return b + a",
     "tests": ["test_calc.py::test_sub"], "why": "a test id that does not exist"},
]
'''


def tiny_repo(where: Path) -> Path:
    repo = where / "tiny"
    repo.mkdir()
    (repo / "calc.py").write_text(CALC)
    (repo / "test_calc.py").write_text(TEST)
    (repo / "mutations.py").write_text(LIST)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    return repo


def mutants(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "devtools.mutants", "--repo", str(repo),
                           "--list", str(repo / "mutations.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def verdicts(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("caught", "SURVIVED", "BROKEN"):
            out[parts[1]] = parts[0]
    return out


def test_caught_survived_and_broken_entries(tmp_path):
    repo = tiny_repo(tmp_path)
    proc = mutants(repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert verdicts(proc.stdout) == {"caught": "caught", "survives": "SURVIVED",
                                     "twice": "BROKEN", "missing": "BROKEN",
                                     "no-such-test": "BROKEN"}
    assert "the old text occurs 2 times" in proc.stdout
    assert "the old text occurs 0 times" in proc.stdout
    assert "mutants: 1 caught, 1 survived, 3 broken entries" in proc.stdout
    assert (repo / "calc.py").read_text() == CALC  # the repository itself is never touched


def test_all_caught_exits_zero(tmp_path):
    repo = tiny_repo(tmp_path)
    proc = mutants(repo, "--only", "caught")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert verdicts(proc.stdout) == {"caught": "caught"}
    proc = mutants(repo, "--only", "survives")
    assert proc.returncode == 1 and verdicts(proc.stdout) == {"survives": "SURVIVED"}


def test_the_repository_list_is_well_formed():
    """Every entry of devtools/mutations.py applies to this tree (its old text occurs exactly
    once) and names test files that exist; running them is the job of the check itself."""
    from devtools.mutants import DEFAULT_LIST, check_entry, load

    mutations, problems = load(DEFAULT_LIST)
    assert problems == []
    assert len(mutations) >= 15
    for m in mutations:
        assert check_entry(m, ROOT) is None, m.name
        for t in m.tests:
            assert (ROOT / t.split("::")[0]).is_file(), (m.name, t)
