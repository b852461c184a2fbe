"""Which driver functions get hand-written hooks: the one table, as data.

Every other exported function is forwarded untouched by its assembly trampoline. A hook is a
C function `shimgen_hook_<name>` defined in the named source file of runtime/; it reaches the
real driver through `shimgen_real[SHIMGEN_IDX_<name>]`, never through the trampolines, so a
hook can never recurse into itself. A build compiles the hook files its hooks name.

`feature` says when the shim installs the hook at run time (all are compiled in):
  always  - on every run
  attrs   - SHIMGEN_TRACE=attrs, SHIMGEN_ATTR_OVERRIDE or SHIMGEN_GATES is in effect
  gates   - SHIMGEN_GATES is set and the loaded driver matches the baked-in gate profile
  memory  - the run traces into a directory (SHIMGEN_TRACE_DIR), has a memory limit
            (SHIMGEN_LIMIT_MEMORY), or has gates in effect: the memory ledger's routes
            (shim/memroutes.py; `optional`: a driver without the function has no such hook)
  limit   - SHIMGEN_LIMIT_MEMORY is set: cuMemGetInfo_v2 and cuDeviceTotalMem_v2 answer with it
  kernels - the run traces into a directory (any mode): the kernels' names and launches and
            each stream's last launch (runtime/kernels/; `optional`, as the memory routes)
  gputime - the kernels' hooks are in and SHIMGEN_GPU_TIME is on: a stream or event found
            done resolves the launches' GPU times (runtime/kernels/gputime.c)
When its feature is off, the slot points straight at the real function: no cost.

`wrappable` False: a user hook (docs/hooks.md) may not wrap the function: the
cuGetProcAddress hooks are how every address the driver hands out reaches the shim.

A hooked function that not every supported driver has is marked with the CUDA version that
added it (`cudaversions.FUNCTION_SINCE`): a driver older than that has no such hook
(470.256.02, CUDA 11.4, has cuGetProcAddress and no cuGetProcAddress_v2). Generation fails
when this table names any other function the driver does not export, or one of these that a
driver new enough lacks: a misspelt name is never silently left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cuda import FEATURES
from ..cudaversions import FUNCTION_SINCE
from ..runenv import KERN_LAUNCH_FUNCTIONS
from .memroutes import MEMORY_SOURCE, ROUTES, WATCHES

__all__ = ["FEATURES", "HOOKS", "Hook"]


@dataclass(frozen=True)
class Hook:
    name: str  # exported driver function
    source: str  # file under runtime/
    why: str
    feature: str = "always"
    # False: a user hook (shimgen/shim/userhooks.py) may not wrap it; shimgen must keep it as it is
    wrappable: bool = True
    # The CUDA version that added the function (cudaversions.FUNCTION_SINCE); 0: every supported
    # driver exports it
    since: int = 0
    # True: a driver that lacks the function simply has no such hook (the memory routes,
    # shim/memroutes.py: a program cannot take memory by a function its driver lacks)
    optional: bool = False


HOOKS: tuple[Hook, ...] = (
    Hook("cuGetProcAddress", "hooks_proc_address.c",
         "answer with the shim's forwarder of the variant the real driver picked",
         wrappable=False),
    Hook("cuGetProcAddress_v2", "hooks_proc_address.c",
         "same, keeping the driver's query-result out-parameter", wrappable=False,
         since=FUNCTION_SINCE["cuGetProcAddress_v2"]),
    Hook("cuDeviceGetAttribute", "hooks_attributes.c",
         "apply gates, then report (SHIMGEN_TRACE=attrs) or override the value", "attrs"),
    Hook("cuInit", "hooks_gates.c", "apply gates to every device once the driver is up", "gates"),
    Hook("cuDeviceGet", "hooks_gates.c", "apply gates around device lookup", "gates"),
    Hook("cuMemGetHandleForAddressRange", "hooks_gates.c",
         "apply gates before a DMA-BUF export", "gates",
         since=FUNCTION_SINCE["cuMemGetHandleForAddressRange"]),
) + tuple(
    # The memory ledger's routes (cuMemCreate's hook also applies the gates before a
    # GPUDirect RDMA allocation: gates install the "memory" hooks too)
    Hook(r.name, MEMORY_SOURCE, f"memory ledger: {r.reads}", r.feature, optional=True)
    for r in ROUTES) + tuple(
    Hook(w.name, MEMORY_SOURCE, f"memory ledger: {w.reads}", "memory",
         since=FUNCTION_SINCE.get(w.name, 0), optional=True)
    for w in WATCHES)

# The kernels (runtime/kernels/hooks_kernels.c): the functions that make a handle (its name
# learned) and the launches (counted by kernel and stream); no other function pays.
KERNEL_SOURCE = "hooks_kernels.c"
KERNEL_HOOKS = (
    ("cuModuleGetFunction", "a function's name, as the program passed it"),
    ("cuLibraryGetKernel", "a kernel's name, as the program passed it"),
    ("cuKernelGetFunction", "a function made of a kernel: the kernel's name"),
    ("cuLaunchKernel", "a launch by kernel and stream"),
    ("cuLaunchKernel_ptsz", "a launch by kernel and stream"),
    ("cuLaunchCooperativeKernel", "a launch by kernel and stream"),
    ("cuLaunchCooperativeKernel_ptsz", "a launch by kernel and stream"),
    ("cuLaunchKernelEx", "a launch by kernel and stream (its config read safely)"),
    ("cuLaunchKernelEx_ptsz", "a launch by kernel and stream (its config read safely)"),
    ("cuLaunchHostFunc", "a host function's launch, named by its symbol"),
    ("cuLaunchHostFunc_ptsz", "a host function's launch, named by its symbol"),
)
HOOKS += tuple(Hook(name, KERNEL_SOURCE, f"kernels: {why}", "kernels",
                    since=FUNCTION_SINCE.get(name, 0), optional=True)
               for name, why in KERNEL_HOOKS)
# A graph's launches (runtime/kernels/hooks_graphs.c): the instantiations keep each
# executable graph's count of kernel nodes; the launch, also the memory ledger's watch of
# graphs (after it, the graphs' reservation asked again), is installed with the ledger
# (feature "memory", on whenever "kernels" is) and counts the launch when "kernels" is on.
GRAPH_SOURCE = "hooks_graphs.c"
GRAPH_HOOKS = (
    ("cuGraphInstantiate", "kernels", "the executable graph's kernel nodes counted"),
    ("cuGraphInstantiate_v2", "kernels", "the executable graph's kernel nodes counted"),
    ("cuGraphInstantiateWithFlags", "kernels", "the executable graph's kernel nodes counted"),
    ("cuGraphInstantiateWithParams", "kernels", "the executable graph's kernel nodes counted"),
    ("cuGraphInstantiateWithParams_ptsz", "kernels",
     "the executable graph's kernel nodes counted"),
    ("cuGraphLaunch", "memory", "a graph's launch by its kernel nodes and stream; the graphs' "
     "reservation asked again"),
    ("cuGraphLaunch_ptsz", "memory", "a graph's launch by its kernel nodes and stream; the "
     "graphs' reservation asked again"),
)
HOOKS += tuple(Hook(name, GRAPH_SOURCE, f"kernels: {why}", feature,
                    since=FUNCTION_SINCE.get(name, 0), optional=True)
               for name, feature, why in GRAPH_HOOKS)
assert set(KERN_LAUNCH_FUNCTIONS) <= {h.name for h in HOOKS if h.source in (KERNEL_SOURCE,
                                                                             GRAPH_SOURCE)}

# GPU time per kernel (runtime/kernels/hooks_gputime.c): a query the driver answers done is
# a synchronisation of the program's, where the launches' timing events are resolved.
GPU_TIME_SOURCE = "hooks_gputime.c"
GPU_TIME_HOOKS = ("cuStreamQuery", "cuStreamQuery_ptsz", "cuEventQuery")
HOOKS += tuple(Hook(name, GPU_TIME_SOURCE, "gputime: a stream or event done resolves the "
                    "launches' GPU times", "gputime", since=FUNCTION_SINCE.get(name, 0),
                    optional=True)
               for name in GPU_TIME_HOOKS)

# Not hooked on purpose (documented in docs/design.md): cuGetExportTable returns tables of
# private entry points whose layout is not public; it is forwarded untouched.
