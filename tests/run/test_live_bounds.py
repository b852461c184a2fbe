"""The bounds of shimgen/trace/live.py, at the nanosecond: a heartbeat is read from its
file's first 64 bytes; a time of run.json, or a heartbeat, exactly AHEAD_S ahead of this
machine's clock is ignored and said to be; a heartbeat exactly HEARTBEAT_FRESH_S old is no
sign of a node that runs. The clock is passed in (`now_real_ns`), never read."""

from __future__ import annotations

from shimgen.runenv import HEARTBEAT, RUN_JSON
from shimgen.trace import live

AHEAD_NS = int(live.AHEAD_S * 10**9)
FRESH_NS = int(live.HEARTBEAT_FRESH_S * 10**9)
STAMP = "2024-03-01T12:00:00.123456789Z"  # to the nanosecond
HB = 1_709_294_400_123_456_789  # a heartbeat: CLOCK_REALTIME ns


def test_a_heartbeat_is_read_from_its_files_first_64_bytes(tmp_path):
    """45 blanks, then digits past the 64th byte: the number is the digits within it."""
    (tmp_path / HEARTBEAT).write_bytes(b" " * 45 + b"1" * 19 + b"2" * 5 + b"\n")
    assert live.read_heartbeat(tmp_path) == int("1" * 19)


def test_a_run_json_time_exactly_ahead_s_ahead_is_ignored_and_said(tmp_path):
    t = live.stamp_ns(STAMP)
    assert t is not None
    part = live.Part(tmp_path, "h", {"end": STAMP})
    assert part.end_ns(t - AHEAD_NS) is None
    assert part.ignored(t - AHEAD_NS) == [
        f"{tmp_path / RUN_JSON}: its end is 10 s ahead of this machine's clock: ignored"]
    # a nanosecond less ahead: taken, and the node's run has ended
    assert part.end_ns(t - AHEAD_NS + 1) == t
    assert part.ignored(t - AHEAD_NS + 1) == []
    assert not part.node_running(t - AHEAD_NS + 1)


def _part(tmp_path) -> live.Part:
    (tmp_path / HEARTBEAT).write_text(f"{HB}\n")
    part = live.Part(tmp_path, "h", {})
    assert part.heartbeat_ns == HB
    return part


def test_a_heartbeat_exactly_heartbeat_fresh_s_old_is_not_fresh(tmp_path):
    part = _part(tmp_path)
    assert not part.node_running(HB + FRESH_NS)
    assert part.node_running(HB + FRESH_NS - 1)
    assert part.ignored(HB + FRESH_NS) == []  # old, not from the future


def test_a_heartbeat_exactly_ahead_s_ahead_is_not_fresh_and_is_said_ignored(tmp_path):
    part = _part(tmp_path)
    assert not part.node_running(HB - AHEAD_NS)
    assert part.ignored(HB - AHEAD_NS) == [
        f"{tmp_path / HEARTBEAT}: its time is 10 s ahead of this machine's clock: ignored "
        "(no sign of a node that runs)"]
    # a nanosecond less ahead: fresh, and nothing said
    assert part.node_running(HB - AHEAD_NS + 1)
    assert part.ignored(HB - AHEAD_NS + 1) == []
