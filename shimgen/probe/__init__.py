"""`shimgen probe`: GPU diagnostics with cuda-python, run in child processes without and with
the shim. `gated` asks about the gated capabilities, `p2p` (with `p2p_format`) about GPU
pairs, and `child` builds the environment of every probe and benchmark child process.

Nothing here is imported by the generator; cuda-python is imported only inside a probe.
"""

from __future__ import annotations

from ..cuda import RESULTS
from ..errors import ShimgenError

#: What a user without cuda-python is told to do (README.md, "Build a shim").
INSTALL_HINT = "install the probe extra: pip install '.[probe]'"
#: What a user is told when cuda-python finds no driver to load.
NO_DRIVER = ("no CUDA driver: cuda-python cannot load libcuda.so.1; install the NVIDIA driver "
             "(or run where one is installed)")


def driver_bindings():
    """cuda-python's driver module, or one line that says how to install it."""
    try:
        from cuda.bindings import driver
    except ImportError:
        raise ShimgenError(f"the probe needs cuda-python, which is not installed; "
                           f"{INSTALL_HINT}") from None
    return driver


def result_text(code: int) -> str:
    """A CUresult as shown in the probe tables: "CUDA_ERROR_NO_DEVICE (100)", or
    "error N" for a code cuda.h does not name."""
    return f"{RESULTS[code]} ({code})" if code in RESULTS else f"error {code}"
