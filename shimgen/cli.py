"""The `shimgen` command line. Every failure is one line on stderr and a non-zero exit."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from . import __version__
from .errors import ERROR_PREFIX, Interrupted, ShimgenError, one_line, redeliver_swallowed
from .gates import ALLOW_UNPROVEN
from .runenv import DEBUG

TYPE_CHECKING = False  # typing is not imported at run time: `shimgen run` starts faster
if TYPE_CHECKING:
    import argparse  # imported when a command line needs it (_parser_class)
    from typing import NoReturn

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in shimgen, not a problem with the input
EXIT_PIPE = 141  # 128 + SIGPIPE: whoever read the output went away


def _path_option(value: str | None, option: str, what: str, default) -> Path:
    """A path given with `option`, checked as text; `default()` when it is not given."""
    from .elfnotes import check_path_text  # not elf.py: nothing heavy on `run`'s path

    if value is None:
        return default()
    if not value.strip():
        raise ShimgenError(f"{option}: empty path")
    check_path_text(value, what)
    return Path(value)


def _driver_path(value: str | None) -> Path:
    def default() -> Path:
        from .driver import default_driver

        return default_driver()

    return _path_option(value, "--driver", "driver", default)


def _out_root(value: str | None) -> Path:
    from .model import default_output_root

    root = _path_option(value, "--out", "output directory", default_output_root)
    if "\\" in str(root.absolute()):
        raise ShimgenError(f"output directory {root.absolute()}: the path contains a "
                           "backslash, which meson reads as a path separator; choose a path "
                           "without one")
    return root


def _init_directions(gate) -> str:
    """Which directions of a baked gate SHIMGEN_GATE_METHOD=init can apply."""
    got = [d for d, b in (("set", gate.init_set), ("mask", gate.init_mask)) if b]
    return "/".join(got) or "none"


def _gates_summary(args: argparse.Namespace, plan) -> str:
    """The build summary's gates line: what was asked, what was found, the proof's status."""
    if plan is None:
        return "not asked (--gates auto or --gates PROFILE bakes them in)"
    source = "--gates auto" if args.gates == "auto" else f"profile {args.gates}"
    found = ", ".join(f"{g.name} (attributes {', '.join(map(str, g.attributes))}; init site: "
                      f"{_init_directions(g)})" for g in plan.gates)
    return (f"{found} from {source}, proof {plan.proof}; select at run time with "
            "SHIMGEN_GATES")


def _cmd_build(args: argparse.Namespace) -> int:
    from .pipeline import make_shim

    if args.allow_unproven_gates and args.gates is None:
        raise ShimgenError(f"{ALLOW_UNPROVEN} goes with --gates")
    out_root = _out_root(args.out)
    result = make_shim(_driver_path(args.driver), out_root, gates=args.gates,
                       allow_unproven=args.allow_unproven_gates, out_option=args.out,
                       user_hooks=tuple(args.hook or ()))
    model, plan = result.model, result.model.gates
    driver = model.driver
    data = ", ".join(d.name for d in driver.data) or "none"
    lines = [
        f"driver     {driver.real_path}",
        f"version    {driver.version}   build-id {driver.build_id or 'none'}",
        f"forwarded  {len(model.functions)} functions ({len(model.hooked)} with hooks: "
        f"{', '.join(f.name for f in model.hooked)})",
        f"data       {len(driver.data)} exported objects left in the real library "
        f"(variables cannot be forwarded by code): {data}",
        f"gates      {_gates_summary(args, plan)}",
        *_user_hooks_summary(model),
        f"shim       {result.library}",
        f"time       {result.seconds:.2f} s",
    ]
    print("\n".join(lines))
    return 0


def _user_hooks_summary(model) -> list[str]:
    if model.user is None:
        return []
    from .userhooks import summary

    return summary(model)


def _cmd_hook_header(args: argparse.Namespace) -> int:
    from .render import hook_header

    sys.stdout.write(hook_header())
    return 0


def _add_hook_header(sub) -> None:
    h = sub.add_parser("hook-header", help="print shimgen/hook.h, the header of user hooks "
                                           "(--hook FILE.c; docs/hooks.md)")
    h.set_defaults(func=_cmd_hook_header)


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


def _site(value: str) -> int:
    try:
        v = int(value, 16)
    except ValueError:
        raise _type_error(f"not a hex address: {value!r}") from None
    if v <= 0:
        raise _type_error(f"not an instruction address: {value!r}")
    return v


def _cmd_patch(args: argparse.Namespace) -> int:
    """A patched copy of the driver in -o DIR: the init sites changed, nothing else."""
    from .gates import patch

    gates = [g for g in args.gates.split(",") if g]
    if not gates or len(set(gates)) != len(gates):
        raise ShimgenError(f"--gates {args.gates!r}: name each gate once, comma-separated")
    out = _path_option(args.out, "-o", "output directory", lambda: None)
    profile = _path_option(args.profile, "--profile", "profile", lambda: None)
    return patch.run(_driver_path(args.driver), gates, out, args.mask, profile, args.site or [])


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


def _cmd_run(args: argparse.Namespace) -> int:
    from .run import CommandError, RunOptions, run

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise ShimgenError("run: no command given (shimgen run [OPTIONS] -- COMMAND ...)")
    if args.gate_profile is not None and args.gates is None:
        raise ShimgenError("run --gate-profile goes with --gates")
    if args.gate_profile is not None and args.gate_profile != "auto":
        _path_option(args.gate_profile, "--gate-profile", "gate profile", lambda: None)
    if args.driver is None:
        from .cache import default_driver  # remembered: no `ldconfig -p` at every run

        driver = default_driver()
    else:
        driver = _driver_path(args.driver)
    opts = RunOptions(
        command=command,
        driver=driver,
        driver_given=args.driver is not None,
        trace=args.trace,
        gates=args.gates,
        gate_profile=args.gate_profile,
        out=_path_option(args.out, "-o", "run directory", lambda: None)
        if args.out is not None else None,
        hooks=tuple(args.hook or ()),
    )
    try:
        return run(opts)
    except CommandError as e:  # like a shell: 127 not found, 126 cannot be run
        _say(str(e))
        return e.status


def _add_run(sub) -> None:
    from .run import DEFAULT_TRACE, TRACE_MODES

    r = sub.add_parser("run", help="run a command under the shim (built once per driver and "
                                   "cached) and report its driver calls",
                       description="Run COMMAND and everything it starts under the shim; "
                       "the trace goes to a run directory and the report is printed at the "
                       "end. Exit status: the command's (128+N if signal N killed it).")
    r.add_argument("--driver", help="real libcuda (default: the one ldconfig would pick); "
                                    "also given to the shim as SHIMGEN_DRIVER")
    r.add_argument("--trace", choices=list(TRACE_MODES), default=DEFAULT_TRACE,
                   help=f"counts (calls only), time (calls, times and error returns) or "
                        f"timeline (also a Chrome trace per process); default {DEFAULT_TRACE}")
    r.add_argument("--gates", metavar="SEL",
                   help="gate selection, as SHIMGEN_GATES takes it (gdr,dmabuf or "
                        "-gdr,-dmabuf): runs a shim with gates baked in")
    r.add_argument("--gate-profile", metavar="auto|PROFILE",
                   help="with --gates: the gates baked in ('auto', the default, finds and "
                        "proves them on first use; or a profile from `shimgen gates --json`)")
    r.add_argument("-o", "--out", metavar="DIR",
                   help="run directory, new or empty (default: "
                        "./shimgen-runs/<date>-<time>-<command>)")
    r.add_argument("--hook", action="append", metavar="FILE.c",
                   help="a user hook file compiled into the shim (repeatable; the cached "
                        "shim is keyed by their contents; docs/hooks.md)")
    r.add_argument("command", nargs="...", metavar="-- COMMAND ...",
                   help="the command to run, after --")
    r.set_defaults(func=_cmd_run)


def _cmd_exports(args: argparse.Namespace) -> int:
    from .driver import read_driver

    driver = read_driver(_driver_path(args.driver))
    for f in driver.functions:
        print(f.name)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from .report import report

    if any(not p.strip() for p in args.paths):
        raise ShimgenError("report: empty path")
    fmt = "json" if args.json else "csv" if args.csv else "text"
    sys.stdout.write(report([Path(p) for p in args.paths], by=args.by, fmt=fmt))
    sys.stdout.flush()
    return 0


def _add_report(sub) -> None:
    from .report import BY

    r = sub.add_parser("report", help="summarize the traces of a run (a run directory or "
                                      "trace files), or compare two runs")
    r.add_argument("paths", nargs="+", metavar="PATH",
                   help="one run directory, two run directories to compare, or trace files "
                        "(*.shimtrace, JSON traces) to merge")
    r.add_argument("--by", choices=BY, help="one table per rank or per process")
    out = r.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="JSON (schema shimgen-report)")
    out.add_argument("--csv", action="store_true", help="CSV: one row per group and function")
    r.set_defaults(func=_cmd_report)


def _gates_option(value: str) -> str:
    """--gates: 'auto' or a profile's path, never empty (an empty value would build without
    gates, which nobody asked for)."""
    if not value.strip():
        raise _type_error("empty; give 'auto' or a gate profile's path")
    return value


def _columns() -> int:
    """The terminal's width as shutil.get_terminal_size gives it: COLUMNS, else the
    terminal on stdout, else 80."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return 80


# `shimgen run`'s options that take a value, by the attribute argparse gives each (_add_run).
_RUN_VALUES = {"--driver": "driver", "--trace": "trace", "--gates": "gates",
               "--gate-profile": "gate_profile", "-o": "out", "--out": "out"}


def _fast_run(argv: list[str]):
    """`shimgen run`'s usual command line, parsed without argparse (whose import and parser
    cost `run` 10 to 15 ms at every start): each option of _RUN_VALUES at most once, as
    `OPT VALUE` or `--opt=VALUE`, then the command (after `--`, or from the first word that
    is no option). Anything else (help, an abbreviation, a repeated option, a separate value
    that starts with '-', an unknown --trace mode, no command) gives None, and argparse parses
    the line: it stays the judge of every usage error. Gives what argparse would give."""
    from types import SimpleNamespace

    from .run import DEFAULT_TRACE, TRACE_MODES

    if argv[:1] != ["run"]:
        return None
    got: dict = {}
    i = 1
    while i < len(argv) and argv[i] != "--" and argv[i].startswith("-"):
        opt, eq, value = argv[i].partition("=")
        if opt not in _RUN_VALUES or (eq and not opt.startswith("--")):
            return None
        if not eq:  # OPT VALUE: argparse takes a VALUE that starts with '-' for an option
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                return None
            i += 1
            value = argv[i]
        if _RUN_VALUES[opt] in got:
            return None
        got[_RUN_VALUES[opt]] = value
        i += 1
    command = argv[i:]
    if command in ([], ["--"]) or got.get("trace", DEFAULT_TRACE) not in TRACE_MODES:
        return None
    return SimpleNamespace(command=command, driver=got.get("driver"),
                           trace=got.get("trace", DEFAULT_TRACE), gates=got.get("gates"),
                           gate_profile=got.get("gate_profile"), out=got.get("out"),
                           hook=None, func=_cmd_run)


def _type_error(message: str) -> Exception:
    import argparse

    return argparse.ArgumentTypeError(message)


def _parser_class() -> type:
    """argparse's parser, with a usage error as one line like every other error, and a help
    formatter that finds the terminal's width without importing shutil (and zlib, bz2 and
    lzma with it): argparse makes a formatter for every option it adds. argparse itself is
    imported here, when a command line needs it (`run`'s usual one does not: _fast_run)."""
    import argparse

    class _Formatter(argparse.HelpFormatter):
        def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                     width: int | None = None) -> None:
            super().__init__(prog, indent_increment, max_help_position,
                             _columns() - 2 if width is None else width)

    class _Parser(argparse.ArgumentParser):
        """argparse, with a usage error as one line like every other error, and the formatter
        above."""

        def __init__(self, *args, **kwargs) -> None:
            kwargs.setdefault("formatter_class", _Formatter)
            super().__init__(*args, **kwargs)

        def error(self, message: str) -> NoReturn:
            _say(f"{message} (see `{self.prog} --help`)")
            sys.exit(EXIT_USAGE)

    return _Parser


def _add_build(sub) -> None:
    from .runenv import SHIM_LIBRARY

    b = sub.add_parser("build", help=f"build {SHIM_LIBRARY} for a driver")
    b.add_argument("--driver", help="real libcuda (default: the one ldconfig would pick)")
    b.add_argument("-o", "--out", metavar="DIR", help="output root (default: ./build)")
    b.add_argument("--gates", metavar="auto|PROFILE", type=_gates_option,
                   help="bake gates into the shim: 'auto' finds and proves them now, or a "
                        "profile written by `shimgen gates --json` (its proof must have "
                        "passed)")
    b.add_argument(ALLOW_UNPROVEN, action="store_true",
                   help="with --gates: bake a profile whose emulation proof was not run "
                        "(`shimgen gates --no-proof`) or failed. Unproven gates may write "
                        "the wrong bits of the driver's device state")
    b.add_argument("--hook", action="append", metavar="FILE.c",
                   help="a user hook file compiled into the shim (repeatable; docs/hooks.md)")
    b.set_defaults(func=_cmd_build)


def _add_gates(sub) -> None:
    g = sub.add_parser("gates", help="find the attribute gates in a driver binary")
    g.add_argument("--driver", help="real libcuda (default: the one ldconfig would pick)")
    g.add_argument("--json", help="write the profile here (only if the proof passes, or "
                                  "marked unproven with --no-proof); replaces only an "
                                  "earlier profile")
    g.add_argument("--no-proof", action="store_true",
                   help="skip the emulation proof; the profile records that it is unproven "
                        f"and `build --gates` refuses it without {ALLOW_UNPROVEN}")
    g.set_defaults(func=_cmd_gates)


def _add_patch(sub) -> None:
    pt = sub.add_parser("patch", help="write a copy of the driver with its gates' init sites "
                        "changed (no shim needed: LD_LIBRARY_PATH=DIR)")
    pt.add_argument("--driver", help="real libcuda (default: the one ldconfig would pick); "
                    "only read, never written")
    pt.add_argument("--gates", required=True, metavar="NAME[,NAME]",
                    help="the gates to set (or, with --mask, to mask), e.g. gdr")
    pt.add_argument("--mask", action="store_true",
                    help="the inverse copy: the driver never sets the gates' bits")
    pt.add_argument("-o", "--out", required=True, metavar="DIR",
                    help="where the copy, its libcuda.so.1/libcuda.so links and the manifest go "
                         "(created owner-only; no existing file is replaced)")
    pt.add_argument("--profile", help="a profile from `shimgen gates --json` the driver must "
                    "match (default: discover and prove now)")
    pt.add_argument("--site", action="append", type=_site, metavar="0xADDR",
                    help="change only the chosen instruction at this address (repeatable; "
                         "for finding which site a GPU's driver runs)")
    pt.set_defaults(func=_cmd_patch)


def _add_exports(sub) -> None:
    e = sub.add_parser("exports", help="list the functions a driver exports")
    e.add_argument("--driver", help="real libcuda (default: the one ldconfig would pick)")
    e.set_defaults(func=_cmd_exports)


COMMANDS = {"run": _add_run, "report": _add_report, "build": _add_build, "gates": _add_gates,
            "patch": _add_patch, "probe": _add_probe, "exports": _add_exports,
            "hook-header": _add_hook_header}


def parser(command: str | None = None):
    """The command line; with `command`, only that command's options (each parser argparse
    makes costs about a millisecond, and `shimgen run` starts with every command it runs)."""
    p = _parser_class()(
        prog="shimgen",
        description="Generate and build a complete forwarding shim for libcuda.",
    )
    p.add_argument("--version", action="version", version=f"shimgen {__version__}")
    # prog given: argparse would otherwise make a help formatter now, which imports shutil
    sub = p.add_subparsers(dest="command", required=True, prog="shimgen")
    for name, add in COMMANDS.items():
        if command in (None, name):
            add(sub)
    return p


def _glue_dash_values(argv: list[str]) -> list[str]:
    """`--gates -gdr,-dmabuf` as `--gates=-gdr,-dmabuf`: argparse would take a value that
    starts with '-' for an option. Only before `--` (what follows is the command's)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--":
            return out + argv[i:]
        if argv[i] == "--gates" and i + 1 < len(argv) and argv[i + 1].startswith("-") \
                and argv[i + 1] != "--":
            out.append(f"--gates={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


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
    words = sys.argv[1:] if argv is None else argv
    command = words[0] if words else None
    try:
        sys.unraisablehook = redeliver_swallowed(unraisable)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup, `cmd &` in a script
                try:
                    handlers[sig] = signal.signal(sig, _raise_interrupted)
                except ValueError:  # not the main thread: Python delivers signals there only
                    break
        argv = _glue_dash_values(sys.argv[1:] if argv is None else argv)
        args = _fast_run(argv) or parser(
            argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
        return int(args.func(args))
    except ShimgenError as e:
        _say(str(e))
        return EXIT_ERROR
    except Interrupted as e:
        _say(e.message(command))
        return 128 + e.signum
    except KeyboardInterrupt:
        _say(Interrupted(signal.SIGINT).message(command))
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
            _say(cause.message(command))
            return 128 + cause.signum
        if os.environ.get(DEBUG):
            raise
        _say(f"internal error, please report it: {type(e).__name__}: {e} "
             "(SHIMGEN_DEBUG=1 shows where)")
        return EXIT_INTERNAL
    finally:
        for sig, old in handlers.items():
            signal.signal(sig, old)
        sys.unraisablehook = unraisable

