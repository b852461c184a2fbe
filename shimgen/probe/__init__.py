"""`shimgen probe`: GPU diagnostics with cuda-python, run in child processes without and with
the shim. `gated` asks about the gated capabilities, `p2p` (with `p2p_format`) about GPU
pairs, and `child` builds the environment of every probe and benchmark child process.

Nothing here is imported by the generator; cuda-python is imported only inside a probe.
"""

from __future__ import annotations

from ..cuda import RESULTS


def result_text(code: int) -> str:
    """A CUresult as shown in the probe tables: "CUDA_ERROR_NO_DEVICE (100)", or
    "error N" for a code cuda.h does not name."""
    return f"{RESULTS[code]} ({code})" if code in RESULTS else f"error {code}"
