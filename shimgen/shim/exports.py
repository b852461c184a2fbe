"""`shimgen exports`: the functions a driver exports, one a line, in the order of its
dynamic symbol table (what the shim forwards). A libcuda or an NVML library alike: a file
that is no libcuda is read again as NVML when it says it is one (driver/nvml.py: its
SONAME), and its own checks then say what is wrong with it."""

from __future__ import annotations

from ..driver import check_nvml, is_nvml, read_driver, read_image
from ..errors import ShimgenError
from ..options import driver_path


def command(args) -> int:
    path = driver_path(args.driver)
    try:
        image = read_driver(path)
    except ShimgenError as e:
        nvml = read_image(path)
        if not is_nvml(nvml):
            raise e from None
        image = check_nvml(nvml)
    for f in image.functions:
        print(f.name)
    return 0
