"""`shimgen top`'s command without a shim: its refusals and exit statuses, which of a
snapshot and the live view it shows, the calls per second it works out between two
readings, and how the live view leaves (a key, Ctrl-C) with the terminal as it was. The
readings, the view and the functions are replaced by recorders: these tests hold top/main.py
alone."""

from __future__ import annotations

import io
import json
import os
import sys
import termios
from types import SimpleNamespace

import pytest

from shimgen.cli import main as cli
from shimgen.top import main as top


def _p(key: str, counts: int) -> SimpleNamespace:
    return SimpleNamespace(key=key, counts=counts)


class _Fake:
    """Readings in turn, a clock that moves only by sleeps, and what the view was given."""

    def __init__(self, monkeypatch, readings, sleeps_before_stop: int | None = None):
        self.readings = list(readings)
        self.now = 100.0
        self.slept: list[float] = []
        self.views: list[tuple] = []
        self.rows: list[tuple] = []
        self.stop = sleeps_before_stop
        self.drift = 0.0  # what the clock moves more than a sleep asked
        monkeypatch.setattr(top, "_read", self.read)
        monkeypatch.setattr(top.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(top.time, "sleep", self.sleep)
        monkeypatch.setattr(top.job, "ignored", lambda run: ["ign"])
        monkeypatch.setattr(top.view, "text", self.text)
        monkeypatch.setattr(top.view, "as_json", self.as_json)
        monkeypatch.setattr(top.functions, "totals", lambda procs: {"t": [p.counts for p in
                                                                          procs]})
        monkeypatch.setattr(top.functions, "rows", self.fn_rows)
        monkeypatch.setattr(top.functions, "text", lambda found, procs, pid, dt:
                            [f"fn {found} {pid} {dt}"])

    def read(self, run):
        return self.readings.pop(0), [f"problem {len(self.readings)}"]

    def sleep(self, s):
        self.slept.append(s)
        self.now += s + self.drift
        if self.stop is not None and len(self.slept) >= self.stop:
            raise KeyboardInterrupt

    def text(self, run, procs, rates, problems, ignored):
        self.views.append((run, rates, problems, ignored))
        return f"VIEW {rates}\n"

    def as_json(self, run, procs, rates, problems, ignored):
        self.views.append((run, rates, problems, ignored))
        return {"run": run, "rates": rates}

    def fn_rows(self, before, procs, dt, pid):
        self.rows.append((before, dt, pid))
        return ["row"]


def test_calls_per_second_are_the_calls_since_the_reading_before_never_below_zero():
    rates = top._rates({"a": 10, "b": 5, "gone": 3}, [_p("a", 30), _p("b", 2), _p("new", 7)], 2.0)
    assert rates == {"a": 10.0, "b": 0.0}
    assert top._rates({"a": 10}, [_p("a", 30)], 0.0) == {}
    assert top._rates({"a": 10}, [_p("a", 30)], -1.0) == {}


def test_a_reading_is_every_part_with_its_calls_counted(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(top.job, "snapshot", lambda run, **kw: seen.append((run, kw)) or ([], []))
    assert top._read(tmp_path) == ([], [])
    assert seen == [(tmp_path, {"counts": True})]


def test_once_reads_twice_half_a_second_apart_and_says_the_rates_between(monkeypatch, tmp_path):
    f = _Fake(monkeypatch, [[_p("a", 10)], [_p("a", 20)]])
    out = top.once(tmp_path, False)
    assert f.slept == [top.ONCE_WINDOW_S] == [0.5]
    assert f.views == [(str(tmp_path), {"a": 20.0}, ["problem 0"], ["ign"])]
    assert out == "VIEW {'a': 20.0}\n" and not f.rows


def test_once_with_functions_adds_the_hottest_since_the_first_reading(monkeypatch, tmp_path):
    f = _Fake(monkeypatch, [[_p("a", 10)], [_p("a", 20)]])
    out = top.once(tmp_path, False, hot=True, pid=9)
    assert f.rows == [({"t": [10]}, 0.5, 9)]
    assert out == "VIEW {'a': 20.0}\nfn ['row'] 9 0.5\n"


def test_once_as_json_with_and_without_functions(monkeypatch, tmp_path):
    f = _Fake(monkeypatch, [[_p("a", 10)], [_p("a", 11)]] * 2)
    doc = json.loads(top.once(tmp_path, True))
    assert doc == {"run": str(tmp_path), "rates": {"a": 2.0}} and not f.rows
    f.drift = 0.00037
    doc = json.loads(top.once(tmp_path, True, hot=True, pid=None))
    assert doc["functions"] == {"pid": None, "seconds": 0.5, "rows": ["row"]}
    assert doc["rates"] == {"a": pytest.approx(1 / 0.50037)}


def test_live_without_a_terminal_redraws_each_second_until_ctrl_c(monkeypatch, tmp_path):
    f = _Fake(monkeypatch, [[_p("a", 10)], [_p("a", 13)], [_p("a", 14)]], sleeps_before_stop=3)
    monkeypatch.setattr(top, "_key_pressed", lambda t: pytest.fail("no terminal to read"))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stdin", open(os.devnull))
    assert top.live(tmp_path, hot=True, pid=4) is None
    assert f.slept == [1.0, 1.0, 1.0]
    assert [v[1] for v in f.views] == [{}, {"a": 3.0}, {"a": 1.0}]
    assert f.rows == [(None, 0.0, 4), ({"t": [10]}, 1.0, 4), ({"t": [13]}, 1.0, 4)]
    frames = out.getvalue().split("\x1b[H\x1b[2J")
    assert frames == ["", "VIEW {}\nfn ['row'] 4 0.0\n(q to leave)\n",
                      "VIEW {'a': 3.0}\nfn ['row'] 4 1.0\n(q to leave)\n",
                      "VIEW {'a': 1.0}\nfn ['row'] 4 1.0\n(q to leave)\n"]


def test_live_on_a_terminal_leaves_on_q_and_restores_the_terminal(monkeypatch, tmp_path):
    master, slave = os.openpty()
    try:
        before = termios.tcgetattr(slave)
        for key, frames in (("xQ", 1), ("zz", 2), ("q", 1)):
            f = _Fake(monkeypatch, [[_p("a", 1)], [_p("a", 2)]])
            keys = [key, "q"]
            waits = []
            monkeypatch.setattr(top, "_key_pressed", lambda t, waits=waits, keys=keys:
                                waits.append((t, termios.tcgetattr(slave)[3] & termios.ICANON))
                                or keys.pop(0))
            out = io.StringIO()
            monkeypatch.setattr(sys, "stdout", out)
            monkeypatch.setattr(sys, "stdin", SimpleNamespace(fileno=lambda: slave))
            top.live(tmp_path)
            assert waits == [(1.0, 0)] * frames and not f.slept, key
            assert out.getvalue().count("(q to leave)") == frames
            assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


def test_a_key_is_up_to_16_bytes_read_once_ready_and_none_when_not(monkeypatch):
    r, w = os.pipe()
    try:
        monkeypatch.setattr(sys, "stdin", SimpleNamespace(fileno=lambda: r))
        assert top._key_pressed(0) == ""
        os.write(w, b"q" * 20)
        assert top._key_pressed(0) == "q" * 16
        assert top._key_pressed(0) == "q" * 4
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("argv, status, line", [
    (["top", " "], 1, "shimgen: error: top: empty path"),
    (["top", "--json", "{d}"], 2,
     "shimgen: error: top --json goes with --once (see `shimgen top --help`)"),
    (["top", "--once", "{d}/f"], 1, "shimgen: error: top: {d}/f: not a run directory"),
    (["top", "--once", "{d}/none"], 1, "shimgen: error: top: {d}/none: no such directory"),
])
def test_top_refuses_in_one_line(capsys, tmp_path, argv, status, line):
    (tmp_path / "f").write_text("")
    assert cli([a.format(d=tmp_path) for a in argv]) == status
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [line.format(d=tmp_path)]


@pytest.mark.parametrize("argv, tty, want", [
    (["--once"], False, ("once", False, False, None)),
    (["--once", "--json"], True, ("once", True, False, None)),
    ([], False, ("once", False, False, None)),
    (["--functions"], False, ("once", False, True, None)),
    (["--pid", "0"], True, ("live", True, 0)),
    ([], True, ("live", False, None)),
    (["--functions", "--pid", "5"], True, ("live", True, 5)),
])
def test_top_shows_once_or_live_as_asked_and_exits_0(monkeypatch, capsys, tmp_path, argv, tty,
                                                     want):
    calls = []
    monkeypatch.setattr(top, "once", lambda run, j, hot, pid: calls.append(
        ("once", j, hot, pid)) or "SNAP\n")
    monkeypatch.setattr(top, "live", lambda run, hot, pid: calls.append(("live", hot, pid)))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    assert cli(["top", *argv, str(tmp_path)]) == 0
    assert calls == [want]
    assert capsys.readouterr().out == ("SNAP\n" if want[0] == "once" else "")
