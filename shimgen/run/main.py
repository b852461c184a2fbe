"""`shimgen run`: trace one command and everything it starts.

The shim for this machine's driver comes from the per-user cache (cache/store.py: built once, then
reused). The command runs with the shim first in LD_PRELOAD and the trace going to a run
directory; `run` forwards the signals sent to it (run/child.py: the command's process),
writes run.json at the start and the end, prints the report (run/summary.py) and exits with
the command's status, as a shell would. The run directory
is made and written through one descriptor of it, in a runs directory nobody else can write
(run/directory.py); an interrupt before the command started says what it interrupted, and a command
that started always keeps its run directory and its report (the signals: below).

Kept light: the cached path imports nothing heavy (no jinja2, pyelftools or meson).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from .. import __version__
from ..errors import Interrupted, ShimgenError, UsageError, say
from ..runenv import LIMIT_GROUP, RUN_JSON
from .child import (
    ENV_BUDGET_FILE,
    ENV_DRIVER,
    ENV_GATES,
    ENV_INJECT,
    ENV_LIMIT_JOB_MEMORY,
    ENV_LIMIT_MEMORY,
    ENV_NOTICE_FILE,
    ENV_PRELOAD,
    ENV_QEMU_SET,
    ENV_TIMELINE_FILE,
    ENV_TRACE,
    ENV_TRACE_DIR,
    FORWARDED,
    CommandError,
    block_signals,
    check_preload_path,
    child_environment,
    exit_status,
    find_command,
    hold_for_good,
    signal_name,
    spawn_and_wait,
    take_pending,
)
from .directory import RunDir, layout, open_run_dir, write_json
from .nvml import nvml_preload
from .options import (
    RunOptions,
    calls_ring_option,
    check_selection,
    gpu_time_option,
    limit_options,
    seconds_option,
    time_where_no_calls,
)
from .summary import calls_timeline, one_line, run_report, trace_size

# ---- running it ----------------------------------------------------------------------------
#
# Signals. Until the shim is ready, SIGINT, SIGTERM and SIGHUP interrupt shimgen (cli.py's
# handlers), and the line says what they interrupted (the checks, or the build of the shim)
# and that the command did not run (RunInterrupted). From then on they are blocked in this
# process for as long as it lives: one that came before the command could start is taken
# instead of starting it (its run directory removed); while the command runs, each is passed
# on to it; after it ended, each is recorded in run.json and nothing else. So a command that
# ran always keeps its run directory and its report, and `run` exits with its status.

class RunInterrupted(Interrupted):
    """An interrupt of `run` before the command started, said with what it interrupted."""

    def __init__(self, signum: int, said: str) -> None:
        super().__init__(signum)
        self.said = said

    def message(self, command: str | None = None) -> str:
        return f"interrupted by {self.name} {self.said}"


def _signum(e: KeyboardInterrupt) -> int:
    return e.signum if isinstance(e, Interrupted) else signal.SIGINT


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def _prepare(opts: RunOptions) -> tuple[str, Path, str | None, object]:
    """The checks before anything is built or made: (the command's file, the driver's real
    path, the gate profile, the cache key)."""
    from ..cache import entry_dir, key_for
    from ..driver import check_driver

    if opts.gates is not None:
        check_selection(opts.gates, None)
    if opts.inject:
        from ..shim import inject

        for rule in opts.inject:  # its form now, before any build; its names below
            inject.parse(rule)
    path = find_command(opts.command[0], os.environ.get("PATH"))
    driver = check_driver(opts.driver)  # every command's check, in the same words
    profile = None
    if opts.gates is not None:
        profile = opts.gate_profile or "auto"
        profile = profile if profile == "auto" else str(Path(profile).absolute())
    key = key_for(driver, profile, opts.hooks)
    check_preload_path(entry_dir(key))
    return path, driver, profile, key


NOT_RUN = "before the command started: the command did not run"


def _in_cache_now(lookup, key) -> str:
    """What an interrupted build left in the cache, looked at (signals held)."""
    try:
        usable = lookup(key) is not None
    except (ShimgenError, OSError):
        usable = False
    return ("the shim was built and is in the cache" if usable else
            "no shim was installed in the cache (the next run builds it)")


def _not_started(entry) -> str:
    return (f"{NOT_RUN}, and no run directory is left; "
            + ("the shim was in the cache already" if entry.how == "cached" else
               "the shim built now is in the cache"))


def _shim(opts: RunOptions, forwarded: set[int]) -> tuple[str, Path, str | None, object, object]:
    """The checks, then the shim from the cache or built now: (the command's file, the
    driver's real path, the gate profile, the cache key, the cache entry). An interrupt
    meanwhile is said with what it interrupted, the signals then held for good."""
    from ..cache import ensure, lookup

    try:
        path, driver, profile, key = _prepare(opts)
        entry = lookup(key)
    except KeyboardInterrupt as e:
        hold_for_good(forwarded)
        raise RunInterrupted(_signum(e), f"{NOT_RUN}, and no shim was built") from None
    if entry is None:
        try:
            entry = ensure(driver, key, profile, opts.hooks)
        except KeyboardInterrupt as e:
            hold_for_good(forwarded)
            raise RunInterrupted(_signum(e), "while the shim was being built, before the "
                                 "command started: the command did not run; "
                                 + _in_cache_now(lookup, key)) from None
    return path, driver, profile, key, entry


def _banner(opts: RunOptions, entry, run_dir: Path) -> str:
    """What `run` says once the command started: the shim, how it came, the trace, the run
    directory."""
    how = entry.how if entry.how == "cached" else f"{entry.how} in {entry.seconds:.1f} s"
    gates = f", gates {opts.gates}" if opts.gates else ""
    gates += f", inject {';'.join(opts.inject)}" if opts.inject else ""
    gates += f", hooks {' '.join(opts.hooks)}" if opts.hooks else ""
    gates += "".join(f", limit {k} {n} bytes" for k, n in opts.limits.items())
    if opts.emulated:
        how += f"; an {opts.emulated} shim, given to the emulated program ({ENV_QEMU_SET})"
    banner = one_line(f"shimgen: run: shim {entry.library} ({how}); "
                      f"mode {opts.trace}{opts.trace_note}{gates}; "
                      f"run directory {run_dir}")
    if ENV_INJECT in os.environ and not opts.inject:
        banner += (f"\nshimgen: run: {ENV_INJECT} from the environment is not passed on "
                   "(give the rules with --inject, which checks and records them)")
    if ENV_LIMIT_MEMORY in os.environ and not opts.limits:
        banner += (f"\nshimgen: run: {ENV_LIMIT_MEMORY} from the environment is not passed on "
                   "(give the limit with --limit memory=SIZE, which checks and records it)")
    return banner


def _record(opts: RunOptions, driver: Path, profile: str | None, key, entry,
            env: dict[str, str], start: float) -> dict:
    """run.json as written at the start: the command, the driver, the shim, the selection,
    the environment given; its end, pid, exit and signals still to come."""
    from ..driver import version_from_name
    from .nodes import host_name

    return {
        "command": opts.command, "cwd": os.getcwd(),
        "driver": {"path": str(opts.driver), "real_path": str(driver),
                   "version": version_from_name(driver), "build_id": key.build_id},
        "shim": {"path": str(entry.library), "key": key.as_dict(),
                 "cache_entry": key.name, "how": entry.how, "gates": list(entry.gates)},
        "trace": opts.trace, "gates": opts.gates, "gate_profile": profile,
        "inject": opts.inject, "limit": opts.limits,
        "budget": {"books": env[ENV_BUDGET_FILE], "group": opts.limit_group}
        if ENV_BUDGET_FILE in env else None,
        "hooks": [str(Path(h).absolute()) for h in opts.hooks],
        "shimgen_version": __version__, "host": host_name(),
        "environment": {k: env[k] for k in (ENV_PRELOAD, ENV_QEMU_SET, ENV_TRACE, ENV_TRACE_DIR,
                                            ENV_NOTICE_FILE, ENV_TIMELINE_FILE, ENV_DRIVER,
                                            ENV_GATES, ENV_INJECT, ENV_LIMIT_MEMORY,
                                            ENV_LIMIT_JOB_MEMORY, ENV_BUDGET_FILE)
                        if k in env},
        "start": _stamp(start), "end": None, "pid": None, "exit": None, "signals": [],
    }


def _finish(run_dir: RunDir, record: dict, wait: int, timeline: bool = False) -> int:
    """After the command ended: run.json's end written, the timeline of a calls run written
    (`timeline`), the report printed; the command's exit status."""
    status = exit_status(wait)
    code = os.WEXITSTATUS(wait) if os.WIFEXITED(wait) else None
    sig = os.WTERMSIG(wait) if os.WIFSIGNALED(wait) else None
    record.update(end=_stamp(time.time()),
                  exit={"status": status, "code": code, "signal": sig,
                        "signal_name": signal_name(sig)})
    try:
        write_json(run_dir, record)
    except OSError as e:  # the command ran: its status is still what `run` exits with
        with contextlib.suppress(OSError, ValueError):
            print(f"shimgen: error: {one_line(str(run_dir.path / RUN_JSON))}: not updated at "
                  f"the end ({e.strerror})", file=sys.stderr, flush=True)
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    if run_dir.still_named():
        said = (calls_timeline(run_dir) + "\n" + trace_size(run_dir.path)) if timeline else ""
        report = run_report(run_dir.path) + ("\n" + said if said else "")
    else:
        report = (f"report: {one_line(str(run_dir.path))} is no longer this run's directory "
                  "(it was moved or replaced while the command ran); not read")
    run_dir.close()
    with contextlib.suppress(OSError, ValueError):
        print(report, file=sys.stderr, flush=True)
    return status


def run(opts: RunOptions) -> int:
    """Run the command under the shim (the signals: above); the command's exit status."""
    if not opts.command:
        raise ShimgenError("run: no command given (shimgen run [OPTIONS] -- COMMAND ...)")
    forwarded = {s for s in FORWARDED if signal.getsignal(s) is not signal.SIG_IGN}
    path, driver, profile, key, entry = _shim(opts, forwarded)
    try:
        old = block_signals({*forwarded, signal.SIGCHLD})  # for as long as this process lives
    except KeyboardInterrupt as e:
        hold_for_good(forwarded)
        raise RunInterrupted(_signum(e), _not_started(entry)) from None
    time_where_no_calls(opts, entry.library)
    if opts.gates is not None:
        check_selection(opts.gates, entry.gates, driver)
    if opts.inject:
        from ..driver import version_from_name
        from ..shim import inject

        inject.check(opts.inject, inject.exports_of(entry.directory), version_from_name(driver))
    start = time.time()
    from .nodes import host_name

    me = {"host": host_name(), "command": opts.command, "build_id": key.build_id}
    run_dir = open_run_dir(opts.out, opts.command[0], start, me, opts.force)
    banner = _banner(opts, entry, run_dir.path)
    started_pid: list[int] = []
    from .watch import Watcher

    watcher = Watcher(run_dir, opts.stall)

    def started(pid: int) -> None:
        """The command runs: its pid recorded, then the banner (said only once it started,
        so that a command that cannot start is one line); the watcher started."""
        started_pid.append(pid)
        record["pid"] = pid
        with contextlib.suppress(OSError, ValueError):
            print(banner, file=sys.stderr, flush=True)
        watcher.start()

    try:
        layout(run_dir, "time" if opts.trace_note else opts.trace)  # no calls: no timeline
        st = os.fstat(run_dir.fd)
        env = child_environment(dict(os.environ), entry.library, run_dir.path, opts,
                                (st.st_dev, st.st_ino), nvml_preload(opts, driver))
        record = _record(opts, driver, profile, key, entry, env, start)
        write_json(run_dir, record)
        waiting = take_pending(forwarded)
        if waiting is not None:  # it came before the command could start: not started
            raise RunInterrupted(waiting, _not_started(entry))
        try:
            wait = spawn_and_wait(path, opts.command, env, old, forwarded, started,
                                  record["signals"])
        finally:
            if started_pid:
                watcher.stop()
    except BaseException:
        if not started_pid:  # nothing ran: nothing of this run is left
            run_dir.discard()
        raise
    return _finish(run_dir, record, wait, opts.trace == "calls" and not opts.trace_note)


def command(args) -> int:
    """`shimgen run`: the options checked, then run()."""
    from ..options import driver_path, path_option

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("run: no command given: shimgen run [OPTIONS] -- COMMAND ...")
    if args.gate_profile is not None and args.gates is None:
        raise UsageError("run --gate-profile goes with --gates")
    if args.force and args.out is None:
        raise UsageError("run --force goes with -o DIR (a new run directory is made otherwise)")
    if args.gate_profile is not None and args.gate_profile != "auto":
        path_option(args.gate_profile, "--gate-profile", "gate profile")
    stall = seconds_option(args.stall, "--stall") if args.stall is not None else None
    if args.driver is None:
        from ..cache import default_driver  # remembered: no `ldconfig -p` at every run

        driver = default_driver()
    else:
        driver = driver_path(args.driver)
    opts = RunOptions(
        command=command,
        driver=driver,
        driver_given=args.driver is not None,
        trace=args.trace,
        gates=args.gates,
        gate_profile=args.gate_profile,
        out=path_option(args.out, "-o", "run directory") if args.out is not None else None,
        inject=args.inject,
        hooks=tuple(args.hook or ()),
        stall=stall,
        limits=limit_options(args.limit),
    )
    opts.calls_ring = calls_ring_option(getattr(args, "calls_ring", None))
    opts.gpu_time = gpu_time_option(getattr(args, "gpu_time", None))
    opts.force = bool(args.force)
    opts.limit_group = getattr(args, "limit_group", None) or os.environ.get(LIMIT_GROUP) or None
    if opts.limit_group:  # the group's budget: its books, its size the run's job-memory
        from .group import budget

        opts.budget_books, opts.limits["job-memory"] = budget(opts.limits, opts.limit_group)
    try:
        return run(opts)
    except CommandError as e:  # like a shell: 127 not found, 126 cannot be run
        say(str(e))
        return e.status
