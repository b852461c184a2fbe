"""What counts as NVML (libnvidia-ml): the rules a parsed ELF image must meet for the NVML
shim, and how a file is told to be NVML rather than a libcuda (for `exports` and `diff`,
which take either). The facts are shimgen/nvml.py's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ShimgenError
from ..nvml import MIN_FUNCTIONS, REQUIRED_FUNCTIONS, SEARCH_PATHS, SONAME

if TYPE_CHECKING:
    from .elf import DriverImage


def is_nvml(image: DriverImage) -> bool:
    """A library that says it is NVML: its SONAME, or (a copy without one) NVML's init."""
    return image.soname == SONAME or (not image.soname
                                      and "nvmlInit_v2" in set(image.function_names()))


def check_nvml(image: DriverImage, *, require_real: bool = True) -> DriverImage:
    """Refuse an image that is not a libnvidia-ml (one line naming what it lacks);
    `require_real` off skips the count of functions (the tests' fake NVML)."""
    names = set(image.function_names())
    missing = [n for n in REQUIRED_FUNCTIONS if n not in names]
    if missing:
        soname = f" {image.soname}" if image.soname else ""
        raise ShimgenError(f"NVML library {image.path}: a shared library{soname} that exports "
                           f"no {', '.join(missing)}: not libnvidia-ml")
    if "dlopen" in names:
        raise ShimgenError(f"NVML library {image.path} exports dlopen: a shimgen shim, not "
                           "libnvidia-ml")
    if require_real and len(names) < MIN_FUNCTIONS:
        raise ShimgenError(f"NVML library {image.path}: a stub, not the real libnvidia-ml: it "
                           f"exports {len(names)} functions (a real one exports at least "
                           f"{MIN_FUNCTIONS})")
    return image


def read_nvml(path: Path | str, *, require_real: bool = True) -> DriverImage:
    """Read a libnvidia-ml file (elf.read_image) and check it is one (ShimgenError, one
    line, when it is not)."""
    from .elf import read_image

    return check_nvml(read_image(path), require_real=require_real)


def read_either(path: Path | str) -> tuple[str, DriverImage]:
    """A libcuda or an NVML file, read once and checked as what it says it is: ("nvml",
    image) or ("cuda", image)."""
    from .elf import read_image
    from .library import check_libcuda

    image = read_image(path)
    if is_nvml(image):
        return "nvml", check_nvml(image)
    return "cuda", check_libcuda(image)


def default_nvml() -> Path:
    """The installed libnvidia-ml: the first of NVML's usual places that exists."""
    for cand in map(Path, SEARCH_PATHS):
        if cand.exists():
            return cand
    raise ShimgenError(f"no {SONAME} found (in {', '.join(sorted({str(Path(p).parent) for p in SEARCH_PATHS}))}); "
                       "pass --nvml PATH")
