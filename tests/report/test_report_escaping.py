"""`shimgen report` never prints a control character that it read from a file: a function's
name, a rank, a driver version, a note, run.json's command and exit, a file's name, why a
file could not be read, a notice. `ESC ] 0 ; ... BEL` would retitle the terminal, `ESC [ 2 J`
clear it, a newline forge a line of the table. Each is escaped (report_format.shown) in
every view: the table (one run, --by rank, --by pid), two runs compared, and the CSV (still
valid CSV, one row per function); the JSON keeps each string exact (json escapes it). Made-up
processes rendered directly, JSON traces on disk, and a real binary trace of a shim with its
rank, driver version and a function's name changed to such bytes."""

from __future__ import annotations

import csv
import io
import json
import shlex
import shutil
from pathlib import Path

import pytest

from shimgen.report.compare import render as render_compare
from shimgen.report.format import render
from shimgen.report.model import groups
from shimgen.report.output import shown
from shimgen.report.source import Notices, Source
from tests.faultkit import run
from tests.report.test_report import cli, fn, proc, write_run
from tests.report.test_tracefile_reader import header, put

TITLE, CLEAR, FORGE = "\x1b]0;pwned\x07", "\x1b[2J", "\nFORGED line"
NAME = f"cuEvil{TITLE}{CLEAR}{FORGE}\r\x85\u2028\u202e\x00end"
RANK = f"0{CLEAR}\udc9b"  # a lone surrogate: a byte of a binary trace that is not UTF-8
DRIVER = f"535{TITLE}"
NOTE = f"note {CLEAR}{FORGE}"
COMMAND = [f"python{TITLE}", f"a{FORGE}"]


def clean(out: str) -> list[str]:
    """The output's lines, each checked to be printable (nothing for a terminal to act on,
    no line but the output's own)."""
    lines = out.split("\n")
    for line in lines:
        assert line.isprintable(), repr(line)
        assert not line.startswith("FORGED"), repr(line)
    return lines


def escaped(text: str) -> str:
    """How the report shows `text`."""
    return shown(text)


def evil_run(path: str, *, other: bool = False) -> Source:
    """A run whose every string read from a file holds control characters."""
    name = NAME + ("2" if other else "")
    p1 = proc(11, {name: fn(5, total=50.0, most=20.0, errors={700: 2}),
                   "cuInit": fn(1, total=1.0, most=1.0)}, rank=RANK, driver=DRIVER)
    p1.notes.append(NOTE)
    p2 = proc(12, {name: fn(2, total=10.0, most=6.0)}, rank=f"1{TITLE}", complete=False,
              driver=f"550{CLEAR}")
    s = Source(Path(path), True, [p1, p2])
    s.run = {"command": COMMAND, "exit": {"status": 143, "signal_name": f"SIGTERM{CLEAR}"}}
    if other:
        s.run = {"command": COMMAND, "exit": {"status": 126, "error": f"cannot{FORGE}"}}
        s.run_problem = f"run.json {CLEAR}"
    s.unreadable = [(f"{path}/traces/x{CLEAR}.json", f"why {TITLE}{FORGE}")]
    n = Notices(f"{path}/notices{CLEAR}.log")
    n.total, n.kinds = 2, {f"said {TITLE}{FORGE}": 2}
    s.notices = n
    return s


# ---- every view of made-up processes -----------------------------------------------------

@pytest.mark.parametrize("by", [None, "rank", "pid"])
def test_the_table_escapes_every_string_it_read(by):
    s = evil_run(f"/tmp/run{CLEAR}")
    lines = clean(render([s], groups(s.processes, by), by, "text"))
    out = "\n".join(lines)
    for text in (NAME, DRIVER, NOTE, s.name, shlex.join(COMMAND), f"x{CLEAR}.json",
                 f"why {TITLE}{FORGE}", f"said {TITLE}{FORGE}", f"notices{CLEAR}.log",
                 f"SIGTERM{CLEAR}"):
        assert escaped(text) in out, (text, out)
    if by == "rank":
        assert f"== rank {escaped(RANK)} ==" in lines, out
        assert f"== rank {escaped('1' + TITLE)} ==" in lines, out
    elif by is None:
        assert any(ln.startswith("processes  2, ranks ") and escaped(RANK) in ln
                   for ln in lines), out
    # the name is one line of the table and one of the errors section, however it is made
    assert sum(escaped(NAME) in ln for ln in lines) == (2 if by is None else 3), out


@pytest.mark.parametrize("by", [None, "rank"])
def test_the_csv_escapes_every_string_and_stays_one_row_per_function(by):
    s = evil_run("/tmp/run")
    gs = groups(s.processes, by)
    out = render([s], gs, by, "csv")
    clean(out)
    rows = list(csv.reader(io.StringIO(out)))
    assert len(rows) == 1 + sum(len(g.functions) for g in gs), rows
    for row in rows:
        assert len(row) == len(rows[0]) and all(f.isprintable() for f in row), row
    assert {r[2] for r in rows[1:]} == {escaped(NAME), "cuInit"}
    if by == "rank":
        assert {r[1] for r in rows[1:]} == {escaped(RANK), escaped("1" + TITLE)}


@pytest.mark.parametrize("fmt", ["text", "csv"])
def test_two_runs_compared_escape_every_string_they_read(fmt):
    a, b = evil_run(f"/tmp/a{CLEAR}"), evil_run(f"/tmp/b{TITLE}", other=True)
    out = render_compare(a, b, fmt)
    lines = clean(out)
    if fmt == "csv":
        rows = list(csv.reader(io.StringIO(out)))
        assert len(rows) == 1 + 3, rows  # NAME gone, NAME2 new, cuInit
        assert all(f.isprintable() for row in rows for f in row), rows
        assert {r[0] for r in rows[1:]} == {escaped(NAME), escaped(NAME + "2"), "cuInit"}
        return
    text = "\n".join(lines)
    for t in (NAME, NAME + "2", a.name, b.name, DRIVER, "550" + CLEAR, "run.json " + CLEAR,
              f"said {TITLE}{FORGE}", f"cannot{FORGE}", shlex.join(COMMAND)):
        assert escaped(t) in text, (t, text)
    assert sum(escaped(NAME) in ln and escaped(NAME + "2") not in ln for ln in lines) == 2


def test_the_json_keeps_every_string_exact():
    s = evil_run("/tmp/run")
    data = json.loads(render([s], groups(s.processes, "rank"), "rank", "json"))
    assert {g["group"] for g in data["groups"]} == {RANK, "1" + TITLE}
    assert {f["function"] for g in data["groups"] for f in g["functions"]} == {NAME, "cuInit"}
    assert data["sources"][0]["command"] == shlex.join(COMMAND)  # the exact words, quoted
    assert data["unreadable"][0]["reason"] == f"why {TITLE}{FORGE}"
    a, b = evil_run("/tmp/a"), evil_run("/tmp/b", other=True)
    data = json.loads(render_compare(a, b, "json"))
    assert {f["function"] for f in data["functions"]} == {NAME, NAME + "2", "cuInit"}


# ---- from files: JSON traces on disk, through the command line ---------------------------

# JSON traces refuse C0 and C1 control characters (tracejson.is_text); these pass, and are no
# more printable: line and paragraph separators, a right-to-left override, a zero-width space
JSON_NAME = "cuOdd\u2028FORGED\u2029\u202e\u200b\ufeff"


def _json_run(directory: Path, name: str) -> Path:
    p = proc(21, {name: fn(3, total=30.0, most=12.0, errors={1: 1})}, rank="2\u2028r",
             driver="535\u202e")
    write_run(directory, [p], {"command": COMMAND, "exit": {"status": 0}})
    (directory / "notices.log").write_text(f"[pid 21] said {TITLE}{FORGE}\n")
    (directory / "traces" / f"bad{CLEAR}.json").write_text(  # refused: named as unreadable
        json.dumps({"shimgen": "0", "pid": 5, "calls": {f"cu{TITLE}": 1}}))
    return directory


def test_a_run_on_disk_is_escaped_in_every_view(capsys, tmp_path):
    a = _json_run(tmp_path / "a", JSON_NAME)
    b = _json_run(tmp_path / "b", JSON_NAME + "2")
    for args in ([a], ["--by", "rank", a], ["--by", "pid", a], [a, b]):
        rc, out, err = cli(capsys, *args)
        assert rc == 0, err
        text = "\n".join(clean(out))
        assert escaped(JSON_NAME) in text and escaped("535\u202e") in text, text
        assert escaped(f"bad{CLEAR}.json") in text and escaped(f"said {TITLE}") in text, text
        assert escaped(COMMAND[0]) in text, text
    for args in ([a], ["--by", "rank", a], [a, b]):
        rc, out, err = cli(capsys, "--csv", *args)
        assert rc == 0
        clean(out)
        rows = list(csv.reader(io.StringIO(out)))
        assert all(f.isprintable() for row in rows for f in row), rows
        assert escaped(JSON_NAME) in {f for row in rows for f in row}, rows
    rc, out, _ = cli(capsys, "--json", "--by", "rank", a)
    data = json.loads(out)
    assert [f["function"] for f in data["groups"][0]["functions"]] == [JSON_NAME]
    assert data["groups"][0]["group"] == "2\u2028r"


# ---- a real binary trace, its bytes changed ------------------------------------------------

BIN_NAME = b"cuDriverGetVersion"  # changed, in the names table, to as many bytes:
EVIL_NAME = b"cu\x1b[2J\nFORGED 1 2 "
assert len(EVIL_NAME) == len(BIN_NAME)


@pytest.fixture(scope="module")
def binary_run(shims, probes, tmp_path_factory) -> Path:
    """A run directory with a trace the shim wrote (a timed process), then its rank, driver
    version and one function's name changed to bytes with control characters in them."""
    d = tmp_path_factory.mktemp("escaping") / "run"
    traces = d / "traces"
    traces.mkdir(parents=True)
    run(["sh", "-c", '(sleep 0.1; echo) | "$0" libcuda.so.1 rounds 2 3 11', probes / "tracekill"],
        shims[0].env(SHIMGEN_TRACE="time", SHIMGEN_TRACE_DIR=str(traces), RANK="3"))
    (f,) = traces.glob("*.shimtrace")
    data = bytearray(f.read_bytes())
    h = header(bytes(data))
    put(data, "rank", b"3\x1b[31m\xff\x00")
    put(data, "driver_version", DRIVER.encode() + b"\x00")
    at = data.index(BIN_NAME + b"\x00", h["names_off"])
    data[at:at + len(BIN_NAME)] = EVIL_NAME
    f.write_bytes(bytes(data))
    return d


def test_a_binary_trace_with_control_characters_is_escaped_in_every_view(capsys, binary_run,
                                                                        tmp_path):
    other = tmp_path / "other"
    shutil.copytree(binary_run, other)
    name = EVIL_NAME.decode()
    for args in ([binary_run], ["--by", "rank", binary_run], [binary_run, other]):
        rc, out, err = cli(capsys, *args)
        assert rc == 0, err
        text = "\n".join(clean(out))
        assert escaped(name) in text and escaped(DRIVER) in text, text
        if "--by" in args:
            assert "== rank 3\\x1b[31m\\udcff ==" in text.split("\n"), text
    for args in ([binary_run], ["--by", "rank", binary_run], [binary_run, other]):
        rc, out, _ = cli(capsys, "--csv", *args)
        assert rc == 0
        clean(out)
        assert escaped(name) in {f for row in csv.reader(io.StringIO(out)) for f in row}, out
    rc, out, _ = cli(capsys, "--json", "--by", "rank", binary_run)
    data = json.loads(out)
    assert name in {f["function"] for f in data["groups"][0]["functions"]}
    assert data["groups"][0]["group"] == "3\x1b[31m\udcff"
    assert list(data["groups"][0]["driver_versions"]) == [DRIVER]


def test_the_report_at_the_end_of_a_run_says_a_bad_name_escaped(monkeypatch, tmp_path):
    """When the report cannot be made, the line `shimgen run` prints instead (which comes
    from the traces: a function's name) is escaped too."""
    from shimgen.errors import ShimgenError
    from shimgen.report import main as report
    from shimgen.run import summary as runreport

    def refuse(d):
        raise ShimgenError(f"report: {NAME}: its total time is too large to add up")

    monkeypatch.setattr(report, "summary_for_run", refuse)
    line = runreport.run_report(tmp_path / f"r{CLEAR}")
    assert line.isprintable() and escaped(NAME) in line and escaped(CLEAR) in line, line


def test_one_escaping_rule_for_every_line_made_of_text_from_outside():
    """report/output.py shown, errors.py one_line (every error line) and run/summary.py
    one_line (the run's banner) escape by one rule: each of NAME's characters that a
    terminal could act on (C0 and C1 controls, DEL, line and paragraph separators, a
    direction override, a lone surrogate) escaped as Python writes it, the rest as it is."""
    from shimgen.errors import one_line, printable_line
    from shimgen.run import summary

    text = NAME + RANK + "\x7f"
    want = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    assert printable_line(text) == want and want.isprintable()
    assert shown(text) == want and summary.one_line(text) == want
    assert one_line(f"a{CLEAR}\x7f\nb\u202e\udc9b") == "a\\x1b[2J\\x7f; b\\u202e\\udc9b"
    assert printable_line("caf\u00e9 \u4e2d") == "caf\u00e9 \u4e2d"
