"""`shimgen report --calls --sqlite FILE`: the decoded calls as a table `calls` of an SQLite
file (the standard library's sqlite3), written whole or not at all: into a temporary file
beside FILE (owner-only), renamed over it at the end. An existing FILE is refused unless it
is such a file already (a table `calls` and nothing else of another kind)."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

from ..errors import ShimgenError

COLUMNS = ("pid INTEGER, rank TEXT, tid INTEGER, seq INTEGER, start_s REAL, dur_us REAL, "
           "function TEXT, args TEXT, result INTEGER, result_name TEXT, outputs TEXT, "
           "state TEXT")


def _ours(path: Path) -> bool:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return names <= {"calls", "calls_function"}


def write_sqlite(path: Path, rows) -> None:
    """`rows`: tuples in the order of COLUMNS (report/calls.py Shown.table_rows)."""
    if path.is_symlink() or (path.exists() and (not path.is_file() or not _ours(path))):
        raise ShimgenError(f"report: {path} exists and is not a calls database written by "
                           "shimgen; name a new file")
    d = path.parent if str(path.parent) else Path(".")
    if not d.is_dir():
        raise ShimgenError(f"report: {d} is not a directory")
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{path.name}.", suffix=".tmp")
    try:
        con = sqlite3.connect(tmp)
        # a new file, renamed over FILE only once whole: no journal, no sync while it fills
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.execute(f"CREATE TABLE calls ({COLUMNS})")
        con.executemany("INSERT INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        con.execute("CREATE INDEX calls_function ON calls(function)")
        con.commit()
        con.close()
        os.fsync(fd)  # once, whole, before it takes FILE's name
        os.replace(tmp, path)
    except (OSError, sqlite3.Error) as e:
        os.unlink(tmp)
        raise ShimgenError(f"report: cannot write {path}: {e}") from None
    finally:
        os.close(fd)
