"""`shimgen run`: trace one command and everything it starts.

The shim for this machine's driver comes from the per-user cache (cache.py: built once, then
reused). The command runs with the shim first in LD_PRELOAD and the trace going to a run
directory; `run` forwards the signals sent to it, writes run.json at the start and the end,
prints the report and exits with the command's status, as a shell would.

Kept light: the cached path imports nothing heavy (no jinja2, pyelftools or meson).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from . import __version__
from .errors import ShimgenError
from .runenv import ENV, NOTICES, RUN_JSON, RUNS_DIR, TIMELINE, TRACES

# --trace MODE -> the value of SHIMGEN_TRACE (runtime/config.c reads these names)
TRACE_MODES = {"counts": "counts", "time": "time", "timeline": "timeline"}
# `run`'s default: the time path, which also records every error return (counts does not:
# docs/performance.md says why the default is not counts).
DEFAULT_TRACE = "time"
# The variables `run` gives the command (read by the shim: runtime/config.c; the names are
# runenv.py's, which facts.h also has).
ENV_PRELOAD = "LD_PRELOAD"
ENV_TRACE = ENV["TRACE"]
ENV_TRACE_DIR = ENV["TRACE_DIR"]
ENV_NOTICE_FILE = ENV["NOTICE_FILE"]
ENV_TIMELINE_FILE = ENV["TIMELINE_FILE"]
ENV_DRIVER = ENV["DRIVER"]
ENV_GATES = ENV["GATES"]
# Inherited, they would send this run's record elsewhere or make a process think another
# owns the trace file: never passed on.
ENV_DROPPED = (ENV["TRACE_FILE"], ENV["TRACE_JOB"])

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# si_code of a signal sent by a process (kill, sigqueue, tgkill). A terminal's Ctrl-C or
# hang-up comes from the kernel (SI_KERNEL) and reaches the command's process group itself,
# so forwarding it would deliver it twice.
SI_USER, SI_QUEUE, SI_TKILL = 0, -1, -6
SENT_BY_A_PROCESS = (SI_USER, SI_QUEUE, SI_TKILL)
EXIT_NOT_FOUND, EXIT_CANNOT_RUN = 127, 126  # as a shell


class RunOptions:
    """What `shimgen run` was asked (a plain class: a dataclass costs milliseconds to make)."""

    def __init__(self, command: list[str], driver: Path, driver_given: bool, trace: str,
                 gates: str | None, gate_profile: str | None, out: Path | None) -> None:
        self.command = command
        self.driver = driver  # as given or found
        self.driver_given = driver_given  # --driver: also SHIMGEN_DRIVER
        self.trace = trace  # a key of TRACE_MODES
        self.gates = gates  # the SHIMGEN_GATES selection, e.g. "-gdr,-dmabuf"
        self.gate_profile = gate_profile  # with gates: "auto" or a profile file
        self.out = out  # -o DIR


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


def check_selection(selection: str, gates: tuple[str, ...] | None) -> None:
    """A SHIMGEN_GATES selection: names separated by commas, each optionally after + (set)
    or - (clear). With `gates` (the names the shim has), every name must be one of them."""
    for tok in selection.split(","):
        name = tok[1:] if tok[:1] in "+-" and tok else tok
        if not name or not all(c.isascii() and (c.isalnum() or c == "_") for c in name):
            raise ShimgenError(f"--gates {selection!r}: {tok!r} is not a gate name, +name or "
                               "-name (e.g. gdr,dmabuf or -gdr,-dmabuf)")
        if gates is not None and name not in gates:
            raise ShimgenError(f"--gates {selection!r}: unknown gate {name!r} (this driver's "
                               f"shim has: {', '.join(gates) or 'none'})")


# ---- the run directory -------------------------------------------------------------------

def _command_tag(argv0: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(argv0))[:40].lstrip(".") or "cmd"


def _mkdir_private(path: Path) -> None:
    """Make `path` and any missing parents, each 0700."""
    missing = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)


def make_run_dir(out: Path | None, argv0: str, now: float) -> Path:
    """The run directory, made 0700 and empty: `out` (missing, or an empty directory of ours;
    never a symlink, never one with files in it), or ./shimgen-runs/<time>-<command>[-N]."""
    try:
        if out is not None:
            return _named_run_dir(out)
        parent = Path(RUNS_DIR).absolute()
        _mkdir_private(parent)
        base = f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}-{_command_tag(argv0)}"
        for n in range(1, 10000):
            d = parent / (base if n == 1 else f"{base}-{n}")
            try:
                os.mkdir(d, 0o700)
                return d
            except FileExistsError:
                continue
        raise ShimgenError(f"run directory: {parent} has too many runs named {base}")
    except OSError as e:
        raise ShimgenError(f"run directory {e.filename or out}: {e.strerror}") from None


def _named_run_dir(out: Path) -> Path:
    out = out.absolute()
    if os.path.islink(out):
        raise ShimgenError(f"run directory {out}: is a symbolic link; name a directory")
    if not os.path.lexists(out):
        _mkdir_private(out.parent)
        os.mkdir(out, 0o700)  # FileExistsError: made by someone else meanwhile, reported
        return out
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_uid != os.getuid():
            raise ShimgenError(f"run directory {out}: owned by another user")
        if os.listdir(fd):
            raise ShimgenError(f"run directory {out}: exists and is not empty; name a new "
                               "or empty directory (nothing is overwritten)")
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return out


def write_json(run_dir: Path, data: dict) -> None:
    """run.json, written whole: a temporary file of ours renamed over it."""
    dfd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        tmp = f".{RUN_JSON}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(data, indent=2) + "\n")
            os.replace(tmp, RUN_JSON, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)


def _layout(run_dir: Path, trace: str) -> None:
    os.mkdir(run_dir / TRACES, 0o700)
    if trace == "timeline":
        os.mkdir(run_dir / TIMELINE, 0o700)
    fd = os.open(run_dir / NOTICES, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o600)
    os.close(fd)


# ---- the command's environment -----------------------------------------------------------

def child_environment(base: dict[str, str], shim: Path, run_dir: Path, opts: RunOptions
                      ) -> dict[str, str]:
    """`base` with the shim first in LD_PRELOAD (what was there kept after it) and the
    trace sent to `run_dir`."""
    env = {k: v for k, v in base.items() if k not in ENV_DROPPED}
    before = base.get(ENV_PRELOAD, "")
    env[ENV_PRELOAD] = f"{shim}:{before}" if before.strip() else str(shim)
    env[ENV_TRACE] = TRACE_MODES[opts.trace]
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
    return env


# ---- running it ----------------------------------------------------------------------------

def spawn_and_wait(path: str, argv: list[str], env: dict[str, str], started=None,
                   signals: list[dict] | None = None) -> int:
    """Run the command and wait for it, forwarding SIGINT, SIGTERM and SIGHUP sent to this
    process by another one (never a terminal's: those reach the command already). Returns the
    wait status; each signal received is appended to `signals` (for run.json). The command
    starts with this process's signal mask, and with SIGPIPE and SIGXFSZ at their defaults
    (Python ignores them)."""
    # An ignored one (nohup, a background job) stays ignored: neither waited for nor passed
    # on; the command inherits it ignored, as from a shell.
    forwarded = {s for s in FORWARDED if signal.getsignal(s) is not signal.SIG_IGN}
    watched = {*forwarded, signal.SIGCHLD}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    try:
        try:
            pid = os.posix_spawn(path, argv, env, setsigmask=old,
                                 setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        except OSError as e:
            status = EXIT_NOT_FOUND if e.errno == errno.ENOENT else EXIT_CANNOT_RUN
            raise CommandError(f"{argv[0]}: cannot run it ({e.strerror})", status) from None
        if started is not None:
            started(pid)
        while True:
            info = signal.sigwaitinfo(watched)
            if info.si_signo != signal.SIGCHLD:
                passed_on = False
                if info.si_code in SENT_BY_A_PROCESS:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, info.si_signo)
                    passed_on = True
                if signals is not None:
                    signals.append({"signal": _signal_name(info.si_signo),
                                    "si_code": info.si_code, "sender_pid": info.si_pid,
                                    "passed_on": passed_on})
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return status
    finally:
        # what arrived after the command ended is for nobody: not raised here as an
        # interruption of shimgen
        while forwarded and signal.sigtimedwait(forwarded, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def exit_status(wait_status: int) -> int:
    """A shell's `$?`: the exit code, or 128 + N for a command killed by signal N."""
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def _signal_name(sig: int | None) -> str | None:
    try:
        return signal.Signals(sig).name if sig else None
    except ValueError:  # a real-time signal
        return f"SIG{sig}"


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def _notices_written(run_dir: Path) -> str:
    """Where the shim's notices are, when it wrote any: said also when there is no report
    (the report shows them)."""
    import stat

    path = run_dir / NOTICES
    try:
        st = os.lstat(path)
    except OSError:
        return ""
    return f"; the shim wrote notices: {path}" if stat.S_ISREG(st.st_mode) and st.st_size else ""


def _report(run_dir: Path) -> str:
    """The end-of-run report (shimgen/report.py, which shows the shim's notices too), or
    where to get it and where the notices are."""
    try:
        from .report import summary_for_run
    except ImportError:
        return f"report: shimgen report {run_dir}{_notices_written(run_dir)}"
    try:
        return summary_for_run(run_dir)
    except ShimgenError as e:
        return f"report: {e}; shimgen report {run_dir}{_notices_written(run_dir)}"
    except Exception as e:  # the command's exit status matters more than the report
        return (f"report: internal error, please report it: {type(e).__name__}: {e}; "
                f"shimgen report {run_dir}{_notices_written(run_dir)}")


def run(opts: RunOptions) -> int:
    from .cache import ensure, entry_dir, key_for
    from .elfnotes import check_driver, version_from_name

    if not opts.command:
        raise ShimgenError("run: no command given (shimgen run [OPTIONS] -- COMMAND ...)")
    if opts.gates is not None:
        check_selection(opts.gates, None)
    path = find_command(opts.command[0], os.environ.get("PATH"))
    driver = check_driver(opts.driver)  # every command's check, in the same words
    profile = None
    if opts.gates is not None:
        profile = opts.gate_profile or "auto"
        profile = profile if profile == "auto" else str(Path(profile).absolute())
    key = key_for(driver, profile)
    if any(c.isspace() or c == ":" for c in str(entry_dir(key))):
        raise ShimgenError(f"shim cache {entry_dir(key)}: LD_PRELOAD cannot carry a path with "
                           "a space or a colon; set XDG_CACHE_HOME to a path without one")
    entry = ensure(driver, key, profile)
    if opts.gates is not None:
        check_selection(opts.gates, entry.gates)
    start = time.time()
    run_dir = make_run_dir(opts.out, opts.command[0], start)
    _layout(run_dir, opts.trace)
    env = child_environment(dict(os.environ), entry.library, run_dir, opts)
    record = {
        "command": opts.command, "cwd": os.getcwd(),
        "driver": {"path": str(opts.driver), "real_path": str(driver),
                   "version": version_from_name(driver), "build_id": key.build_id},
        "shim": {"path": str(entry.library), "key": key.as_dict(), "cache_entry": key.name,
                 "how": entry.how, "gates": list(entry.gates)},
        "trace": opts.trace, "gates": opts.gates, "gate_profile": profile,
        "shimgen_version": __version__, "host": os.uname().nodename,
        "environment": {k: env[k] for k in (ENV_PRELOAD, ENV_TRACE, ENV_TRACE_DIR,
                                            ENV_NOTICE_FILE, ENV_TIMELINE_FILE, ENV_DRIVER,
                                            ENV_GATES) if k in env},
        "start": _stamp(start), "end": None, "pid": None, "exit": None, "signals": [],
    }
    write_json(run_dir, record)
    how = entry.how if entry.how == "cached" else f"{entry.how} in {entry.seconds:.1f} s"
    gates = f", gates {opts.gates}" if opts.gates else ""
    print(f"shimgen: run: shim {entry.library} ({how}); trace {opts.trace}{gates}; "
          f"run directory {run_dir}", file=sys.stderr, flush=True)

    def started(pid: int) -> None:
        record["pid"] = pid

    try:
        wait = spawn_and_wait(path, opts.command, env, started, record["signals"])
    except CommandError as e:
        record.update(end=_stamp(time.time()), exit={"error": str(e), "status": e.status})
        write_json(run_dir, record)
        raise
    status = exit_status(wait)
    code = os.WEXITSTATUS(wait) if os.WIFEXITED(wait) else None
    sig = os.WTERMSIG(wait) if os.WIFSIGNALED(wait) else None
    record.update(end=_stamp(time.time()),
                  exit={"status": status, "code": code, "signal": sig,
                        "signal_name": _signal_name(sig)})
    try:
        write_json(run_dir, record)
    except OSError as e:  # the command ran: its status is still what `run` exits with
        print(f"shimgen: error: {run_dir / RUN_JSON}: not updated at the end ({e.strerror})",
              file=sys.stderr, flush=True)
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    print(_report(run_dir), file=sys.stderr, flush=True)
    return status
