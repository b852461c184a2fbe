"""The `shimgen` command line: parse (cliargs.py) and dispatch to the command's module.
Every failure is one line on stderr and a non-zero exit."""

from __future__ import annotations

import os
import signal
import sys

from . import __version__
from .cliargs import COMMANDS, EXIT_USAGE, fast_run
from .cliargs import parser as _parser
from .errors import (
    INTERRUPTS,
    Interrupted,
    ShimgenError,
    UsageError,
    quiet_unraisable,
    raise_interrupted,
    raise_swallowed,
    redeliver_swallowed,
    said,
    say,
)
from .runenv import DEBUG

EXIT_ERROR = 1
__all__ = ["EXIT_ERROR", "EXIT_USAGE", "EXIT_INTERNAL", "EXIT_PIPE", "main", "parser"]
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in shimgen, not a problem with the input
EXIT_PIPE = 141  # 128 + SIGPIPE: whoever read the output went away


def glue_dash_values(argv: list[str]) -> list[str]:
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


def glue_gpu_time(argv: list[str]) -> list[str]:
    """`run --gpu-time` as `--gpu-time=1`, `--gpu-time every=N` as `--gpu-time=every=N`: its
    value is optional, and argparse would take the command's first word for it. Only among
    run's options (up to `--` or the first word that is neither an option nor its value)."""
    from .cliargs import RUN_OPTIONS
    from .runenv import KGPU_EVERY

    if argv[:1] != ["run"]:
        return argv
    valued = {f for o in RUN_OPTIONS if not o.flag for f in o.flags}
    i = 1
    while i < len(argv) and argv[i] != "--" and argv[i].startswith("-"):
        if argv[i] == "--gpu-time":
            every = i + 1 < len(argv) and argv[i + 1].startswith(KGPU_EVERY)
            return argv[:i] + [f"--gpu-time={argv[i + 1] if every else '1'}"] + \
                argv[i + 1 + every:]
        i += 2 if argv[i] in valued else 1
    return argv


def parser(command: str | None = None):
    """The command line (cliargs.parser); with `command`, only that command's options."""
    return _parser(say, __version__, command)


def _interrupt_inside(e: BaseException) -> Interrupted | None:
    """The interrupt that caused `e`, if one did, through its chain of causes."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt):
            return e if isinstance(e, Interrupted) else Interrupted(signal.SIGINT)
        e = e.__cause__ or e.__context__
    return None


def _said_interrupted(e: Interrupted, command: str | None) -> int:
    """The interrupt's one line, and nothing after it: the interrupts that come from now on
    dropped (a second SIGTERM, as timeout(1) sends it, landing while the first is said
    would take the line's place, or add another), and what the interrupt cut short freed in
    silence (errors.quiet_unraisable). Exit status 128 + the signal."""
    while True:
        try:
            said.append(e.signum)  # raise_interrupted drops any that come from now on
            sys.unraisablehook = quiet_unraisable
            say(e.message(command))
            return 128 + e.signum
        except KeyboardInterrupt:  # the second, before the first's line: the first is said
            continue


def _dispatch(args) -> int:
    """Run the command's `command(args)`, from the module COMMANDS names."""
    from importlib import import_module

    module, function = args.func.split(":")
    return int(getattr(import_module(module), function)(args))


def main(argv: list[str] | None = None) -> int:
    """Run one command. Whatever happens, the result is an exit status and at most one line
    on stderr: ShimgenError (bad input, failed build) exits 1; a usage error 2; an
    interruption (SIGINT, SIGTERM, SIGHUP) exits 128 + the signal; a bug in shimgen exits 70
    with its type and message (SHIMGEN_DEBUG=1 shows the traceback)."""
    handlers: dict = {}
    unraisable = sys.unraisablehook
    words = sys.argv[1:] if argv is None else argv
    command = words[0] if words else None
    try:
        sys.unraisablehook = redeliver_swallowed(unraisable)
        for sig in INTERRUPTS:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup, `cmd &` in a script
                try:
                    handlers[sig] = signal.signal(sig, raise_interrupted)
                except ValueError:  # not the main thread: Python delivers signals there only
                    break
        argv = glue_gpu_time(glue_dash_values(list(words)))
        args = fast_run(argv) or parser(
            argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
        status = _dispatch(args)
        raise_swallowed()  # an interrupt that landed where Python ignores one, said now
        return status
    except UsageError as e:
        say(f"{e} (see `shimgen {command} --help`)")
        return EXIT_USAGE
    except ShimgenError as e:
        say(str(e))
        return EXIT_ERROR
    except KeyboardInterrupt as e:
        return _said_interrupted(e if isinstance(e, Interrupted) else
                                 Interrupted(signal.SIGINT), command)
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
        say(f"{e.strerror or e}{where}")
        return EXIT_ERROR
    except Exception as e:
        cause = _interrupt_inside(e)
        if cause is not None:  # Python wrapped it (e.g. an error calling __set_name__)
            return _said_interrupted(cause, command)
        if os.environ.get(DEBUG):
            raise
        say(f"internal error, please report it: {type(e).__name__}: {e} "
            "(SHIMGEN_DEBUG=1 shows where)")
        return EXIT_INTERNAL
    finally:
        raise_swallowed(drop=True)  # one after the line: the line was said
        for sig, old in handlers.items():
            signal.signal(sig, old)
        said.clear()  # raise_interrupted is no handler any more (it may be called in-process)
        if sys.unraisablehook is not quiet_unraisable:
            sys.unraisablehook = unraisable
