"""`shimgen report --calls` on a run with a trace file that cannot be read (a process killed
while it made its file, a foreign file): every view (text, --json, --sqlite,
--first-difference) reports the traces it can read and names, in one escaped line each, the
file left out and why, in the plain report's words; only a run in which no trace could be
read is refused, in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.report.test_calls_hostile import cli, evil, printable  # noqa: F401

BAD = "9\x1b[2J.shimtrace"  # a name with control characters
BAD_SHOWN = "9\\x1b[2J.shimtrace"


def _with_bad(run: Path, to: Path) -> Path:
    """A copy of the run with a trace file of zeros (a process that died before it wrote its
    file's magic) and a foreign file beside its traces."""
    shutil.copytree(run, to)
    (to / "traces" / BAD).write_bytes(bytes(4096))
    (to / "traces" / "8.shimtrace").write_bytes(b"not a trace file at all, longer than magic")
    return to


def test_every_calls_view_reports_what_it_can_read_and_names_what_it_left_out(evil, tmp_path):  # noqa: F811
    a = _with_bad(evil[0], tmp_path / "a")
    plain = json.loads(cli("--json", a).stdout)["unreadable"]
    assert len(plain) == 2
    said = {Path(u["file"]).name: u["reason"] for u in plain}
    assert "no magic" in said[BAD]
    text = cli("--calls", a)
    assert text.returncode == 0, text.stderr
    lines = [line for line in printable(text.stdout).splitlines()
             if line.startswith("unreadable ")]
    assert len(lines) == 2, text.stdout
    for name, why in said.items():
        shown = name.replace("\x1b", "\\x1b")
        assert any(f"{shown}: left out, it could not be read: {why}" in line
                   for line in lines), (name, lines)
    assert "cuModuleLoad(" in text.stdout
    data = json.loads(cli("--calls", "--json", a).stdout)
    assert data["calls"] and {Path(u["file"]).name: u["reason"]
                              for u in data["unreadable"]} == said
    db = tmp_path / "calls.db"
    out = cli("--calls", "--sqlite", db, a)
    assert out.returncode == 0 and BAD_SHOWN in printable(out.stdout), out.stderr
    diff = cli("--calls", "--first-difference", a, evil[1])
    assert diff.returncode == 1, diff.stderr  # the runs part
    assert f"{BAD_SHOWN}: left out" in printable(diff.stdout)
    both = json.loads(cli("--calls", "--first-difference", "--json", a, evil[1]).stdout)
    assert len(both["unreadable"]) == 2 and both["differences"]


def test_a_run_of_which_no_trace_can_be_read_is_refused_in_one_line(evil, tmp_path):  # noqa: F811
    a = _with_bad(evil[0], tmp_path / "a")
    for f in (a / "traces").iterdir():
        if f.name not in (BAD, "8.shimtrace"):
            f.unlink()
    for args in (("--calls",), ("--calls", "--json"), ("--calls", "--first-difference")):
        out = cli(*args, a, *([evil[1]] if "--first-difference" in args else []))
        trouble = 2 if "--first-difference" in args else 1  # diff(1)'s status for trouble
        assert out.returncode == trouble and out.stdout == "", (args, out)
        line, = out.stderr.splitlines()
        assert line.isprintable() and ": no trace in it could be read: " in line, line
        assert "(and 1 more)" in line, line
