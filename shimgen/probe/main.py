"""`shimgen probe`: each probe in a child process, without and with --shim; --child is the
probe itself."""

from __future__ import annotations

from ..errors import ShimgenError
from .bindings import driver_bindings


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
