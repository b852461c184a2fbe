"""`shimgen run`'s options: what was asked, each checked as the shim will check it (the
gate selection, the calls ring, the limits, the seconds of --stall), and the trace mode a
shim without the calls path gives instead of `calls`. main.py runs with them."""

from __future__ import annotations

from pathlib import Path

from ..errors import ShimgenError, UsageError


class RunOptions:
    """What `shimgen run` was asked (a plain class: a dataclass costs milliseconds to make)."""

    def __init__(self, command: list[str], driver: Path, driver_given: bool, trace: str,
                 gates: str | None, gate_profile: str | None, out: Path | None,
                 inject: list[str] | None = None, hooks: tuple[str, ...] = (),
                 stall: float | None = None,
                 limits: dict[str, int] | None = None) -> None:
        self.command = command
        self.driver = driver  # as given or found
        self.driver_given = driver_given  # --driver: also SHIMGEN_DRIVER
        self.trace = trace  # a name of runenv.TRACE_MODES, also SHIMGEN_TRACE's value
        self.gates = gates  # the SHIMGEN_GATES selection, e.g. "-gdr,-dmabuf"
        self.gate_profile = gate_profile  # with gates: "auto" or a profile file
        self.out = out  # -o DIR
        self.inject = inject or []  # --inject RULE, each (shimgen/shim/inject.py)
        self.hooks = hooks  # --hook FILE.c, in order (shim/userhooks.py)
        self.stall = stall  # --stall SECONDS (run/watch.py), None: off
        self.limits = limits or {}  # --limit KEY=SIZE, in bytes (run/limits.py)
        self.limit_group: str | None = None  # --limit-group NAME|DIR (run/group.py)
        self.budget_books: str | None = None  # the shared budget's books (run/group.py)
        self.calls_ring: str | None = None  # --calls-ring N: SHIMGEN_CALLS_RING
        self.gpu_time: str | None = None  # --gpu-time [every=N]: SHIMGEN_GPU_TIME's value
        self.force = False  # --force: -o DIR may hold a finished run, replaced (replace.py)
        self.trace_note = ""  # why the trace is not the one asked (time_where_no_calls)
        # the shim's architecture when it is not this machine's (time_where_no_calls): the
        # program runs under qemu-user, which is given the shim for it alone (child.py)
        self.emulated = ""


def check_selection(selection: str, gates: tuple[str, ...] | None,
                    driver: Path | None = None) -> None:
    """A SHIMGEN_GATES selection: names separated by commas, each optionally after + (set)
    or - (clear). With `gates` (the names the shim has), every name must be one of them; a
    gate the driver is too old to have says so."""
    for tok in selection.split(","):
        name = tok[1:] if tok[:1] in "+-" and tok else tok
        if not name or not name[0].isalnum() \
                or not all(c.isascii() and (c.isalnum() or c in "_-") for c in name):
            raise ShimgenError(f"--gates {selection!r}: {tok!r} is not a gate name, +name or "
                               "-name (e.g. gdr,dmabuf or -gdr,-dmabuf)")
        if gates is not None and name not in gates:
            from ..driver import version_from_name
            from ..gates import why_no_gate

            why = why_no_gate(name, version_from_name(driver)) if driver else ""
            raise ShimgenError(f"--gates {selection!r}: unknown gate {name!r} (this driver's "
                               f"shim has: {', '.join(gates) or 'none'}{why})")


def time_where_no_calls(opts: RunOptions, library: Path) -> None:
    """`calls` on a shim without the calls path (aarch64, for now) is `time`, said in the
    banner: the shim's own notice is not needed then. A shim of another architecture than
    this machine's is for a program under qemu-user (opts.emulated)."""
    from ..arches import ARCHES, host
    from ..driver import library_arch

    arch = library_arch(library)
    opts.emulated = arch if arch != host() else ""
    if opts.trace == "calls" and not ARCHES[arch].calls:
        opts.trace_note = (f" (not calls: calls mode is x86-64 only, for now; this {arch} "
                           "shim times calls)")
        opts.trace = "time"


def calls_ring_option(value: str | None) -> str | None:
    """--calls-ring N: records kept per thread in calls mode, checked as the shim checks it."""
    from ..runenv import CALLS_RING_MAX, CALLS_RING_MIN

    if value is None:
        return None
    if not value.isdigit() or not CALLS_RING_MIN <= int(value) <= CALLS_RING_MAX:
        raise UsageError(f"run --calls-ring {value!r}: give a number of calls from "
                         f"{CALLS_RING_MIN} to {CALLS_RING_MAX}")
    return value


def gpu_time_option(value: str | None) -> str | None:
    """--gpu-time's value as SHIMGEN_GPU_TIME takes it ("1", or "every=N" with N from 1 to
    10**9; every=1 is "1"); ShimgenError (one line) for another."""
    from ..runenv import KGPU_EVERY

    if value is None or value == "1":
        return value
    n = value[len(KGPU_EVERY):]
    if not value.startswith(KGPU_EVERY) or not n.isdigit() or not 1 <= int(n) <= 10**9 \
            or n.startswith("0"):
        raise ShimgenError(f"--gpu-time {value}: give no value, or {KGPU_EVERY}N with N from "
                           "1 to 1000000000")
    return "1" if n == "1" else value


def limit_options(values: list[str] | None) -> dict[str, int]:
    if not values:
        return {}
    from .limits import parse_limits

    return parse_limits(values)


def seconds_option(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e7:
        raise UsageError(f"run {flag} {text!r}: a number of seconds above 0")
    return value
