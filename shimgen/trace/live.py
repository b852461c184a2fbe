"""Whether a traced process still runs, and the parts of a run directory that nodes made.

A process on this machine (its trace's boot id is this boot's) runs while /proc has its
pid with the same start time. One on another host cannot be asked: its node's `shimgen run`
rewrites a heartbeat file in its part of the run directory every second (runenv.HEARTBEAT:
the CLOCK_REALTIME ns of the write, in decimal), and a process there counts as running
while that heartbeat is fresh (HEARTBEAT_FRESH_S) and the node's run has not ended.

A run directory made by several nodes (docs/multigpu.md): the node that made it has its
run.json, traces and notices at the top; every other node joined it under its host name,
a directory with its own run.json, traces, notices and heartbeat. `parts(run_dir)` lists
them, the top first.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..runenv import HEARTBEAT, RUN_JSON, TRACES

HEARTBEAT_EVERY_S = 1.0
HEARTBEAT_FRESH_S = 10.0
# The most a time written on another host may be ahead of this machine's clock (the hosts'
# clocks as synchronised as they are); a time further ahead is ignored, never taken as now.
AHEAD_S = HEARTBEAT_FRESH_S
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str:
    try:
        with open(_BOOT_ID) as f:
            return f.read().strip()
    except OSError:
        return ""


def proc_start(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (its start, in clock ticks since boot); None: no such
    process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2:].split()
    try:
        return int(rest[19])
    except (IndexError, ValueError):
        return None


def alive_here(pid: int, start: int | None, uid: int | None = None) -> bool:
    """Whether the process of this pid and start time runs on this machine now (a zombie
    does not: it ended); with `uid` (the owner of the trace file that names it, which the
    process wrote as itself), only a process of that user: a file that names another
    user's process (its pid and start time can be read in /proc) is not taken for it."""
    if start is None or pid <= 0:
        return False
    if proc_start(pid) != start:
        return False
    if uid is not None:
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                return False
        except OSError:
            return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        return raw[raw.rfind(b")") + 2:][:1] not in (b"Z", b"X")
    except OSError:
        return False


def read_heartbeat(part: Path) -> int | None:
    """The CLOCK_REALTIME ns of a part's last heartbeat; None: none (never through a
    symbolic link; only a small regular file)."""
    try:
        fd = os.open(part / HEARTBEAT, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.read(fd, 64)
    except OSError:
        return None
    finally:
        os.close(fd)
    text = raw.strip()
    return int(text) if text.isdigit() and len(text) < 25 else None


def _days(y: int, m: int, d: int) -> int:
    """Days from 1970-01-01 to the date y-m-d of the proleptic Gregorian calendar (the
    civil-from-days algorithm reversed: years counted from March, so the leap day is last)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def stamp_ns(stamp) -> int | None:
    """run.json's time stamp (YYYY-MM-DDTHH:MM:SS.mmmZ, UTC) in ns; None: none. Parsed by
    hand: time.strptime and calendar cost milliseconds of imports at every `run`."""
    if not isinstance(stamp, str) or len(stamp) < 20 or not stamp.endswith("Z"):
        return None
    main, _, frac = stamp[:-1].partition(".")
    parts = (main[0:4], main[5:7], main[8:10], main[11:13], main[14:16], main[17:19])
    if (len(main) != 19 or main[4] + main[7] + main[10] + main[13] + main[16] != "--T::"
            or not all(p.isascii() and p.isdigit() for p in parts)
            or not (frac == "" or frac.isascii() and frac.isdigit())):
        return None
    y, mo, d, h, mi, s = map(int, parts)
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    if not (1 <= mo <= 12 and 1 <= d <= (29 if mo == 2 and leap else
                                          (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[mo - 1])
            and h < 24 and mi < 60 and s < 62):
        return None
    t = ((_days(y, mo, d) * 24 + h) * 60 + mi) * 60 + s
    return t * 10**9 + int((frac or "0").ljust(9, "0")[:9])


class Part:
    """One node's part of a run directory: its path, host, run.json and heartbeat."""

    __slots__ = ("path", "host", "run", "heartbeat_ns")

    def __init__(self, path: Path, host: str, run: dict | None) -> None:
        self.path, self.host, self.run = path, host, run
        self.heartbeat_ns = read_heartbeat(path)

    def _stamp(self, key: str, now_real_ns: int) -> int | None:
        """run.json's `key` time in ns; None: none, or one further ahead of this machine's
        clock than the hosts' clocks may differ (ignored: never taken for now or a time
        past)."""
        t = stamp_ns((self.run or {}).get(key))
        return None if t is None or t - now_real_ns >= AHEAD_S * 1e9 else t

    def end_ns(self, now_real_ns: int) -> int | None:
        """When this node's run ended (run.json); None: not said, or said in the future."""
        return self._stamp("end", now_real_ns)

    def node_running(self, now_real_ns: int) -> bool:
        """Whether this node's `shimgen run` still runs, as far as its files tell."""
        if self.end_ns(now_real_ns) is not None:
            return False
        hb = self.heartbeat_ns
        # fresh: written within HEARTBEAT_FRESH_S, by a clock at most AHEAD_S ahead of this
        # one (a heartbeat from further in the future is no sign of a node that runs)
        return (hb is not None and now_real_ns - hb < HEARTBEAT_FRESH_S * 1e9
                and hb - now_real_ns < AHEAD_S * 1e9)

    def ignored(self, now_real_ns: int) -> list[str]:
        """A line for each time of this part that is ignored because it is in the future
        (further ahead of this machine's clock than AHEAD_S), saying what and why."""
        out = []
        for key in ("start", "end"):
            t = stamp_ns((self.run or {}).get(key))
            if t is not None and self._stamp(key, now_real_ns) is None:
                out.append(f"{self.path / RUN_JSON}: its {key} is {(t - now_real_ns) / 1e9:.0f} s "
                           "ahead of this machine's clock: ignored")
        hb = self.heartbeat_ns
        if hb is not None and hb - now_real_ns >= AHEAD_S * 1e9:
            out.append(f"{self.path / HEARTBEAT}: its time is {(hb - now_real_ns) / 1e9:.0f} s "
                       "ahead of this machine's clock: ignored (no sign of a node that runs)")
        return out


def _run_json(d: Path) -> dict | None:
    from ..errors import ShimgenError
    from .jsonfile import read_json

    try:
        data = read_json(d / RUN_JSON)
    except (ShimgenError, OSError):
        return None
    return data if isinstance(data, dict) else None


def is_node_part(d: Path) -> bool:
    """A directory a node joined the run with: its own run.json and traces/ (and no
    symbolic link)."""
    return (not d.is_symlink() and d.is_dir() and (d / RUN_JSON).is_file()
            and (d / TRACES).is_dir())


def parts(run_dir: Path) -> list[Part]:
    """The parts of a run directory: the top, then each node that joined it, by name."""
    top = _run_json(run_dir)
    out = [Part(run_dir, str((top or {}).get("host") or ""), top)]
    try:
        entries = sorted(os.scandir(run_dir), key=lambda e: e.name)
    except OSError:
        return out
    for e in entries:
        if e.name.startswith(".") or e.name == TRACES:
            continue
        d = Path(e.path)
        if e.is_dir(follow_symlinks=False) and is_node_part(d):
            run = _run_json(d)
            out.append(Part(d, str((run or {}).get("host") or e.name), run))
    return out
