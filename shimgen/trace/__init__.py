"""The traces the shim writes, read: binary.py the binary trace files of SHIMGEN_TRACE_DIR
(blocks.py sums their blocks), jsonfile.py the JSON trace of SHIMGEN_TRACE_FILE, both into
model.py's one shape of a process's trace (read by `shimgen report` and `shimgen run` alike);
inflight.py the calls a process has in progress, live.py whether it runs (and the parts nodes
made of a run directory), job.py a whole job now (report, top, run --stall), cmdline.py a
live process's command line; memory.py the device memory ledger of a binary trace file,
kernels.py its kernels and streams; budget.py the books of a shared memory budget.
"""

from .. import face

__getattr__, __all__ = face(__name__, {
    "HIST_BUCKETS": "model",
    "HOST": "memory",
    "KernelsError": "kernels",
    "read_kernels": "kernels",
    "stream_text": "kernels",
    "NOT_FINISHED": "model",
    "NO_ERROR_COUNTS": "jsonfile",
    "NO_ROOM": "model",
    "NotATrace": "jsonfile",
    "ProcessTrace": "model",
    "binary": "binary:",
    "budget": "budget:",
    "command_line": "cmdline",
    "inflight": "inflight:",
    "job": "job:",
    "live": "live:",
    "jsonfile": "jsonfile:",
    "read_json": "jsonfile",
    "tick_segments": "model",
})
