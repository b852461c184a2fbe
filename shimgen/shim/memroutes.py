"""The routes by which a program takes or gives back device memory (and pinned host
memory), as data: the one table the memory ledger (runtime/memory/ledger.c, its hooks in
runtime/memory/hooks_memory.c) and `--limit memory` are built from (docs/memory.md).

Each route is a driver function and what the shim reads of its call. `kind` names the C
hook family of runtime/memory/routes.h that reads it (MEM_KIND_<kind>); the build renders
`memroutes.inc` from this table, one MEM_ROUTE(kind, name, index) line per route the driver
exports (a route the driver lacks, an older driver's, is simply absent). `index` is the
route's row in the trace file's ledger (runenv.MEM_ROUTES rows), its position here: append,
never reorder.

`column`: where its bytes go. "device": the device of the calling thread's current context
(asked of the driver, cuCtxGetDevice, as the allocation itself does); "location": the
`location` of the CUmemAllocationProp, never a current context (a device location's id, any
other location is host memory); "host": pinned host memory, a column of its own; "freed":
gives back what an allocation route took (the device recorded with the allocation).

`feature`: the hooks of "memory" are installed when a run traces into a directory or has a
limit; those of "limit" only with a limit (they answer with the limit).

WATCHES: functions that take no bytes the ledger counts by call, but change what it must
know: which device the calling thread's current context is on (the "context" kind: each
bumps an epoch that makes every thread ask the driver again, so that an allocation need not
ask it each time), which pools exist and where, what pools and graphs hold reserved (asked
of the driver's own attributes after each). Rendered into memroutes.inc as
MEM_WATCH(kind, name); all take at most six integer or pointer arguments (the hooks
forward six registers).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..runenv import MEM_ROUTES


@dataclass(frozen=True)
class Route:
    name: str  # exported driver function
    kind: str  # MEM_KIND_<kind> of runtime/memory/routes.h
    column: str  # device, location, host or freed (above)
    reads: str  # what the shim reads of the call, in words (docs/memory.md)
    feature: str = "memory"


ROUTES: tuple[Route, ...] = (
    Route("cuMemAlloc_v2", "alloc", "device", "size; the address out"),
    Route("cuMemAllocPitch_v2", "pitch", "device", "the pitch out times the height"),
    Route("cuMemAllocManaged", "managed", "device", "size; the address out"),
    Route("cuMemAllocAsync", "async", "device", "size; the address out"),
    Route("cuMemAllocAsync_ptsz", "async", "device", "size; the address out"),
    Route("cuMemAllocFromPoolAsync", "pool", "device", "size; the address out"),
    Route("cuMemAllocFromPoolAsync_ptsz", "pool", "device", "size; the address out"),
    Route("cuMemCreate", "create", "location",
          "size (a multiple of the granularity); the handle out; prop->location"),
    Route("cuMemRetainAllocationHandle", "retain", "freed",
          "the handle out: one more reference to a handle already held"),
    Route("cuMemImportFromShareableHandle", "import", "freed",
          "the handle out: a handle of another's memory, counted by handle (0 bytes)"),
    Route("cuArrayCreate_v2", "array", "device", "the descriptor: width x height x element"),
    Route("cuArray3DCreate_v2", "array3d", "device",
          "the descriptor: width x height x depth x element"),
    Route("cuMipmappedArrayCreate", "mipmap", "device",
          "the descriptor and the levels: each level's extent halved"),
    Route("cuMemHostAlloc", "hostalloc", "host", "size; the pointer out"),
    Route("cuMemAllocHost_v2", "allochost", "host", "size; the pointer out"),
    Route("cuMemFree_v2", "free", "freed", "the address"),
    Route("cuMemFreeAsync", "freeasync", "freed", "the address (given back when enqueued)"),
    Route("cuMemFreeAsync_ptsz", "freeasync", "freed", "the address (given back when enqueued)"),
    Route("cuMemRelease", "release", "freed", "the handle: freed by its last reference"),
    Route("cuArrayDestroy", "arraydestroy", "freed", "the array"),
    Route("cuMipmappedArrayDestroy", "arraydestroy", "freed", "the mipmapped array"),
    Route("cuMemFreeHost", "freehost", "freed", "the pointer"),
    Route("cuMemGetInfo_v2", "info", "device", "answers with the limit as total", "limit"),
    Route("cuDeviceTotalMem_v2", "total", "device", "answers with the limit", "limit"),
)
assert len(ROUTES) <= MEM_ROUTES and len({r.name for r in ROUTES}) == len(ROUTES)

# The kinds of route that allocate from a memory pool: their bytes are the pool's, which
# holds reserved what the driver says (the ledger counts the reservation beyond them).
POOL_KINDS = ("async", "pool")


@dataclass(frozen=True)
class Watch:
    name: str  # exported driver function
    kind: str  # MEM_WATCH_<kind> of runtime/memory/routes.h
    reads: str  # what the shim does around it, in words (docs/memory.md)


_CONTEXT = "the calling thread's device may change: every thread asks the driver again"
_SYNC = ("after it, what pools and graphs hold reserved asked again (a pool gives back here); "
         "with GPU time, the launches' timing events resolved")
WATCHES: tuple[Watch, ...] = tuple(
    Watch(n, "context", _CONTEXT) for n in (
        "cuCtxCreate", "cuCtxCreate_v2", "cuCtxCreate_v3", "cuCtxCreate_v4", "cuCtxPushCurrent",
        "cuCtxPushCurrent_v2", "cuCtxPopCurrent", "cuCtxPopCurrent_v2", "cuCtxSetCurrent",
        "cuCtxAttach", "cuCtxDetach",
        "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2",
        "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2", "cuGLCtxCreate",
        "cuGLCtxCreate_v2", "cuVDPAUCtxCreate", "cuVDPAUCtxCreate_v2", "cuGreenCtxDestroy")
) + tuple(
    Watch(n, "ctxdestroy",
          _CONTEXT + "; with GPU time, the context's timing events dropped")
    for n in ("cuCtxDestroy", "cuCtxDestroy_v2")
) + (
    Watch("cuMemPoolCreate", "poolcreate", "the pool's device from its props' location"),
    Watch("cuDeviceGetDefaultMemPool", "poolget", "the pool out is the device's"),
    Watch("cuDeviceGetMemPool", "poolcurrent", "the pool out is the device's current one"),
    Watch("cuDeviceSetMemPool", "poolset", "the pool is the device's current one"),
    Watch("cuMemPoolTrimTo", "pooltrim", "after it, the pool's reservation asked again"),
    Watch("cuMemPoolDestroy", "pooldestroy", "the pool forgotten: its reservation gone"),
    Watch("cuGraphAddMemAllocNode", "graphnode", "a graph allocation on the params' device"),
    # (cuGraphLaunch and _ptsz: the kernels' hook, shim/hooks.py GRAPH_HOOKS, asks the same)
    Watch("cuGraphUpload", "graph", "after it, the graphs' reservation asked again"),
    Watch("cuGraphUpload_ptsz", "graph", "after it, the graphs' reservation asked again"),
    Watch("cuGraphExecDestroy", "graph", "after it, the graphs' reservation asked again"),
    Watch("cuDeviceGraphMemTrim", "graphtrim", "after it, the device's graphs asked again"),
    Watch("cuStreamBeginCapture", "capture", "a capture begun: pool allocations asked"),
    Watch("cuStreamBeginCapture_v2", "capture", "a capture begun: pool allocations asked"),
    Watch("cuStreamBeginCapture_ptsz", "capture", "a capture begun: pool allocations asked"),
    Watch("cuStreamBeginCapture_v2_ptsz", "capture", "a capture begun: pool allocations asked"),
    Watch("cuStreamBeginCaptureToGraph", "capture", "a capture begun: pool allocations asked"),
    Watch("cuStreamBeginCaptureToGraph_ptsz", "capture",
          "a capture begun: pool allocations asked"),
    Watch("cuStreamEndCapture", "captureend", "a capture ended"),
    Watch("cuStreamEndCapture_ptsz", "captureend", "a capture ended"),
    Watch("cuStreamSynchronize", "sync", _SYNC),
    Watch("cuStreamSynchronize_ptsz", "sync", _SYNC),
    Watch("cuCtxSynchronize", "sync", _SYNC),
    Watch("cuCtxSynchronize_v2", "sync", _SYNC),
    Watch("cuEventSynchronize", "sync", _SYNC),
)
assert len({w.name for w in WATCHES} | {r.name for r in ROUTES}) == len(WATCHES) + len(ROUTES)

# What no route or watch can account, said in docs/memory.md: memory the driver takes for
# itself (contexts, modules, a library inside the driver).
MEMORY_SOURCE = "hooks_memory.c"


def route_index(name: str) -> int:
    return [r.name for r in ROUTES].index(name)
