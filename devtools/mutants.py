"""The mutation check: every mistake in the list (devtools/mutations.py) must be caught by
the tests it names.

    python -m devtools.mutants [--list FILE] [--only NAME ...] [--repo DIR] [--keep]

The repository's files (`git ls-files`: tracked, plus new files not ignored) are copied once
to a scratch directory. Each mutation is applied there in turn (its old text must occur
exactly once in its file, otherwise the entry is broken), only its named tests are run
there with pytest, and the file is restored. A mutation is caught when every named test
fails (for a test id without parameters: at least one of its cases); it survives when any
of them passes. A line per mutation, then a summary; the exit status is 1 when any mutation
survived or any entry is broken, 0 otherwise. The scratch copy keeps its C probe build
between mutations, so only what a mutation touches is rebuilt. Run it where the test suite
passes (CI runs it after the suite): a test that fails without any mutation would make every
mutation that names it look caught.
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LIST = ROOT / "devtools" / "mutations.py"
FIELDS = ("name", "file", "old", "new", "tests", "why")


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    why: str


@dataclass
class Outcome:
    mutation: Mutation
    verdict: str  # caught | SURVIVED | BROKEN
    detail: str
    seconds: float


def load(path: Path) -> tuple[list[Mutation], list[str]]:
    """The mutations of a list file (a Python file defining MUTATIONS, a list of dicts), and
    the problems of entries that are malformed."""
    data = runpy.run_path(str(path)).get("MUTATIONS")
    if not isinstance(data, list):
        raise SystemExit(f"mutants: {path} defines no MUTATIONS list")
    out, problems, names = [], [], set()
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or set(entry) != set(FIELDS):
            problems.append(f"entry {i}: needs exactly the keys {', '.join(FIELDS)}")
            continue
        tests = entry["tests"]
        if isinstance(tests, str) or not tests or not all(isinstance(t, str) for t in tests):
            problems.append(f"{entry['name']}: tests must be a non-empty list of test ids")
            continue
        if entry["name"] in names:
            problems.append(f"{entry['name']}: the name appears twice")
            continue
        names.add(entry["name"])
        out.append(Mutation(entry["name"], entry["file"], entry["old"], entry["new"],
                            tuple(tests), entry["why"]))
    return out, problems


def repo_files(repo: Path) -> list[str]:
    proc = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others",
                           "--exclude-standard"], capture_output=True, check=True)
    return [f for f in proc.stdout.decode().split("\0") if f]


def copy_repo(repo: Path, dest: Path) -> None:
    for rel in repo_files(repo):
        src = repo / rel
        if not src.is_file() and not src.is_symlink():
            continue  # deleted in the working tree, not yet from the index
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)


def check_entry(m: Mutation, scratch: Path) -> str | None:
    """Why the entry cannot be applied, or None."""
    path = scratch / m.file
    if not path.is_file():
        return f"{m.file} does not exist"
    n = path.read_text().count(m.old)
    if n != 1:
        return f"the old text occurs {n} times in {m.file} (must be exactly once)"
    if m.old == m.new:
        return "the new text is the old text"
    return None


FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)
PASSED = re.compile(r"^PASSED (\S+)", re.M)


def run_tests(m: Mutation, scratch: Path, timeout: float) -> tuple[str, str]:
    """(verdict, detail) for the mutation applied in `scratch`."""
    env = dict(os.environ, PYTHONPATH=str(scratch), PYTHONDONTWRITEBYTECODE="1")
    env.pop("SHIMGEN_STRICT_SKIPS", None)  # a skip policy is for whole runs, not these
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEp", "-p", "no:cacheprovider",
           "--no-header", *m.tests]
    try:
        proc = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return "caught", f"the tests did not finish in {timeout:.0f} s (a hang)"
    out = proc.stdout + proc.stderr
    if proc.returncode in (4, 5):
        last = (out.strip().splitlines() or ["no output"])[-1]
        return "BROKEN", f"pytest exit {proc.returncode} (test ids not found?): {last}"
    failed = FAILED.findall(out)
    passed = PASSED.findall(out)
    missed = [t for t in m.tests if not any(_covers(t, f) for f in failed)]
    if proc.returncode == 0 or missed:
        why = [t for t in missed if any(_covers(t, p) for p in passed)] or missed
        return "SURVIVED", "passed: " + ", ".join(why or m.tests)
    if proc.returncode not in (1, 2):
        return "BROKEN", f"pytest exit {proc.returncode}: {out.strip()[-300:]}"
    return "caught", f"{len(failed)} failed: {failed[0]}"


def _covers(test_id: str, reported: str) -> bool:
    """Whether a reported test is (a case of) the test id, or in the file it names; a module
    that failed to import counts for every test in it."""
    return (reported == test_id or reported.startswith((test_id + "[", test_id + "::"))
            or test_id.startswith(reported + "::"))


def run_all(mutations: list[Mutation], scratch: Path, timeout: float,
            say=print) -> list[Outcome]:
    outcomes = []
    for m in mutations:
        t0 = time.monotonic()
        problem = check_entry(m, scratch)
        if problem:
            outcomes.append(Outcome(m, "BROKEN", problem, 0.0))
        else:
            path = scratch / m.file
            original = path.read_bytes()
            path.write_text(original.decode().replace(m.old, m.new))
            try:
                verdict, detail = run_tests(m, scratch, timeout)
            finally:
                path.write_bytes(original)
            outcomes.append(Outcome(m, verdict, detail, time.monotonic() - t0))
        o = outcomes[-1]
        say(f"{o.verdict:9} {m.name:44} {o.seconds:6.1f} s  {o.detail}")
    return outcomes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.mutants",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--list", type=Path, default=DEFAULT_LIST, help="the list of mutations")
    ap.add_argument("--repo", type=Path, default=ROOT, help="the repository to copy")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutations")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per mutation")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    a = ap.parse_args(argv)

    mutations, problems = load(a.list)
    if a.only:
        unknown = set(a.only) - {m.name for m in mutations}
        if unknown:
            print(f"mutants: no mutation named {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        mutations = [m for m in mutations if m.name in a.only]
    t0 = time.monotonic()
    scratch_root = Path(tempfile.mkdtemp(prefix="shimgen-mutants-"))
    try:
        scratch = scratch_root / "repo"
        copy_repo(a.repo.resolve(), scratch)
        print(f"mutants: {len(mutations)} mutations of {a.list.name}, in {scratch}", flush=True)
        outcomes = run_all(mutations, scratch, a.timeout,
                           say=lambda line: print(line, flush=True))
    finally:
        if a.keep:
            print(f"mutants: scratch copy kept in {scratch_root}")
        else:
            shutil.rmtree(scratch_root, ignore_errors=True)
    for p in problems:
        print(f"BROKEN    {p}")
    count = {v: sum(o.verdict == v for o in outcomes) for v in ("caught", "SURVIVED", "BROKEN")}
    broken = count["BROKEN"] + len(problems)
    print(f"mutants: {count['caught']} caught, {count['SURVIVED']} survived, {broken} broken "
          f"entries, in {time.monotonic() - t0:.0f} s")
    return 1 if count["SURVIVED"] or broken else 0


if __name__ == "__main__":
    sys.exit(main())
