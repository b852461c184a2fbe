"""`shimgen report`'s reading of what it is given: each path (a trace file, or a run
directory with its traces, run.json and notices.log) read into a `Source` of
`tracemodel.ProcessTrace`s, every file that cannot be read named with why. The readers are
trace/binary.py (binary) and trace/jsonfile.py (JSON), behind `READERS`. docs/report.md.

Only the standard library and shimgen's own light modules are imported on this path: a
report of a thousand processes must start and finish fast."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import ShimgenError, left_out_why
from ..runenv import NOTICES, RUN_JSON, TRACE_NOSPACE_SUFFIX, TRACE_SUFFIX, TRACES
from ..trace import NO_ROOM, ProcessTrace

# The layout of a run directory (`shimgen run`) is runenv.py's; other traces are JSON.
JSON_SUFFIX = ".json"
NOTICES_MAX_BYTES = 1 << 20  # what is read of notices.log; the rest is said to be left


def _load_shimtrace(path: Path) -> ProcessTrace:
    try:
        from ..trace import binary
    except ImportError:
        raise ShimgenError(f"{path}: a binary trace, and this shimgen has no reader for "
                           "them (shimgen/trace/binary.py)") from None
    return binary.load(path)


def _load_json_trace(path: Path) -> ProcessTrace:
    from ..trace import jsonfile

    return jsonfile.load(path)


def _load_nospace(path: Path) -> ProcessTrace:
    """The note a process left where the disk had no room for its trace file: its name,
    `[r<rank>-]<pid>[-<k>].nospace` (runtime/tracefile/tracefile.c), is all it says."""
    stem = path.name[:-len(TRACE_NOSPACE_SUFFIX)]
    rank = None
    if stem.startswith("r") and "-" in stem:
        rank, stem = stem[1:].split("-", 1)
    pid = stem.split("-", 1)[0]
    if not (pid.isascii() and pid.isdigit() and 0 < int(pid) < 1 << 31):
        raise ShimgenError(f"{path}: not a note of shimgen's (no pid in its name)")
    return ProcessTrace(path=str(path), source="nospace", pid=int(pid), rank=rank, mode="",
                        complete=False, no_file=True, notes=[NO_ROOM])


# How each kind of trace file is read (binary by its suffix, any other file as JSON): the
# one seam between the report and the readers. Each returns a ProcessTrace or raises
# ShimgenError with one line.
READERS = {TRACE_SUFFIX: _load_shimtrace, TRACE_NOSPACE_SUFFIX: _load_nospace,
           JSON_SUFFIX: _load_json_trace}


def _looks_like_json_trace(path: Path) -> bool:
    """The shim writes "shimgen" as a JSON trace's first key; a timeline or run.json does
    not (both are then also checked by content when read)."""
    try:  # a regular file (os.scandir said so); should it be a FIFO now, never waited on
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise ShimgenError(f"{path}: cannot read it: {e.strerror or e}") from None
    return head.lstrip().startswith(b"{") and head.lstrip()[1:].lstrip().startswith(
        b'"shimgen"')


class Source:
    """One path given to `shimgen report`: a trace file, or a directory (a run). (Plain
    classes in this module, not dataclasses: see trace/model.py.)"""

    __slots__ = ("path", "is_run", "processes", "run", "run_problem", "unreadable", "notices",
                 "ignored")

    def __init__(self, path: Path, is_run: bool,
                 processes: list[ProcessTrace] | None = None) -> None:
        self.path = path
        self.is_run = is_run
        self.processes: list[ProcessTrace] = [] if processes is None else processes
        self.run: dict | None = None  # run.json, when the directory has one
        self.run_problem = ""  # why run.json could not be used
        # (path, why) of each file of a run that could not be read: left out of the totals
        self.unreadable: list[tuple[str, str]] = []
        # what of the run's parts was ignored (a time in the future: trace/live.py), and why
        self.ignored: list[str] = []
        self.notices: Notices | None = None  # the run's notices.log, when it has one

    @property
    def name(self) -> str:
        return str(self.path)


class Notices:
    """What the shim said in a run's notices.log, a line per notice, "[pid N] " first. A
    message is its line without that prefix; the same message from several processes is one
    kind, counted; kinds are in the order first seen."""

    __slots__ = ("path", "total", "kinds", "unread", "problem")

    def __init__(self, path: str) -> None:
        self.path = path
        self.total = 0  # notices (lines) read
        self.kinds: dict[str, int] = {}  # message -> notices
        self.unread = 0  # bytes past NOTICES_MAX_BYTES, not read
        self.problem = ""  # why the file was not read


def notice_message(line: str) -> str:
    """A notice's message: the line without the "[pid N] " the shim writes first."""
    if line.startswith("[pid "):
        end = line.find("] ", 5)
        if end > 5 and line[5:end].isascii() and line[5:end].isdigit():
            return line[end + 2:]
    return line


def read_notices(path: Path) -> Notices | None:
    """A run's notices.log, None when there is none. Read with care, as anything may be in
    its place: never through a symbolic link, only a regular file (opened without blocking,
    so a FIFO is refused, never waited on), at most NOTICES_MAX_BYTES of it."""
    import errno

    notices = Notices(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                     | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        notices.problem = ("a symbolic link, not followed" if e.errno == errno.ELOOP
                           else f"cannot read it: {e.strerror or e}")
        return notices
    chunks: list[bytes] = []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            notices.problem = "not a regular file"
            return notices
        left = NOTICES_MAX_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        notices.problem = f"cannot read it: {e.strerror or e}"
        return notices
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    lines = raw[:NOTICES_MAX_BYTES].split(b"\n")
    if len(raw) > NOTICES_MAX_BYTES:
        notices.unread = max(st.st_size, len(raw)) - NOTICES_MAX_BYTES + len(lines[-1])
        lines.pop()  # cut short: the rest of it is not read
    for line in lines:
        text = line.decode("utf-8", "replace").rstrip("\r")
        if text.strip():
            message = notice_message(text)
            notices.total += 1
            notices.kinds[message] = notices.kinds.get(message, 0) + 1
    return notices


def _read_run_metadata(src: Source) -> None:
    path = src.path / RUN_JSON
    if not path.is_file():
        return
    from ..trace import read_json

    try:
        data = read_json(path)
    except ShimgenError as e:
        src.run_problem = str(e)
        return
    if isinstance(data, dict):
        src.run = data
    else:
        src.run_problem = f"{path}: not an object"


def _trace_files(directory: Path, unreadable: list[tuple[str, str]]) -> list[Path]:
    """The binary traces and the notes of no room (`.nospace`) by their suffix; the JSON
    traces by content, whatever their name
    (the shim names a process's trace `<name>.<pid>` when SHIMGEN_TRACE_FILE has no %p).
    What cannot be looked at (traces/ or a file that cannot be listed or opened) goes to
    `unreadable`."""
    found = []
    for d in (directory, directory / TRACES):
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as e:
            if d == directory:
                raise ShimgenError(f"{d}: cannot list it: {e.strerror or e}") from None
            unreadable.append((str(d), f"cannot list it: {e.strerror or e}"))
            continue
        for e in entries:
            if e.name.startswith(".") or not e.is_file():
                continue  # the shim's temporary files start with "."
            path = Path(e.path)
            try:
                if e.name.endswith((TRACE_SUFFIX, TRACE_NOSPACE_SUFFIX)) or (
                        e.name != RUN_JSON and e.name != NOTICES
                        and _looks_like_json_trace(path)):
                    found.append(path)
            except ShimgenError as err:
                unreadable.append((str(path), left_out_why(err, path)))
    return found


def _read_file(path: Path, *, skip_other_json: bool) -> ProcessTrace | None:
    """A trace file: binary by its suffix, anything else as a JSON trace. With
    `skip_other_json`, None for valid JSON that is no shimgen trace."""
    from ..trace import NotATrace

    reader = READERS[next((suffix for suffix in (TRACE_SUFFIX, TRACE_NOSPACE_SUFFIX)
                           if path.name.endswith(suffix)), JSON_SUFFIX)]
    try:
        return reader(path)
    except NotATrace:
        if skip_other_json:
            return None
        raise


def _read_traces(src: Source, d: Path, host: str) -> None:
    for f in _trace_files(d, src.unreadable):
        try:
            trace = _read_file(f, skip_other_json=True)
        except Exception as e:  # noqa: BLE001 - a reader's mistake too: the file is left out
            src.unreadable.append((str(f), left_out_why(e, f)))
            continue
        if trace is not None:
            trace.host = host
            src.processes.append(trace)


def _read_node_parts(src: Source) -> None:
    """A run that several nodes made (trace/live.py): each node's part, its traces with its
    host, its notices with the others'."""
    from ..trace import live

    top, *joined = live.parts(src.path)
    for t in src.processes:
        t.host = top.host
    for part in joined:
        _read_traces(src, part.path, part.host)
        more = read_notices(part.path / NOTICES)
        if more is not None and src.notices is None:
            src.notices = more
        elif more is not None:
            src.notices.total += more.total
            src.notices.unread += more.unread
            for k, n in more.kinds.items():
                src.notices.kinds[k] = src.notices.kinds.get(k, 0) + n


def load_source(path: Path, *, explicit: bool = True) -> Source:
    """The traces at one path. A file must be a trace (one that cannot be read is refused).
    A directory is a run: every trace in it that can be read, and each one that cannot in
    `unreadable` with why (one bad file does not lose the run), and its notices. It must
    hold a trace, readable or not, or run.json (a run whose command made no traced call);
    unless `explicit`, nothing is refused."""
    if path.is_dir():
        src = Source(path, is_run=True)
        _read_run_metadata(src)
        _read_traces(src, path, "")
        src.notices = read_notices(path / NOTICES)
        _read_node_parts(src)
        if not src.processes and src.run is None and explicit:
            if src.unreadable:
                f, why = src.unreadable[0]
                more = len(src.unreadable) - 1
                raise ShimgenError(f"{path}: no trace in it could be read, and no {RUN_JSON}: "
                                   f"{f}: {why}" + (f" (and {more} more)" if more else ""))
            raise ShimgenError(f"{path}: no traces in it (no *{TRACE_SUFFIX} or shimgen "
                               f"JSON trace in it or in {TRACES}/, and no {RUN_JSON})")
        return src
    if not path.exists():
        raise ShimgenError(f"{path}: no such file or directory")
    return Source(path, is_run=False, processes=[_read_file(path, skip_other_json=False)])
