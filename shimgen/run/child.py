"""The command's process, for `shimgen run` (run/main.py): its environment (child_environment: the
shim first in LD_PRELOAD, the trace sent to the run directory), its file found as a shell finds it
(find_command), started with posix_spawn and waited for with the signals sent to `run`
passed on (spawn_and_wait), its wait status as a shell's `$?` (exit_status); and the
blocking of those signals in `run` itself.

Signals. Before the command starts, `run` blocks SIGINT, SIGTERM and SIGHUP (those not
ignored) and SIGCHLD (block_signals), for as long as it lives; the command starts with the mask
from before, and SIGPIPE and SIGXFSZ at their defaults. `run` then waits in sigwaitinfo:
each of the three that a process sent (kill, sigqueue, tgkill: SENT_BY_A_PROCESS) is passed
on, a terminal's is not (it reaches the command's process group already); each is recorded
for run.json, one that comes after the command ended too, never raised. take_pending takes one
that came before the command could start; hold_for_good blocks them for good while an
interrupt is said (run/main.py says what each interrupted).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from pathlib import Path

from ..errors import ShimgenError
from ..runenv import BUDGET_BOOKS, ENV, NOTICES, TIMELINE, TRACES

# The variables `run` gives the command (read by the shim: runtime/base/config.c; the names are
# runenv.py's, which facts.h also has).
ENV_PRELOAD = "LD_PRELOAD"
# qemu-user's variables for the emulated program alone (name=value, separated by commas):
# the shim of another architecture goes there, so that qemu itself is not asked to preload it
ENV_QEMU_SET = "QEMU_SET_ENV"
ENV_TRACE = ENV["TRACE"]
ENV_TRACE_DIR = ENV["TRACE_DIR"]
ENV_NOTICE_FILE = ENV["NOTICE_FILE"]
ENV_TIMELINE_FILE = ENV["TIMELINE_FILE"]
ENV_DRIVER = ENV["DRIVER"]
ENV_GATES = ENV["GATES"]
ENV_INJECT = ENV["INJECT"]
ENV_RUN_DIR = ENV["RUN_DIR"]
ENV_LIMIT_MEMORY = ENV["LIMIT_MEMORY"]
ENV_LIMIT_JOB_MEMORY = ENV["LIMIT_JOB_MEMORY"]
ENV_BUDGET_FILE = ENV["BUDGET_FILE"]
# Inherited, they would send this run's record elsewhere or make a process think another
# owns the trace file: never passed on. SHIMGEN_INJECT: only --inject's rules, which the
# run checks and records; SHIMGEN_LIMIT_MEMORY: only --limit's, likewise, and the shared
# budget's two (run/group.py) only this run's.
ENV_DROPPED = (ENV["TRACE_FILE"], ENV["TRACE_JOB"], ENV_INJECT, ENV_LIMIT_MEMORY,
               ENV_LIMIT_JOB_MEMORY, ENV_BUDGET_FILE)

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# si_code of a signal sent by a process (kill, sigqueue, tgkill). A terminal's Ctrl-C or
# hang-up comes from the kernel (SI_KERNEL) and reaches the command's process group itself,
# so forwarding it would deliver it twice.
SI_USER, SI_QUEUE, SI_TKILL = 0, -1, -6
SENT_BY_A_PROCESS = (SI_USER, SI_QUEUE, SI_TKILL)
EXIT_NOT_FOUND, EXIT_CANNOT_RUN = 127, 126  # as a shell


class CommandError(ShimgenError):
    """The command cannot be started: one line, and a shell's exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def find_command(name: str, path: str | None) -> str:
    """The file the command `name` runs, searched in `path` like a shell (a name with a
    slash is taken as it is). CommandError 127 when there is none, 126 when it cannot run."""
    if not name:
        raise CommandError("run: the command is an empty string", EXIT_NOT_FOUND)
    if "/" in name:
        candidates = [name]
    else:
        candidates = [os.path.join(d or ".", name) for d in (path or os.defpath).split(":")]
    denied = None
    for c in candidates:
        if os.path.isfile(c):
            if os.access(c, os.X_OK):
                return c
            denied = denied or c
        elif "/" in name and os.path.isdir(c):
            raise CommandError(f"{name}: is a directory", EXIT_CANNOT_RUN)
    if denied:
        raise CommandError(f"{denied}: permission denied", EXIT_CANNOT_RUN)
    if "/" in name:
        raise CommandError(f"{name}: no such file", EXIT_NOT_FOUND)
    raise CommandError(f"{name}: command not found", EXIT_NOT_FOUND)


def hold_for_good(sigs: set[int]) -> None:
    """Block `sigs` for the rest of the process: the interrupt being said is the one said;
    another (`timeout` sends two) is not raised over it."""
    while True:
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
            return
        except KeyboardInterrupt:  # it came before the block did: the block stands
            continue


def block_signals(sigs: set[int]) -> set[int]:
    """Block `sigs`; the mask before. An interrupt that came just before is raised (by
    pthread_sigmask, once `sigs` are blocked)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    return old


def take_pending(sigs: set[int]) -> int | None:
    """A signal of `sigs` that is pending (blocked), taken; None when there is none."""
    if not signal.sigpending() & sigs:
        return None
    info = signal.sigtimedwait(sigs, 0)
    return info.si_signo if info is not None else None


def _received(info, passed_on: bool) -> dict:
    return {"signal": signal_name(info.si_signo), "si_code": info.si_code,
            "sender_pid": info.si_pid, "passed_on": passed_on}


def spawn_and_wait(path: str, argv: list[str], env: dict[str, str], old, forwarded: set[int],
                   started=None, signals: list[dict] | None = None) -> int:
    """Run the command and wait for it, forwarding SIGINT, SIGTERM and SIGHUP sent to this
    process by another one (never a terminal's: those reach the command already). Called with
    `forwarded` (those of the three not ignored) and SIGCHLD blocked, `old` the mask before;
    they stay blocked. Returns the wait status; each signal received is appended to `signals`
    (for run.json), one received after the command ended too, not passed on. The command
    starts with the signal mask `old`, and with SIGPIPE and SIGXFSZ at their defaults (Python
    ignores them). CommandError when it cannot be started."""
    # An ignored one (nohup, a background job) stays ignored: neither waited for nor passed
    # on; the command inherits it ignored, as from a shell.
    watched = {*forwarded, signal.SIGCHLD}
    try:
        pid = os.posix_spawn(path, argv, env, setsigmask=old,
                             setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
    except OSError as e:
        status = EXIT_NOT_FOUND if e.errno == errno.ENOENT else EXIT_CANNOT_RUN
        raise CommandError(f"{argv[0]}: cannot run it ({e.strerror})", status) from None
    if started is not None:
        started(pid)
    try:
        while True:
            info = signal.sigwaitinfo(watched)
            if info.si_signo != signal.SIGCHLD:
                passed_on = False
                if info.si_code in SENT_BY_A_PROCESS:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, info.si_signo)
                    passed_on = True
                if signals is not None:
                    signals.append(_received(info, passed_on))
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return status
    finally:
        # what arrived after the command ended is for nobody: recorded, never raised here
        while forwarded:
            info = signal.sigtimedwait(forwarded, 0)
            if info is None:
                break
            if signals is not None:
                signals.append(_received(info, False))


def exit_status(wait_status: int) -> int:
    """A shell's `$?`: the exit code, or 128 + N for a command killed by signal N."""
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def signal_name(sig: int | None) -> str | None:
    try:
        return signal.Signals(sig).name if sig else None
    except ValueError:  # a real-time signal
        return f"SIG{sig}"


def child_environment(base: dict[str, str], shim: Path, run_dir: Path, opts,
                      ident: tuple[int, int] | None = None,
                      nvml: Path | None = None) -> dict[str, str]:
    """`base` with the shim first in LD_PRELOAD (what was there kept after it) and the
    trace sent to `run_dir`, as `opts` (run.RunOptions) asks. `ident`, the run directory's
    (device, inode): the shim reaches what it makes under the run directory only through
    that directory (SHIMGEN_RUN_DIR), never through one put in its place. `nvml`: the NVML
    shim, preloaded right after the shim (run/nvml.py)."""
    env = {k: v for k, v in base.items() if k not in ENV_DROPPED}
    if ident is not None:
        env[ENV_RUN_DIR] = f"{ident[0]}:{ident[1]}:{os.path.abspath(run_dir)}"
    else:
        env.pop(ENV_RUN_DIR, None)
    if getattr(opts, "emulated", ""):  # qemu-user runs the program: the shim is its alone
        if "," in str(shim):
            raise ShimgenError(f"shim {shim}: {ENV_QEMU_SET} cannot carry a path with a comma; "
                               "set XDG_CACHE_HOME to a path without one")
        qemu = base.get(ENV_QEMU_SET, "").strip(",")
        env[ENV_QEMU_SET] = (f"{qemu}," if qemu else "") + f"{ENV_PRELOAD}={shim}"
    else:
        before = base.get(ENV_PRELOAD, "")
        shims = f"{shim}:{nvml}" if nvml is not None else str(shim)
        env[ENV_PRELOAD] = f"{shims}:{before}" if before.strip() else shims
    env[ENV_TRACE] = opts.trace  # --trace MODE is the value (runenv.TRACE_MODES)
    env[ENV_TRACE_DIR] = str(run_dir / TRACES)
    env[ENV_NOTICE_FILE] = str(run_dir / NOTICES)
    if opts.trace == "timeline":
        env[ENV_TIMELINE_FILE] = str(run_dir / TIMELINE / "%p.json")
    else:
        env.pop(ENV_TIMELINE_FILE, None)
    if opts.driver_given:
        env[ENV_DRIVER] = str(opts.driver.absolute())
    if opts.gates:
        env[ENV_GATES] = opts.gates
    else:
        env.pop(ENV_GATES, None)
    if opts.inject:
        env[ENV_INJECT] = ";".join(opts.inject)
    if opts.limits:
        from .limits import limit_environment

        env.update(limit_environment(opts.limits))
    if getattr(opts, "budget_books", None):  # a group's (run/group.py)
        env[ENV_BUDGET_FILE] = opts.budget_books
    elif "job-memory" in opts.limits:  # the run's own
        env[ENV_BUDGET_FILE] = os.path.join(os.path.abspath(run_dir), BUDGET_BOOKS)
    if getattr(opts, "calls_ring", None):
        env[ENV["CALLS_RING"]] = opts.calls_ring
    if getattr(opts, "gpu_time", None):
        env[ENV["GPU_TIME"]] = opts.gpu_time
    else:
        env.pop(ENV["GPU_TIME"], None)
    return env


def check_preload_path(directory: Path) -> None:
    """The shim's directory must go into LD_PRELOAD as it is: the loader splits the list at
    spaces and colons, and reads $ORIGIN, $LIB and $PLATFORM (also as ${...}) in a name as
    its own tokens (then refuses the name: the command would run without the shim)."""
    text = str(directory)
    if any(c.isspace() or c == ":" for c in text):
        raise ShimgenError(f"shim cache {directory}: LD_PRELOAD cannot carry a path with "
                           "a space or a colon; set XDG_CACHE_HOME to a path without one")
    if "$" in text:
        raise ShimgenError(f"shim cache {directory}: LD_PRELOAD cannot carry a path with a "
                           "'$' (the loader reads $ORIGIN, $LIB and $PLATFORM in it as its "
                           "own); set XDG_CACHE_HOME to a path without one")
