"""`shimgen run`'s watcher: a thread of the parent (never of the shim) that, while the
command runs, rewrites the node's heartbeat in its part of the run directory every second
(trace/live.py: how a reader on another host knows the job's processes still run) and, with
`--stall SECONDS`, reads the job's trace files and says when a process has been inside one
driver call for longer than SECONDS, and again when it left it:

    shimgen: pid 625 (rank 3, python3 train.py) has been inside cuCtxSynchronize_v2 for 60 s
    shimgen: pid 625 (rank 3, python3 train.py) left cuCtxSynchronize_v2 after 61.3 s

on stderr and in the run's notices.log. It only reads the trace files; its own files (the
heartbeat, the notices it appends) are opened through the run directory's descriptor,
never through a symbolic link.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

from ..runenv import HEARTBEAT, NOTICES

TICK_S = 0.25  # how often the trace files are read with --stall
_O_APPEND = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _who(pid: int, rank: str | None, command: str | None = None) -> str:
    from ..report import shown

    said = ([f"rank {shown(rank)}"] if rank is not None else []) + (
        [shown(command)] if command else [])
    return f"pid {pid}" + (f" ({', '.join(said)})" if said else "")


def stall_line(pid: int, rank: str | None, function: str, seconds: float,
               launched: str = "", command: str | None = None) -> str:
    """The notice of a call in progress for longer than --stall, naming the process by its
    pid, rank and command line (trace/cmdline.py) where known; what the trace file says
    (rank, function) escaped, as one printable line; with the process's latest launch
    (report/kernels.py last_launch_text) when one is known."""
    from ..report import shown

    return (f"shimgen: {_who(pid, rank, command)} has been inside {shown(function)} for "
            f"{seconds:g} s" + (f"; {launched}" if launched else ""))


def left_line(pid: int, rank: str | None, function: str, seconds: float,
              command: str | None = None) -> str:
    from ..report import shown

    return (f"shimgen: {_who(pid, rank, command)} left {shown(function)} "
            f"after {seconds:.1f} s")


class Watcher:
    """Started once the command runs, stopped when it ended (`stop`)."""

    def __init__(self, run_dir, stall: float | None) -> None:
        self.run_dir = run_dir  # run/directory.RunDir, held open
        self.stall = stall
        self.said: dict[tuple, tuple] = {}  # a call said -> (its start, pid, rank, command)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="shimgen-watch", daemon=True)
        self._beat = -1.0

    def start(self) -> None:
        self._heartbeat()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self.said and not self._thread.is_alive():  # the calls that ended with the command
            with contextlib.suppress(Exception):
                self._look()

    def _heartbeat(self) -> None:
        now = time.monotonic()
        if now - self._beat < 1.0:
            return
        self._beat = now
        with contextlib.suppress(OSError):
            fd = os.open(HEARTBEAT, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=self.run_dir.fd)
            try:
                os.pwrite(fd, f"{time.time_ns():020d}\n".encode(), 0)
            finally:
                os.close(fd)

    def _loop(self) -> None:
        while not self._stop.wait(TICK_S if self.stall is not None else 1.0):
            self._heartbeat()
            if self.stall is not None:
                try:
                    self._look()
                except Exception:  # a watcher's mistake never stops the run  # noqa: BLE001
                    pass

    def _look(self) -> None:
        from ..report import last_launch_text
        from ..trace import command_line, job

        procs, _ = job.snapshot(self.run_dir.path, only_top=True)
        seen = set()
        for p in procs:
            for c in p.calls:
                if c.seconds is None:
                    continue
                key = (p.key, c.tid, c.function, c.start)
                seen.add(key)
                if c.seconds > self.stall and key not in self.said:
                    command = command_line(p.pid, p.proc_start, p.boot_id)
                    self.said[key] = (time.monotonic() - c.seconds, p.pid, p.rank, command)
                    self._say(stall_line(p.pid, p.rank, c.function, self.stall,
                                         last_launch_text(p), command))
        for key in [k for k in self.said if k not in seen]:
            began, pid, rank, command = self.said.pop(key)
            self._say(left_line(pid, rank, key[2], time.monotonic() - began, command))

    def _say(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            print(line, file=sys.stderr, flush=True)
        with contextlib.suppress(OSError):
            fd = os.open(NOTICES, _O_APPEND, dir_fd=self.run_dir.fd)
            try:
                os.write(fd, (line + "\n").encode())
            finally:
                os.close(fd)
