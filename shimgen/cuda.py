"""Every CUDA fact shimgen relies on, in one table: result codes, device attribute numbers,
the gated attributes, where libcuda is installed, the shim's run-time feature bits, what the
memory ledger reads of the driver's structs and the types a user hook needs. Which CUDA each
driver carries, and when a function came, are cudaversions.py's.

The numbers are cuda.h's (CUDA 13.x), as cuda-python's `cuda.bindings.driver` enums give them;
`tests/pipeline/test_cuda_facts.py` checks every entry against those enums. Python imports the names
from here; the C runtime and the assembly get them through the generated `facts.h`
(templates/facts.h.j2). When NVIDIA adds codes or attributes, regenerate the two tables with
    python -c "from cuda.bindings import driver as d; [print(int(e), e.name) for e in d.CUresult]"
and the same for `d.CUdevice_attribute`.
"""

from __future__ import annotations

import re

# ---- CUresult: every result code of the driver API -----------------------------------------------
RESULTS: dict[int, str] = {
    0: "CUDA_SUCCESS",
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    4: "CUDA_ERROR_DEINITIALIZED",
    5: "CUDA_ERROR_PROFILER_DISABLED",
    6: "CUDA_ERROR_PROFILER_NOT_INITIALIZED",
    7: "CUDA_ERROR_PROFILER_ALREADY_STARTED",
    8: "CUDA_ERROR_PROFILER_ALREADY_STOPPED",
    34: "CUDA_ERROR_STUB_LIBRARY",
    36: "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
    47: "CUDA_ERROR_MULTICAST_RESOURCE_FULL",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    102: "CUDA_ERROR_DEVICE_NOT_LICENSED",
    200: "CUDA_ERROR_INVALID_IMAGE",
    201: "CUDA_ERROR_INVALID_CONTEXT",
    202: "CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
    205: "CUDA_ERROR_MAP_FAILED",
    206: "CUDA_ERROR_UNMAP_FAILED",
    207: "CUDA_ERROR_ARRAY_IS_MAPPED",
    208: "CUDA_ERROR_ALREADY_MAPPED",
    209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
    210: "CUDA_ERROR_ALREADY_ACQUIRED",
    211: "CUDA_ERROR_NOT_MAPPED",
    212: "CUDA_ERROR_NOT_MAPPED_AS_ARRAY",
    213: "CUDA_ERROR_NOT_MAPPED_AS_POINTER",
    214: "CUDA_ERROR_ECC_UNCORRECTABLE",
    215: "CUDA_ERROR_UNSUPPORTED_LIMIT",
    216: "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
    217: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
    218: "CUDA_ERROR_INVALID_PTX",
    219: "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT",
    220: "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
    222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    223: "CUDA_ERROR_JIT_COMPILATION_DISABLED",
    224: "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
    225: "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC",
    226: "CUDA_ERROR_CONTAINED",
    227: "CUDA_ERROR_INSUFFICIENT_LOADER_VERSION",
    300: "CUDA_ERROR_INVALID_SOURCE",
    301: "CUDA_ERROR_FILE_NOT_FOUND",
    302: "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
    303: "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    400: "CUDA_ERROR_INVALID_HANDLE",
    401: "CUDA_ERROR_ILLEGAL_STATE",
    402: "CUDA_ERROR_LOSSY_QUERY",
    500: "CUDA_ERROR_NOT_FOUND",
    600: "CUDA_ERROR_NOT_READY",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    702: "CUDA_ERROR_LAUNCH_TIMEOUT",
    703: "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING",
    704: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
    705: "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
    708: "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
    709: "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    710: "CUDA_ERROR_ASSERT",
    711: "CUDA_ERROR_TOO_MANY_PEERS",
    712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
    713: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
    714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
    715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    716: "CUDA_ERROR_MISALIGNED_ADDRESS",
    717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    718: "CUDA_ERROR_INVALID_PC",
    719: "CUDA_ERROR_LAUNCH_FAILED",
    720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
    721: "CUDA_ERROR_TENSOR_MEMORY_LEAK",
    800: "CUDA_ERROR_NOT_PERMITTED",
    801: "CUDA_ERROR_NOT_SUPPORTED",
    802: "CUDA_ERROR_SYSTEM_NOT_READY",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    805: "CUDA_ERROR_MPS_CONNECTION_FAILED",
    806: "CUDA_ERROR_MPS_RPC_FAILURE",
    807: "CUDA_ERROR_MPS_SERVER_NOT_READY",
    808: "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED",
    809: "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED",
    810: "CUDA_ERROR_MPS_CLIENT_TERMINATED",
    811: "CUDA_ERROR_CDP_NOT_SUPPORTED",
    812: "CUDA_ERROR_CDP_VERSION_MISMATCH",
    900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
    901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
    902: "CUDA_ERROR_STREAM_CAPTURE_MERGE",
    903: "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
    904: "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
    905: "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
    906: "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
    907: "CUDA_ERROR_CAPTURED_EVENT",
    908: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
    909: "CUDA_ERROR_TIMEOUT",
    910: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
    911: "CUDA_ERROR_EXTERNAL_DEVICE",
    912: "CUDA_ERROR_INVALID_CLUSTER_SIZE",
    913: "CUDA_ERROR_FUNCTION_NOT_LOADED",
    914: "CUDA_ERROR_INVALID_RESOURCE_TYPE",
    915: "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
    916: "CUDA_ERROR_KEY_ROTATION",
    917: "CUDA_ERROR_STREAM_DETACHED",
    918: "CUDA_ERROR_GRAPH_RECAPTURE_FAILURE",
    919: "CUDA_ERROR_FABRIC_NOT_READY",
    999: "CUDA_ERROR_UNKNOWN",
}
CODES: dict[str, int] = {name: code for code, name in RESULTS.items()}

CUDA_SUCCESS = CODES["CUDA_SUCCESS"]
CUDA_ERROR_NOT_INITIALIZED = CODES["CUDA_ERROR_NOT_INITIALIZED"]
CUDA_ERROR_STUB_LIBRARY = CODES["CUDA_ERROR_STUB_LIBRARY"]
CUDA_ERROR_SHARED_OBJECT_INIT_FAILED = CODES["CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"]
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = CODES["CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"]
CUDA_ERROR_NOT_SUPPORTED = CODES["CUDA_ERROR_NOT_SUPPORTED"]

# The codes the generated C needs (facts.h): success, the shim's failure returns, not-ready.
C_RESULTS = ("CUDA_SUCCESS", "CUDA_ERROR_NOT_INITIALIZED", "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
             "CUDA_ERROR_NOT_SUPPORTED", "CUDA_ERROR_OUT_OF_MEMORY", "CUDA_ERROR_NOT_READY")


def result_name(code: int) -> str:
    return RESULTS.get(code, f"CUresult {code}")


# ---- which exports return a CUresult (the time paths count their error returns) -----------------
# Every function of the driver API is named cu<Capital>... and returns a CUresult: cuda.h and
# its interop headers (cudaGL.h, cudaEGL.h, cudaVDPAU.h, cudaProfiler.h) declare no other
# kind, and cuda-python's driver bindings return a CUresult from each
# (tests/pipeline/test_cuda_facts.py checks every export of the real drivers against them).
# ABI variants keep the rule (_v2, _ptds, _ptsz). Not counted: exports outside that naming
# (cudbg*: the debugger's interface, in no public header; cudbgMain and cudbgApiInit return
# nothing) and the cu<Capital> exports that no public header declares, whose prototype is
# unknown:
RESULT_NAME_PATTERN = r"cu[A-Z][A-Za-z0-9_]*"
NO_RESULT_EXPORTS = frozenset({
    "cuEGLApiInit",          # internal to the EGL interop, in no header
    "cuMemGetAttribute",     # in no header (not cuMemGetAllocationGranularity & co.)
    "cuMemGetAttribute_v2",
})


def returns_result(name: str) -> bool:
    """True when export `name` returns a CUresult, whose non-zero values the time paths count."""
    return re.fullmatch(RESULT_NAME_PATTERN, name) is not None and name not in NO_RESULT_EXPORTS


# ---- CUdevice_attribute (without the CU_DEVICE_ATTRIBUTE_ prefix) --------------------------------
ATTRIBUTES: dict[int, str] = {
    1: "MAX_THREADS_PER_BLOCK",
    2: "MAX_BLOCK_DIM_X",
    3: "MAX_BLOCK_DIM_Y",
    4: "MAX_BLOCK_DIM_Z",
    5: "MAX_GRID_DIM_X",
    6: "MAX_GRID_DIM_Y",
    7: "MAX_GRID_DIM_Z",
    8: "MAX_SHARED_MEMORY_PER_BLOCK",
    9: "TOTAL_CONSTANT_MEMORY",
    10: "WARP_SIZE",
    11: "MAX_PITCH",
    12: "MAX_REGISTERS_PER_BLOCK",
    13: "CLOCK_RATE",
    14: "TEXTURE_ALIGNMENT",
    15: "GPU_OVERLAP",
    16: "MULTIPROCESSOR_COUNT",
    17: "KERNEL_EXEC_TIMEOUT",
    18: "INTEGRATED",
    19: "CAN_MAP_HOST_MEMORY",
    20: "COMPUTE_MODE",
    21: "MAXIMUM_TEXTURE1D_WIDTH",
    22: "MAXIMUM_TEXTURE2D_WIDTH",
    23: "MAXIMUM_TEXTURE2D_HEIGHT",
    24: "MAXIMUM_TEXTURE3D_WIDTH",
    25: "MAXIMUM_TEXTURE3D_HEIGHT",
    26: "MAXIMUM_TEXTURE3D_DEPTH",
    27: "MAXIMUM_TEXTURE2D_LAYERED_WIDTH",
    28: "MAXIMUM_TEXTURE2D_LAYERED_HEIGHT",
    29: "MAXIMUM_TEXTURE2D_LAYERED_LAYERS",
    30: "SURFACE_ALIGNMENT",
    31: "CONCURRENT_KERNELS",
    32: "ECC_ENABLED",
    33: "PCI_BUS_ID",
    34: "PCI_DEVICE_ID",
    35: "TCC_DRIVER",
    36: "MEMORY_CLOCK_RATE",
    37: "GLOBAL_MEMORY_BUS_WIDTH",
    38: "L2_CACHE_SIZE",
    39: "MAX_THREADS_PER_MULTIPROCESSOR",
    40: "ASYNC_ENGINE_COUNT",
    41: "UNIFIED_ADDRESSING",
    42: "MAXIMUM_TEXTURE1D_LAYERED_WIDTH",
    43: "MAXIMUM_TEXTURE1D_LAYERED_LAYERS",
    44: "CAN_TEX2D_GATHER",
    45: "MAXIMUM_TEXTURE2D_GATHER_WIDTH",
    46: "MAXIMUM_TEXTURE2D_GATHER_HEIGHT",
    47: "MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE",
    48: "MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE",
    49: "MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE",
    50: "PCI_DOMAIN_ID",
    51: "TEXTURE_PITCH_ALIGNMENT",
    52: "MAXIMUM_TEXTURECUBEMAP_WIDTH",
    53: "MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH",
    54: "MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS",
    55: "MAXIMUM_SURFACE1D_WIDTH",
    56: "MAXIMUM_SURFACE2D_WIDTH",
    57: "MAXIMUM_SURFACE2D_HEIGHT",
    58: "MAXIMUM_SURFACE3D_WIDTH",
    59: "MAXIMUM_SURFACE3D_HEIGHT",
    60: "MAXIMUM_SURFACE3D_DEPTH",
    61: "MAXIMUM_SURFACE1D_LAYERED_WIDTH",
    62: "MAXIMUM_SURFACE1D_LAYERED_LAYERS",
    63: "MAXIMUM_SURFACE2D_LAYERED_WIDTH",
    64: "MAXIMUM_SURFACE2D_LAYERED_HEIGHT",
    65: "MAXIMUM_SURFACE2D_LAYERED_LAYERS",
    66: "MAXIMUM_SURFACECUBEMAP_WIDTH",
    67: "MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH",
    68: "MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS",
    69: "MAXIMUM_TEXTURE1D_LINEAR_WIDTH",
    70: "MAXIMUM_TEXTURE2D_LINEAR_WIDTH",
    71: "MAXIMUM_TEXTURE2D_LINEAR_HEIGHT",
    72: "MAXIMUM_TEXTURE2D_LINEAR_PITCH",
    73: "MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH",
    74: "MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT",
    75: "COMPUTE_CAPABILITY_MAJOR",
    76: "COMPUTE_CAPABILITY_MINOR",
    77: "MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH",
    78: "STREAM_PRIORITIES_SUPPORTED",
    79: "GLOBAL_L1_CACHE_SUPPORTED",
    80: "LOCAL_L1_CACHE_SUPPORTED",
    81: "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    82: "MAX_REGISTERS_PER_MULTIPROCESSOR",
    83: "MANAGED_MEMORY",
    84: "MULTI_GPU_BOARD",
    85: "MULTI_GPU_BOARD_GROUP_ID",
    86: "HOST_NATIVE_ATOMIC_SUPPORTED",
    87: "SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO",
    88: "PAGEABLE_MEMORY_ACCESS",
    89: "CONCURRENT_MANAGED_ACCESS",
    90: "COMPUTE_PREEMPTION_SUPPORTED",
    91: "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM",
    92: "CAN_USE_STREAM_MEM_OPS_V1",
    93: "CAN_USE_64_BIT_STREAM_MEM_OPS_V1",
    94: "CAN_USE_STREAM_WAIT_VALUE_NOR_V1",
    95: "COOPERATIVE_LAUNCH",
    96: "COOPERATIVE_MULTI_DEVICE_LAUNCH",
    97: "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    98: "CAN_FLUSH_REMOTE_WRITES",
    99: "HOST_REGISTER_SUPPORTED",
    100: "PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES",
    101: "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST",
    102: "VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED",
    103: "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED",
    104: "HANDLE_TYPE_WIN32_HANDLE_SUPPORTED",
    105: "HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED",
    106: "MAX_BLOCKS_PER_MULTIPROCESSOR",
    107: "GENERIC_COMPRESSION_SUPPORTED",
    108: "MAX_PERSISTING_L2_CACHE_SIZE",
    109: "MAX_ACCESS_POLICY_WINDOW_SIZE",
    110: "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED",
    111: "RESERVED_SHARED_MEMORY_PER_BLOCK",
    112: "SPARSE_CUDA_ARRAY_SUPPORTED",
    113: "READ_ONLY_HOST_REGISTER_SUPPORTED",
    114: "TIMELINE_SEMAPHORE_INTEROP_SUPPORTED",
    115: "MEMORY_POOLS_SUPPORTED",
    116: "GPU_DIRECT_RDMA_SUPPORTED",
    117: "GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS",
    118: "GPU_DIRECT_RDMA_WRITES_ORDERING",
    119: "MEMPOOL_SUPPORTED_HANDLE_TYPES",
    120: "CLUSTER_LAUNCH",
    121: "DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED",
    122: "CAN_USE_64_BIT_STREAM_MEM_OPS",
    123: "CAN_USE_STREAM_WAIT_VALUE_NOR",
    124: "DMA_BUF_SUPPORTED",
    125: "IPC_EVENT_SUPPORTED",
    126: "MEM_SYNC_DOMAIN_COUNT",
    127: "TENSOR_MAP_ACCESS_SUPPORTED",
    128: "HANDLE_TYPE_FABRIC_SUPPORTED",
    129: "UNIFIED_FUNCTION_POINTERS",
    130: "NUMA_CONFIG",
    131: "NUMA_ID",
    132: "MULTICAST_SUPPORTED",
    133: "MPS_ENABLED",
    134: "HOST_NUMA_ID",
    135: "D3D12_CIG_SUPPORTED",
    136: "MEM_DECOMPRESS_ALGORITHM_MASK",
    137: "MEM_DECOMPRESS_MAXIMUM_LENGTH",
    138: "VULKAN_CIG_SUPPORTED",
    139: "GPU_PCI_DEVICE_ID",
    140: "GPU_PCI_SUBSYSTEM_ID",
    141: "HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
    142: "HOST_NUMA_MEMORY_POOLS_SUPPORTED",
    143: "HOST_NUMA_MULTINODE_IPC_SUPPORTED",
    144: "HOST_MEMORY_POOLS_SUPPORTED",
    145: "HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
    146: "HOST_ALLOC_DMA_BUF_SUPPORTED",
    147: "ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED",
    148: "ATOMIC_REDUCTION_SUPPORTED",
    149: "LOCALITY_DOMAIN_COUNT",
    150: "MAX_OVERSIZED_SHARED_MEMORY_PER_BLOCK",
    151: "D3D12_CIG_STREAMS_SUPPORTED",
    152: "DMA_BUF_MMAP_SUPPORTED",
    153: "LOGICAL_ENDPOINT_UNICAST_SUPPORTED",
    154: "LOGICAL_ENDPOINT_MULTICAST_SUPPORTED",
    155: "LOGICAL_ENDPOINT_COUNTED_OPS_SUPPORTED",
    156: "LOGICAL_ENDPOINT_UNICAST_ACCESS_ON_OWNER_DEVICE_SUPPORTED",
    157: "LOCALITY_DOMAIN_MULTIPROCESSOR_COUNT",
    158: "LOGICAL_ENDPOINT_SUPPORTED_HANDLE_TYPES",
    159: "VULKAN_CIG_STREAMS_SUPPORTED",
    160: "TENSOR_MAP_LARGE_TENSOR_MIN_SIZE",
    161: "GPU_DIRECT_RDMA_WITH_LOCALIZED_MEMORY_SUPPORTED",
}


def attribute_name(number: int) -> str:
    return ATTRIBUTES.get(number, f"ATTRIBUTE_{number}")


# ---- the gated attributes: what `shimgen gates` looks for ----------------------------------------
ATTR_GDR = 116      # GPU_DIRECT_RDMA_SUPPORTED: its gate bits are named "gdr"
ATTR_DMABUF = 124   # DMA_BUF_SUPPORTED: its extra gate bits are named "dmabuf"
GATE_ATTRIBUTES = (110, ATTR_GDR, ATTR_DMABUF, 146)
# What `shimgen probe` shows: the gated attributes and their neighbours.
PROBED_ATTRIBUTES = (103, 110, ATTR_GDR, 117, 118, ATTR_DMABUF, 146)

# ---- where libcuda.so.1 is installed (x86-64), searched in this order ----------------------------
LIBCUDA_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/lib/wsl/lib",
    "/lib/x86_64-linux-gnu",
    "/lib64",
)
# The dynamic loader's cache, which `ldconfig -p` lists: when it changes, the libcuda the
# loader would pick may have changed (shimgen run remembers its answer until then).
LD_SO_CACHE = "/etc/ld.so.cache"

# ---- the shim's run-time features: which hooks are installed (see shim/hooks.py) -----------------
FEATURES = dict(always=1, attrs=2, gates=4, memory=8, limit=16, kernels=32, gputime=64)

# What the memory ledger reads of the driver's structs (runtime/memory/hooks_memory.c): the
# CUmemLocation {type, id} in a CUmemAllocationProp, at this byte offset; the location type
# of a device (any other, host or host NUMA, is host memory); the bytes of one channel of an
# element of each CUarray_format (a format not listed is counted at 4).
MEM_PROP_LOCATION_OFFSET = 8
# The device attributes whose largest bounds the pitch of a row the driver pads
# (cuMemAllocPitch_v2, an array's rows): the ledger checks a limit against rows padded to it.
PITCH_ALIGNMENT_ATTRIBUTES = [n for n, name in ATTRIBUTES.items()
                              if name in ("TEXTURE_ALIGNMENT", "TEXTURE_PITCH_ALIGNMENT")]
MEM_LOCATION_TYPE_DEVICE = 1
# Pools and graph memory: CUmemPoolProps' and CUDA_MEM_ALLOC_NODE_PARAMS' (poolProps first)
# location lies where CUmemAllocationProp's does (MEM_PROP_LOCATION_OFFSET); the attributes the
# ledger asks, in runenv.MEM_RESERVE_FIELDS' order: CUmemPool_attribute's RESERVED_MEM_CURRENT,
# _HIGH, USED_MEM_CURRENT, _HIGH and CUgraphMem_attribute's; CU_STREAM_CAPTURE_STATUS_ACTIVE;
# CUgraphNodeType's kernel, child graph and conditional node (runtime/kernels/hooks_graphs.c).
MEMPOOL_ATTRS = (5, 6, 7, 8)
GRAPH_MEM_ATTRS = (2, 3, 0, 1)
STREAM_CAPTURE_ACTIVE = 1
GRAPH_NODE_KERNEL, GRAPH_NODE_GRAPH, GRAPH_NODE_CONDITIONAL = 0, 4, 13
LAUNCH_CONFIG_STREAM_OFFSET = 32  # CUlaunchConfig's hStream, after its grid, block, shared bytes
ARRAY_FORMAT_BYTES = {0x01: 1, 0x02: 2, 0x03: 4, 0x08: 1, 0x09: 2, 0x0A: 4, 0x10: 2, 0x20: 4,
                      0xC0: 1, 0xC1: 2, 0xC2: 4, 0xC3: 2, 0xC4: 4, 0xC5: 8, 0xC6: 1, 0xC7: 2,
                      0xC8: 4, 0xC9: 2, 0xCA: 4, 0xCB: 8}

# ---- the CUDA types a user hook needs (shimgen/hook.h, templates/hook.h.j2) ----------------------
# (name, C declaration) as cuda.h declares them for x86-64: hook.h typedefs each unless cuda.h
# came first. The struct types are left incomplete: a hook passes them on, it never lays them out.
HOOK_TYPES: tuple[tuple[str, str], ...] = (
    ("CUdevice", "int"),
    ("CUdeviceptr", "unsigned long long"),
    ("CUmemGenericAllocationHandle", "unsigned long long"),
    ("CUcontext", "struct CUctx_st *"),
    ("CUmodule", "struct CUmod_st *"),
    ("CUfunction", "struct CUfunc_st *"),
    ("CUstream", "struct CUstream_st *"),
    ("CUevent", "struct CUevent_st *"),
    ("CUmemoryPool", "struct CUmemPoolHandle_st *"),
    ("CUmemAllocationProp", "struct CUmemAllocationProp_st"),
)
