"""cuda-python's driver module for the probes, what a user is told without it or without a
driver, and a CUresult as the probe tables show it."""

from __future__ import annotations

from ..cuda import RESULTS
from ..errors import ShimgenError

#: What a user without cuda-python is told to do (README.md, "More"; docs/run.md).
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
