"""The mutation check: every mistake in the list (devtools/mutations.py) must be caught by
the tests it names.

    python -m devtools.mutants [--list FILE] [--only NAME ...] [--repo DIR] [-j N] [--keep]
                               [--changed-since COMMIT] [--share K/N]

The repository's files (`git ls-files`: tracked, plus new files not ignored) are copied once
to a scratch directory, itself made a git checkout of them. First the tests that the
mutations name, all of them together, are run there once without any mutation: an entry
whose tests fail (or are not found) then is broken, since a test that fails anyway would
make its mutation look caught. Then each mutation is applied there in turn (its old text
must occur exactly once in its file, otherwise the entry is broken), only its named tests
are run there with pytest, and the file is restored. A mutation is caught when every named
test fails (for a test id without parameters: at least one of its cases); it survives when
any of them passes. A mutation whose code no longer builds (the shim, a test probe or a
unit that a test compiles: their "compile failed", "meson setup failed", ninja's "build
stopped" or a compiler's "error:" in a failure's message) is broken, "does not build", not
caught: an entry must be a mistake that compiles. A line per mutation, then a summary; the
exit status is 1 when any mutation survived or any entry is broken, 0 otherwise. The
scratch copy keeps its C probe build between runs, so only what a mutation touches is
rebuilt. With `-j N` (by default one for every two CPUs the process may use, at most
four) N mutations are tested at once, each in a scratch copy of its own, made the same way.
A mutated file is restored with its bytes and its modification time, and whatever the
tests left running (a program a mistake made hang: in the session pytest ran in, or from
the scratch copy) is killed; never a process outside, whatever its working directory.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from devtools import mutselect

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
    # a checkout of its own, its files in the index: tests that ask git which files the
    # repository has (a wheel built from the tracked files) see the copy as a checkout
    for cmd in (["init", "-q"], ["add", "-A"]):
        subprocess.run(["git", "-C", str(dest), *cmd], capture_output=True, check=True)


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
# pytest's short summary line of a failure: its id, then " - " and the failure's message
FAILED_WHY = re.compile(r"^(?:FAILED|ERROR) (\S+) - (.+)$", re.M)
PASSED = re.compile(r"^PASSED (\S+)", re.M)
NOT_FOUND = re.compile(r"^ERROR: (?:file or directory )?not found: (\S+)", re.M)
# What a failure says when code did not build: shimgen.shim.build's ShimgenError ("compile
# failed", "meson setup failed"), the tests' own compile steps ("compile failed: ..."), the
# probes' meson output (ninja's "build stopped"), a compiler's error line. Only the lines
# of failure messages ("E ..." in pytest's report) count, not a failing test's source.
BUILD_FAILED = re.compile(r"^E\s.*?(\bcompile failed\b|\bmeson setup failed\b|"
                          r"ninja: build stopped|[\w./-]+\.(?:c|cc|h|S):\d+(?::\d+)?: "
                          r"(?:fatal )?error: .*)", re.M)


def pytest(tests: list[str] | tuple[str, ...], scratch: Path, timeout: float,
           *extra: str) -> subprocess.CompletedProcess:
    """pytest on `tests` in `scratch`, in a session of its own: whatever it leaves running
    in that session is killed when it ends, and, when `scratch` is a copy this check made
    (COPIES), whatever runs from the copy too (a program that left the session)."""
    env = dict(os.environ, PYTHONPATH=str(scratch), PYTHONDONTWRITEBYTECODE="1")
    env.pop("SHIMGEN_STRICT_SKIPS", None)  # a skip policy is for whole runs, not these
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEp", "-p", "no:cacheprovider",
           "--no-header", "-m", "", *extra, *tests]  # -m "": either tier (tests/tiers.py)
    proc = subprocess.Popen(cmd, cwd=scratch, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="backslashreplace",
                            start_new_session=True)  # a test may print any byte
    try:
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    finally:
        reap(scratch, proc)


# The scratch copies this process made (main): the only directories whose programs reap
# kills by where they run. Never the repository itself, nor a directory a caller names.
COPIES: set[str] = set()


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of a process from /proc; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()  # after the name, which may hold ")"
        return int(fields[1]), int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def _ancestors() -> set[int]:
    """This process and the processes it descends from."""
    found, pid = set(), os.getpid()
    while pid > 1 and pid not in found:
        found.add(pid)
        st = _stat(pid)
        if st is None:
            break
        pid = st[0]
    return found


def reap(scratch: Path, proc: subprocess.Popen | None = None) -> list[int]:
    """Kill what a pytest run left behind: every process of its session (`proc`, started
    in a session of its own), and, when `scratch` is one of COPIES, every process whose
    program or working directory lies in it. A mistake can make a test's program hang or
    spin after its test gave up on it, and it must not take a core from the mutations
    after it. Never this process or one it descends from. The pids killed."""
    root = str(scratch.resolve())
    ours = root in COPIES
    spared = _ancestors()
    killed = []
    if proc is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    for pid in (int(d) for d in os.listdir("/proc") if d.isdigit()):
        if pid in spared:
            continue
        st = _stat(pid)
        if st is None:
            continue
        hit = proc is not None and st[1] == proc.pid
        for link in ("exe", "cwd") if ours and not hit else ():
            try:
                where = os.readlink(f"/proc/{pid}/{link}")
            except OSError:
                continue
            hit = where == root or where.startswith(root + os.sep)
            if hit:
                break
        if hit:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


def does_not_build(out: str) -> str | None:
    """The line that says code did not build, in pytest's output; None when none does."""
    m = BUILD_FAILED.search(out)
    return m.group(1).strip()[:200] if m else None


def run_tests(m: Mutation, scratch: Path, timeout: float) -> tuple[str, str]:
    """(verdict, detail) for the mutation applied in `scratch`."""
    try:
        proc = pytest(m.tests, scratch, timeout)
    except subprocess.TimeoutExpired:
        return "caught", f"the tests did not finish in {timeout:.0f} s (a hang)"
    out = proc.stdout + proc.stderr
    if proc.returncode in (4, 5):
        last = (out.strip().splitlines() or ["no output"])[-1]
        return "BROKEN", f"pytest exit {proc.returncode} (test ids not found?): {last}"
    if proc.returncode != 0 and (line := does_not_build(out)):
        return "BROKEN", f"does not build: {line}"
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


def baseline(mutations: list[Mutation], scratch: Path, timeout: float) -> dict[str, str]:
    """The union of the mutations' tests, run once in `scratch` without any mutation: for
    each mutation whose tests do not all pass then (a failure, an error, or no case of it
    passed: skipped, or never run), why (its entry is broken)."""
    broken: dict[str, str] = {}
    while True:
        todo = [m for m in mutations if m.name not in broken]
        tests = list(dict.fromkeys(t for m in todo for t in m.tests))
        if not tests:
            return broken
        try:
            # one module that cannot be collected must not keep the others from running
            proc = pytest(tests, scratch, timeout, "--continue-on-collection-errors")
        except subprocess.TimeoutExpired:
            for m in todo:
                broken[m.name] = (f"its tests, run without the mutation, did not finish in "
                                  f"{timeout:.0f} s")
            return broken
        out = proc.stdout + proc.stderr
        if proc.returncode == 4 and NOT_FOUND.search(out):
            # pytest runs nothing when an id is not found: name those entries, run the rest
            missing = [_relative(p, scratch) for p in NOT_FOUND.findall(out)]
            gone = set()
            for p in missing:
                # pytest names a missing case without its parameters: when several ids
                # share that name, each is collected alone to tell which is missing
                ids = [t for t in tests if t == p or t.startswith((p + "[", p + "::"))]
                if len(ids) > 1:
                    ids = [t for t in ids if pytest([t], scratch, timeout,
                                                    "--collect-only").returncode == 4]
                gone |= {m.name for m in todo if set(m.tests) & set(ids)}
            if not gone:
                gone = {m.name for m in todo}
            for name in gone:
                broken[name] = "a test id it names is not found (pytest: not found)"
            continue
        failed, passed = FAILED.findall(out), PASSED.findall(out)
        line = does_not_build(out) if proc.returncode else None
        for m in todo:
            bad = [t for t in m.tests if any(_covers(t, f) for f in failed)]
            unrun = [t for t in m.tests if not any(_covers(t, p) for p in passed)]
            if bad:
                why = next((w for f, w in FAILED_WHY.findall(out)
                            if any(_covers(t, f) for t in bad)), "")
                broken[m.name] = ("its tests fail without the mutation"
                                  + (f" (does not build: {line})" if line else "")
                                  + ": " + ", ".join(bad)
                                  + (f" ({why.strip()[:300]})" if why and not line else ""))
            elif unrun:
                last = (out.strip().splitlines() or ["no output"])[-1] if proc.returncode \
                    not in (0, 1) else ""
                broken[m.name] = ("its tests do not pass without the mutation (skipped or "
                                  f"not run, pytest exit {proc.returncode}"
                                  + (f": {last[:200]}" if last else "") + "): "
                                  + ", ".join(unrun))
        return broken


def _relative(reported: str, scratch: Path) -> str:
    """A test path pytest reported (absolute, parameters left out) relative to `scratch`."""
    root = str(scratch.resolve()) + os.sep
    return reported[len(root):] if reported.startswith(root) else reported


def run_one(m: Mutation, scratch: Path, timeout: float,
            unmutated: dict[str, str] | None = None) -> Outcome:
    """Apply `m` in `scratch`, run its tests, restore the file (its bytes and its times: a
    restored file is the file the other mutations' tests were built from)."""
    t0 = time.monotonic()
    problem = (unmutated or {}).get(m.name) or check_entry(m, scratch)
    if problem:
        return Outcome(m, "BROKEN", problem, 0.0)
    path = scratch / m.file
    original, st = path.read_bytes(), path.stat()
    path.write_text(original.decode().replace(m.old, m.new))
    try:
        verdict, detail = run_tests(m, scratch, timeout)
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return Outcome(m, verdict, detail, time.monotonic() - t0)


def run_all(mutations: list[Mutation], scratches: list[Path], timeout: float,
            say=print, unmutated: dict[str, str] | None = None) -> list[Outcome]:
    """Every mutation, each in one of `scratches` (a worker thread per scratch copy, each
    taking the next mutation when its last is done); the outcomes in the list's order."""
    todo = list(enumerate(mutations))
    done: dict[int, Outcome] = {}
    lock = threading.Lock()

    def worker(scratch: Path) -> None:
        while True:
            with lock:
                if not todo:
                    return
                i, m = todo.pop(0)
            o = run_one(m, scratch, timeout, unmutated)
            with lock:
                done[i] = o
                say(f"{o.verdict:9} {m.name:44} {o.seconds:6.1f} s  {o.detail}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in scratches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [done[i] for i in range(len(mutations))]


def default_jobs() -> int:
    """One mutation at a time for every two CPUs this process may use (at most four at
    once): a mutation's tests run programs of their own, several at a time."""
    return max(1, min(4, len(os.sched_getaffinity(0)) // 2))


def select(mutations: list[Mutation], a: argparse.Namespace) -> tuple[list[Mutation], str]:
    """The entries `--changed-since` and `--share` pick (their union), and a line saying so."""
    repo = a.repo.resolve()
    caught = mutselect.read_caught(a.caught) if a.caught else {}
    changed = (mutselect.changed_since(mutations, repo, a.changed_since, a.list, caught)
               if a.changed_since else set())
    k, n = mutselect.parse_share(a.share, repo) if a.share else (0, 0)
    shared = {m.name for m in mutations if n and mutselect.in_share(m.name, k, n)}
    picked = [m for m in mutations if m.name in changed | shared]
    parts = ([f"{len(changed)} changed since {a.changed_since}"] if a.changed_since else []) + \
        ([f"{len(shared - changed)} more of share {k}/{n}"] if n else [])
    return picked, (f"checking {len(picked)} of {len(mutations)} entries: "
                    + ", ".join(parts) + " (the whole list: no --changed-since, no --share)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.mutants",
                                 description=__doc__.split("\n\n")[0].replace("\n", " "),
                                 epilog="example: python -m devtools.mutants --only "
                                        "NAME1 NAME2 (a few entries, while writing them)")
    ap.add_argument("--list", type=Path, default=DEFAULT_LIST, help="the list of mutations")
    ap.add_argument("--repo", type=Path, default=ROOT, help="the repository to copy")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutations")
    ap.add_argument("--changed-since", metavar="COMMIT",
                    help="only the entries a change since COMMIT can have broken (their "
                         "file or tests changed, or the entry itself), with --share's")
    ap.add_argument("--caught", type=Path, metavar="FILE",
                    help="with --changed-since: the entries caught at a later commit (FILE's "
                         "lines `COMMIT NAME`, as --record writes them) count from it")
    ap.add_argument("--record", type=Path, metavar="FILE",
                    help="add `COMMIT NAME` to FILE for each entry caught (the repository's "
                         "HEAD, only when its tree is clean: what was tested is that commit)")
    ap.add_argument("--share", metavar="K/N",
                    help="only the entries of share K of N (by their names' CRC-32; auto/N: "
                         "K from HEAD's commit count, a rotation), with --changed-since's")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per mutation")
    ap.add_argument("--baseline-timeout", type=float, default=1800,
                    help="seconds for the run of every named test without a mutation")
    ap.add_argument("--jobs", "-j", type=int, default=default_jobs(),
                    help="mutations tested at once, each in a scratch copy of its own "
                         "(default: %(default)s, from the CPUs this process may use)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    a = ap.parse_args(argv)

    mutations, problems = load(a.list)
    if a.only:
        unknown = set(a.only) - {m.name for m in mutations}
        if unknown:
            print(f"mutants: no mutation named {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        mutations = [m for m in mutations if m.name in a.only]
    if a.changed_since or a.share:
        try:
            mutations, why = select(mutations, a)
        except mutselect.SelectError as e:
            print(f"mutants: {e}", file=sys.stderr)
            return 2
        print(f"mutants: {why}", flush=True)
    t0 = time.monotonic()
    # A neutral name, without "shim" in it; the tests must not depend on the path either way
    # (CI runs the suite from a path that has it).
    scratch_root = Path(tempfile.mkdtemp(prefix="mut-"))
    try:
        scratch = scratch_root / "repo"
        copy_repo(a.repo.resolve(), scratch)
        COPIES.add(str(scratch.resolve()))
        print(f"mutants: {len(mutations)} mutations of {a.list.name}, in {scratch}", flush=True)
        t1 = time.monotonic()
        ntests = len({t for m in mutations for t in m.tests})
        unmutated = baseline(mutations, scratch, a.baseline_timeout)
        print(f"mutants: their {ntests} tests without any mutation: "
              + (f"{len(unmutated)} entries broken" if unmutated else "all pass")
              + f", in {time.monotonic() - t1:.0f} s", flush=True)
        scratches = [scratch]
        for n in range(1, max(1, min(a.jobs, len(mutations)))):
            scratches.append(scratch_root / f"repo{n}")
            copy_repo(a.repo.resolve(), scratches[-1])
            COPIES.add(str(scratches[-1].resolve()))
        outcomes = run_all(mutations, scratches, a.timeout,
                           say=lambda line: print(line, flush=True), unmutated=unmutated)
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
    if a.record:
        record(a.record, a.repo.resolve(), [m.name for m, o in zip(mutations, outcomes,
                                                                      strict=True)
                                            if o.verdict == "caught"])
    return 1 if count["SURVIVED"] or broken else 0


def record(path: Path, repo: Path, names: list[str]) -> None:
    """`COMMIT NAME` added to `path` for each name, COMMIT the repository's HEAD; nothing
    (and a line saying why) when its tree has changes: the copy tested was not that commit."""
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain",
                             "--untracked-files=no"], capture_output=True, text=True)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    if status.returncode or head.returncode or status.stdout.strip():
        print(f"mutants: not recorded in {path}: the tree tested is not a commit (changes, "
              "or no git)")
        return
    with path.open("a") as f:
        f.writelines(f"{head.stdout.strip()} {name}\n" for name in names)
    print(f"mutants: {len(names)} caught entries recorded in {path} at {head.stdout.strip()}")


if __name__ == "__main__":
    sys.exit(main())
