"""`shimgen probe`: GPU diagnostics with cuda-python, run in child processes without and with
the shim. `gated` asks about the gated capabilities, `p2p` (with `p2p_format`) about GPU
pairs, and `child` builds the environment of every probe and benchmark child process.

Nothing here is imported by the generator; cuda-python is imported only inside a probe.
"""

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


def _child(args, sizes: dict) -> int:
    """--child: this process is the probe; one JSON line (or, with --table, the p2p table)."""
    import json

    if args.shim:
        raise ShimgenError("probe --child probes this process; --shim is for the parent")
    if args.p2p:
        from .p2p import collect_p2p, format_p2p

        data = collect_p2p(**sizes)
        print(format_p2p(data) if args.table else json.dumps(data))
    else:
        from .gated import collect

        print(json.dumps(collect()))
    return 0


def command(args) -> int:
    """`shimgen probe`: each probe in a child process, without and with --shim."""
    from pathlib import Path

    sizes = {k: v for k, v in (("size", args.size), ("count", args.count)) if v is not None}
    if sizes and not args.p2p:
        raise ShimgenError("probe --size and --count go with --p2p")
    if args.child:
        return _child(args, sizes)
    if args.table:
        raise ShimgenError("probe --table goes with --p2p --child")
    driver_bindings()  # cuda-python is there, or one line that says how to install it
    shim = Path(args.shim).absolute() if args.shim else None
    if shim is not None and not shim.is_file():
        raise ShimgenError(f"shim {shim}: no such file")
    if args.p2p:
        from .p2p import report_p2p

        print(report_p2p(shim, **sizes))
    else:
        from .gated import report

        print(report(shim))
    return 0
