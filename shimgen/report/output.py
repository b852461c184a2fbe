"""The output rules that every view of `shimgen report` keeps (report/format.py: one run's
table, JSON and CSV; report/compare.py: two runs): a string read from a file (a trace,
run.json, a file's name, the shim's notices, why a file could not be read) shown as one
printable line in the table and the CSV, kept exact in the JSON; the JSON always valid; the
output always text that can be written."""

from __future__ import annotations

# json is imported where it is used: the plain table (what `shimgen run` prints) needs none.
from ..errors import ShimgenError, printable_line


def shown(text: str, limit: int | None = None) -> str:
    """Text from a trace, a file's name or the shim's notices as one printable line:
    control characters and undecodable bytes escaped; cut at `limit` characters."""
    text = printable_line(text)
    return text if limit is None or len(text) <= limit else text[:limit] + "..."


def seconds_text(x: float | None) -> str:
    """A call's age as the in-flight lines and `top` show it: seconds to a tenth, minutes from
    ten minutes on; "?" when not known."""
    if x is None:
        return "?"
    return f"{x:.1f} s" if x < 600 else f"{x / 60:.1f} min"


def dump_json(data: dict) -> str:
    """The JSON, always valid: a number that is not finite is refused, never `Infinity`."""
    import json

    try:
        return json.dumps(data, indent=1, allow_nan=False) + "\n"
    except ValueError:
        raise ShimgenError("report: a number to write is not finite (too large to add up): a "
                           "trace's numbers are wrong") from None


def printable(out: str) -> str:
    """The output as text that can be written: a lone surrogate (a file name's undecodable
    byte) escaped, never an error when printed."""
    try:
        out.encode("utf-8")
        return out
    except UnicodeEncodeError:
        return out.encode("utf-8", "backslashreplace").decode("utf-8")


def csv_value(v) -> str:
    """A CSV field: a number as it is, text from a trace escaped as the table shows it (so
    that no control character reaches a terminal; the csv module quotes what needs it)."""
    if v is None:
        return ""
    if isinstance(v, str):
        return shown(v)
    return f"{v:.1f}" if isinstance(v, float) else str(v)

