"""`shimgen report --calls --sqlite FILE`: the decoded calls as a table `calls` of an SQLite
file (the standard library's sqlite3), written whole or not at all: into a temporary file
beside FILE (owner-only), renamed over it at the end; the temporary file is removed on any
failure, an interrupt included.

The file is marked as shimgen's: `PRAGMA application_id` is APPLICATION_ID and `PRAGMA
user_version` SCHEMA_VERSION (both in the file's header, docs/report.md). An existing FILE
is replaced only when it is a regular file of this user that carries the mark; anything
else (an empty file, another program's database, even one whose only table is `calls`) is
refused.

An INTEGER column holds a signed 64-bit number: a `result` that is the whole 64-bit return
of a function that returns no CUresult is kept as its two's complement (a value from 2^63
is stored as value - 2^64; `result & 0xFFFFFFFFFFFFFFFF` in Python gives it back)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import tempfile
from pathlib import Path

from ..errors import ShimgenError
from .output import shown

COLUMNS = ("pid INTEGER, rank TEXT, tid INTEGER, seq INTEGER, start_s REAL, dur_us REAL, "
           "function TEXT, args TEXT, result INTEGER, result_name TEXT, outputs TEXT, "
           "state TEXT")
APPLICATION_ID = 0x5348434C  # "SHCL": the mark of a calls database written by shimgen
SCHEMA_VERSION = 1  # PRAGMA user_version: the layout of COLUMNS
_HEADER = b"SQLite format 3\0"
_AT_USER_VERSION, _AT_APPLICATION_ID = 60, 68  # big-endian u32s of the file's header


def signed64(v: int | None) -> int | None:
    """An unsigned 64-bit value as SQLite's INTEGER keeps it: its two's complement."""
    return v - (1 << 64) if v is not None and v >= 1 << 63 else v


def _ours(path: Path) -> bool:
    """Whether `path` is a calls database shimgen wrote, of this user (its header's mark;
    never through a symbolic link, never waiting on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False
        head = os.pread(fd, 100, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    return (len(head) == 100 and head.startswith(_HEADER)
            and int.from_bytes(head[_AT_APPLICATION_ID:_AT_APPLICATION_ID + 4], "big")
            == APPLICATION_ID
            and int.from_bytes(head[_AT_USER_VERSION:_AT_USER_VERSION + 4], "big")
            == SCHEMA_VERSION)


def write_sqlite(path: Path, rows) -> None:
    """`rows`: tuples in the order of COLUMNS (report/calls.py Shown.table_rows)."""
    if os.path.lexists(path) and not _ours(path):
        raise ShimgenError(f"report: {shown(str(path))} exists and is not a calls database "
                           "written by shimgen; name a new file (or remove it first)")
    d = path.parent if str(path.parent) else Path(".")
    if not d.is_dir():
        raise ShimgenError(f"report: {shown(str(d))} is not a directory")
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{path.name}.", suffix=".tmp")
    con = None
    try:
        con = sqlite3.connect(tmp)
        # a new file, renamed over FILE only once whole: no journal, no sync while it fills
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.execute(f"PRAGMA application_id={APPLICATION_ID}")
        con.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        con.execute(f"CREATE TABLE calls ({COLUMNS})")
        con.executemany("INSERT INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        con.execute("CREATE INDEX calls_function ON calls(function)")
        con.commit()
        con.close()
        con = None
        os.fsync(fd)  # once, whole, before it takes FILE's name
        os.replace(tmp, path)
        tmp = None
    except (OSError, sqlite3.Error, OverflowError) as e:
        raise ShimgenError(f"report: cannot write {shown(str(path))}: {e}") from None
    finally:
        # whatever ended the writing (an error, an interrupt, a damaged record), the
        # temporary file goes
        if con is not None:
            with contextlib.suppress(sqlite3.Error):
                con.close()
        os.close(fd)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
