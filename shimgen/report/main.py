"""`shimgen report`: the command. Its paths are read (report/source.py) into traces,
merged (all processes, or one group per rank or pid: report/model.py) and printed as tables,
JSON or CSV (report/format.py), or two runs side by side (report/compare.py).
docs/report.md describes what is read and what is printed.

Only the standard library and shimgen's own light modules are imported on this path: a
report of a thousand processes must start and finish fast. The views are imported when a
report is made: the command line imports this module (for `BY`) whatever its command."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ShimgenError, say
from .model import BY, groups
from .source import Source, load_source

__all__ = ["BY", "report", "summary_for_run"]


def _sources(paths: list[Path]) -> list[Source]:
    if not paths:
        raise ShimgenError("report: name a run directory or trace files")
    seen: set[str] = set()
    for p in paths:
        real = os.path.realpath(p)
        if real in seen:
            raise ShimgenError(f"report: {p} is named twice (its calls would count twice)")
        seen.add(real)
    dirs = [p for p in paths if p.is_dir()]
    if (dirs and len(paths) > 2) or (len(dirs) == 1 and len(paths) == 2):
        raise ShimgenError("report: give one run directory, two run directories to compare, "
                           "or any number of trace files to merge")
    return [load_source(p) for p in paths]


def _csv_leaves_out(sources: list[Source], fmt: str) -> None:
    """The CSV has the numbers only: that some files could not be read is said on stderr."""
    n = sum(len(s.unreadable) for s in sources)
    if fmt == "csv" and n:
        import sys

        some, verb, them = (f"{n} trace files", "are", "them") if n > 1 else (
            "1 trace file", "is", "it")
        print(f"shimgen: warning: {some} could not be read and {verb} left out of these "
              f"numbers (the table and --json name {them})", file=sys.stderr)


def report(paths: list[Path], *, by: str | None = None, fmt: str = "text",
           mangled: bool = False) -> str:
    """What `shimgen report` prints for these paths (cli.py parses the arguments)."""
    from . import format as report_format

    sources = _sources(paths)
    if len(sources) == 2 and all(s.is_run for s in sources):
        if by is not None:
            raise ShimgenError("report: --by goes with one run, not with two compared")
        from . import compare as report_compare

        out = report_compare.render(sources[0], sources[1], fmt)
        _csv_leaves_out(sources, fmt)
        return out
    processes = [p for s in sources for p in s.processes]
    run = sources[0] if sources[0].is_run else None
    if not processes and run is None:
        raise ShimgenError("report: no traces")
    from . import inflight

    inflight.attach(sources)
    gs = groups(processes, by)
    if by == "kernel":
        from .kernels import by_kernel

        gs = [by_kernel(g) for g in gs]
    out = report_format.render(sources, gs, by, fmt, mangled)
    _csv_leaves_out(sources, fmt)
    return out


def summary_for_run(run_dir: Path) -> str:
    """The report `shimgen run` prints at the end of a run: every process merged."""
    from . import format as report_format
    from . import inflight

    src = load_source(run_dir, explicit=False)
    inflight.attach([src])
    return report_format.render([src], groups(src.processes, None), None, "text")


# `--first-difference`'s exit statuses, as diff(1)'s and `shimgen diff`'s: the runs make the
# same calls, they part, or trouble (any failure: its one line).
SAME, PARTED, TROUBLE = 0, 1, 2


def _calls_command(args, fmt: str, out) -> int:
    """`shimgen report --calls ...` (report/main.py hands it over), written to `out`; the exit
    status."""
    if fmt == "csv" or args.by:
        raise ShimgenError("report: --calls prints lines or --json (not --csv or --by)")
    from .calls import Filters, check, render

    f = Filters(args.function, args.errors, args.last, args.pid, args.rank,
                getattr(args, "mangled", False))
    check(f)
    paths = [Path(p) for p in args.paths]
    if args.first_difference:
        if len(paths) != 2:
            raise ShimgenError("report: --first-difference compares two runs: name two")
        from .calls_diff import first_difference

        text, parted = first_difference(paths[0], paths[1], f, addresses=args.addresses,
                                        fmt=fmt)
        out.write(text)
        return PARTED if parted else SAME
    if args.addresses:
        raise ShimgenError("report: --addresses goes with --first-difference")
    if args.times and fmt == "json":
        raise ShimgenError("report: --times chooses the lines' first number; --json gives "
                           "each call's `t`, seconds since the run's first process began")
    text = render(paths, f, fmt, args.sqlite, out, times=args.times or "start")
    if text is not None:
        out.write(text)
    return 0


CALLS_ONLY = ("function", "errors", "last", "pid", "rank", "sqlite", "first_difference",
              "addresses", "times")


def _calls_asked(args) -> bool:
    """--calls, or an option that goes with it alone (said when --calls is missing)."""
    given = [o for o in CALLS_ONLY if getattr(args, o, None) not in (None, False)]
    if given and not getattr(args, "calls", False):
        flag = "--" + given[0].replace("_", "-")
        raise ShimgenError(f"report: {flag} goes with --calls")
    return bool(getattr(args, "calls", False))


def command(args) -> int:
    """`shimgen report`."""
    import sys

    if any(not p.strip() for p in args.paths):
        raise ShimgenError("report: empty path")
    fmt = "json" if args.json else "csv" if args.csv else "text"
    if _calls_asked(args):
        if not args.first_difference:
            status = _calls_command(args, fmt, sys.stdout)
            sys.stdout.flush()
            return status
        try:
            status = _calls_command(args, fmt, sys.stdout)
        except (ShimgenError, OSError) as e:
            say(f"{e.strerror or e}: {e.filename}" if isinstance(e, OSError) and e.filename
                else str(e))
            return TROUBLE
        sys.stdout.flush()
        return status
    sys.stdout.write(report([Path(p) for p in args.paths], by=args.by, fmt=fmt,
                            mangled=getattr(args, "mangled", False)))
    sys.stdout.flush()
    return 0
