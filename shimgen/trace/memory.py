"""The device memory ledger of one process, read from its binary trace file (format version
4; runtime/ledger.c writes it, docs/memory.md and docs/traceformat.md say what it holds).

Per column (a device ordinal, or "host": pinned host memory): the most held at once
(`peak`), and per allocation function the bytes held at exit or death (`held`), the
allocations held then (`live`: never freed) and the bytes taken in all (`taken`). A version 3
file has no ledger (None)."""

from __future__ import annotations

from ..runenv import MEM_COLUMNS, MEM_HOST_COLUMN, MEM_ROUTES

HOST = "host"


class MemoryColumn:
    __slots__ = ("peak", "held", "live", "taken")

    def __init__(self) -> None:
        self.peak = 0
        self.held: dict[str, int] = {}
        self.live: dict[str, int] = {}
        self.taken: dict[str, int] = {}

    @property
    def at_exit(self) -> int:
        return sum(self.held.values())

    @property
    def leaked(self) -> int:
        return sum(self.live.values())


class MemoryLedger:
    """One process's ledger: its columns by device ordinal (int) or HOST, the limit it ran
    under (bytes per device, 0 none), the allocations it refused for it and those it could
    not follow."""

    __slots__ = ("columns", "limit", "refused", "untracked")

    def __init__(self, limit: int = 0, refused: int = 0, untracked: int = 0) -> None:
        self.columns: dict[int | str, MemoryColumn] = {}
        self.limit, self.refused, self.untracked = limit, refused, untracked


class LedgerError(Exception):
    """What is wrong with a file's ledger (trace/binary.py says it with the file's name)."""


def read_ledger(h: dict, names: list[bytes]) -> MemoryLedger | None:
    """The ledger from a header's fields (trace/binary.py), None for a version 3 file."""
    if h.get("mem_columns") is None:
        return None
    cols, routes = h["mem_columns"], h["mem_routes"]
    if cols != MEM_COLUMNS or routes != MEM_ROUTES:
        raise LedgerError(f"its memory ledger has {cols} columns and {routes} routes, not "
                          f"{MEM_COLUMNS} and {MEM_ROUTES}")
    fn = {}
    for r, k in enumerate(h["mem_route_fn"]):
        if k > len(names):
            raise LedgerError(f"its memory ledger's route {r} names function {k - 1}")
        if k:
            fn[r] = names[k - 1].decode("ascii", "replace")
    led = MemoryLedger(h["mem_limit"], h["mem_refused"], h["mem_untracked"])
    for c in range(cols):
        col, at = MemoryColumn(), c * routes
        for r, name in fn.items():
            held, live, taken = (h[f][at + r] for f in ("mem_held", "mem_live", "mem_taken"))
            for d, v in ((col.held, held), (col.live, live), (col.taken, taken)):
                if v:
                    d[name] = v
        col.peak = h["mem_peak"][c]
        if col.peak or col.taken or col.live:
            led.columns[HOST if c == MEM_HOST_COLUMN else c] = col
    return led
