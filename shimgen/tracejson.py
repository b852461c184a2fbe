"""The reader of the JSON trace the shim writes at exit (`SHIMGEN_TRACE_FILE`, runtime/trace.c
`write_json`) into a `tracemodel.ProcessTrace`. It takes the first form (counts, and per
function calls, total, mean and max in `time` mode) and the extended one (`mode`, `rank`,
`ns_per_tick`, per-function `hist`, `errors`, `error_overflow`): a key that is missing is
information the trace does not have. Anything else is refused with one line."""

from __future__ import annotations

import json
import os
import stat
from itertools import chain
from math import isfinite
from pathlib import Path

from .errors import ShimgenError
from .tracemodel import HIST_BUCKETS, FunctionStats, ProcessTrace

MODES = ("counts", "time", "timeline")
# The note (ProcessTrace.notes) of a timed trace without "errors": from a shim that did
# not count non-success returns yet. The report shows its errors as unknown.
NO_ERROR_COUNTS = "no error counts (the shim that wrote it did not count them)"
MAX_BYTES = 64 << 20  # far above any real trace (a few hundred functions)
_NUMBER = {int, float}


class NotATrace(ShimgenError):
    """Valid JSON, but not a shimgen trace (a run's metadata, a timeline, anything else)."""


def _int(value, what: str, *, low: int = 0) -> int:
    if type(value) is not int or value < low:
        raise ShimgenError(f"{what} is {value!r}, not a whole number >= {low}")
    return value


def _num(value, what: str) -> float:
    if type(value) not in (int, float) or value != value or value < 0 or value == float("inf"):
        raise ShimgenError(f"{what} is {value!r}, not a number >= 0")
    return float(value)


def _str(value, what: str, *, null: bool = False) -> str | None:
    if value is None and null:
        return None
    if not isinstance(value, str):
        raise ShimgenError(f"{what} is {value!r}, not a string")
    return value


def _obj(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise ShimgenError(f"{what} is {type(value).__name__}, not an object")
    return value


def is_trace(data) -> bool:
    """Whether parsed JSON has the shape of a shimgen trace (its identifying keys); the
    timeline's Chrome trace and a run's run.json do not."""
    return (isinstance(data, dict) and isinstance(data.get("shimgen"), str)
            and isinstance(data.get("calls"), dict) and "pid" in data)


def read_json(path: Path) -> object:
    """A file's JSON. A file that cannot be read or parsed is refused with one line."""
    try:  # O_NONBLOCK: a FIFO or device named by mistake is refused, never waited on
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ShimgenError(f"{path}: cannot read it: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ShimgenError(f"{path}: not a regular file, so not a shimgen trace")
        try:
            raw = f.read(MAX_BYTES + 1)
        except OSError as e:
            raise ShimgenError(f"{path}: cannot read it: {e.strerror or e}") from None
    if len(raw) > MAX_BYTES:
        raise ShimgenError(f"{path}: larger than {MAX_BYTES >> 20} MiB, not a shimgen trace")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ShimgenError(f"{path}: not a shimgen trace (not UTF-8 text)") from None
    except json.JSONDecodeError as e:
        raise ShimgenError(f"{path}: not a shimgen trace: not valid JSON (cut short or "
                           f"damaged?): {e.msg} (line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise ShimgenError(f"{path}: not a shimgen trace (nested too deeply)") from None


def _hist(value, what: str) -> list[int]:
    if (not isinstance(value, list) or len(value) > HIST_BUCKETS
            or not set(map(type, value)) <= {int} or min(value, default=0) < 0):
        raise ShimgenError(f"{what} is not a list of at most {HIST_BUCKETS} whole numbers "
                           ">= 0")
    return value + [0] * (HIST_BUCKETS - len(value))


def _timed(fs: FunctionStats, entry, what: str, calls: int) -> None:
    entry = _obj(entry, what)
    if "calls" in entry and _int(entry["calls"], f"{what}.calls") != calls:
        raise ShimgenError(f"{what}.calls is {entry['calls']}, but calls has {calls}")
    fs.total_ns = _num(entry.get("total_ns"), f"{what}.total_ns")
    fs.max_ns = _num(entry.get("max_ns"), f"{what}.max_ns")
    if "hist" in entry:
        fs.hist = _hist(entry["hist"], f"{what}.hist")


def _time_fast(functions: dict[str, FunctionStats], timed) -> bool:
    """Every entry of `time` checked and taken at once, in bulk, when all are well formed
    (a thousand traces must be read in well under a second); False when any is not, and
    the entries are then read one by one to say which."""
    try:
        rows = [(functions[n], e["calls"], e["total_ns"], e["max_ns"], e.get("hist"))
                for n, e in timed.items()]
    except (KeyError, TypeError, AttributeError):
        return False
    numbers = [r[2] for r in rows] + [r[3] for r in rows]
    if (not set(map(type, numbers)) <= _NUMBER or min(numbers, default=0) < 0
            or not all(map(isfinite, numbers))
            or [r[1] for r in rows] != [r[0].calls for r in rows]):
        return False
    hists = [r[4] for r in rows if r[4] is not None]
    if not set(map(type, hists)) <= {list} or max(map(len, hists), default=0) > HIST_BUCKETS:
        return False
    counts = list(chain.from_iterable(hists))
    if not set(map(type, counts)) <= {int} or min(counts, default=0) < 0:
        return False
    for fs, _, total, most, hist in rows:
        fs.total_ns, fs.max_ns = float(total), float(most)
        if hist is not None:
            fs.hist = hist + [0] * (HIST_BUCKETS - len(hist))
    return True


def _errors(fs: FunctionStats, entry, what: str) -> None:
    for code, count in _obj(entry, what).items():
        try:
            number = int(code)
        except ValueError:
            raise ShimgenError(f"{what}: {code!r} is not a result code") from None
        fs.errors[number] = fs.errors.get(number, 0) + _int(count, f"{what}.{code}")


def parse(data, path: str) -> ProcessTrace:
    """A parsed JSON trace as a ProcessTrace; ShimgenError (without the path) when any value
    is of the wrong kind, NotATrace when it is no shimgen trace at all."""
    if not is_trace(data):
        raise NotATrace("not a shimgen trace (no \"shimgen\", \"calls\" and \"pid\" keys)")
    timed = data.get("time")
    mode = data.get("mode", "time" if timed is not None else "counts")
    if mode not in MODES:
        raise ShimgenError(f"mode is {mode!r}, not one of {', '.join(MODES)}")
    rank = _str(data.get("rank"), "rank", null=True)
    npt = data.get("ns_per_tick")
    trace = ProcessTrace(
        path=path, source="json", pid=_int(data["pid"], "pid", low=1), rank=rank,
        mode=mode, complete=True, shimgen_version=data["shimgen"],
        driver_path=_str(data.get("driver", ""), "driver"),
        driver_version=_str(data.get("driver_version", ""), "driver_version"),
        driver_build_id=_str(data.get("loaded_build_id") or data.get("build_id") or "",
                             "loaded_build_id"),
        ns_per_tick=None if npt is None else _num(npt, "ns_per_tick"),
        untimed_calls=_int(data.get("untimed_calls", 0), "untimed_calls"),
        unmapped_proc_addresses=_int(data.get("unmapped_proc_addresses", 0),
                                     "unmapped_proc_addresses"),
        errors_overflow=_int(data.get("error_overflow", 0), "error_overflow"),
    )
    if mode != "counts" and "errors" not in data:
        trace.notes.append(NO_ERROR_COUNTS)
    for name, calls in data["calls"].items():
        trace.functions[name] = FunctionStats(calls=_int(calls, f"calls.{name}"))
    if timed is not None and not _time_fast(trace.functions, timed):
        for name, entry in _obj(timed, "time").items():
            fs = trace.functions.get(name)
            if fs is None:
                raise ShimgenError(f"time.{name}: the function is not in calls")
            _timed(fs, entry, f"time.{name}", fs.calls)
    if "errors" in data:
        for name, entry in _obj(data["errors"], "errors").items():
            fs = trace.functions.get(name)
            if fs is None:
                raise ShimgenError(f"errors.{name}: the function is not in calls")
            _errors(fs, entry, f"errors.{name}")
    if any(fs.hist is not None for fs in trace.functions.values()) and trace.ns_per_tick is None:
        raise ShimgenError("it has latency histograms but no ns_per_tick")
    return trace


def load(path: Path) -> ProcessTrace:
    """The JSON trace at `path`; one line naming the file when it is not one."""
    data = read_json(path)
    try:
        return parse(data, str(path))
    except NotATrace as e:
        raise NotATrace(f"{path}: {e}") from None
    except ShimgenError as e:
        raise ShimgenError(f"{path}: not a valid shimgen trace: {e}") from None
