"""`shimgen probe`: what the driver says about the gated capabilities, and whether they work.

For every device: the gated attributes, whether a DMA-BUF fd can be exported
(`cuMemGetHandleForAddressRange`), and whether `cuMemCreate` of GPUDirect-RDMA-capable
memory succeeds. `collect()` runs in the probed process (`shimgen probe --child`);
`report(shim)` runs that child without, and with `--shim` also with, `LD_PRELOAD` of the
shim (SHIMGEN_* variables pass through to the shimmed child only), and shows the answers
side by side. Uses cuda-python (the probe extra).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..cuda import CUDA_SUCCESS, PROBED_ATTRIBUTES, attribute_name
from ..errors import ShimgenError
from .bindings import NO_DRIVER, driver_bindings, result_text
from .child import run_probe

DMABUF_FD = 1  # CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
ALLOC_BYTES = 2 << 20


def _code(err) -> int:
    return int(err)


def collect(cu=None) -> dict:
    """Run in the probed process: query the driver with cuda-python, return plain data. `cu`
    is cuda.bindings.driver (the tests pass a fake)."""
    if cu is None:
        cu = driver_bindings()
    result: dict = {"devices": []}
    try:
        (err,) = cu.cuInit(0)
    except Exception:  # noqa: BLE001 - cuda-python could not load libcuda at all
        raise ShimgenError(NO_DRIVER) from None
    result["cuInit"] = _code(err)
    err, version = cu.cuDriverGetVersion()
    result["driver_version"] = version if _code(err) == CUDA_SUCCESS else None
    if _code(err) != CUDA_SUCCESS or result["cuInit"] != CUDA_SUCCESS:
        return result
    err, count = cu.cuDeviceGetCount()
    for ordinal in range(count if _code(err) == CUDA_SUCCESS else 0):
        err, dev = cu.cuDeviceGet(ordinal)
        info: dict = {"ordinal": ordinal, "attributes": {}}
        err, name = cu.cuDeviceGetName(64, dev)
        info["name"] = name.split(b"\0", 1)[0].decode(errors="replace")
        for a in PROBED_ATTRIBUTES:
            try:
                attr = cu.CUdevice_attribute(a)
            except ValueError:
                info["attributes"][str(a)] = None
                continue
            err, value = cu.cuDeviceGetAttribute(attr, dev)
            ok = _code(err) == CUDA_SUCCESS
            info["attributes"][str(a)] = value if ok else f"error {_code(err)}"
        err, ctx = cu.cuDevicePrimaryCtxRetain(dev)
        cu.cuCtxSetCurrent(ctx)
        info["dmabuf_export"] = _dmabuf_export(cu)
        info["gdr_cuMemCreate"] = _gdr_mem_create(cu, dev)
        cu.cuDevicePrimaryCtxRelease(dev)
        result["devices"].append(info)
    return result


def _dmabuf_export(cu) -> int:
    err, ptr = cu.cuMemAlloc(ALLOC_BYTES)
    if _code(err) != CUDA_SUCCESS:
        return _code(err)
    try:
        err, fd = cu.cuMemGetHandleForAddressRange(
            ptr, ALLOC_BYTES, cu.CUmemRangeHandleType(DMABUF_FD), 0)
        if _code(err) == CUDA_SUCCESS:
            os.close(int(fd))
        return _code(err)
    finally:
        cu.cuMemFree(ptr)


def _gdr_mem_create(cu, dev) -> int:
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = int(dev)
    prop.allocFlags.gpuDirectRDMACapable = 1
    err, gran = cu.cuMemGetAllocationGranularity(
        prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM)
    if _code(err) != CUDA_SUCCESS:
        return _code(err)
    err, handle = cu.cuMemCreate(max(int(gran), ALLOC_BYTES), prop, 0)
    if _code(err) == CUDA_SUCCESS:
        cu.cuMemRelease(handle)
    return _code(err)


def _run_child(shim: Path | None) -> dict:
    return run_probe([], shim, 300, "probe process")


def _rows(data: dict) -> list[tuple[str, str]]:
    rows = [("cuInit", _fmt_rc(data["cuInit"])),
            ("driver version", str(data.get("driver_version")))]
    for d in data["devices"]:
        p = f"dev {d['ordinal']} "
        rows.append((p + "name", d["name"]))
        for a, v in d["attributes"].items():
            rows.append((p + f"{a} {attribute_name(int(a))}", str(v)))
        rows.append((p + "DMA-BUF export (cuMemGetHandleForAddressRange)",
                     _fmt_rc(d["dmabuf_export"])))
        rows.append((p + "cuMemCreate gpuDirectRDMACapable", _fmt_rc(d["gdr_cuMemCreate"])))
    return rows


def _fmt_rc(rc: int) -> str:
    return "ok" if rc == CUDA_SUCCESS else result_text(rc)


def report(shim: Path | None) -> str:
    """The answers of a child process without the shim; with `shim`, a second child with
    LD_PRELOAD=shim, and the two side by side."""
    plain = _run_child(None)
    if shim is None:
        rows = _rows(plain)
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    shimmed = _run_child(shim)
    left, right = dict(_rows(plain)), _rows(shimmed)
    keys = [k for k, _ in _rows(plain)] + [k for k, _ in right if k not in left]
    rmap = dict(right)
    width = max(len(k) for k in keys)
    lines = [f"{'':<{width}}  {'without shim':<30}  with shim", ]
    for k in keys:
        a, b = left.get(k, "-"), rmap.get(k, "-")
        mark = "  <- changed" if a != b else ""
        lines.append(f"{k:<{width}}  {a:<30}  {b}{mark}")
    for ln in shimmed["stderr"]:
        lines.append(f"(shim said) {ln}")
    return "\n".join(lines)
