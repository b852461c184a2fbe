"""What tests/gpu/memory_validation.sh runs under `shimgen run`: one framework's workload
(argv[1]: torch, jax, cupy, nccl, torch-limit, jax-limit, torch-pool, cupy-pool,
torch-graph, cupy-graph), printing one line `RESULT {json}`.

The pool and graph checks compare the device memory really taken with what the ledger says
the process holds and has reserved on device 0: what the routes hold, less what the pool
routes hold, plus what the pools and graphs reserve (as the ledger last asked the driver).

The ledger check (torch, jax, cupy, nccl): once the framework is up and its kernels loaded,
the device memory really free (cuMemGetInfo_v2 on the primary context, asked of the driver
through the shim, which forwards it untouched without a limit) and the ledger's bytes held
on device 0 (read from this process's own trace file while it runs) are taken before and
after the workload allocates; the two deltas must agree within 2 MiB plus one granularity
(2 MiB) per allocation the ledger gained. The limit runs print what the framework sees."""

import ctypes
import glob
import json
import os
import sys

MiB, GiB = 1 << 20, 1 << 30
SIZES = [MiB, 10 * MiB + 3, 100 * MiB, GiB, 333 * MiB + 7]
cu = ctypes.CDLL("libcuda.so.1")


def real_free() -> int:
    dev, ctx, f, t = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
    cu.cuInit(0)
    cu.cuDeviceGet(ctypes.byref(dev), 0)
    cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cu.cuCtxPushCurrent_v2(ctx)
    rc = cu.cuMemGetInfo_v2(ctypes.byref(f), ctypes.byref(t))
    cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    cu.cuDevicePrimaryCtxRelease_v2(dev)
    assert rc == 0, rc
    return f.value


def ledger_now() -> tuple[int, int, int]:
    """(bytes held on device 0, allocations held there, peak) from this process's file."""
    from shimgen.trace.binary import load

    pid = os.getpid()
    for p in sorted(glob.glob(f"{os.environ['SHIMGEN_TRACE_DIR']}/*{pid}*.shimtrace"),
                    key=os.path.getmtime, reverse=True):
        t = load(p)
        if t.pid == pid and t.memory is not None:
            col = t.memory.columns.get(0)
            return (col.at_exit, col.leaked, col.peak) if col else (0, 0, 0)
    raise SystemExit("no trace file of this process")


POOL_FNS = ("cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync",
            "cuMemAllocFromPoolAsync_ptsz")


def footprint_now() -> tuple[int, int, int, dict]:
    """(bytes held and reserved on device 0, allocations held there plus graph allocations
    seen, reserved peak, detail) from this process's file."""
    from shimgen.trace.binary import load

    pid = os.getpid()
    for p in sorted(glob.glob(f"{os.environ['SHIMGEN_TRACE_DIR']}/*{pid}*.shimtrace"),
                    key=os.path.getmtime, reverse=True):
        t = load(p)
        if t.pid != pid or t.memory is None:
            continue
        col = t.memory.columns.get(0)
        if col is None:
            return 0, 0, 0, {}
        pooled = sum(v for k, v in col.held.items() if k in POOL_FNS)
        pool, graph = col.pool or {}, col.graph or {}
        held = (col.at_exit - pooled + max(pool.get("reserved", 0), pooled)
                + graph.get("reserved", 0))
        return (held, col.leaked + (t.memory.graph_allocs or 0), col.reserved_peak,
                {"pool": pool, "graph": graph, "pooled": pooled, "held": col.at_exit})
    raise SystemExit("no trace file of this process")


def reserved_measured(b, a, f0, f1, extra=None) -> dict:
    out = measured(b, a, f0, f1, extra)
    out.update(ledger_reserved_peak=a[2], ledger_detail=a[3])
    return out


def torch_pool() -> dict:
    """PyTorch on its cudaMallocAsync backend: every tensor a pool allocation."""
    import torch

    x = torch.randn(1024, 1024, device="cuda")
    (x @ x).sum().item()
    torch.cuda.synchronize()
    f0, b = real_free(), footprint_now()
    keep = [torch.empty(s, dtype=torch.uint8, device="cuda") for s in SIZES]
    torch.cuda.synchronize()
    f1, a = real_free(), footprint_now()
    out = reserved_measured(b, a, f0, f1, {"alloc_conf": os.environ.get(
        "PYTORCH_CUDA_ALLOC_CONF")})
    del keep
    torch.cuda.synchronize()
    f2, c = real_free(), footprint_now()
    out["after_free"] = reserved_measured(b, c, f0, f2)
    return out


def torch_graph() -> dict:
    """A CUDA graph captured by PyTorch on the cudaMallocAsync backend: its allocations are
    graph memory nodes, taken at the first replay."""
    import torch

    x = torch.ones(1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        (x * 2).sum()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    f0, b = real_free(), footprint_now()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ys = [torch.full((n // 4,), 1.0, device="cuda") for n in (64 * MiB, 200 * MiB)]
        y = sum(t.sum() for t in ys)
    g.replay()
    torch.cuda.synchronize()
    f1, a = real_free(), footprint_now()
    return reserved_measured(b, a, f0, f1, {"value": float(y.item())})


def cupy_pool() -> dict:
    import cupy as cp

    cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
    cp.ones(10).sum().get()
    cp.cuda.Device(0).synchronize()
    f0, b = real_free(), footprint_now()
    keep = [cp.empty(s, dtype=cp.uint8) for s in SIZES]
    cp.cuda.Device(0).synchronize()
    f1, a = real_free(), footprint_now()
    out = reserved_measured(b, a, f0, f1)
    del keep
    cp.cuda.Device(0).synchronize()
    f2, c = real_free(), footprint_now()
    out["after_free"] = reserved_measured(b, c, f0, f2)
    return out


def cupy_graph() -> dict:
    """A graph captured by CuPy on its async pool: graph memory nodes."""
    import cupy as cp

    cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        cp.ones(10).sum()
    s.synchronize()
    f0, b = real_free(), footprint_now()
    with s:
        s.begin_capture()
        ys = [cp.full(n // 4, 1.0, dtype=cp.float32) for n in (64 * MiB, 200 * MiB)]
        total = sum(float(0) + t.sum() for t in ys)
        g = s.end_capture()
    g.launch(s)
    s.synchronize()
    f1, a = real_free(), footprint_now()
    return reserved_measured(b, a, f0, f1, {"value": float(total)})


def nvml_used() -> int | None:
    """NVML's used memory of this process on device 0, or None."""
    try:
        nv = ctypes.CDLL("libnvidia-ml.so.1")
        assert nv.nvmlInit_v2() == 0
        h = ctypes.c_void_p()
        assert nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0

        class Info(ctypes.Structure):
            _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                        ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]
        n = ctypes.c_uint(64)
        infos = (Info * 64)()
        if nv.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), infos) != 0:
            return None
        return next((i.used for i in infos[:n.value] if i.pid == os.getpid()), None)
    except (OSError, AssertionError, AttributeError):
        return None


def measured(before, after, f0, f1, extra=None) -> dict:
    real, led = f0 - f1, after[0] - before[0]
    tol = 2 * MiB + max(after[1] - before[1], 0) * 2 * MiB
    return {"real_delta": real, "ledger_delta": led, "live_added": after[1] - before[1],
            "tolerance": tol, "agree": abs(real - led) <= tol, "ledger_peak": after[2],
            "nvml_used": nvml_used(), **(extra or {})}


def torch_work() -> dict:
    import torch

    x = torch.randn(1024, 1024, device="cuda")
    (x @ x).sum().item()
    torch.cuda.synchronize()
    f0, b = real_free(), ledger_now()
    keep = [torch.empty(s, dtype=torch.uint8, device="cuda") for s in SIZES]
    torch.cuda.synchronize()
    f1, a = real_free(), ledger_now()
    out = measured(b, a, f0, f1, {"alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")})
    del keep
    try:
        big = torch.empty(3 * GiB, dtype=torch.uint8, device="cuda")
        big.fill_(1)
        torch.cuda.synchronize()
        out["alloc_3GiB"] = "ok"
    except torch.cuda.OutOfMemoryError as e:
        out["alloc_3GiB"] = "OutOfMemoryError: " + str(e).splitlines()[0][:200]
    return out


def torch_limit() -> dict:
    import torch

    free, total = torch.cuda.mem_get_info()
    out = {"mem_get_info_total": total, "mem_get_info_free": free,
           "total_memory": torch.cuda.get_device_properties(0).total_memory}
    for label, n in (("alloc_1.5GiB", 3 * GiB // 2), ("alloc_3GiB", 3 * GiB)):
        try:
            t = torch.empty(n, dtype=torch.uint8, device="cuda")
            t.fill_(1)
            torch.cuda.synchronize()
            out[label] = "ok"
            del t
        except torch.cuda.OutOfMemoryError as e:
            out[label] = "OutOfMemoryError: " + str(e).splitlines()[0][:200]
        torch.cuda.empty_cache()
    return out


def jax_work() -> dict:
    import jax
    import numpy as np

    jax.device_put(np.ones(1000, np.float32)).block_until_ready()
    f0, b = real_free(), ledger_now()
    keep = [jax.device_put(np.zeros(s // 4, np.float32)) for s in SIZES]
    for k in keep:
        k.block_until_ready()
    f1, a = real_free(), ledger_now()
    return measured(b, a, f0, f1, {"preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")})


def jax_limit() -> dict:
    import jax
    import numpy as np

    jax.device_put(np.ones(1000, np.float32)).block_until_ready()
    stats = jax.devices()[0].memory_stats() or {}
    return {"bytes_limit": stats.get("bytes_limit"), "ledger": ledger_now()}


def cupy_work() -> dict:
    import cupy as cp

    cp.ones(10).sum().get()
    f0, b = real_free(), ledger_now()
    keep = [cp.empty(s, dtype=cp.uint8) for s in SIZES]
    cp.cuda.Device(0).synchronize()
    f1, a = real_free(), ledger_now()
    del keep
    return measured(b, a, f0, f1)


def nccl_work() -> dict:
    import torch
    import torch.distributed as dist

    t = torch.ones(16 * MiB, device="cuda")
    torch.cuda.synchronize()
    f0, b = real_free(), ledger_now()
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=0,
                            world_size=1, device_id=torch.device("cuda", 0))
    dist.all_reduce(t)
    torch.cuda.synchronize()
    f1, a = real_free(), ledger_now()
    out = measured(b, a, f0, f1, {"sum_ok": bool(t[0].item() == 1.0)})
    dist.destroy_process_group()
    return out


WORK = {"torch": torch_work, "torch-limit": torch_limit, "jax": jax_work,
        "jax-limit": jax_limit, "cupy": cupy_work, "nccl": nccl_work, "torch-pool": torch_pool,
        "torch-graph": torch_graph, "cupy-pool": cupy_pool, "cupy-graph": cupy_graph}

if __name__ == "__main__":
    try:
        result = WORK[sys.argv[1]]()
    except Exception as e:  # (a framework without the feature: said in the result)
        result = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    print("RESULT " + json.dumps({"work": sys.argv[1], **result}), flush=True)
