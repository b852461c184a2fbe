"""The names the shim, `shimgen run` and the trace readers share, kept here once: the
environment variables the shim reads, the launchers' rank variables, the binary trace
file's magic, version and suffix, and the layout of a run directory. shim/render.py writes
them into facts.h as #defines for the runtime; run/main.py, report/main.py and
trace/binary.py import them. This module imports nothing: it is on `shimgen run`'s path."""

# The shim's environment variables (runtime/base/config.c reads them once, at load), by key;
# facts.h has each as SHIMGEN_ENV_<KEY>.
ENV = {
    "QUIET": "SHIMGEN_QUIET",
    "NOTICE_FILE": "SHIMGEN_NOTICE_FILE",
    "DRIVER": "SHIMGEN_DRIVER",
    "TRACE": "SHIMGEN_TRACE",
    "TRACE_FILE": "SHIMGEN_TRACE_FILE",
    "TRACE_DIR": "SHIMGEN_TRACE_DIR",
    "TRACE_JOB": "SHIMGEN_TRACE_JOB",
    "TIMELINE_FILE": "SHIMGEN_TIMELINE_FILE",
    "TIMELINE_EVENTS": "SHIMGEN_TIMELINE_EVENTS",
    "CALLS_RING": "SHIMGEN_CALLS_RING",
    "ATTR_OVERRIDE": "SHIMGEN_ATTR_OVERRIDE",
    "GATES": "SHIMGEN_GATES",
    "GATE_METHOD": "SHIMGEN_GATE_METHOD",
    "INJECT": "SHIMGEN_INJECT",
    "RUN_DIR": "SHIMGEN_RUN_DIR",
    "LIMIT_MEMORY": "SHIMGEN_LIMIT_MEMORY",
    "GPU_TIME": "SHIMGEN_GPU_TIME",
    "LIMIT_JOB_MEMORY": "SHIMGEN_LIMIT_JOB_MEMORY",
    "BUDGET_FILE": "SHIMGEN_BUDGET_FILE",
}

# SHIMGEN_GATE_METHOD's values, by the number the shim's configuration keeps (facts.h:
# SHIMGEN_GATE_METHOD_<NAME> and its name): "struct", the default, writes the selected gates'
# bits into the device structs; "init" applies each selected gate at its proven init site,
# and by the struct method a gate that has none for its direction; "init-all" applies every
# selected gate at its init site, or none at all (docs/gates.md).
GATE_METHODS = {0: "struct", 1: "init", 2: "init-all"}

# The sizes SHIMGEN_LIMIT_MEMORY and `--limit memory=SIZE` take: bytes, or a number and one
# of these letters (powers of 1024: K 2**10 ... T 2**40), with "iB", "B" or nothing after.
SIZE_UNITS = "KMGT"
# The most a size can be (what is more is no size: a limit of 16 EiB would be none), and the
# words both parsers say of what is not a size (`--limit`, and the shim of its variable).
SIZE_MAX = (1 << 64) - 1
SIZE_HINT = "is not a size (200MiB, 2GiB, or bytes)"
# What `shimgen run --limit` limits: KEY=SIZE, each key's variable of the shim.
LIMITS = {"memory": "LIMIT_MEMORY", "job-memory": "LIMIT_JOB_MEMORY"}
# A shared memory budget (docs/memory.md, "One budget for many processes"): `shimgen run
# --limit-group`'s variable (the command's, not the shim's), the books' file in the run
# directory or the group's directory, the group directory's file that fixes its size, and
# where a group named by a bare name lives (under $XDG_RUNTIME_DIR, else /tmp/shimgen-UID).
LIMIT_GROUP = "SHIMGEN_LIMIT_GROUP"
BUDGET_BOOKS = "budget.books"
BUDGET_SIZE = "budget.size"
GROUPS_DIR = "shimgen/groups"

# The `shimgen` command's own variable (not the shim's): a traceback for an internal error.
DEBUG = "SHIMGEN_DEBUG"
# `shimgen run`'s host name, in place of the machine's, for the part of a run directory its
# node makes (tests that simulate several nodes on one machine; docs/multigpu.md).
TEST_HOST = "SHIMGEN_TEST_HOST"

# Where a launcher puts a process's rank, in the order the shim reads them.
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID",
             "LOCAL_RANK")

# What a build installs: the shim's file name and its manifest's.
# meson's library target: the file is lib<target>.so, its version script lib<target>.map
SHIM_TARGET = "cudashim"
SHIM_LIBRARY = f"lib{SHIM_TARGET}.so"
SHIM_MANIFEST = "shim.json"
# The NVML shim's (libnvidia-ml.so.1, shimgen/shim/nvml.py): its target and file.
NVML_SHIM_TARGET = "nvmlshim"
NVML_SHIM_LIBRARY = f"lib{NVML_SHIM_TARGET}.so"

# The trace modes, by the number the binary trace file records (its header's `mode`) and
# the name SHIMGEN_TRACE takes (which also takes "1" for counts and "attrs").
TRACE_MODES = {1: "counts", 2: "time", 3: "timeline", 4: "calls"}
# `shimgen run --trace`'s default: the time path, which also records every error return
# (counts does not: docs/performance.md says why the default is not counts).
DEFAULT_TRACE = "time"

# The binary trace file of SHIMGEN_TRACE_DIR (docs/traceformat.md).
TRACE_MAGIC = b"SHIMTRC\n"
TRACE_VERSION = 9
# The versions the reader reads: each is the next one it reads without the fields from that
# version's first field on (TRACE_HEADER_FIRST): 8 has no digest of its capture table; 7
# has no GPU times; 5 has no kernels; 4 has no pool or graph reservations in its memory
# ledger; 3 no calls in progress, no call records and no memory ledger. Version 6 (its
# kernels with a fixed 256 bytes of name per slot) is not read. Version 8's fine keys are
# other than 7's: (index + 1) * fine_hash + bucket, in the slot the key modulo fine_slots
# (7: (index + 1) << fine_bits | bucket from a hashed home).
TRACE_VERSIONS_READ = (3, 4, 5, 7, 8, 9)
# The first version whose fine keys are steps of fine_hash (TRACE_VERSIONS_READ).
TRACE_FINE_STEP_FIRST = 8
TRACE_SUFFIX = ".shimtrace"
# The empty file a process leaves in place of its trace file when the disk had no room even
# for the file's header: `<name>.nospace` for the `<name>.shimtrace` it could not make, so
# that the run knows the process existed and that its calls are not in it.
TRACE_NOSPACE_SUFFIX = ".nospace"
TRACE_BYTE_ORDER = 0x0102030405060708
TRACE_STATES = {"running": 1, "complete": 2}
# An error slot's key with this bit set counts failures that SHIMGEN_INJECT returned without
# calling the driver (the rest of the key as usual: (function index + 1) << 32 | code).
TRACE_ERR_INJECTED = 1 << 63
# The memory ledger's columns and routes (version 4's fields below): a column per device
# ordinal below MEM_DEVICES, then one of pinned host memory; a row per route of the model's
# table (shim/memroutes.py), by its index there.
MEM_DEVICES = 16
MEM_HOST_COLUMN = MEM_DEVICES
MEM_COLUMNS = MEM_DEVICES + 1
MEM_ROUTES = 32
# The kernels (version 7's fields below, runtime/kernels/): the handles (CUfunction or
# CUkernel) the table keeps, the bytes of the names' arena (all names together), the most
# bytes of one name (a longer one is cut, as is one the full arena has no room for), the
# bit of a slot's kern_name_at that says its name was cut, the streams whose last launch it
# keeps; how a slot's name was learned
# (its `kern_from`: the function whose argument gave it, the driver asked, none the driver
# would give, a host function's symbol).
KERN_SLOTS = 1024
KERN_NAME_BYTES = 256 * 1024
KERN_NAME_MAX = 4096
KERN_NAME_CUT = 1 << 31
KERN_STREAMS = 64
# CUstream's handles of the legacy and the per-thread default stream (CU_STREAM_LEGACY,
# CU_STREAM_PER_THREAD): a _ptsz launch's stream 0 is the per-thread one.
KERN_STREAM_LEGACY = 1
KERN_STREAM_PER_THREAD = 2
KERN_FROM = {1: "cuModuleGetFunction", 2: "cuLibraryGetKernel", 3: "cuKernelGetFunction",
             4: "driver", 5: "unnamed", 6: "cuLaunchHostFunc", 7: "cuGraphLaunch"}
# The name of a host function whose symbol the dynamic loader does not know.
KERN_HOST_UNKNOWN = "(host function)"
# A graph's launches (cuGraphLaunch) are counted on a slot per count of kernel nodes, whose
# handle word is KERN_GRAPH_KEY | (the count + 1), KERN_GRAPH_KEY alone when the count is not
# known (no user-space address has these bits: never a kernel's handle), named
# KERN_GRAPH_PREFIX then the count in decimal, or "?" (no kernel's name holds a colon).
KERN_GRAPH_KEY = 0xFFFF << 48
KERN_GRAPH_PREFIX = "graph:"
# The functions whose launches the kernels' tables count (shim/hooks.py hooks each): the
# rows `report --by kernel` splits by kernel.
KERN_LAUNCH_FUNCTIONS = (
    "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchCooperativeKernel",
    "cuLaunchCooperativeKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
    "cuLaunchHostFunc", "cuLaunchHostFunc_ptsz", "cuGraphLaunch", "cuGraphLaunch_ptsz")
# A collective: a kernel whose name holds this, in any case (NCCL's device kernels,
# ncclDevKernel_*, ncclKernel_*): the report compares its launches across the ranks of a run.
KERN_COLLECTIVE = "nccl"
# GPU time per kernel (SHIMGEN_GPU_TIME, `shimgen run --gpu-time`; runtime/kernels/gputime.c,
# version 8's fields below): the value that samples ("every=N": one launch in N timed; "1":
# every launch); the event pairs in flight at once; per slot a histogram of the launches'
# GPU ns, KGPU_SUB buckets per power of two (bucket b is b ns below KGPU_SUB; else, with
# e = floor(log2(ns)) and s = KGPU_SUB_SHIFT, (e - s) * KGPU_SUB + (ns >> (e - s))),
# KGPU_BUCKETS of them, the last one also holding every longer launch; why a
# launch was not timed, in the order kgpu_not keeps the counts: one the sampling skipped,
# one into a capturing stream (or a stream the driver could not say of), one whose events
# the driver refused (cuEventCreate or cuEventRecord failed), one that found no free pair,
# one whose pair was dropped (its context destroyed, or the driver no longer knew its
# events), one still running at exit.
KGPU_EVERY = "every="
KGPU_PAIRS = 1024
KGPU_SUB_SHIFT = 2
KGPU_SUB = 1 << KGPU_SUB_SHIFT
KGPU_BUCKETS = 128
KGPU_NOT = ("sampled", "capture", "refused", "pool", "context", "unfinished")
# The GPU track (the calls timeline's, report/calls_timeline.py): the last KGPU_TRACK timed
# launches, each KGPU_TRACK_WORDS words: its kernel slot + 1 (0: none, or being written),
# its stream, the host ticks at which its context's reference event was recorded, the GPU
# ns from that event to the launch's start (cuEventElapsedTime), the launch's GPU ns.
KGPU_TRACK = 4096
KGPU_TRACK_WORDS = 5
# Its header, field by field in order: (name, type, count), the type one of u32, u64, i64,
# char. runtime/tracefile/header.h declares its struct from this list (rendered into facts.h,
# with each field's offset checked) and shimgen/trace/binary.py reads it with the same one;
# every field lies at a multiple of its own size, so the C struct has no padding.
TRACE_HEADER = (
    ("magic", "char", 8), ("version", "u32", 1), ("header_size", "u32", 1),
    ("byte_order", "u64", 1), ("nfuncs", "u32", 1), ("page_size", "u32", 1),
    ("block_size", "u64", 1), ("block_stride", "u64", 1), ("names_off", "u64", 1),
    ("names_size", "u64", 1), ("blocks_off", "u64", 1),
    ("off_fn", "u32", 1), ("fstats_size", "u32", 1), ("off_untimed", "u32", 1),
    ("off_err_overflow", "u32", 1), ("off_err", "u32", 1), ("err_slots", "u32", 1),
    ("errslot_size", "u32", 1), ("off_hist", "u32", 1), ("hist_buckets", "u32", 1),
    ("off_tid", "u32", 1), ("off_state", "u32", 1), ("off_count", "u32", 1),
    ("blocks_reserved", "u64", 1), ("blocks_mapped", "u64", 1),
    ("pid", "i64", 1), ("ppid", "i64", 1), ("rank", "char", 16),
    ("mode", "u32", 1), ("state", "u32", 1), ("start_ns", "u64", 1), ("end_ns", "u64", 1),
    ("calib_ns0", "u64", 1), ("calib_ticks0", "u64", 1), ("calib_ns1", "u64", 1),
    ("calib_ticks1", "u64", 1), ("unmapped_proc_addresses", "u64", 1),
    ("calls_missing", "u64", 1), ("shimgen_version", "char", 32),
    ("driver_version", "char", 32), ("driver_build_id", "char", 136),
    ("driver_path", "char", 4096),
    ("calib_width0", "u64", 1), ("calib_width1", "u64", 1), ("calib_ns_a", "u64", 1),
    ("calib_ticks_a", "u64", 1), ("calib_width_a", "u64", 1), ("calib_seq", "u64", 1),
    ("proc_start", "u64", 1), ("boot_id", "char", 40),
    ("off_fine", "u32", 1), ("fine_slots", "u32", 1), ("fine_bits", "u32", 1),
    ("fine_sub_shift", "u32", 1), ("fine_probes", "u32", 1), ("fine_hash", "u32", 1),
    # version 4: where a block's shadow frames are (its calls in progress, time modes)
    ("off_frames", "u32", 1), ("frame_slots", "u32", 1), ("frame_size", "u32", 1),
    ("frame_off_start", "u32", 1), ("frame_off_idx", "u32", 1), ("frame_off_ret", "u32", 1),
    # version 4: SHIMGEN_TRACE=calls, each thread's ring of call records (docs/traceformat.md)
    ("calls_ring_off", "u64", 1), ("calls_ring_records", "u64", 1),
    ("calls_record_size", "u32", 1), ("calls_capture_off", "u32", 1),
    ("off_calls_head", "u32", 1), ("calls_string_max", "u32", 1),
    # version 4: the device memory ledger (runtime/memory/ledger.c, docs/memory.md), kept in the
    # header as it changes, so a process killed leaves its numbers at death.
    ("mem_columns", "u32", 1), ("mem_routes", "u32", 1),
    ("mem_route_fn", "u32", MEM_ROUTES),  # each route's function index + 1 in the names; 0: none
    ("mem_limit", "u64", 1),  # --limit memory, bytes per device; 0: none
    ("mem_untracked", "u64", 1),  # allocations the ledger could not follow (a full table)
    ("mem_refused", "u64", 1),  # allocations refused for the limit
    ("mem_peak", "u64", MEM_COLUMNS),  # per column: the most held at once
    # [column][route]: the bytes held now (at exit or death), the allocations (handles)
    # held now, the bytes taken in all
    ("mem_held", "u64", MEM_COLUMNS * MEM_ROUTES),
    ("mem_live", "u64", MEM_COLUMNS * MEM_ROUTES),
    ("mem_taken", "u64", MEM_COLUMNS * MEM_ROUTES),
    # version 5: what memory pools and graphs reserve (docs/memory.md), as the ledger last
    # asked the driver: per column, the most held at once counting the reservations beyond
    # what the routes hold (0 while never more than mem_peak); the pools' and the graphs'
    # [column][MEM_RESERVE_FIELDS]; the pools the ledger knows; graph allocations seen.
    ("mem_reserved_peak", "u64", MEM_COLUMNS),
    ("mem_pool", "u64", MEM_COLUMNS * 4),
    ("mem_graph", "u64", MEM_COLUMNS * 4),
    ("mem_pools", "u64", 1), ("mem_graph_allocs", "u64", 1),
    # version 7: the kernels (runtime/kernels/, docs/traceformat.md "Kernels"): the table's
    # sizes, whether the driver could be asked names (it exports cuFuncGetName), the names'
    # arena's bytes and the bytes taken of it (more than it has once full), handles and
    # launches no slot took; per slot the handle (0: free), launches, host ticks of the
    # launch calls, launches whose shape differed from the one before, where its name is in
    # the arena (offset << 32 | length, KERN_NAME_CUT set when cut; 0: no name yet), how the
    # name was learned (KERN_FROM), the last grid and block; per stream (key: the handle + 1)
    # its launches, the slot + 1 of its last kernel and that launch's start in ticks; the
    # arena, the names' bytes one after another (no NULs).
    ("kern_slots", "u32", 1), ("kern_name_max", "u32", 1), ("kern_streams", "u32", 1),
    ("kern_asks", "u32", 1), ("kern_name_bytes", "u32", 1), ("kern_name_used", "u32", 1),
    ("kern_lost", "u64", 1), ("kern_lost_launches", "u64", 1), ("kstream_lost", "u64", 1),
    ("kern_handle", "u64", KERN_SLOTS), ("kern_launches", "u64", KERN_SLOTS),
    ("kern_ticks", "u64", KERN_SLOTS), ("kern_shapes", "u64", KERN_SLOTS),
    ("kern_name_at", "u64", KERN_SLOTS),
    ("kstream_key", "u64", KERN_STREAMS), ("kstream_launches", "u64", KERN_STREAMS),
    ("kstream_slot", "u64", KERN_STREAMS), ("kstream_start", "u64", KERN_STREAMS),
    ("kern_from", "u32", KERN_SLOTS), ("kern_grid", "u32", KERN_SLOTS * 3),
    ("kern_block", "u32", KERN_SLOTS * 3), ("kern_names", "char", KERN_NAME_BYTES),
    # version 8: GPU time per kernel (runtime/kernels/gputime.c, docs/traceformat.md "GPU
    # time"): the sampling (1 in kgpu_every launches timed; 0: not on), the buckets per slot,
    # the pairs in flight now (at death: launches never resolved), the launches not timed by
    # reason (KGPU_NOT); per slot the GPU ns of its timed launches, how many, the longest,
    # and its histogram [slot][KGPU_BUCKETS]; the GPU track.
    ("kgpu_every", "u32", 1), ("kgpu_buckets", "u32", 1), ("kgpu_pending", "u64", 1),
    ("kgpu_not", "u64", len(KGPU_NOT)),
    ("kgpu_ns", "u64", KERN_SLOTS), ("kgpu_timed", "u64", KERN_SLOTS),
    ("kgpu_max", "u64", KERN_SLOTS), ("kgpu_hist", "u32", KERN_SLOTS * KGPU_BUCKETS),
    # the GPU track: records written in all (the ring's next is this modulo KGPU_TRACK), the
    # ring of KGPU_TRACK records of KGPU_TRACK_WORDS words
    ("kgpu_track_used", "u64", 1), ("kgpu_track", "u64", KGPU_TRACK * KGPU_TRACK_WORDS),
    # version 9: SHIMGEN_TRACE=calls, the digest of the capture table the shim was built with
    # (calls/model.py table_digest; 0: not a calls trace), so that a report that would read
    # the records' captures with another table (other CUDA headers) knows it
    ("calls_table_digest", "u64", 1),
)
# One list of the trace's fields, read by both readers (trace/jsonfile.py: the exit JSON of
# SHIMGEN_TRACE_FILE, runtime/stats/trace.c; trace/binary.py and blocks.py: the binary file).
# A process's: (its name in trace/model.py's ProcessTrace, its JSON key, where the binary
# file keeps it: a header field, "block:" a word of each block summed, or None: derived).
TRACE_PROCESS_FIELDS = (
    ("shimgen_version", "shimgen", "shimgen_version"),
    ("driver_path", "driver", "driver_path"),
    ("driver_version", "driver_version", "driver_version"),
    ("driver_build_id", "loaded_build_id", "driver_build_id"),
    ("pid", "pid", "pid"), ("rank", "rank", "rank"), ("mode", "mode", "mode"),
    ("unmapped_proc_addresses", "unmapped_proc_addresses", "unmapped_proc_addresses"),
    ("ns_per_tick", "ns_per_tick", None),  # binary: from the header's calibration
    ("untimed_calls", "untimed_calls", "block:untimed"),
    ("errors_overflow", "error_overflow", "block:err_overflow"),
)
# The exit JSON's other keys: the shim's own build (not read into a trace), the tables.
TRACE_JSON_OTHER = ("shim_driver_version", "build_id", "calls", "time", "errors", "injected")
# A function's, in the JSON's `time` entry and in a block: (its name in FunctionStats or None,
# its JSON key or None, its word of struct fstats (runtime/tracefile/block.h) or None). The JSON's
# times are the block's ticks times ns_per_tick; its mean and percentiles are derived.
TRACE_FUNCTION_FIELDS = (
    ("calls", "calls", "count"), ("total_ns", "total_ns", "total"),
    (None, "mean_ns", None), ("max_ns", "max_ns", "max"),
    (None, "p50_ns", None), (None, "p90_ns", None), (None, "p99_ns", None),
    ("hist", "hist", None), ("fine", "fine", None),  # block: the tables at off_hist, off_fine
    (None, None, "target"),  # aarch64's counted calls read the function's target here
)
# struct fstats, one per function at the block's off_fn: its 64-bit words in order, each
# (word, how the blocks' words fold into the process's: "calls" (added into shimgen_counts,
# which counts mode's stubs add to), "sum", "max" or None (no total), its unit: "calls",
# "ticks" (written to the JSON and read as ns) or None). struct fstats, the stubs' TS_*
# offsets, the totals (runtime/stats/totals.h), the fold, the clear and the JSON writer are
# rendered from it (tracefields.h's X-macros), and both readers read it.
TRACE_FSTATS_WORDS = (
    ("count", "calls", "calls"), ("total", "sum", "ticks"), ("max", "max", "ticks"),
    ("target", None, None),
)
# Each word's byte offset; the struct's size, a power of two (the stubs index fn[] by a shift).
TRACE_FSTATS = {word: 8 * i for i, (word, _, _) in enumerate(TRACE_FSTATS_WORDS)}
TRACE_FSTATS_SHIFT = (8 * len(TRACE_FSTATS_WORDS) - 1).bit_length()
TRACE_FSTATS_SIZE = 1 << TRACE_FSTATS_SHIFT
# The four numbers of a column's pools (the driver's CU_MEMPOOL_ATTR_*, summed over the
# column's pools) and of its graphs (CU_GRAPH_MEM_ATTR_*), in the order mem_pool and
# mem_graph keep them.
MEM_RESERVE_FIELDS = ("reserved", "reserved_high", "used", "used_high")
# The first field new in each version (the header of the version read before it ends where
# it begins; version 7's kernels replaced version 6's, which is not read).
TRACE_HEADER_FIRST = {4: "off_frames", 5: "mem_reserved_peak", 7: "kern_slots",
                      8: "kgpu_every", 9: "calls_table_digest"}
TRACE_HEADER_V4_FIRST = TRACE_HEADER_FIRST[4]
# SHIMGEN_TRACE=calls: one record per call in its thread's ring (runtime/arch/x86_64/calls.S writes
# it, shimgen/calls/records.py reads it): its size, where its captured bytes start (strings,
# structs, outputs, per the capture table the build renders from shimgen/calls/), the
# stack arguments a record keeps (cuLaunchKernel's 11 arguments: 6 registers and 5 on the
# stack), the longest string kept (its NUL included), and the ring's records per thread.
CALLS_RECORD_SIZE = 256
# A record's words before its arguments (runtime/arch/layout.h REC_*): seq, idx, state, tid, start,
# dur, result, as a struct format (little-endian).
CALLS_RECORD_HEAD = "<QHHiQQQ"
CALLS_CAPTURE_OFF = 128
CALLS_STACK_ARGS = 5
CALLS_STRING_MAX = 64
# The argument word of a record that says which of its function's captures were not read
# (bit k: the k-th capture of the function's table: its address could not be read), or
# CALLS_UNREAD_TAKING while its captures at entry are being read (a process that died then
# left them unread). A function with captures has at most this many integer arguments, so
# the word is never one of its own (model.py).
CALLS_UNREAD_WORD = 10
CALLS_UNREAD_TAKING = (1 << 64) - 1
CALLS_RING_DEFAULT = 65536
CALLS_RING_MIN = 1024
CALLS_RING_MAX = 1 << 22
# A capture's kind (the capture table's `kind`): a string read at entry, a struct read at
# entry, an output read after a successful return.
CALLS_CAPTURE_KINDS = {1: "string", 2: "struct", 3: "output"}
# The kind's bits (the rest are flags of an output): TEXT, its bytes are a string (a `char *`
# buffer the driver fills); POINTED, a pointer the driver wrote (`const char **`) and the
# string it points to, read after the call through the safe read (8 bytes, then the
# string); FUNCTION, a function pointer the driver wrote (cuGetProcAddress's `void **pfn`)
# and which of the shim's exports it is (8 bytes, then its slot + 1 as 4 bytes, 0: none),
# found when the call returns, where the shim knows its own exports' addresses.
CALLS_CAPTURE_KIND_MASK = 0x1F
CALLS_CAPTURE_FLAGS = {0x80: "text", 0x40: "pointed", 0x20: "function"}
# The outputs of type `void **` that are a driver function's pointer (the others, such as
# cuLibraryGetUnifiedFunction's fptr, point to the program's own code).
CALLS_FUNCTION_OUTPUTS = ("pfn",)
_FIELD_TYPES = {"u32": ("uint32_t", "I", 4), "u64": ("uint64_t", "Q", 8),
                "i64": ("int64_t", "q", 8), "char": ("char", "s", 1)}


def trace_header_layout(version: int = TRACE_VERSION) -> list[tuple[str, str, int, int, str]]:
    """Each header field as (name, C type, count, offset, struct code), in order, of the
    header of `version` (an older one: the fields before the first field of the next version
    that adds some, TRACE_HEADER_FIRST)."""
    out, at = [], 0
    fields = TRACE_HEADER
    later = [v for v in sorted(TRACE_HEADER_FIRST) if v > version]
    if later:
        fields = fields[:[f[0] for f in fields].index(TRACE_HEADER_FIRST[later[0]])]
    for name, kind, count in fields:
        ctype, code, size = _FIELD_TYPES[kind]
        assert at % size == 0, name  # (no padding: see TRACE_HEADER)
        out.append((name, ctype, count, at, f"{count}s" if kind == "char" else
                    (f"{count}{code}" if count > 1 else code)))
        at += size * count
    return out

# A run directory (`shimgen run`): its metadata, the traces, the timelines, the notices.
RUNS_DIR = "shimgen-runs"  # the default parent of run directories, in the current directory
RUN_JSON = "run.json"
TRACES = "traces"
TIMELINE = "timeline"
NOTICES = "notices.log"
# A node's `shimgen run` rewrites this every second while its command runs (trace/live.py)
HEARTBEAT = "heartbeat"


def trace_header_size(version: int = TRACE_VERSION) -> int:
    _, ctype, count, offset, _ = trace_header_layout(version)[-1]
    size = {t[0]: t[2] for t in _FIELD_TYPES.values()}[ctype]
    return offset + size * count
