"""What `shimgen run` says of the report once the command ended: the report itself
(report.summary_for_run, imported only then), or, when it cannot be had, where to get it and
where the shim's notices are; a name from the run shown as one printable line (one_line,
errors.py printable_line; also for run/main.py's banner and errors)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ShimgenError
from ..errors import printable_line as one_line
from ..runenv import NOTICES, TIMELINE, TRACES


def _notices_written(run_dir: Path) -> str:
    """Where the shim's notices are, when it wrote any: said also when there is no report
    (the report shows them)."""
    import stat

    path = run_dir / NOTICES
    try:
        st = os.lstat(path)
    except OSError:
        return ""
    return (f"; the shim wrote notices: {one_line(str(path))}"
            if stat.S_ISREG(st.st_mode) and st.st_size else "")


def run_report(run_dir: Path) -> str:
    """The end-of-run report (shimgen/report/main.py, which shows the shim's notices too), or
    where to get it and where the notices are."""
    where = f"shimgen report {one_line(str(run_dir))}"
    try:
        from ..report import summary_for_run
    except ImportError:
        return f"report: {where}{_notices_written(run_dir)}"
    try:
        return summary_for_run(run_dir)
    except ShimgenError as e:
        return f"report: {one_line(str(e))}; {where}{_notices_written(run_dir)}"
    except Exception as e:  # the command's exit status matters more than the report
        return (f"report: internal error, please report it: {type(e).__name__}: "
                f"{one_line(str(e))}; {where}{_notices_written(run_dir)}")


def _disk_use(top: Path) -> tuple[int, int]:
    """(files, bytes on disk) of the regular files under `top`, symbolic links not followed."""
    files = used = 0
    for folder, _, names in os.walk(top):
        for name in names:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if st.st_mode & 0o170000 == 0o100000:
                files, used = files + 1, used + st.st_blocks * 512
    return files, used


def trace_size(path: Path) -> str:
    """`--trace calls`: what the run's trace files and timeline take on disk, as one line
    (a ring of call records takes disk space as it fills, up to its size)."""
    from ..report import size_text

    files, used = _disk_use(path / TRACES)
    _, timeline = _disk_use(path / TIMELINE)
    return (f"trace size {size_text(used)} on disk in {files} trace file"
            f"{'' if files == 1 else 's'}, {size_text(timeline)} of timeline")


def calls_timeline(run_dir) -> str:
    """`--trace calls`: the timeline written from the call records once the command ended
    (report/calls_timeline.py: `timeline/<pid>.json`, each call's arguments in its event's
    `args`), and the line that says where, or why not. `run_dir`: the run's RunDir."""
    where = one_line(str(run_dir.path / TIMELINE))
    try:
        from ..report import write_calls_timeline

        files, calls = write_calls_timeline(run_dir.path, run_dir.fd)
    except ShimgenError as e:
        return f"timeline   not written: {one_line(str(e))}"
    except OSError as e:
        return f"timeline   not written to {where}: {e.strerror or e}"
    except Exception as e:  # the command's exit status matters more than the timeline
        return (f"timeline   not written: internal error, please report it: "
                f"{type(e).__name__}: {one_line(str(e))}")
    return (f"timeline   {where}: {calls} calls of {files} processes as Chrome trace JSON "
            "(Perfetto), each call's arguments in its event's args")
