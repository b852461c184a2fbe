"""`shimgen run --limit KEY=SIZE` (and the shim's variables they become, runenv.LIMITS):
checked before anything runs, one line for a bad one. A size is bytes, or a number and K,
M, G or T (powers of 1024), with "iB", "B" or nothing after: what the shim's parser
(runtime/memory/ledger.c) takes too (runenv.SIZE_UNITS)."""

from __future__ import annotations

from ..errors import ShimgenError
from ..runenv import ENV, LIMITS, SIZE_HINT, SIZE_MAX, SIZE_UNITS


def parse_size(text: str) -> int | None:
    """The bytes of a size, or None when it is not one (0 is not a limit)."""
    digits = len(text) - len(text.lstrip("0123456789"))
    if not digits or not text[:digits].isascii():
        return None
    if len(text[:digits].lstrip("0")) > len(str(SIZE_MAX)):
        return None  # (past any size, and past what int() takes of a string)
    n, rest, shift = int(text[:digits]), text[digits:], 0
    if rest[:1] and rest[:1] in SIZE_UNITS:
        shift, rest = 10 * (SIZE_UNITS.index(rest[0]) + 1), rest[1:]
        rest = "" if rest in ("iB", "B") else rest
    elif rest == "B":
        rest = ""
    value = n << shift
    return value if not rest and 0 < value <= SIZE_MAX else None


def parse_limits(values: list[str]) -> dict[str, int]:
    """--limit's values as {key: bytes}; ShimgenError (one line) for a bad one."""
    out: dict[str, int] = {}
    for v in values:
        key, eq, size = v.partition("=")
        if not eq or key not in LIMITS:
            raise ShimgenError(f"--limit {v}: give {' or '.join(k + '=SIZE' for k in LIMITS)}"
                               " (e.g. memory=2GiB)")
        if key in out:
            raise ShimgenError(f"--limit {key} is given twice")
        n = parse_size(size)
        if n is None:
            raise ShimgenError(f"--limit {v}: {size!r} {SIZE_HINT}")
        out[key] = n
    return out


def limit_environment(limits: dict[str, int]) -> dict[str, str]:
    """The shim's variables of the limits."""
    return {ENV[LIMITS[k]]: str(n) for k, n in limits.items()}
