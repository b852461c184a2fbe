"""The reader of the JSON trace the shim writes at exit (`SHIMGEN_TRACE_FILE`, runtime/stats/trace.c
`write_json`) into a `tracemodel.ProcessTrace`. It takes the first form (counts, and per
function calls, total, mean and max in `time` mode) and the extended one (`mode`, `rank`,
`ns_per_tick`, per-function `hist`, `errors`, `error_overflow`, `injected`): a key that is
missing is information the trace does not have. Nothing in it is trusted: counts are whole
numbers in the range of the shim's (uint64), times finite and not negative, histograms no
longer than the shim's, names and other strings text (no control character, nothing
undecodable). Anything else is refused with one line that names the file and the key."""

from __future__ import annotations

import json
import os
import stat
from itertools import chain
from math import isfinite
from pathlib import Path

from ..errors import ShimgenError
from ..runenv import TRACE_FSTATS_WORDS, TRACE_FUNCTION_FIELDS, TRACE_PROCESS_FIELDS
from .model import FINE_BUCKETS, HIST_BUCKETS, FunctionStats, ProcessTrace

# The JSON's keys (runenv's one list of trace fields), by their names in trace/model.py: a
# process's (K) and a function's in `time` (F).
K = {name: key for name, key, _ in TRACE_PROCESS_FIELDS}
F = {name: key for name, key, _ in TRACE_FUNCTION_FIELDS if name and key}
# The function fields of the `time` entry read from words of struct fstats, less the count
# (the `calls` table's): (name, key, is a time: a word of unit "ticks", written in ns; else
# a whole number).
_UNITS = {word: (fold, unit) for word, fold, unit in TRACE_FSTATS_WORDS}
WORDS = tuple((name, key, _UNITS[word][1] == "ticks")
              for name, key, word in TRACE_FUNCTION_FIELDS
              if name and key and word and _UNITS[word][0] not in ("calls", None))

MODES = ("counts", "time", "timeline")
# The note (ProcessTrace.notes) of a timed trace without "errors": from a shim that did
# not count non-success returns yet. The report shows its errors as unknown.
NO_ERROR_COUNTS = "no error counts (the shim that wrote it did not count them)"
MAX_BYTES = 64 << 20  # far above any real trace (a few hundred functions)
_NUMBER = {int, float}
U64 = (1 << 64) - 1  # the shim's counters are uint64
PID_MAX = (1 << 31) - 1  # pid_t
CODE_MAX = (1 << 32) - 1  # a CUresult
NAME_MAX = 256  # characters of a function's name: far more than any driver function has
TEXT_MAX = 4096  # of any other string (a path: PATH_MAX)
# ns_per_tick: 0 (the shim could not calibrate its clock) or a tick of 1 THz to 1 kHz. Out of
# that range a histogram's edges, 2**63 ticks and more, would leave the range of numbers.
NS_PER_TICK_RANGE = (1e-3, 1e6)
DIGITS_MAX = 400  # digits of a number: longer ones are kept as _Long, not converted


class _Long:
    """A number written with more than DIGITS_MAX digits: far out of any range here, and
    Python refuses to convert the longest (sys.set_int_max_str_digits). Kept as it is, it is
    refused where it is checked, by its key."""

    __slots__ = ("digits",)

    def __init__(self, text: str) -> None:
        self.digits = len(text.lstrip("-"))

    def __repr__(self) -> str:
        return f"a number of {self.digits} digits"


def _parse_int(text: str) -> int | _Long:
    return int(text) if len(text) <= DIGITS_MAX else _Long(text)


def _show(value) -> str:
    """A value in a message: short, and printable (repr escapes what is not)."""
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _key(name: str) -> str:
    """A function's name as part of a key in a message."""
    return name if name.isprintable() and len(name) <= 80 else _show(name)


def is_text(value: str) -> bool:
    """No control character (C0, DEL, C1) and no lone surrogate (JSON's "\\ud800", or a
    byte that was not UTF-8)."""
    return value.isprintable() or not any(
        c < " " or "\x7f" <= c < "\xa0" or "\ud800" <= c <= "\udfff" for c in value)


class NotATrace(ShimgenError):
    """Valid JSON, but not a shimgen trace (a run's metadata, a timeline, anything else)."""


def _int(value, what: str, *, low: int = 0, high: int = U64) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ShimgenError(f"{what} is {_show(value)}, not a whole number from {low} to {high}")
    return value


def _num(value, what: str) -> float:
    """A time in ns: a finite number, not negative."""
    if type(value) in _NUMBER:
        try:
            number = float(value)
        except OverflowError:  # an int beyond the range of a float
            number = float("inf")
        if isfinite(number) and number >= 0:
            return number
    raise ShimgenError(f"{what} is {_show(value)}, not a finite number >= 0")


def _ns_per_tick(value, what: str) -> float:
    number = _num(value, what)
    if number and not NS_PER_TICK_RANGE[0] <= number <= NS_PER_TICK_RANGE[1]:
        raise ShimgenError(f"{what} is {_show(value)}, not 0 (no calibration) or from "
                           f"{NS_PER_TICK_RANGE[0]:g} to {NS_PER_TICK_RANGE[1]:g}")
    return number


def _str(value, what: str, *, null: bool = False, limit: int = TEXT_MAX) -> str | None:
    if value is None and null:
        return None
    if not isinstance(value, str):
        raise ShimgenError(f"{what} is {_show(value)}, not a string")
    if len(value) > limit:
        raise ShimgenError(f"{what} is a string of {len(value)} characters, more than {limit}")
    if not is_text(value):
        raise ShimgenError(f"{what} is {_show(value)}, not text (a control character, or one "
                           "that is not UTF-8)")
    return value


def _name(name: str) -> str:
    """A function's name, the key of `calls`."""
    if not name or len(name) > NAME_MAX or not is_text(name):
        raise ShimgenError(f"calls: {_show(name)} is not a function's name (empty, longer than "
                           f"{NAME_MAX} characters, or not text)")
    return name


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
    if not raw.strip():
        raise ShimgenError(f"{path}: empty ({len(raw)} bytes), not a shimgen trace")
    try:
        text = raw.decode("utf-8")
        try:
            return json.loads(text)
        except ValueError as e:
            if isinstance(e, json.JSONDecodeError):
                raise
            # a number too long for Python to convert: read again, each number through
            # _parse_int (slower), so that the key that holds it is named
            return json.loads(text, parse_int=_parse_int)
    except UnicodeDecodeError:
        raise ShimgenError(f"{path}: not a shimgen trace (not UTF-8 text)") from None
    except json.JSONDecodeError as e:
        raise ShimgenError(f"{path}: not a shimgen trace: not valid JSON (cut short or "
                           f"damaged?): {e.msg} (line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise ShimgenError(f"{path}: not a shimgen trace (nested too deeply)") from None
    except ValueError as e:  # what the JSON parser's conversions refuse
        raise ShimgenError(f"{path}: not a shimgen trace: {_show(str(e))}") from None


def _hist(value, what: str) -> list[int]:
    if (not isinstance(value, list) or len(value) > HIST_BUCKETS
            or not set(map(type, value)) <= {int} or min(value, default=0) < 0
            or max(value, default=0) > U64):
        raise ShimgenError(f"{what} is {_show(value)}, not a list of at most {HIST_BUCKETS} "
                           f"whole numbers from 0 to {U64}")
    return value + [0] * (HIST_BUCKETS - len(value))


def _fine(value, what: str) -> dict[int, int]:
    """"fine": [[bucket, calls], ...], each bucket of FINE_BUCKETS at most once."""
    ok = isinstance(value, list) and len(value) <= FINE_BUCKETS
    out: dict[int, int] = {}
    for pair in value if ok else ():
        if (not isinstance(pair, list) or len(pair) != 2 or type(pair[0]) is not int
                or type(pair[1]) is not int or not 0 <= pair[0] < FINE_BUCKETS
                or not 0 <= pair[1] <= U64 or pair[0] in out):
            ok = False
            break
        out[pair[0]] = pair[1]
    if not ok:
        raise ShimgenError(f"{what} is {_show(value)}, not a list of [bucket, calls] pairs, "
                           f"each bucket below {FINE_BUCKETS} once, calls from 0 to {U64}")
    return out


def _timed(fs: FunctionStats, entry, what: str, calls: int) -> None:
    entry = _obj(entry, what)
    c, hist, fine = (F[n] for n in ("calls", "hist", "fine"))
    if c in entry and _int(entry[c], f"{what}.{c}") != calls:
        raise ShimgenError(f"{what}.{c} is {entry[c]}, but calls has {calls}")
    for name, key, time in WORDS:
        read = _num if time else _int
        setattr(fs, name, read(entry.get(key), f"{what}.{key}"))
    if hist in entry:
        fs.hist = _hist(entry[hist], f"{what}.{hist}")
    if fine in entry:
        fs.fine = _fine(entry[fine], f"{what}.{fine}")


def _time_fast(functions: dict[str, FunctionStats], timed) -> bool:
    """Every entry of `time` checked and taken at once, in bulk, when all are well formed
    (a thousand traces must be read in well under a second); False when any is not, and
    the entries are then read one by one to say which."""
    try:
        c, hist, fine = (F[n] for n in ("calls", "hist", "fine"))
        rows = [(functions[n], e[c], [e[key] for _, key, _ in WORDS], e.get(hist),
                 e.get(fine)) for n, e in timed.items()]
    except (KeyError, TypeError, AttributeError):
        return False
    numbers = list(chain.from_iterable(r[2] for r in rows))
    wholes = [v for r in rows for v, (_, _, time) in zip(r[2], WORDS, strict=True) if not time]
    try:  # isfinite of an int beyond the range of a float: OverflowError
        if (not set(map(type, numbers)) <= _NUMBER or min(numbers, default=0) < 0
                or not set(map(type, wholes)) <= {int} or max(wholes, default=0) > U64
                or not all(map(isfinite, numbers))
                or [r[1] for r in rows] != [r[0].calls for r in rows]):
            return False
    except OverflowError:
        return False
    hists = [r[3] for r in rows if r[3] is not None]
    if not set(map(type, hists)) <= {list} or max(map(len, hists), default=0) > HIST_BUCKETS:
        return False
    counts = list(chain.from_iterable(hists))
    if (not set(map(type, counts)) <= {int} or min(counts, default=0) < 0
            or max(counts, default=0) > U64):
        return False
    fines = []
    for r in rows:
        if r[4] is not None:
            try:
                fines.append(_fine(r[4], ""))
            except ShimgenError:
                return False
        else:
            fines.append(None)
    for (fs, _, times, hist, _), fine in zip(rows, fines, strict=True):
        for (name, _, time), value in zip(WORDS, times, strict=True):
            setattr(fs, name, float(value) if time else value)
        if hist is not None:
            fs.hist = hist + [0] * (HIST_BUCKETS - len(hist))
        fs.fine = fine
    return True


def _errors(into: dict[int, int], entry, what: str) -> None:
    for code, count in _obj(entry, what).items():
        # as the shim writes it: decimal digits, no sign, space or leading zero
        if not (code.isascii() and code.isdigit() and len(code) <= 10
                and str(int(code)) == code and int(code) <= CODE_MAX):
            raise ShimgenError(f"{what}: {_show(code)} is not a result code (a whole number "
                               f"from 0 to {CODE_MAX})")
        number = int(code)
        into[number] = into.get(number, 0) + _int(count, f"{what}.{code}")


def _possible(name: str, fs: FunctionStats) -> None:
    """No more failures (the driver's errors and the injected ones) than calls, and no
    CUDA_SUCCESS (0) among them: the shim writes its JSON at exit, every call counted."""
    for what, per in (("errors", fs.errors), ("injected", fs.injected)):
        if 0 in per:
            raise ShimgenError(f"{what}.{_key(name)}.0 is CUDA_SUCCESS, which is no failure")
    failed = sum(fs.errors.values()) + sum(fs.injected.values())
    if failed > fs.calls:
        raise ShimgenError(f"errors.{_key(name)} and injected.{_key(name)} count {failed} "
                           f"failures, more than its {fs.calls} calls")


def parse(data, path: str) -> ProcessTrace:
    """A parsed JSON trace as a ProcessTrace; ShimgenError (without the path) when any value
    is of the wrong kind, NotATrace when it is no shimgen trace at all."""
    if not is_trace(data):
        raise NotATrace("not a shimgen trace (no \"shimgen\", \"calls\" and \"pid\" keys)")
    timed = data.get("time")
    mode = data.get(K["mode"], "time" if timed is not None else "counts")
    if mode not in MODES:
        raise ShimgenError(f"mode is {_show(mode)}, not one of {', '.join(MODES)}")
    rank = _str(data.get(K["rank"]), K["rank"], null=True, limit=NAME_MAX)
    npt = data.get(K["ns_per_tick"])
    trace = ProcessTrace(
        path=path, source="json", pid=_int(data[K["pid"]], K["pid"], low=1, high=PID_MAX),
        rank=rank, mode=mode, complete=True,
        shimgen_version=_str(data[K["shimgen_version"]], K["shimgen_version"], limit=NAME_MAX),
        driver_path=_str(data.get(K["driver_path"], ""), K["driver_path"]),
        driver_version=_str(data.get(K["driver_version"], ""), K["driver_version"],
                            limit=NAME_MAX),
        driver_build_id=_str(data.get(K["driver_build_id"]) or data.get("build_id") or "",
                             K["driver_build_id"], limit=NAME_MAX),
        ns_per_tick=None if npt is None else _ns_per_tick(npt, K["ns_per_tick"]),
        untimed_calls=_int(data.get(K["untimed_calls"], 0), K["untimed_calls"]),
        unmapped_proc_addresses=_int(data.get(K["unmapped_proc_addresses"], 0),
                                     K["unmapped_proc_addresses"]),
        errors_overflow=_int(data.get(K["errors_overflow"], 0), K["errors_overflow"]),
    )
    if mode != "counts" and "errors" not in data:
        trace.notes.append(NO_ERROR_COUNTS)
    names = data["calls"].keys()
    if not ("".join(names).isprintable() and min(map(len, names), default=1) > 0
            and max(map(len, names), default=0) <= NAME_MAX):
        for name in names:  # which one is wrong
            _name(name)
    for name, calls in data["calls"].items():
        trace.functions[name] = FunctionStats(calls=_int(calls, f"calls.{name}"))
    if timed is not None and not _time_fast(trace.functions, timed):
        for name, entry in _obj(timed, "time").items():
            fs = trace.functions.get(name)
            if fs is None:
                raise ShimgenError(f"time.{_key(name)}: the function is not in calls")
            _timed(fs, entry, f"time.{name}", fs.calls)
    for what in ("errors", "injected"):  # the driver's own errors; SHIMGEN_INJECT's failures
        for name, entry in _obj(data.get(what, {}), what).items():
            fs = trace.functions.get(name)
            if fs is None:
                raise ShimgenError(f"{what}.{_key(name)}: the function is not in calls")
            _errors(fs.errors if what == "errors" else fs.injected, entry, f"{what}.{name}")
    for name, fs in trace.functions.items():
        _possible(name, fs)
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
