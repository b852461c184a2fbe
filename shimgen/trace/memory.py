"""The device memory ledger of one process, read from its binary trace file (format version
4; runtime/memory/ledger.c writes it, docs/memory.md and docs/traceformat.md say what it holds).

Per column (a device ordinal, or "host": pinned host memory): the most held at once
(`peak`), and per allocation function the bytes held at exit or death (`held`), the
allocations held then (`live`: never freed) and the bytes taken in all (`taken`); from
version 5, what the column's memory pools and graphs reserve and use as the driver said at
the ledger's last look (`pool`, `graph`: runenv.MEM_RESERVE_FIELDS by name) and the most held
and reserved at once (`reserved_peak`). A version 4 file has no reservations (`pool` and
`graph` None); a version 3 file has no ledger (None)."""

from __future__ import annotations

from ..runenv import MEM_COLUMNS, MEM_HOST_COLUMN, MEM_RESERVE_FIELDS, MEM_ROUTES

HOST = "host"


class MemoryColumn:
    __slots__ = ("peak", "held", "live", "taken", "reserved_peak", "pool", "graph")

    def __init__(self) -> None:
        self.peak = 0
        self.held: dict[str, int] = {}
        self.live: dict[str, int] = {}
        self.taken: dict[str, int] = {}
        self.reserved_peak = 0  # (never below peak)
        self.pool: dict[str, int] | None = None
        self.graph: dict[str, int] | None = None

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

    __slots__ = ("columns", "limit", "refused", "untracked", "pools", "graph_allocs")

    def __init__(self, limit: int = 0, refused: int = 0, untracked: int = 0) -> None:
        self.columns: dict[int | str, MemoryColumn] = {}
        self.limit, self.refused, self.untracked = limit, refused, untracked
        # version 5: the pools the ledger knew, graph allocations seen (None: version 4)
        self.pools: int | None = None
        self.graph_allocs: int | None = None


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
    reserves = h.get("mem_pool") is not None
    if reserves:
        led.pools, led.graph_allocs = h["mem_pools"], h["mem_graph_allocs"]
    for c in range(cols):
        col, at = MemoryColumn(), c * routes
        for r, name in fn.items():
            held, live, taken = (h[f][at + r] for f in ("mem_held", "mem_live", "mem_taken"))
            for d, v in ((col.held, held), (col.live, live), (col.taken, taken)):
                if v:
                    d[name] = v
        col.peak = col.reserved_peak = h["mem_peak"][c]
        if reserves:
            n = len(MEM_RESERVE_FIELDS)
            col.pool, col.graph = (
                dict(zip(MEM_RESERVE_FIELDS, h[f][c * n:(c + 1) * n], strict=True))
                for f in ("mem_pool", "mem_graph"))
            col.reserved_peak = max(col.peak, h["mem_reserved_peak"][c])
        if col.peak or col.taken or col.live or (reserves and col.reserved_peak > col.peak
                                                  or any((col.pool or {}).values())
                                                  or any((col.graph or {}).values())):
            led.columns[HOST if c == MEM_HOST_COLUMN else c] = col
    return led
