"""`shimgen exports`: the functions a driver exports, one a line, in the order of its
dynamic symbol table (what the shim forwards). A libcuda or an NVML library alike
(driver/nvml.py tells them apart by SONAME and exports)."""

from __future__ import annotations

from ..driver import read_either
from ..options import driver_path


def command(args) -> int:
    _, image = read_either(driver_path(args.driver))
    for f in image.functions:
        print(f.name)
    return 0
