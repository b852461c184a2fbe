"""A live process's command line, for the lines that name a process (`run --stall`'s
notices, `report --by pid`, `top`): read from /proc/PID/cmdline while the process runs on
this host, and only when the pid is still that process (its start time, field 22 of
/proc/PID/stat, is the one its trace file recorded). A trace file does not record the
command line: a process that ended or runs elsewhere has none here (None)."""

from __future__ import annotations

import os

SHOWN_MAX = 80  # the longest command line shown in a heading or a notice


def _read(path: str, limit: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def command_line(pid: int, proc_start: int | None, boot_id: str | None = None) -> str | None:
    """The command line of process `pid` started at `proc_start` (clock ticks since boot)
    in boot `boot_id` (None: this boot, as a run's own watcher knows), its words joined by
    spaces, cut at SHOWN_MAX characters ("..."); None where it cannot be known to be that
    process's."""
    from . import live

    if not proc_start or pid <= 0 or (boot_id is not None and (
            not boot_id or boot_id != live.boot_id())):
        return None
    if live.proc_start(pid) != proc_start:
        return None
    raw = _read(f"/proc/{pid}/cmdline", 4 * SHOWN_MAX)
    if not raw:
        return None
    from ..errors import printable_line

    text = printable_line(raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace"))
    return text if len(text) <= SHOWN_MAX else text[:SHOWN_MAX - 3] + "..."
