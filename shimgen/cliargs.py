"""The command line's grammar: every command's options, its description and an example.
An option that several commands take (`--driver`, `-o`, `--gates`, `--json`) is defined once
here, with one meaning: `--gates` is a gate selection (run, patch), `--gate-profile` the gates
baked in (run, build, patch). An old spelling that meant something else is kept hidden, and
says what it became when used. cli.py parses with it and dispatches; each command's work is a
`command(args)` function in the module that `COMMANDS` names, imported only when it runs."""

from __future__ import annotations

import os
import sys

from .clihelp import DESCRIPTIONS
from .gates import ALLOW_UNPROVEN
from .runenv import CALLS_RING_DEFAULT, DEFAULT_TRACE, TRACE_MODES

TYPE_CHECKING = False  # typing is not imported at run time: `shimgen run` starts faster
if TYPE_CHECKING:
    from typing import NoReturn

EXIT_USAGE = 2

#: command -> the function that does its work, "module:function" (imported when it runs).
COMMANDS = {
    "run": "shimgen.run:command", "report": "shimgen.report:command",
    "build": "shimgen.shim:command", "gates": "shimgen.gates:command",
    "patch": "shimgen.gates:patch_command", "probe": "shimgen.probe:command",
    "exports": "shimgen.shim:list_exports", "diff": "shimgen.diff:command",
    "hook-header": "shimgen.shim:header_command",
    "top": "shimgen.top:command",
}

_DRIVER_HELP = "the real libcuda (default: the one `ldconfig -p` would pick)"


class Option:
    """One option of `shimgen run` (RUN_OPTIONS): argparse's parser and the fast parser of a
    usual `run` line (fast_run) are both made from it. (A plain class: dataclasses is not
    imported on `run`'s cached path.)"""

    __slots__ = ("flags", "dest", "help", "metavar", "choices", "default", "repeat", "flag")

    def __init__(self, flags: tuple[str, ...], dest: str, help: str, *,
                 metavar: str | None = None, choices: tuple[str, ...] | None = None,
                 default: str | None = None, repeat: bool = False, flag: bool = False) -> None:
        self.flags, self.dest, self.help, self.metavar = flags, dest, help, metavar
        self.choices, self.default = choices, False if flag else default
        self.repeat, self.flag = repeat, flag  # repeatable (append); no value (store_true)


RUN_OPTIONS = (
    Option(("--driver",), "driver", f"{_DRIVER_HELP}; also given to the shim as SHIMGEN_DRIVER",
           metavar="P"),
    Option(("--trace",), "trace", "counts (calls only), time (calls, times and error "
           "returns), timeline (also a Chrome trace per process) or calls (also each call "
           "with its arguments and result, `report --calls`, and the Chrome trace with "
           "them); default " + DEFAULT_TRACE,
           choices=tuple(TRACE_MODES.values()), default=DEFAULT_TRACE),
    Option(("--gates",), "gates", "gate selection, as SHIMGEN_GATES takes it (gdr,dmabuf or "
           "-gdr,-dmabuf): runs a shim with gates baked in", metavar="SEL"),
    Option(("--gate-profile",), "gate_profile", "with --gates: the gates baked in ('auto', "
           "the default, finds and proves them on first use; or a profile from `shimgen gates "
           "--json FILE`)", metavar="auto|PROFILE"),
    Option(("-o", "--out"), "out", "run directory, new or empty (default: "
           "./shimgen-runs/<date>-<time>-<command>)", metavar="DIR"),
    Option(("--force",), "force", "with -o DIR: replace a finished run of yours there", flag=True),
    Option(("--inject",), "inject", "fail chosen driver calls on purpose: "
           "PATTERN=RESULT[,KEY=VALUE...], e.g. cuMemAlloc_v2=CUDA_ERROR_OUT_OF_MEMORY,nth=3 "
           "(repeatable; docs/inject.md)", metavar="RULE", repeat=True),
    Option(("--limit",), "limit", "limit what the command may take: memory=SIZE, device "
           "memory per process and device (200MiB, 2GiB); job-memory=SIZE, device memory per "
           "device of all the command's processes together; allocations past either fail with "
           "CUDA_ERROR_OUT_OF_MEMORY (docs/memory.md)", metavar="memory=SIZE|job-memory=SIZE",
           repeat=True),
    Option(("--limit-group",), "limit_group", "share --limit job-memory's budget with the "
           "other runs of group NAME on this machine (a name, or a directory's path; default "
           "$SHIMGEN_LIMIT_GROUP); the group's first run fixes its size", metavar="NAME|DIR"),
    Option(("--calls-ring",), "calls_ring", "with --trace calls: the last N calls each "
           f"thread keeps (default {CALLS_RING_DEFAULT})", metavar="N"),
    Option(("--hook",), "hook", "a user hook file compiled into the shim (repeatable; the "
           "cached shim is keyed by their contents; docs/hooks.md)", metavar="FILE.c", repeat=True),
    Option(("--gpu-time",), "gpu_time", "time each kernel launch on the GPU by the driver's "
           "events (no CUPTI): GPU time per kernel in the report, a GPU track per stream in the "
           "calls timeline; every=N times one launch in N (docs/run.md)", metavar="[every=N]"),
    Option(("--stall",), "stall", "say (on stderr and in notices.log) when a process has been "
           "inside one driver call longer than SECONDS, and when it left it (time modes; "
           "default: off)", metavar="SECONDS"),
)


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


def type_error(message: str) -> Exception:
    import argparse

    return argparse.ArgumentTypeError(message)


def parser_class(say) -> type:
    """argparse's parser, with a usage error as one line (`say`) and exit 2, and a help
    formatter that keeps the descriptions as written and finds the terminal's width without
    importing shutil (and zlib, bz2 and lzma with it): argparse makes a formatter for every
    option it adds. argparse itself is imported here, when a command line needs it (`run`'s
    usual one does not: fast_run)."""
    import argparse

    class _Formatter(argparse.RawDescriptionHelpFormatter):
        def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                     width: int | None = None) -> None:
            super().__init__(prog, indent_increment, max_help_position,
                             _columns() - 2 if width is None else width)

    class _Parser(argparse.ArgumentParser):
        def __init__(self, *args, **kwargs) -> None:
            kwargs.setdefault("formatter_class", _Formatter)
            super().__init__(*args, **kwargs)

        def error(self, message: str) -> NoReturn:
            say(f"{message} (see `{self.prog} --help`)")
            sys.exit(EXIT_USAGE)

    return _Parser


def _command(sub, name: str):
    help_line, description, example = DESCRIPTIONS[name]
    p = sub.add_parser(name, help=help_line, description=description, epilog=example)
    p.set_defaults(func=COMMANDS[name])
    return p


def _driver(p, extra: str = "") -> None:
    p.add_argument("--driver", metavar="P", help=_DRIVER_HELP + extra)


def _not_empty(value: str) -> str:
    """--gates/--gate-profile of build: 'auto' or a profile's path, never empty (an empty
    value would build without gates, which nobody asked for)."""
    if not value.strip():
        raise type_error("empty; give 'auto' or a gate profile's path")
    return value


def _site(value: str) -> int:
    try:
        v = int(value, 16)
    except ValueError:
        raise type_error(f"not a hex address: {value!r}") from None
    if v <= 0:
        raise type_error(f"not an instruction address: {value!r}")
    return v


def _add_run(sub) -> None:
    r = _command(sub, "run")
    for o in RUN_OPTIONS:
        kw = {"metavar": o.metavar} if o.metavar else {}
        if o.choices:
            kw["choices"] = list(o.choices)
        r.add_argument(*o.flags, dest=o.dest, default=[] if o.repeat else o.default,
                       action="store_true" if o.flag else "append" if o.repeat else "store",
                       help=o.help, **kw)
    r.add_argument("command", nargs="...", metavar="-- COMMAND ...",
                   help="the command to run, after --")


def _add_report(sub) -> None:
    from .report import BY

    r = _command(sub, "report")
    r.add_argument("paths", nargs="+", metavar="PATH",
                   help="one run directory, two run directories to compare, or trace files "
                        "(*.shimtrace, JSON traces) to merge")
    r.add_argument("--by", choices=BY, help="one table per rank, process or host (a run's "
                   "nodes); kernel: the launch functions' rows split by kernel")
    r.add_argument("--mangled", action="store_true",
                   help="kernels' names as the driver has them, not demangled")
    out = r.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="JSON (schema shimgen-report)")
    out.add_argument("--csv", action="store_true", help="CSV: one row per group and function")
    c = r.add_argument_group("decoded calls (a run traced with --trace calls)")
    c.add_argument("--calls", action="store_true",
                   help="every call with its arguments, outputs and result, one line each")
    c.add_argument("--function", metavar="GLOB", help="with --calls: functions matching GLOB")
    c.add_argument("--errors", action="store_true", help="with --calls: failed calls only")
    c.add_argument("--last", metavar="N", type=int, help="with --calls: the last N per thread")
    c.add_argument("--pid", metavar="N", type=int, help="with --calls: this process only")
    c.add_argument("--rank", metavar="R", help="with --calls: this rank only")
    c.add_argument("--sqlite", metavar="FILE",
                   help="with --calls: write them as table `calls` of FILE (prints a summary)")
    c.add_argument("--times", choices=("start", "relative", "absolute"),
                   help="with --calls: each line's first number: seconds since the run's "
                        "first process began (start, the default), since the line before "
                        "(relative, as strace -r) or the time of day (absolute, as strace -tt)")
    c.add_argument("--first-difference", action="store_true",
                   help="with --calls, two runs: the first call where they part (exit as diff)")
    c.add_argument("--addresses", action="store_true",
                   help="with --first-difference: addresses differ too (ignored by default)")


def _add_build(sub) -> None:
    import argparse

    b = _command(sub, "build")
    _driver(b)
    b.add_argument("-o", "--out", metavar="DIR", help="output root (default: ./build)")
    which = b.add_mutually_exclusive_group()
    which.add_argument("--gate-profile", dest="gates", metavar="auto|PROFILE", type=_not_empty,
                       help="bake gates into the shim: 'auto' finds and proves them now, or a "
                            "profile written by `shimgen gates --json FILE` (its proof must "
                            "have passed); select them at run time with SHIMGEN_GATES")
    # --gate-profile's first name, kept for scripts: pipeline.command says what it became,
    # and refuses a selection (`--gates gdr`), which is what --gates means in run and patch
    which.add_argument("--gates", dest="old_gates", type=_not_empty, help=argparse.SUPPRESS)
    b.add_argument(ALLOW_UNPROVEN, action="store_true",
                   help="with --gate-profile: bake a profile whose emulation proof was not "
                        "run (`shimgen gates --no-proof`) or failed. Unproven gates may "
                        "write the wrong bits of the driver's device state")
    b.add_argument("--hook", action="append", metavar="FILE.c",
                   help="a user hook file compiled into the shim (repeatable; docs/hooks.md)")
    b.add_argument("--nvml", nargs="?", const=True, metavar="PATH",
                   help="build the NVML shim (libnvidia-ml.so.1) alone, from PATH (default: "
                        "the installed libnvidia-ml.so.1), for LD_PRELOAD by hand "
                        "(docs/memory.md)")


def _add_gates(sub) -> None:
    g = _command(sub, "gates")
    _driver(g)
    g.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help="the profile as JSON: on stdout, instead of the table, or written "
                        "to FILE (only if the proof passes, or marked unproven with "
                        "--no-proof; replaces only an earlier profile)")
    g.add_argument("--no-proof", action="store_true",
                   help="skip the emulation proof; the profile records that it is unproven "
                        f"and `build --gate-profile` refuses it without {ALLOW_UNPROVEN}")
    g.add_argument("-v", "--detail", action="store_true",
                   help="after the verdict: the reader, the device table, each gate's fields, "
                        "init-site instructions and bytes, every attribute's case and each "
                        "check of the proof")


def _add_patch(sub) -> None:
    pt = _command(sub, "patch")
    _driver(pt, "; only read, never written")
    pt.add_argument("--gates", required=True, metavar="SEL",
                    help="the gates to set (or, with --mask, to mask), comma-separated, e.g. "
                         "gdr or gdr,dmabuf")
    pt.add_argument("--mask", action="store_true",
                    help="the inverse copy: the driver never sets the gates' bits")
    pt.add_argument("-o", "--out", required=True, metavar="DIR",
                    help="where the copy, its libcuda.so.1/libcuda.so links and the manifest go "
                         "(created owner-only; no existing file is replaced)")
    pt.add_argument("--gate-profile", "--profile", dest="profile", metavar="PROFILE",
                    help="a profile from `shimgen gates --json FILE` the driver must match "
                         "(default: discover and prove now)")
    pt.add_argument("--site", action="append", type=_site, metavar="0xADDR",
                    help="change only the chosen instruction at this address (repeatable; "
                         "for finding which site a GPU's driver runs)")


def _add_probe(sub) -> None:
    import argparse

    pr = _command(sub, "probe")
    pr.add_argument("--shim", metavar="LIB",
                    help="also run with LD_PRELOAD of this shim and compare")
    pr.add_argument("--p2p", action="store_true",
                    help="peer-to-peer: cuDeviceCanAccessPeer, P2P attributes and measured "
                         "peer vs host-bounce copy bandwidth for every GPU pair")
    pr.add_argument("--size", type=int, help="with --p2p: bytes per copy (default 128 MiB)")
    pr.add_argument("--count", type=int,
                    help="with --p2p: timed copies per measurement (default 10)")
    # What each probed process runs (shimgen/probe/child.py), and its table form: the probe's
    # own plumbing, kept out of --help (docs/multigpu.md shows the one use a person has).
    pr.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    pr.add_argument("--table", action="store_true", help=argparse.SUPPRESS)


def _add_exports(sub) -> None:
    _driver(_command(sub, "exports"), "; or a libnvidia-ml (NVML), told by its SONAME")


def _add_hook_header(sub) -> None:
    _command(sub, "hook-header")


def _add_diff(sub) -> None:
    import argparse

    d = _command(sub, "diff")
    d.add_argument("old", metavar="OLD", help="the driver now (a file, or a directory "
                   "holding libcuda.so.1); or two NVML libraries (libnvidia-ml.so.1): their "
                   "exports compared")
    d.add_argument("new", metavar="NEW", help="the driver after the upgrade")
    d.add_argument("--json", action="store_true", help="JSON (schema shimgen-diff/1): every "
                   "span of every name")
    d.add_argument("-v", "--verbose", action="store_true",
                   help="list each name of a change that many names share (the text groups "
                        "them into one line with their count)")
    d.add_argument("--hook", action="append", metavar="FILE.c",
                   help="a hook file: which of its names vanish or change (repeatable)")
    on = d.add_mutually_exclusive_group()
    on.add_argument("--no-gates", action="store_true",
                    help="do not compare the gates (compared by default: about a second per "
                         "driver)")
    # once a switch for the default; --gates is a selection in run and patch (said when used)
    on.add_argument("--gates", action="store_true", help=argparse.SUPPRESS)


def _add_top(sub) -> None:
    t = _command(sub, "top")
    t.add_argument("run", metavar="RUN", help="a run directory (of one node, or of several)")
    t.add_argument("--once", action="store_true",
                   help="print one snapshot and exit (also when stdout is no terminal)")
    t.add_argument("--json", action="store_true", help="with --once: JSON (schema shimgen-top)")
    t.add_argument("--functions", action="store_true",
                   help="also the hottest driver functions of the job: calls per second and "
                        "share of the time in driver calls")
    t.add_argument("--pid", metavar="N", type=int,
                   help="the hottest functions of this process only (implies --functions)")


_ADD = {"run": _add_run, "report": _add_report, "top": _add_top, "build": _add_build,
        "gates": _add_gates, "patch": _add_patch, "probe": _add_probe, "exports": _add_exports,
        "diff": _add_diff, "hook-header": _add_hook_header}


def parser(say, version: str, command: str | None = None):
    """The command line; with `command`, only that command's options (each parser argparse
    makes costs about a millisecond, and `shimgen run` starts with every command it runs)."""
    p = parser_class(say)(
        prog="shimgen",
        description="Generate and build a complete forwarding shim for libcuda, run\n"
                    "programs under it, and report their driver calls.",
        epilog="`shimgen COMMAND --help` describes each command, with an example.",
    )
    p.add_argument("--version", action="version", version=f"shimgen {version}")
    # prog given: argparse would otherwise make a help formatter now, which imports shutil
    sub = p.add_subparsers(dest="subcommand", required=True, prog="shimgen", metavar="COMMAND")
    for name, add in _ADD.items():
        if command in (None, name):
            add(sub)
    return p


_RUN_VALUES = {flag: o for o in RUN_OPTIONS for flag in o.flags}


def fast_run(argv: list[str]):
    """`shimgen run`'s usual command line, parsed without argparse (whose import and parser
    cost `run` 10 to 15 ms at every start), from the same RUN_OPTIONS: each option at most
    once (a repeatable one any number of times), as `OPT VALUE` or `--opt=VALUE`, then the
    command (after `--`, or from the first word that is no option). Anything else (help, an
    abbreviation, a repeated option, a separate value that starts with '-', a value not
    among the choices, no command) gives None, and argparse parses the line: it stays the
    judge of every usage error. Gives what argparse would give."""
    from types import SimpleNamespace

    if argv[:1] != ["run"]:
        return None
    got: dict = {o.dest: [] if o.repeat else o.default for o in RUN_OPTIONS}
    seen: set[str] = set()
    i = 1
    while i < len(argv) and argv[i] != "--" and argv[i].startswith("-"):
        flag, eq, value = argv[i].partition("=")
        o = _RUN_VALUES.get(flag)
        if o is None or (eq and (o.flag or not flag.startswith("--"))):
            return None
        if o.flag:  # no value
            value = True
        elif not eq:  # OPT VALUE: argparse takes a VALUE that starts with '-' for an option
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                return None
            i += 1
            value = argv[i]
        if (o.dest in seen and not o.repeat) or (o.choices and value not in o.choices):
            return None
        seen.add(o.dest)
        if o.repeat:
            got[o.dest].append(value)
        else:
            got[o.dest] = value
        i += 1
    command = argv[i:]
    if command in ([], ["--"]):
        return None
    return SimpleNamespace(**got, command=command, subcommand="run", func=COMMANDS["run"])

