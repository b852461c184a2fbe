"""The versions of the driver API, in one table: each CUDA version with the first driver
branch that carries it, the CUDA version that added each function or attribute shimgen relies
on, and the ABI variants of one function (_v2, _ptds, _ptsz). The numbers of the API itself
(result codes, attributes) are cuda.py's. Stamped into the shim cache's key as cuda.py is:
which hooks a shim has follows from it.
"""

from __future__ import annotations

import re

# ---- CUDA releases and the drivers that carry them --------------------------------------------
# Each CUDA version (1000*major + 10*minor, as cuDriverGetVersion reports it) with the first
# Linux driver branch that carries it (NVIDIA's CUDA release notes, "CUDA Toolkit and
# Corresponding Driver Versions"). A driver reports the newest CUDA version whose branch is at
# or below its own: 470.256.02 is CUDA 11.4. tests/pipeline/test_cuda_facts.py checks this
# against cuDriverGetVersion of every Debian build the tests fetch.
CUDA_DRIVER_BRANCHES: tuple[tuple[int, int], ...] = (
    (10000, 410), (10010, 418), (10020, 440),
    (11000, 450), (11010, 455), (11020, 460), (11030, 465), (11040, 470), (11050, 495),
    (11060, 510), (11070, 515), (11080, 520),
    (12000, 525), (12010, 530), (12020, 535), (12030, 545), (12040, 550), (12050, 555),
    (12060, 560), (12080, 570), (12090, 575),
    (13000, 580), (13010, 590),
)

# When the driver API added what shimgen relies on or reports: a driver older than the CUDA
# version lacks it. Functions by their exported name, attributes by number.
FUNCTION_SINCE: dict[str, int] = {
    "cuGetProcAddress": 11030,
    "cuGetProcAddress_v2": 12000,
    "cuMemGetHandleForAddressRange": 11070,
    # (functions the memory ledger watches, shim/memroutes.py)
    "cuStreamBeginCaptureToGraph": 12030, "cuStreamBeginCaptureToGraph_ptsz": 12030,
    "cuGreenCtxDestroy": 12040, "cuCtxCreate_v4": 12050, "cuCtxSynchronize_v2": 12090,
    # (the kernels' hooks, shim/hooks.py KERNEL_HOOKS and GRAPH_HOOKS)
    "cuLaunchKernelEx": 11080, "cuLaunchKernelEx_ptsz": 11080, "cuLibraryGetKernel": 12000,
    "cuKernelGetFunction": 12000, "cuGraphInstantiateWithParams": 12000,
    "cuGraphInstantiateWithParams_ptsz": 12000,
}
ATTRIBUTE_SINCE: dict[int, int] = {
    124: 11070,  # DMA_BUF_SUPPORTED
}
# The oldest CUDA version shimgen builds for: the one that added cuGetProcAddress, the
# route by which the CUDA runtime, NCCL and PyTorch find every driver function.
OLDEST_CUDA = FUNCTION_SINCE["cuGetProcAddress"]


def cuda_text(version: int) -> str:
    """12040 -> "12.4" (a version as cuDriverGetVersion reports it, in CUDA's own words)."""
    return f"{version // 1000}.{version % 1000 // 10}"


def driver_branch(version: str) -> int | None:
    """The branch of a driver version: "470.256.02" -> 470; None when it is not one."""
    m = re.fullmatch(r"(\d+)\.\d+(\.\d+)?", version)
    return int(m.group(1)) if m else None


def cuda_of_driver(version: str) -> int | None:
    """The CUDA version a driver of this version carries ("470.256.02" -> 11040), or None when
    the version is unknown or older than every branch of CUDA_DRIVER_BRANCHES."""
    branch = driver_branch(version)
    found = [cuda for cuda, first in CUDA_DRIVER_BRANCHES if branch is not None and first <= branch]
    return found[-1] if found else None


def first_driver(cuda: int) -> int:
    """The first driver branch that carries CUDA version `cuda` (11030 -> 465)."""
    return next(first for c, first in CUDA_DRIVER_BRANCHES if c >= cuda)


def newer_than_driver(name: str, driver_version: str) -> str:
    """" (CUDA 11.7 added it; driver 470.256.02 is CUDA 11.4)" when the function `name`
    (or the one it is an ABI variant of) came with a CUDA version newer than the driver's;
    else empty: what a message about a function the driver lacks adds."""
    since = FUNCTION_SINCE.get(name) or FUNCTION_SINCE.get(base_name(name), 0)
    cuda = cuda_of_driver(driver_version)
    if not since or cuda is None or cuda >= since:
        return ""
    return (f" (CUDA {cuda_text(since)} added it; driver {driver_version} is CUDA "
            f"{cuda_text(cuda)})")


def since_text(cuda: int) -> str:
    """How the docs and messages name a CUDA version with its first driver:
    "CUDA 11.3, driver 465"."""
    return f"CUDA {cuda_text(cuda)}, driver {first_driver(cuda)}"



# The ABI variants of one function: cuMemAlloc and cuMemAlloc_v2; cuStreamSynchronize and
# cuStreamSynchronize_ptsz. The variant suffixes, in the order the driver's names use them.
_VARIANT = re.compile(r"(_v\d+)?(_ptds|_ptsz)?$")


def base_name(name: str) -> str:
    """The name without its _v<N>, _ptds or _ptsz suffixes."""
    return _VARIANT.sub("", name)


def variants(name: str, names) -> list[str]:
    """The other names among `names`, in their order, that are the same function as `name`:
    `name` with _v<N>, _ptsz or _ptds suffixes added or removed."""
    base = base_name(name)
    return [n for n in names if n != name and base_name(n) == base]
