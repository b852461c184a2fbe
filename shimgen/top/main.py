"""`shimgen top RUN`: the command. Reads the run's trace files every second (trace/job.py,
read-only maps; no file is written, no process signalled) and redraws; `q` or Ctrl-C
leaves. `--once` prints one snapshot (two readings half a second apart, for the calls per
second) and exits, as it does when stdout is no terminal; `--json` (with `--once`) prints
it as JSON. docs/report.md, "shimgen top"."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ..errors import ShimgenError, UsageError
from ..trace import job
from . import functions, view

REFRESH_S = 1.0
ONCE_WINDOW_S = 0.5


def _rates(before: dict, procs: list[job.ProcNow], dt: float) -> dict:
    return {p.key: max(p.counts - before[p.key], 0) / dt for p in procs
            if p.key in before and dt > 0}


def _read(run: Path) -> tuple[list[job.ProcNow], list[str]]:
    return job.snapshot(run, counts=True)


def once(run: Path, as_json: bool, hot: bool = False, pid: int | None = None) -> str:
    """One snapshot; with `hot`, the hottest functions of the job (or of process `pid`)."""
    first, _ = _read(run)
    t0 = time.monotonic()
    time.sleep(ONCE_WINDOW_S)
    procs, problems = _read(run)
    dt = time.monotonic() - t0
    rates = _rates({p.key: p.counts for p in first}, procs, dt)
    found = functions.rows(functions.totals(first), procs, dt, pid) if hot else None
    if as_json:
        from ..report import dump_json

        doc = view.as_json(str(run), procs, rates, problems, job.ignored(run))
        if hot:
            doc["functions"] = {"pid": pid, "seconds": round(dt, 3), "rows": found}
        return dump_json(doc)
    return view.text(str(run), procs, rates, problems, job.ignored(run)) + (
        "\n".join(functions.text(found, procs, pid, dt)) + "\n" if hot else "")


def _key_pressed(timeout: float) -> str:
    import select

    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    return os.read(sys.stdin.fileno(), 16).decode("latin-1") if ready else ""


def live(run: Path, hot: bool = False, pid: int | None = None) -> None:
    """Redraw every second until `q` (or Ctrl-C, or end of input)."""
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd) if os.isatty(fd) else None
    if saved is not None:
        tty.setcbreak(fd)
    before: dict = {}
    before_fns: dict | None = None
    t_before = time.monotonic()
    try:
        while True:
            procs, problems = _read(run)
            now = time.monotonic()
            rates = _rates(before, procs, now - t_before)
            hot_lines = functions.text(functions.rows(before_fns, procs, now - t_before, pid),
                                       procs, pid, now - t_before) if hot else []
            before, t_before = {p.key: p.counts for p in procs}, now
            before_fns = functions.totals(procs)
            sys.stdout.write("\x1b[H\x1b[2J" + view.text(str(run), procs, rates, problems,
                                                                job.ignored(run))
                             + "".join(line + "\n" for line in hot_lines) + "(q to leave)\n")
            sys.stdout.flush()
            key = _key_pressed(REFRESH_S) if saved is not None else (
                time.sleep(REFRESH_S) or "")
            if "q" in key.lower():
                return
    except KeyboardInterrupt:
        return
    finally:
        if saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def command(args) -> int:
    """`shimgen top`."""
    run = Path(args.run)
    if not args.run.strip():
        raise ShimgenError("top: empty path")
    if args.json and not args.once:
        raise UsageError("top --json goes with --once")
    if not run.is_dir():
        raise ShimgenError(f"top: {run}: not a run directory" if run.exists() else
                           f"top: {run}: no such directory")
    hot = args.functions or args.pid is not None
    if args.once or not sys.stdout.isatty():
        sys.stdout.write(once(run, args.json, hot, args.pid))
        sys.stdout.flush()
        return 0
    live(run, hot, args.pid)
    return 0
