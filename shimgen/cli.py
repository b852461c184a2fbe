"""The `shimgen` command line. Every failure is one line on stderr and a non-zero exit."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import NoReturn

from . import __version__
from .errors import ERROR_PREFIX, Interrupted, ShimgenError, one_line, redeliver_swallowed
from .gates import ALLOW_UNPROVEN

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in shimgen, not a problem with the input
EXIT_PIPE = 141  # 128 + SIGPIPE: whoever read the output went away


def _path_option(value: str | None, option: str, what: str, default) -> Path:
    """A path given with `option`, checked as text; `default()` when it is not given."""
    from .elf import check_path_text

    if value is None:
        return default()
    if not value.strip():
        raise ShimgenError(f"{option}: empty path")
    check_path_text(value, what)
    return Path(value)


def _driver_path(value: str | None) -> Path:
    from .driver import default_driver

    return _path_option(value, "--driver", "driver", default_driver)


def _out_root(value: str | None) -> Path:
    from .model import default_output_root

    root = _path_option(value, "--out", "output directory", default_output_root)
    if "\\" in str(root.absolute()):
        raise ShimgenError(f"output directory {root.absolute()}: the path contains a "
                           "backslash, which meson reads as a path separator; choose a path "
                           "without one")
    return root


def _gates_summary(args: argparse.Namespace, plan) -> str:
    """The build summary's gates line: what was asked, what was found, the proof's status."""
    if plan is None:
        return "not asked (--gates auto or --gates PROFILE bakes them in)"
    source = "--gates auto" if args.gates == "auto" else f"profile {args.gates}"
    found = ", ".join(f"{g.name} (attributes {', '.join(map(str, g.attributes))})"
                      for g in plan.gates)
    return (f"{found} from {source}, proof {plan.proof}; select at run time with "
            "SHIMGEN_GATES")


def _cmd_build(args: argparse.Namespace) -> int:
    from .build import build
    from .driver import read_driver
    from .model import build_model

    if args.allow_unproven_gates and args.gates is None:
        raise ShimgenError(f"{ALLOW_UNPROVEN} goes with --gates")
    out_root = _out_root(args.out)
    driver = read_driver(_driver_path(args.driver))
    argv = ["shimgen", "build", "--driver", str(driver.path)]
    if args.out is not None:
        argv += ["--out", str(args.out)]
    plan = None
    if args.gates is not None:
        from .gates.plan import load_plan

        gates_arg = args.gates if args.gates == "auto" else str(Path(args.gates).absolute())
        argv += ["--gates", gates_arg] + ([ALLOW_UNPROVEN] if args.allow_unproven_gates else [])
        plan = load_plan(driver, gates_arg, allow_unproven=args.allow_unproven_gates)
    model = build_model(driver, argv, gates=plan)
    result = build(model, out_root)
    data = ", ".join(d.name for d in driver.data) or "none"
    lines = [
        f"driver     {driver.real_path}",
        f"version    {driver.version}   build-id {driver.build_id or 'none'}",
        f"forwarded  {len(model.functions)} functions ({len(model.hooked)} with hooks: "
        f"{', '.join(f.name for f in model.hooked)})",
        f"data       {len(driver.data)} exported objects left in the real library "
        f"(variables cannot be forwarded by code): {data}",
        f"gates      {_gates_summary(args, plan)}",
        f"shim       {result.library}",
        f"time       {result.seconds:.2f} s",
    ]
    print("\n".join(lines))
    return 0


def _cmd_gates(args: argparse.Namespace) -> int:
    """Exit 0: the profile found (proven unless --no-proof) and written; a failure is one
    line and EXIT_ERROR like every other command: a driver refused or its layout not
    understood, a failed proof (nothing written), an output path that cannot be written
    (checked before the analysis)."""
    from .elf import read_image
    from .gates import report
    from .outfile import check_target

    path = _driver_path(args.driver)
    json_out = None
    if args.json is not None:
        json_out = _path_option(args.json, "--json", "profile", lambda: None)
        check_target(json_out, "--json", report.is_profile)
    return report.run(read_image(path), json_out, proof=not args.no_proof)


# ---- shimgen probe: its options and what it runs -----------------------------------------

def _cmd_probe(args: argparse.Namespace) -> int:
    import json

    sizes = {k: v for k, v in (("size", args.size), ("count", args.count)) if v is not None}
    if sizes and not args.p2p:
        raise ShimgenError("probe --size and --count go with --p2p")
    if args.child:  # this process is the probe: one JSON line (or the p2p table)
        if args.shim:
            raise ShimgenError("probe --child probes this process; --shim is for the parent")
        if args.p2p:
            from .probe.p2p import collect_p2p, format_p2p

            data = collect_p2p(**sizes)
            print(format_p2p(data) if args.table else json.dumps(data))
        else:
            from .probe.gated import collect

            print(json.dumps(collect()))
        return 0
    if args.table:
        raise ShimgenError("probe --table goes with --p2p --child")
    from .probe import driver_bindings

    driver_bindings()  # cuda-python is there, or one line that says how to install it
    shim = Path(args.shim).absolute() if args.shim else None
    if shim is not None and not shim.is_file():
        raise ShimgenError(f"shim {shim}: no such file")
    if args.p2p:
        from .probe.p2p import report_p2p

        print(report_p2p(shim, **sizes))
    else:
        from .probe.gated import report

        print(report(shim))
    return 0


def _add_probe(sub) -> None:
    pr = sub.add_parser("probe", help="gated attributes, DMA-BUF export and GPUDirect RDMA "
                                      "allocation on this machine's GPUs (cuda-python)")
    pr.add_argument("--shim", help="also run with LD_PRELOAD of this shim and compare")
    pr.add_argument("--p2p", action="store_true",
                    help="peer-to-peer: cuDeviceCanAccessPeer, P2P attributes and measured "
                         "peer vs host-bounce copy bandwidth for every GPU pair")
    pr.add_argument("--size", type=int, help="with --p2p: bytes per copy (default 128 MiB)")
    pr.add_argument("--count", type=int,
                    help="with --p2p: timed copies per measurement (default 10)")
    pr.add_argument("--child", action="store_true",
                    help="probe this process and print its answers as one JSON line (what "
                         "each child process of `shimgen probe` runs)")
    pr.add_argument("--table", action="store_true",
                    help="with --p2p --child: print the table instead of JSON")
    pr.set_defaults(func=_cmd_probe)


def _cmd_exports(args: argparse.Namespace) -> int:
    from .driver import read_driver

    driver = read_driver(_driver_path(args.driver))
    for f in driver.functions:
        print(f.name)
    return 0


def _gates_option(value: str) -> str:
    """--gates: 'auto' or a profile's path, never empty (an empty value would build without
    gates, which nobody asked for)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("empty; give 'auto' or a gate profile's path")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line like every other error."""

    def error(self, message: str) -> NoReturn:
        _say(f"{message} (see `{self.prog} --help`)")
        sys.exit(EXIT_USAGE)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="shimgen",
        description="Generate and build a complete forwarding shim for libcuda.",
    )
    p.add_argument("--version", action="version", version=f"shimgen {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="build libcudashim.so for a driver")
    b.add_argument("--driver", help="real libcuda (default: the one ldconfig would pick)")
    b.add_argument("--out", help="output root (default: ./build)")
    b.add_argument("--gates", metavar="auto|PROFILE", type=_gates_option,
                   help="bake gates into the shim: 'auto' finds and proves them now, or a "
                        "profile written by `shimgen gates --json` (its proof must have "
                        "passed)")
    b.add_argument(ALLOW_UNPROVEN, action="store_true",
                   help="with --gates: bake a profile whose emulation proof was not run "
                        "(`shimgen gates --no-proof`) or failed. Unproven gates may write "
                        "the wrong bits of the driver's device state")
    b.set_defaults(func=_cmd_build)

    g = sub.add_parser("gates", help="find the attribute gates in a driver binary")
    g.add_argument("--driver", help="real libcuda (default: the one ldconfig would pick)")
    g.add_argument("--json", help="write the profile here (only if the proof passes, or "
                                  "marked unproven with --no-proof); replaces only an "
                                  "earlier profile")
    g.add_argument("--no-proof", action="store_true",
                   help="skip the emulation proof; the profile records that it is unproven "
                        f"and `build --gates` refuses it without {ALLOW_UNPROVEN}")
    g.set_defaults(func=_cmd_gates)

    _add_probe(sub)

    e = sub.add_parser("exports", help="list the functions a driver exports")
    e.add_argument("--driver", help="real libcuda (default: the one ldconfig would pick)")
    e.set_defaults(func=_cmd_exports)
    return p


def _say(message: str) -> None:
    """One line on stderr. A closed or broken stderr is no reason for a traceback."""
    try:
        print(f"{ERROR_PREFIX}{one_line(message)}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _raise_interrupted(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


def _interrupt_inside(e: BaseException) -> Interrupted | None:
    """The interrupt that caused `e`, if one did, through its chain of causes."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt):
            return e if isinstance(e, Interrupted) else Interrupted(signal.SIGINT)
        e = e.__cause__ or e.__context__
    return None


def main(argv: list[str] | None = None) -> int:
    """Run one command. Whatever happens, the result is an exit status and at most one line
    on stderr: ShimgenError (bad input, failed build) exits 1; an interruption (SIGINT,
    SIGTERM, SIGHUP) exits 128 + the signal; a bug in shimgen exits 70 with its type and
    message (SHIMGEN_DEBUG=1 shows the traceback)."""
    handlers: dict = {}
    unraisable = sys.unraisablehook
    try:
        sys.unraisablehook = redeliver_swallowed(unraisable)
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup, `cmd &` in a script
                    handlers[sig] = signal.signal(sig, _raise_interrupted)
        args = parser().parse_args(argv)
        return int(args.func(args))
    except ShimgenError as e:
        _say(str(e))
        return EXIT_ERROR
    except Interrupted as e:
        _say(e.message())
        return 128 + e.signum
    except KeyboardInterrupt:
        _say(Interrupted(signal.SIGINT).message())
        return 128 + signal.SIGINT
    except BrokenPipeError:
        # stdout was closed early (`shimgen exports | head`): nothing more to say to anyone.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_PIPE
    except OSError as e:
        where = f": {e.filename}" if e.filename else ""
        _say(f"{e.strerror or e}{where}")
        return EXIT_ERROR
    except Exception as e:
        cause = _interrupt_inside(e)
        if cause is not None:  # Python wrapped it (e.g. an error calling __set_name__)
            _say(cause.message())
            return 128 + cause.signum
        if os.environ.get("SHIMGEN_DEBUG"):
            raise
        _say(f"internal error, please report it: {type(e).__name__}: {e} "
             "(SHIMGEN_DEBUG=1 shows where)")
        return EXIT_INTERNAL
    finally:
        for sig, old in handlers.items():
            signal.signal(sig, old)
        sys.unraisablehook = unraisable

