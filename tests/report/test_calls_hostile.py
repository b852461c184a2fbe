"""`shimgen report --calls` on what a program or a damaged file can put in a calls trace: a
captured string with control characters (a module name that retitles and clears a
terminal), one left unterminated, a function name with control bytes, a result above 2^63,
a ring head near 2^64. Every text view prints them escaped (report/output.py shown), the
JSON and the SQLite table keep them exact; an impossible ring is refused in one line. And
`--sqlite FILE` replaces only a database that carries shimgen's mark, leaving no temporary
file whatever ends the writing. A real calls-mode run on the Debian driver (a Python
program loading the module through ctypes), then changed byte by byte."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.calls import records
from shimgen.errors import ShimgenError
from shimgen.report import calls_sql
from shimgen.trace import binary
from tests.faultkit import run
from tests.report.test_tracefile_reader import put

ROOT = Path(__file__).resolve().parents[2]
EVIL = "\x1b]0;TITLE\x07\x1b[2J\x1b[31mfake.cubin"
SHOWN = "\\x1b]0;TITLE\\x07\\x1b[2J\\x1b[31mfake.cubin"
PROGRAM = ("import ctypes, sys\n"
           "lib = ctypes.CDLL('libcuda.so.1')\n"
           "lib.cuModuleLoad(ctypes.byref(ctypes.c_void_p()), sys.argv[1].encode())\n"
           "lib.cuDriverGetVersion(ctypes.byref(ctypes.c_int()))\n")


def _traced(shim, d: Path, name: str) -> Path:
    d.mkdir(parents=True)
    run([sys.executable, "-c", PROGRAM, name],
        shim.env(SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR=str(d / "traces"),
                 SHIMGEN_CALLS_RING="1024"))
    return d


@pytest.fixture(scope="module")
def evil(shims, tmp_path_factory) -> tuple[Path, Path]:
    """Two runs of the program: the module names EVIL and EVIL with one more letter."""
    top = tmp_path_factory.mktemp("evilcalls")
    return (_traced(shims[-1], top / "a", EVIL), _traced(shims[-1], top / "b", EVIL + "x"))


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shimgen", "report", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def printable(out: str) -> str:
    for line in out.split("\n"):
        assert line.isprintable(), repr(line)
    return out


def test_first_difference_exits_as_diff_does(evil, tmp_path):
    """0: the runs make the same calls; 1: they part (the calls shown); 2: trouble, in one
    line, as diff(1) and `shimgen diff`."""
    a, b = evil
    for fmt in ((), ("--json",)):
        same = cli("--calls", "--first-difference", *fmt, a, a)
        assert same.returncode == 0 and same.stderr == "", same
        parted = cli("--calls", "--first-difference", *fmt, a, b)
        assert parted.returncode == 1 and parted.stderr == "", parted
    assert cli("--calls", "--first-difference", a, a).stdout.startswith("no difference: ")
    for bad in ((a, tmp_path / "nothing"), (a,), (a, b, "--last", "0")):
        out = cli("--calls", "--first-difference", *bad)
        assert out.returncode == 2 and out.stdout == "", (bad, out)
        line, = out.stderr.splitlines()
        assert line.startswith("shimgen: error: "), line


def test_a_captured_string_is_escaped_in_every_text_view_and_exact_elsewhere(evil, tmp_path):
    a, b = evil
    text = cli("--calls", a)
    assert text.returncode == 0, text.stderr
    assert f'fname="{SHOWN}")' in printable(text.stdout)
    diff = cli("--calls", "--first-difference", a, b)
    assert diff.returncode == 1 and SHOWN in printable(diff.stdout), diff.stderr
    calls = json.loads(cli("--calls", "--json", a).stdout)["calls"]
    assert calls[0]["args"]["fname"] == EVIL
    db = tmp_path / "calls.db"
    out = cli("--calls", "--sqlite", db, a)
    assert out.returncode == 0 and SHOWN not in printable(out.stdout)  # an export is quiet
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT json_extract(args, '$.fname') FROM calls").fetchall()[
            0] == (EVIL,)


def _trace(run_dir: Path) -> Path:
    (f,) = (run_dir / "traces").glob("*.shimtrace")
    return f


def _record_at(f: Path) -> int:
    """Where the first record of the first block's ring is in the file."""
    h = binary.header(f)
    return h["blocks_off"] + h["calls_ring_off"]


def _changed(evil_dir: Path, tmp: Path, change) -> Path:
    d = tmp / "run"
    shutil.copytree(evil_dir, d)
    f = _trace(d)
    data = bytearray(f.read_bytes())
    change(data, f)
    f.write_bytes(data)
    return d


def test_an_unterminated_string_and_a_name_with_control_bytes_are_escaped(evil, tmp_path):
    """A damaged file: the captured name runs to the end of its capture without a NUL, and
    a function's name in the names table holds ESC [ 2 J."""
    def change(data, f):
        at = data.index(EVIL.encode())
        data[at:at + 64] = (b"\x1b[2J\x07" * 13)[:64]
        names = data.index(b"cuDriverGetVersion\0")
        data[names:names + 18] = b"cuDriv\x1b[2JVersion\x1b"
        # a capture table named as not recorded (a hostile file may say anything there):
        # decoded with the headers found, whose table for these names is another one
        put(data, "calls_table_digest", 0)
    d = _changed(evil[0], tmp_path, change)
    for args in (("--calls",), ()):
        out = cli(*args, d)
        assert out.returncode == 0, out.stderr
        assert "\\x1b[2J" in printable(out.stdout)
    calls = json.loads(cli("--calls", "--json", d).stdout)["calls"]
    assert calls[0]["args"]["fname"].startswith("\x1b[2J\x07")
    assert calls[1]["function"] == "cuDriv\x1b[2JVersion\x1b"


def test_a_result_above_2_63_is_kept_in_the_table_as_its_twos_complement(evil, tmp_path):
    """A function that returns no CUresult keeps the whole rax as its result: 2^64 - 1 is
    stored as -1 (docs/report.md), shown whole in the text and the JSON."""
    def change(data, f):
        names = data.index(b"cuModuleLoad\0")
        data[names:names + 2] = b"zz"  # a name the headers do not know, of no CUresult
        struct.pack_into("<Q", data, _record_at(f) + records.HEAD, (1 << 64) - 1)
    d = _changed(evil[0], tmp_path, change)
    db = tmp_path / "calls.db"
    out = cli("--calls", "--sqlite", db, d)
    assert out.returncode == 0, out.stderr
    assert " = 0xffffffffffffffff " in cli("--calls", d).stdout
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT function, result FROM calls ORDER BY seq").fetchall()[
            0] == ("zzModuleLoad", -1)
    assert json.loads(cli("--calls", "--json", d).stdout)["calls"][0]["result"] == 2**64 - 1
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("head", [2**64 - 5, 2**63])
def test_a_ring_head_no_thread_can_reach_is_refused_in_every_view(evil, tmp_path, head):
    def change(data, f):
        h = binary.header(f)
        struct.pack_into("<Q", data, h["blocks_off"] + h["off_calls_head"], head)
    d = _changed(evil[0], tmp_path, change)
    db = tmp_path / "calls.db"
    for args in (("--calls",), ("--calls", "--json"), ("--calls", "--sqlite", db)):
        out = cli(*args, d)
        assert out.returncode == 1 and out.stdout == "", (args, out.stdout, out.stderr)
        assert out.stderr.count("\n") == 1 and (
            "its call rings are not ones this shimgen reads") in out.stderr, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_ring_head_of_2_63_less_one_is_read(evil, tmp_path):
    """The largest head the reader takes (records.HEAD_MAX): every record is of an earlier
    turn, so none is kept and all are dropped."""
    def change(data, f):
        h = binary.header(f)
        struct.pack_into("<Q", data, h["blocks_off"] + h["off_calls_head"], records.HEAD_MAX)
    d = _changed(evil[0], tmp_path, change)
    out = cli("--calls", "--sqlite", tmp_path / "calls.db", d)
    assert out.returncode == 0, out.stderr


# ---- --sqlite FILE: only ours is replaced, nothing is left behind ------------------------------

def _foreign_calls_db(path: Path) -> None:
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE calls (x)")
        con.execute("INSERT INTO calls VALUES ('their data')")


def _other_mark(path: Path) -> None:
    calls_sql.write_sqlite(path, [])
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA application_id=1")


def _other_version(path: Path) -> None:
    calls_sql.write_sqlite(path, [])
    with sqlite3.connect(path) as con:
        con.execute(f"PRAGMA user_version={calls_sql.SCHEMA_VERSION + 1}")


@pytest.mark.parametrize("make", [
    pytest.param(lambda p: p.write_bytes(b""), id="empty"),
    pytest.param(_foreign_calls_db, id="foreign-calls-table"),
    pytest.param(lambda p: p.write_text("mine"), id="text"),
    pytest.param(_other_mark, id="another-application-id"),
    pytest.param(_other_version, id="another-schema-version"),
])
def test_sqlite_replaces_only_a_database_shimgen_marked(evil, tmp_path, make):
    db = tmp_path / "calls.db"
    make(db)
    before = db.read_bytes()
    out = cli("--calls", "--sqlite", db, evil[0])
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "is not a calls database written by shimgen; name a new file" in out.stderr
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calls.db"]


def test_sqlite_replaces_its_own_database(evil, tmp_path):
    db = tmp_path / "calls.db"
    for _ in range(2):
        out = cli("--calls", "--sqlite", db, evil[0])
        assert out.returncode == 0, out.stderr
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA application_id").fetchone() == (calls_sql.APPLICATION_ID,)
        assert con.execute("PRAGMA user_version").fetchone() == (calls_sql.SCHEMA_VERSION,)
        assert con.execute("SELECT count(*) FROM calls").fetchone() == (2,)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calls.db"]


def test_sqlite_refuses_a_marked_database_of_another_user(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user")
    db = tmp_path / "calls.db"
    calls_sql.write_sqlite(db, [])
    os.chown(db, 65534, 65534)
    with pytest.raises(ShimgenError, match="not a calls database written by shimgen"):
        calls_sql.write_sqlite(db, [])


ROW = (1, None, 1, 1, 0.5, 1.0, "cuInit", "{}", 0, "CUDA_SUCCESS", "{}", "returned")


def _rows_then(exc):
    yield ROW
    raise exc


def _failing(name):
    def fail(*a, **k):
        raise OSError(28, "No space left on device")
    return name, fail


@pytest.mark.parametrize("rows,patch,raised", [
    pytest.param(lambda: _rows_then(KeyboardInterrupt()), None, KeyboardInterrupt,
                 id="interrupted"),
    pytest.param(lambda: _rows_then(ValueError("a reader's mistake")), None, ValueError,
                 id="reader-error"),
    pytest.param(lambda: [ROW, ROW[:3]], None, ShimgenError, id="sqlite-error"),
    pytest.param(lambda: [(*ROW[:8], 2**64, *ROW[9:])], None, ShimgenError,
                 id="integer-too-large"),
    pytest.param(lambda: [ROW], _failing("fsync"), ShimgenError, id="fsync-fails"),
    pytest.param(lambda: [ROW], _failing("replace"), ShimgenError, id="rename-fails"),
])
def test_sqlite_leaves_no_temporary_file_on_any_failure(tmp_path, monkeypatch, rows, patch,
                                                         raised):
    if patch is not None:
        monkeypatch.setattr(calls_sql.os, *patch)
    db = tmp_path / "calls.db"
    with pytest.raises(raised):
        calls_sql.write_sqlite(db, rows())
    assert list(tmp_path.iterdir()) == []
