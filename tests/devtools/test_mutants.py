"""The mutation check itself (devtools/mutants.py) on a tiny repository made here: a mutation
its test catches, one that survives, and broken entries (old text missing or twice, a test
id that does not exist) must each be reported as such, with the right exit status."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

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


def test_mutations_at_once_each_in_a_copy_give_the_same_verdicts_in_the_list_order(tmp_path):
    """-j 3: three scratch copies; the verdicts are those of one at a time, the summary
    lines in the list's order, and each copy's mutated file is restored, bytes and time."""
    repo = tiny_repo(tmp_path)
    os.utime(repo / "calc.py", ns=(10**18, 10**18))
    proc = mutants(repo, "-j", "3", "--keep")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert verdicts(proc.stdout) == {"caught": "caught", "survives": "SURVIVED",
                                     "twice": "BROKEN", "missing": "BROKEN",
                                     "no-such-test": "BROKEN"}
    kept = Path(proc.stdout.split("scratch copy kept in ")[1].split()[0])
    copies = sorted(kept.glob("repo*"))
    assert [c.name for c in copies] == ["repo", "repo1", "repo2"]
    for c in copies:
        assert (c / "calc.py").read_text() == CALC
        assert (c / "calc.py").stat().st_mtime_ns == 10**18, c
    shutil.rmtree(kept)


LEAVES = '''import os, subprocess, sys
from calc import add


def test_add_leaves_a_program_running():
    p = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(os.environ["LEFT_RUNNING"], "a") as f:
        f.write(f"{p.pid}\\n")
    assert add(2, 3) == 5
'''


def test_what_the_tests_leave_running_in_the_copy_is_killed(tmp_path):
    """A test that leaves a program running (in its own session, as a hung probe would be):
    after the unmutated run and after the mutation's, nothing of it is left."""
    repo = tiny_repo(tmp_path)
    (repo / "test_calc.py").write_text(LEAVES)
    (repo / "mutations.py").write_text(LIST.replace("test_calc.py::test_add",
                                                    "test_calc.py::test_add_leaves_a_program_running"))
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    left = tmp_path / "pids"
    env = dict(os.environ, LEFT_RUNNING=str(left))
    proc = subprocess.run([sys.executable, "-m", "devtools.mutants", "--repo", str(repo),
                           "--list", str(repo / "mutations.py"), "--only", "caught"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert verdicts(proc.stdout) == {"caught": "caught"}, proc.stdout + proc.stderr
    pids = [int(x) for x in left.read_text().split()]
    assert len(pids) == 2  # the run without the mutation, then the mutation's
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone
        assert state == "Z", f"pid {pid} still running"  # killed, not yet waited for


def test_nothing_outside_the_checks_copies_is_killed(tmp_path):
    """After a pytest run in a directory the check did not copy (the suite checks its tiers
    with the check's pytest in the repository itself), nothing that works there is killed:
    the suite's own workers and the shell that started them run there. In a copy the check
    made, a program left there is; never this process or one it descends from."""
    from devtools import mutants

    bystander = subprocess.Popen(["sleep", "60"], cwd=tmp_path)  # as a pytest worker would
    try:
        assert mutants.reap(tmp_path) == [] and bystander.poll() is None
        proc = mutants.pytest(["--version"], tmp_path, 60)
        assert proc.returncode == 0 and bystander.poll() is None
        mutants.COPIES.add(str(tmp_path.resolve()))
        try:
            os.chdir(tmp_path)  # this process works there too: it is spared
            assert mutants.reap(tmp_path) == [bystander.pid]
        finally:
            os.chdir(ROOT)
            mutants.COPIES.discard(str(tmp_path.resolve()))
        assert bystander.wait(timeout=10) == -9
    finally:
        bystander.kill()
        bystander.wait()


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


def test_every_test_the_list_names_is_collected():
    """Every test id an entry names is one pytest collects (or a prefix of some: a test's
    every case): a case whose id is made of a number the code changes (a header's size, a
    format's version) is gone after the change, and the check would call its entry broken."""
    from devtools.mutants import DEFAULT_LIST, _covers, load
    from devtools.mutants import pytest as mutants_pytest

    mutations, _ = load(DEFAULT_LIST)
    files = sorted({t.split("::")[0] for m in mutations for t in m.tests})
    proc = mutants_pytest(files, ROOT, 600, "--collect-only")
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert proc.returncode == 0 and len(ids) > 100, proc.stdout[-2000:] + proc.stderr[-2000:]
    by_file: dict[str, list[str]] = {}
    for i in ids:
        by_file.setdefault(i.split("::")[0], []).append(i)
    missing = [(m.name, t) for m in mutations for t in m.tests
               if not any(_covers(t, i) for i in by_file.get(t.split("::")[0], []))]
    assert missing == []


# A second tiny repository: a C file that a test compiles, a test that fails without any
# mutation, and a parametrized test one of whose named cases does not exist.
ONE_C = "int main(void) { return 1; }\n"

TESTS_2 = '''import os
import shlex
import subprocess
from pathlib import Path

import pytest

from calc import add


def test_one_builds_and_returns_1(tmp_path):
    exe = tmp_path / "one"
    cc = shlex.split(os.environ.get("CC", "cc"))
    proc = subprocess.run([*cc, "-Wall", "-Werror", "-o", str(exe),
                           str(Path(__file__).parent / "one.c")], capture_output=True, text=True)
    assert proc.returncode == 0, f"compile failed: {proc.stderr}"
    assert subprocess.run([str(exe)]).returncode == 1


def test_always_fails():
    assert add(1, 1) == 3


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert add(n, 0) == n
'''

LIST_2 = '''MUTATIONS = [
    {"name": "compiles-and-caught", "file": "one.c", "old": "return 1;", "new": "return 2;",
     "tests": ["test_two.py::test_one_builds_and_returns_1"], "why": "it returns 1"},
    {"name": "does-not-build", "file": "one.c", "old": "return 1;", "new": "return 1",
     "tests": ["test_two.py::test_one_builds_and_returns_1"], "why": "not C"},
    {"name": "fails-unmutated", "file": "calc.py", "old": "return a + b", "new": "return b",
     "tests": ["test_two.py::test_always_fails"], "why": "its test fails anyway"},
    {"name": "param-ok", "file": "calc.py", "old": "return a + b", "new": "return a - b - 1",
     "tests": ["test_two.py::test_param[1]"], "why": "a case that exists"},
    {"name": "no-such-case", "file": "calc.py", "old": "return a + b", "new": "return 0",
     "tests": ["test_two.py::test_param[9]"], "why": "a case that does not exist"},
]
'''


def test_tests_that_fail_unmutated_and_code_that_does_not_build_are_broken(tmp_path):
    """The named tests run once without any mutation first: an entry whose test fails then
    (which would make any mutation look caught), or names a case that is not there, is
    broken; a mutation whose code no longer compiles is broken ("does not build"), never
    caught; the entries around them are judged as usual."""
    repo = tmp_path / "two"
    repo.mkdir()
    (repo / "calc.py").write_text(CALC)
    (repo / "one.c").write_text(ONE_C)
    (repo / "test_two.py").write_text(TESTS_2)
    (repo / "mutations.py").write_text(LIST_2)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    proc = mutants(repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert verdicts(proc.stdout) == {"compiles-and-caught": "caught",
                                     "does-not-build": "BROKEN", "fails-unmutated": "BROKEN",
                                     "param-ok": "caught", "no-such-case": "BROKEN"}
    lines = {ln.split()[1]: ln for ln in proc.stdout.splitlines()
             if ln.split()[:1] in (["caught"], ["BROKEN"])}
    assert "does not build: compile failed" in lines["does-not-build"]
    assert ("its tests fail without the mutation: test_two.py::test_always_fails "
            "(assert 2 == 3" in lines["fails-unmutated"])  # and why, as pytest said it
    assert "not found" in lines["no-such-case"]
    assert "mutants: their 4 tests without any mutation: 2 entries broken" in proc.stdout
    assert "mutants: 2 caught, 0 survived, 3 broken entries" in proc.stdout
    assert (repo / "one.c").read_text() == ONE_C


def _commit(repo: Path, message: str) -> None:
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "-m", message], check=True)


def test_changed_since_picks_the_entries_a_change_can_have_broken(tmp_path):
    """An entry is checked when its file, a file of its tests or the entry itself changed
    since the commit named, or when it is new; the others only in their share."""
    from devtools import mutants as M
    from devtools import mutselect
    repo = tiny_repo(tmp_path)
    (repo / "other.py").write_text("def other():\n    return 1\n")
    (repo / "test_other.py").write_text("from other import other\n\n\ndef test_other():\n"
                                        "    assert other() == 1\n")
    other = ('    {"name": "other", "file": "other.py", "old": "return 1", "new": "return 2",\n'
             '     "tests": ["test_other.py::test_other"], "why": "other is 1"},\n]\n')
    (repo / "mutations.py").write_text(LIST.replace("]\n", other))
    _commit(repo, "base")
    base = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    ms, _ = M.load(repo / "mutations.py")

    def picked():
        return mutselect.changed_since(ms, repo, base, repo / "mutations.py")

    assert picked() == set()
    (repo / "test_other.py").write_text((repo / "test_other.py").read_text() + "\n")
    assert picked() == {"other"}
    _commit(repo, "a test changed")
    assert picked() == {"other"}
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", base, "--", "test_other.py"],
                   check=True)
    assert picked() == set()
    (repo / "calc.py").write_text(CALC + "\n")
    assert picked() == {"caught", "survives", "twice", "missing", "no-such-test"}
    (repo / "calc.py").write_text(CALC)
    listed = (repo / "mutations.py").read_text()
    (repo / "mutations.py").write_text(listed.replace('"why": "other is 1"',
                                                       '"why": "other is one"'))
    ms, _ = M.load(repo / "mutations.py")
    assert picked() == {"other"}
    try:
        mutselect.changed_since(ms, repo, "0" * 40, repo / "mutations.py")
    except mutselect.SelectError as e:
        assert "git" in str(e)
    else:
        raise AssertionError("an unknown commit was taken")


def test_shares_partition_the_list_and_auto_rotates_with_the_commits(tmp_path):
    from devtools import mutselect
    from devtools.mutants import DEFAULT_LIST, load
    names = [m.name for m in load(DEFAULT_LIST)[0]]
    shares = [{n for n in names if mutselect.in_share(n, k, 4)} for k in range(4)]
    assert set().union(*shares) == set(names)
    assert sum(len(s) for s in shares) == len(names)
    assert all(len(s) > len(names) // 8 for s in shares)
    repo = tiny_repo(tmp_path)
    _commit(repo, "one")
    k1 = mutselect.parse_share("auto/4", repo)
    (repo / "calc.py").write_text(CALC + "#\n")
    _commit(repo, "two")
    k2 = mutselect.parse_share("auto/4", repo)
    assert (k1, k2) == ((1, 4), (2, 4))
    assert mutselect.parse_share("3/4", repo) == (3, 4)
    for bad in ("4/4", "x/4", "1/0", "1", "auto/"):
        try:
            mutselect.parse_share(bad, repo)
        except mutselect.SelectError as e:
            assert bad in str(e)
        else:
            raise AssertionError(f"--share {bad} was taken")


def test_a_selection_runs_only_its_entries(tmp_path):
    repo = tiny_repo(tmp_path)
    _commit(repo, "base")
    (repo / "test_calc.py").write_text(TEST + "\n")
    r = mutants(repo, "--only", "caught", "survives", "--changed-since", "HEAD")
    assert "checking 2 of 2 entries: 2 changed since HEAD" in r.stdout, r.stdout + r.stderr
    r = mutants(repo, "--share", "9/4")
    assert r.returncode == 2 and "K must be a whole number below N" in r.stderr


def test_an_entry_caught_at_a_later_commit_counts_from_it(tmp_path):
    """`--record` writes `COMMIT NAME` for each entry caught at a clean HEAD (nothing when the
    tree has changes); `--caught` makes such an entry count from that commit: a change before
    it no longer picks the entry, one after it does."""
    from devtools import mutants as M
    from devtools import mutselect
    repo = tiny_repo(tmp_path)
    _commit(repo, "base")

    def head() -> str:
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()

    base = head()
    ms, _ = M.load(repo / "mutations.py")
    (repo / "calc.py").write_text(CALC + "\n")
    caught_file = tmp_path / "caught"
    M.record(caught_file, repo, ["caught"])
    assert not caught_file.exists()  # the tree had changes: not that commit
    _commit(repo, "calc changed")
    M.record(caught_file, repo, ["caught", "twice"])
    later = head()
    assert caught_file.read_text() == f"{later} caught\n{later} twice\n"
    caught = mutselect.read_caught(caught_file)
    assert caught == {"caught": later, "twice": later}
    every = {"caught", "survives", "twice", "missing", "no-such-test"}
    picked = mutselect.changed_since(ms, repo, base, repo / "mutations.py", caught)
    assert picked == every - {"caught", "twice"}
    (repo / "calc.py").write_text(CALC)
    assert mutselect.changed_since(ms, repo, base, repo / "mutations.py", caught) == every - {
        "survives", "missing", "no-such-test"}
    (tmp_path / "bad").write_text("abc\n")
    try:
        mutselect.read_caught(tmp_path / "bad")
    except mutselect.SelectError as e:
        assert "COMMIT NAME" in str(e)
    else:
        raise AssertionError("a line that is no `COMMIT NAME` was taken")
