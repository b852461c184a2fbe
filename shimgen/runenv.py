"""The names the shim, `shimgen run` and the trace readers share, kept here once: the
environment variables the shim reads, the launchers' rank variables, the binary trace
file's magic, version and suffix, and the layout of a run directory. shim/render.py writes
them into facts.h as #defines for the runtime; run/main.py, report/main.py and
trace/binary.py import them. This module imports nothing: it is on `shimgen run`'s path."""

# The shim's environment variables (runtime/config.c reads them once, at load), by key;
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
}

# SHIMGEN_GATE_METHOD's values, by the number the shim's configuration keeps (facts.h:
# SHIMGEN_GATE_METHOD_<NAME> and its name): "struct", the default, writes the selected gates'
# bits into the device structs; "init" applies each selected gate at its proven init site,
# and by the struct method a gate that has none for its direction; "init-all" applies every
# selected gate at its init site, or none at all (docs/gates.md).
GATE_METHODS = {0: "struct", 1: "init", 2: "init-all"}

# The `shimgen` command's own variable (not the shim's): a traceback for an internal error.
DEBUG = "SHIMGEN_DEBUG"

# Where a launcher puts a process's rank, in the order the shim reads them.
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID",
             "LOCAL_RANK")

# What a build installs: the shim's file name and its manifest's.
# meson's library target: the file is lib<target>.so, its version script lib<target>.map
SHIM_TARGET = "cudashim"
SHIM_LIBRARY = f"lib{SHIM_TARGET}.so"
SHIM_MANIFEST = "shim.json"

# The trace modes, by the number the binary trace file records (its header's `mode`) and
# the name SHIMGEN_TRACE takes (which also takes "1" for counts and "attrs").
TRACE_MODES = {1: "counts", 2: "time", 3: "timeline", 4: "calls"}
# `shimgen run --trace`'s default: the time path, which also records every error return
# (counts does not: docs/performance.md says why the default is not counts).
DEFAULT_TRACE = "time"

# The binary trace file of SHIMGEN_TRACE_DIR (docs/traceformat.md).
TRACE_MAGIC = b"SHIMTRC\n"
TRACE_VERSION = 4
# The versions the reader reads: 3 is 4 without the fields after `fine_hash` (no calls).
TRACE_VERSIONS_READ = (3, 4)
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
# Its header, field by field in order: (name, type, count), the type one of u32, u64, i64,
# char. runtime/tracefile_header.h declares its struct from this list (rendered into facts.h,
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
    # version 4: SHIMGEN_TRACE=calls, each thread's ring of call records (docs/traceformat.md)
    ("calls_ring_off", "u64", 1), ("calls_ring_records", "u64", 1),
    ("calls_record_size", "u32", 1), ("calls_capture_off", "u32", 1),
    ("off_calls_head", "u32", 1), ("calls_string_max", "u32", 1),
)
# SHIMGEN_TRACE=calls: one record per call in its thread's ring (runtime/calls.S writes it,
# shimgen/calls/records.py reads it): its size, where its captured bytes start (strings,
# structs, outputs, per the capture table the build renders from shimgen/calls/), the
# stack arguments a record keeps (cuLaunchKernel's 11 arguments: 6 registers and 5 on the
# stack), the longest string kept (its NUL included), and the ring's records per thread.
CALLS_RECORD_SIZE = 256
CALLS_CAPTURE_OFF = 128
CALLS_STACK_ARGS = 5
CALLS_STRING_MAX = 64
CALLS_RING_DEFAULT = 65536
CALLS_RING_MIN = 1024
CALLS_RING_MAX = 1 << 22
# A capture's kind (the capture table's `kind`): a string read at entry, a struct read at
# entry, an output read after a successful return.
CALLS_CAPTURE_KINDS = {1: "string", 2: "struct", 3: "output"}
_FIELD_TYPES = {"u32": ("uint32_t", "I", 4), "u64": ("uint64_t", "Q", 8),
                "i64": ("int64_t", "q", 8), "char": ("char", "s", 1)}


def trace_header_layout() -> list[tuple[str, str, int, int, str]]:
    """Each header field as (name, C type, count, offset, struct code), in order."""
    out, at = [], 0
    for name, kind, count in TRACE_HEADER:
        ctype, code, size = _FIELD_TYPES[kind]
        assert at % size == 0, name  # (no padding: see TRACE_HEADER)
        out.append((name, ctype, count, at, f"{count}s" if kind == "char" else code))
        at += size * count
    return out

# A run directory (`shimgen run`): its metadata, the traces, the timelines, the notices.
RUNS_DIR = "shimgen-runs"  # the default parent of run directories, in the current directory
RUN_JSON = "run.json"
TRACES = "traces"
TIMELINE = "timeline"
NOTICES = "notices.log"


def trace_header_size() -> int:
    name, kind, count = TRACE_HEADER[-1]
    return trace_header_layout()[-1][3] + _FIELD_TYPES[kind][2] * count
