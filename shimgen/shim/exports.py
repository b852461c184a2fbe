"""`shimgen exports`: the functions a driver exports, one a line, in the order of its
dynamic symbol table (what the shim forwards)."""

from __future__ import annotations

from ..driver import read_driver
from ..options import driver_path


def command(args) -> int:
    for f in read_driver(driver_path(args.driver)).functions:
        print(f.name)
    return 0
