"""Which entries of the mutation list a run checks, when not all of them (devtools/mutants.py's
`--changed-since` and `--share`): CI checks the entries that a change can have broken, and a
rotating share of the rest, so that every entry is checked every few landings while CI stays
well under its time; the whole list is checked before an issue is called resolved.

- changed since REF: an entry whose file, or a file of one of its tests, differs between the
  commit REF and the working tree (or is new), and an entry that is new or changed in the list
  itself since REF;
- caught at a later commit (`--caught FILE`, lines `COMMIT NAME` that a run of the list wrote
  with `--record`): such an entry counts from its own commit, not from REF;
- share K/N: the entries whose name's CRC-32 is K modulo N; `auto/N` takes K from the number
  of commits in HEAD's history, so that each landing checks the next share.
"""

from __future__ import annotations

import dataclasses
import runpy
import subprocess
import tempfile
import zlib
from pathlib import Path


class SelectError(Exception):
    """A selection that cannot be made (a bad share, a commit git does not know)."""


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode:
        raise SelectError(f"git {' '.join(args)}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout


def changed_files(repo: Path, ref: str) -> set[str]:
    """The files that differ between commit `ref` and the working tree, new files included."""
    _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    files = set(_git(repo, "diff", "--name-only", ref, "--").split())
    files |= set(_git(repo, "ls-files", "--others", "--exclude-standard").split())
    return files


def entries_at(repo: Path, ref: str, list_path: Path) -> dict[str, dict]:
    """The list's entries as they were at `ref`, by name (none where the list did not exist)."""
    rel = list_path.resolve().relative_to(repo.resolve()).as_posix()
    proc = subprocess.run(["git", "-C", str(repo), "show", f"{ref}:{rel}"],
                          capture_output=True, text=True)
    if proc.returncode:
        return {}
    with tempfile.NamedTemporaryFile("w", suffix=".py") as f:
        f.write(proc.stdout)
        f.flush()
        data = runpy.run_path(f.name).get("MUTATIONS")
    return {e["name"]: e for e in data or [] if isinstance(e, dict) and "name" in e}


def test_file(test_id: str) -> str:
    return test_id.split("::", 1)[0]


def read_caught(path: Path) -> dict[str, str]:
    """The entries a run caught at a commit later than the whole list's: `path`'s lines
    `COMMIT NAME` (`#` a comment; a later line for a name wins); {} when there is no file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    caught = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise SelectError(f"{path}:{n}: not `COMMIT NAME`: {line.strip()}")
        caught[parts[1]] = parts[0]
    return caught


def changed_since(mutations, repo: Path, ref: str, list_path: Path,
                  caught: dict[str, str] | None = None) -> set[str]:
    """The names of the entries a change since `ref` can have broken; an entry in `caught`
    counts from the commit it was caught at instead."""
    bases = {m.name: (caught or {}).get(m.name, ref) for m in mutations}
    files = {b: changed_files(repo, b) for b in set(bases.values())}
    before = {b: entries_at(repo, b, list_path) for b in set(bases.values())}
    out = set()
    for m in mutations:
        base = bases[m.name]
        then = before[base].get(m.name)
        now = {**dataclasses.asdict(m), "tests": list(m.tests)}
        if (then is None or {**then, "tests": list(then.get("tests", []))} != now
                or m.file in files[base] or any(test_file(t) in files[base] for t in m.tests)):
            out.add(m.name)
    return out


def parse_share(text: str, repo: Path) -> tuple[int, int]:
    """`K/N` or `auto/N` as (K, N)."""
    k, sep, n = text.partition("/")
    if not sep or not n.isdigit() or int(n) < 1:
        raise SelectError(f"--share {text}: give K/N or auto/N, N a whole number from 1")
    count = int(n)
    if k == "auto":
        return int(_git(repo, "rev-list", "--count", "HEAD").strip()) % count, count
    if not k.isdigit() or int(k) >= count:
        raise SelectError(f"--share {text}: K must be a whole number below N")
    return int(k), count


def in_share(name: str, k: int, n: int) -> bool:
    return zlib.crc32(name.encode()) % n == k
