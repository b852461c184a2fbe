"""NVML (libnvidia-ml): the one table of its facts and what counts as one.

The facts: which library it is, the result codes and structure layouts the NVML shim's
answers use, and which exports get them; rendered into the NVML shim's nvml_facts.h
(templates/nvml_facts.h.j2, shim/nvml.py). The layouts are those of nvml.h (CUDA 11 to
12.x; the same in every driver from 450 on): unsigned int is 4 bytes, unsigned long long 8,
each field at its natural alignment.

The rules: what a parsed ELF image must be for the NVML shim, and how a file is told to be
NVML rather than a libcuda (for `exports` and `diff`, which take either)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..cuda import LIBCUDA_DIRS
from ..errors import ShimgenError

# The name every program loads NVML by (nvidia-smi, pynvml and DCGM dlopen this name), and
# the shim's own SONAME: a program that opens it by name gets the preloaded shim.
SONAME = "libnvidia-ml.so.1"
# What every NVML file name starts with: the NVML shim's dlopen opens itself for any of them
# (nvidia-smi tries "libnvidia-ml.so" and absolute paths).
NAME_PREFIX = SONAME.rsplit(".", 1)[0]
# Where an installed libnvidia-ml is, when the file the shim was built from is gone: the
# directories NVIDIA's libraries are installed in (cuda.LIBCUDA_DIRS).
SEARCH_PATHS = tuple(f"{d}/{SONAME}" for d in LIBCUDA_DIRS)
# Exports that make a library NVML: every libnvidia-ml from driver 450 on has all of them.
REQUIRED_FUNCTIONS = ("nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetUUID",
                      "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetComputeRunningProcesses")
# A real libnvidia-ml exports several hundred functions (535.261.03: 332).
MIN_FUNCTIONS = 100
# The one export that does not return nvmlReturn_t (it returns const char *): its stand-in,
# when the real library lacks it, returns a string, not a code.
STRING_RESULT = "nvmlErrorString"

# nvmlReturn_t values the shim returns or tests.
RESULTS = {
    "NVML_SUCCESS": 0,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_INSUFFICIENT_SIZE": 7,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
}
# NVML_DEVICE_UUID_V2_BUFFER_SIZE: the buffer nvmlDeviceGetUUID fills ("GPU-" and 36 more).
UUID_BUFFER = 96


@dataclass(frozen=True)
class Layout:
    """One structure of nvml.h: its size and each field's byte offset."""

    key: str  # its name in nvml_facts.h: SHIMGEN_NVML_<KEY>_<FIELD>
    name: str
    size: int
    fields: dict[str, int]
    version: int = 0  # its NVML_STRUCT_VERSION (size | v << 24), for a versioned structure


MEMORY_V1 = Layout("MEMORY_V1", "nvmlMemory_t", 24, {"total": 0, "free": 8, "used": 16})
MEMORY_V2 = Layout("MEMORY_V2", "nvmlMemory_v2_t", 40,
                   {"version": 0, "total": 8, "reserved": 16, "free": 24, "used": 32},
                   version=40 | 2 << 24)
PROCESS_V1 = Layout("PROCESS_V1", "nvmlProcessInfo_v1_t", 16, {"pid": 0, "usedGpuMemory": 8})
PROCESS_V2 = Layout("PROCESS_V2", "nvmlProcessInfo_v2_t", 24,
                    {"pid": 0, "usedGpuMemory": 8, "gpuInstanceId": 16,
                     "computeInstanceId": 20})
LAYOUTS = (MEMORY_V1, MEMORY_V2, PROCESS_V1, PROCESS_V2)


@dataclass(frozen=True)
class Answer:
    """An export the shim answers itself when a limit is set: `kind` "memory" (its device's
    memory info: the limit as total, the budget's use as used) or "processes" (the compute
    processes: each process of the budget with its ledger's bytes), over `layout`."""

    name: str
    kind: str
    layout: Layout


ANSWERS = (
    Answer("nvmlDeviceGetMemoryInfo", "memory", MEMORY_V1),
    Answer("nvmlDeviceGetMemoryInfo_v2", "memory", MEMORY_V2),
    Answer("nvmlDeviceGetComputeRunningProcesses", "processes", PROCESS_V1),
    Answer("nvmlDeviceGetComputeRunningProcesses_v2", "processes", PROCESS_V2),
    Answer("nvmlDeviceGetComputeRunningProcesses_v3", "processes", PROCESS_V2),
)
# The fields every layout of a kind is rendered with (a version that lacks one: none).
KIND_FIELDS = {"memory": ("version", "total", "reserved", "free", "used"),
               "processes": ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId")}


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



def default_nvml() -> Path:
    """The installed libnvidia-ml: the first of NVML's usual places that exists."""
    for cand in map(Path, SEARCH_PATHS):
        if cand.exists():
            return cand
    places = ", ".join(sorted({str(Path(p).parent) for p in SEARCH_PATHS}))
    raise ShimgenError(f"no {SONAME} found (in {places}); pass --nvml PATH")
