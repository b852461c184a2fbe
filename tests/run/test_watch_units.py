"""`shimgen run`'s watcher (shimgen/run/watch.py) on its own, no shim: the heartbeat written in
place at most once a second, through the run directory's descriptor and never through a
symbolic link; a notice appended to notices.log (never through a link, never waiting on a
FIFO) and printed; --stall's looks at the top part only, every TICK_S, each call over the
threshold said once, while it lasts, and its end said once; the thread a daemon, looked
through once more at its stop only when a call was said."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from shimgen.run import watch
from shimgen.runenv import HEARTBEAT, NOTICES
from shimgen.trace import job


@pytest.fixture
def run_dir(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield SimpleNamespace(path=tmp_path, fd=fd)
    os.close(fd)


def test_the_heartbeat_is_written_in_place_at_most_once_a_second(run_dir, monkeypatch):
    beat = run_dir.path / HEARTBEAT
    beat.write_text("x" * 30)
    clock = iter([0.0, 0.5, 1.0, 1.5, 100.0])
    monkeypatch.setattr(watch.time, "monotonic", lambda: next(clock))
    w = watch.Watcher(run_dir, None)
    seen = []
    for _ in range(4):
        beat.write_text("x" * 30)
        w._heartbeat()
        seen.append(beat.read_text())
    written = [s[:20].isdigit() and s[20:] == "\n" + "x" * 9 for s in seen]
    assert written == [True, False, True, False], seen
    # a link in its place is not followed
    beat.unlink()
    target = run_dir.path / "elsewhere"
    target.write_text("mine")
    beat.symlink_to(target)
    watch.Watcher(run_dir, None)._heartbeat()
    assert target.read_text() == "mine"


def test_a_notice_is_printed_and_appended_never_through_a_link_nor_waiting(run_dir, capsys):
    notices = run_dir.path / NOTICES
    notices.write_text("before\n")
    w = watch.Watcher(run_dir, 1.0)
    w._say("shimgen: one")
    w._say("shimgen: two")
    assert notices.read_text() == "before\nshimgen: one\nshimgen: two\n"
    assert capsys.readouterr().err == "shimgen: one\nshimgen: two\n"
    notices.unlink()
    target = run_dir.path / "elsewhere"
    target.write_text("mine")
    notices.symlink_to(target)
    w._say("shimgen: three")
    assert target.read_text() == "mine"
    notices.unlink()
    os.mkfifo(notices)  # no reader: an open that waited would never end
    t = threading.Thread(target=w._say, args=("shimgen: four",), daemon=True)
    t.start()
    t.join(20)  # (an open that waits never returns: a generous bound, no timing)
    assert not t.is_alive()


def test_stall_looks_at_the_top_part_and_says_each_call_once_while_it_lasts(monkeypatch):
    """Calls at or under the threshold are not said, nor one of unknown age; one over it is
    said once however often it is seen, and its end once it is no longer seen."""
    calls = [job.Busy(1, "cuA", None, 1), job.Busy(2, "cuB", 2.0, 2), job.Busy(3, "cuC", 5.0, 3)]
    proc = SimpleNamespace(key=("b", 7, 99), pid=7, rank=None, calls=calls, proc_start=None,
                           boot_id=None, launches=[])
    answers = [([proc], []), ([proc], []), ([], [])]
    asked = []

    def snapshot(*a, **k):
        asked.append(k)
        return answers.pop(0)
    monkeypatch.setattr(job, "snapshot", snapshot)
    clock = iter([100.0, 103.0])  # when it is said (5 s into the call), when it is gone
    monkeypatch.setattr(watch.time, "monotonic", lambda: next(clock))
    w = watch.Watcher(SimpleNamespace(path=Path("/nonexistent")), 2.0)
    said: list[str] = []
    monkeypatch.setattr(w, "_say", said.append)
    w._look()
    assert said == [watch.stall_line(7, None, "cuC", 2.0)]
    w._look()
    assert len(said) == 1, said
    w._look()
    assert said[1:] == [watch.left_line(7, None, "cuC", 8.0)]
    assert asked == [{"only_top": True}] * 3


class _Stop:
    """The watcher's stop event, answering its first wait with False (a tick) and the
    next with True (stopped), each wait's timeout kept."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        return len(self.timeouts) > 1


@pytest.mark.parametrize("stall", [None, 2.0])
def test_the_loop_ticks_with_stall_and_beats_every_second_without(run_dir, monkeypatch, stall):
    w = watch.Watcher(run_dir, stall)
    w._stop = _Stop()
    looks: list[int] = []
    beats: list[int] = []
    monkeypatch.setattr(w, "_look", lambda: looks.append(1))
    monkeypatch.setattr(w, "_heartbeat", lambda: beats.append(1))
    w._loop()
    assert w._stop.timeouts == [watch.TICK_S if stall is not None else 1.0] * 2
    assert (len(beats), len(looks)) == (1, 0 if stall is None else 1)


@pytest.mark.parametrize("said", [False, True])
def test_stop_looks_once_more_only_when_a_call_was_said(run_dir, monkeypatch, said):
    w = watch.Watcher(run_dir, 1.0)
    assert w._thread.daemon  # never what keeps the process alive
    looks: list[int] = []
    monkeypatch.setattr(w, "_look", lambda: looks.append(1))
    if said:
        w.said[("k",)] = (0.0, 7, None, None)
    w._thread = threading.Thread(target=lambda: None)
    w._thread.start()
    w.stop()
    assert len(looks) == int(said)
