"""The names the shim, `shimgen run` and the trace readers share, kept here once: the
environment variables the shim reads, the launchers' rank variables, the binary trace
file's magic, version and suffix, and the layout of a run directory. render.py writes them
into facts.h as #defines for the runtime; run.py, report.py and tracefile.py import them.
This module imports nothing: it is on `shimgen run`'s path."""

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
    "ATTR_OVERRIDE": "SHIMGEN_ATTR_OVERRIDE",
    "GATES": "SHIMGEN_GATES",
    "GATE_METHOD": "SHIMGEN_GATE_METHOD",
}

# Where a launcher puts a process's rank, in the order the shim reads them.
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID",
             "LOCAL_RANK")

# The binary trace file of SHIMGEN_TRACE_DIR (docs/traceformat.md).
TRACE_MAGIC = b"SHIMTRC\n"
TRACE_VERSION = 2
TRACE_SUFFIX = ".shimtrace"

# A run directory (`shimgen run`): its metadata, the traces, the timelines, the notices.
RUNS_DIR = "shimgen-runs"  # the default parent of run directories, in the current directory
RUN_JSON = "run.json"
TRACES = "traces"
TIMELINE = "timeline"
NOTICES = "notices.log"
