"""The build pipeline, written once: a driver file and the options of `shimgen build` in, a
built shim out. driver/library.py reads and checks the driver, gates/plan.py loads the gates (when
asked), shim/model.py makes the model, shim/build.py renders it and builds it with meson.

`shimgen build` (cli.py) and the shim cache of `shimgen run` (cache/store.py) make every shim with
`make_shim`; `build_command` is the command line a shim records (its banners and shim.json:
how to make it again). This module imports shim/build.py, and with it jinja2 and pyelftools: it is
imported only when a shim is built, never on `run`'s cached path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import progress
from ..arches import ARCHES
from ..driver import read_driver
from ..errors import ShimgenError
from ..gates import ALLOW_UNPROVEN
from ..options import path_option
from . import build as _build
from .hooks import HOOKS, Hook
from .install import check_output, check_writable
from .model import ShimModel, build_model, default_output_root


def build_command(driver: Path | str, *, out: str | None = None, gates: str | None = None,
                  allow_unproven: bool = False, hooks: tuple[Path, ...] = ()) -> list[str]:
    """The `shimgen build` command line that makes the shim again: `driver` (the path as
    read), `--out` as the user gave it, `--gate-profile` ("auto" or a profile's path), each
    `--hook` file (absolute) in order."""
    argv = ["shimgen", "build", "--driver", str(driver)]
    if out is not None:
        argv += ["--out", str(out)]
    if gates is not None:
        argv += ["--gate-profile", gates] + ([ALLOW_UNPROVEN] if allow_unproven else [])
    for hook in hooks:
        argv += ["--hook", str(hook)]
    return argv


@dataclass(frozen=True)
class MadeShim:
    """A shim made: its model (the driver and gate plan it was made from), where its library
    is, and how long the build took."""

    model: ShimModel
    library: Path
    seconds: float


def _begin(version: str, out_root: Path, model: ShimModel | None = None,
           name: str | None = None) -> None:
    """The build announced (progress.begin), once the output is known to be usable (the
    root; with the model, the build's own directory): a refused output is the command's one
    line, as any other input."""
    if model is None:
        check_writable(out_root.absolute())
    else:
        check_output(model, out_root, name)
    progress.begin(version)


def make_shim(driver_path: Path | str, out_root: Path, *, gates: str | None = None,
              allow_unproven: bool = False, hooks: tuple[Hook, ...] = HOOKS,
              require_real: bool = True, name: str | None = None,
              identity: dict | None = None, out_option: str | None = None,
              expect_build_id: str | None = None, user_hooks: tuple[str, ...] = (),
              expect_hooks_digest: str | None = None) -> MadeShim:
    """Make the shim for the driver file `driver_path` in `out_root/name` (default:
    model.output_name). `gates`: None (no gates), "auto" (found and proven now) or a
    profile's path (its proof must have passed, unless `allow_unproven`). `require_real`
    off skips the driver's stub rule (the tests' fake drivers). `identity` is recorded in
    shim.json as "cache_key"; `out_option` is the --out text to record in the command line;
    `expect_build_id`, when given, is the GNU build-id the driver must still have (when it
    has one) once read. `user_hooks`: the user's hook files (--hook FILE.c, in order:
    shim/userhooks.py), each compiled and checked before anything is built; `expect_hooks_digest`,
    when given, is the digest (userhooks.digest) their contents must still have. Its steps
    are announced once the driver, the hook files and a gate profile are checked (with
    `auto`, before the gates are found: that is the build's work), and shown on a terminal
    when a caller expects the build (progress.expect; the caller clears them)."""
    driver = read_driver(driver_path, require_real=require_real)
    if not ARCHES[driver.arch].gates and gates is not None:
        raise ShimgenError(f"driver {driver.path} is built for {driver.arch}: its shim forwards, "
                           "counts, times, injects faults and runs hooks; gates are built for "
                           "x86-64 drivers only, for now")
    _build.cross_triplet(driver)  # its compiler is there, or one line before any work
    files = ()
    if user_hooks:
        from . import userhooks

        files = userhooks.load(user_hooks)
        if expect_hooks_digest is not None and userhooks.digest(files) != expect_hooks_digest:
            raise ShimgenError("a hook file changed while shimgen read it; run again")
    if expect_build_id is not None and driver.build_id and driver.build_id != expect_build_id:
        raise ShimgenError(f"driver {driver_path} changed while shimgen read it; run again")
    if gates == "auto":  # finding the gates is the build's work: announced first
        _begin(driver.version, out_root)
    plan = None
    if gates is not None:
        from ..gates import load_plan

        gates = gates if gates == "auto" else str(Path(gates).absolute())
        progress.step("finding the gates and proving them by emulation" if gates == "auto"
                      else "checking the gate profile against the driver")
        plan = load_plan(driver, gates, allow_unproven=allow_unproven)
    argv = build_command(driver.path, out=out_option, gates=gates,
                         allow_unproven=allow_unproven, hooks=tuple(f.path for f in files))
    model = build_model(driver, argv, hooks, gates=plan)
    if files:  # each compiled and checked alone: an input, refused before the announcement
        model = userhooks.attach(model, files)
    _begin(driver.version, out_root, model, name)
    where = {k: v for k, v in (("name", name), ("identity", identity)) if v is not None}
    result = _build.build(model, out_root, **where)
    return MadeShim(model, result.library, result.seconds)


def _init_directions(gate) -> str:
    """Which directions of a baked gate SHIMGEN_GATE_METHOD=init can apply."""
    got = [d for d, b in (("set", gate.init_set), ("mask", gate.init_mask)) if b]
    return "/".join(got) or "none"


def _gates_summary(asked: str | None, plan) -> str:
    """The build summary's gates line: what was asked, what was found, the proof's status."""
    if plan is None:
        return "not asked (--gate-profile auto or --gate-profile PROFILE bakes them in)"
    source = "--gate-profile auto" if asked == "auto" else f"profile {asked}"
    found = ", ".join(f"{g.name} (attributes {', '.join(map(str, g.attributes))}; init site: "
                      f"{_init_directions(g)})" if g.attributes or g.fields else
                      f"{g.name} (code only, SHIMGEN_GATE_METHOD=init: {len(g.init_set)} "
                      "bytes)" for g in plan.gates)
    return (f"{found} from {source}, proof {plan.proof}; select at run time with "
            "SHIMGEN_GATES")


def _user_hooks_summary(model) -> list[str]:
    """The summary's lines of the user's hooks: each hooked function, and the variants of
    its name the driver exports that the hook does not reach."""
    if model.user is None:
        return []
    from .userhooks import summary as hooks_summary

    return hooks_summary(model)


def _predates_summary(model) -> list[str]:
    """The summary's line of the hooked functions this driver is too old to have: which,
    the CUDA version that added each, and the driver's own."""
    if not model.predates:
        return []
    from ..cudaversions import cuda_of_driver, cuda_text
    from ..driver import known_version

    version = known_version(model.driver)
    cuda = cuda_of_driver(version)
    which = ", ".join(f"{h.name} (CUDA {cuda_text(h.since)})" for h in model.predates)
    return [f"predates   {which}: driver {version} is CUDA {cuda_text(cuda)}; "
            "the shim has no hook for them"]


def _hooked_summary(model) -> str:
    """The hooked functions by name, the memory ledger's routes and watches
    (shim/memroutes.py), the kernels' hooks (shim/hooks.py KERNEL_HOOKS, GRAPH_HOOKS) and GPU
    time's (GPU_TIME_HOOKS) by their number."""
    from .hooks import GPU_TIME_HOOKS, GRAPH_HOOKS, KERNEL_HOOKS

    routes = {name for _, name, _ in model.memory_routes}
    watches = {name for _, name in model.memory_watches}
    kernels = {f.name for f in model.hooked} & ({name for name, _ in KERNEL_HOOKS}
                                                | {name for name, _, _ in GRAPH_HOOKS})
    gpu = {f.name for f in model.hooked} & set(GPU_TIME_HOOKS)
    named = [f.name for f in model.hooked if f.name not in routes | watches | kernels | gpu]
    return ", ".join(named + ([f"{len(routes)} memory routes"] if routes else [])
                     + ([f"{len(watches)} watched by the memory ledger"] if watches else [])
                     + ([f"{len(kernels)} naming kernels"] if kernels else [])
                     + ([f"{len(gpu)} resolving GPU time"] if gpu else []))


def summary(result: MadeShim, gates: str | None) -> str:
    """What `shimgen build` prints: the driver, what is forwarded, the gates, the shim."""
    model = result.model
    driver = model.driver
    data = ", ".join(d.name for d in driver.data) or "none"
    return "\n".join([
        f"driver     {driver.real_path}",
        f"version    {driver.version}   build-id {driver.build_id or 'none'}",
        f"forwarded  {len(model.functions)} functions ({len(model.hooked)} with hooks: "
        f"{_hooked_summary(model)})",
        *_predates_summary(model),
        f"data       {len(driver.data)} exported objects left in the real library "
        f"(variables cannot be forwarded by code): {data}",
        f"gates      {_gates_summary(gates, model.gates)}",
        *_user_hooks_summary(model),
        f"shim       {result.library}",
        f"time       {result.seconds:.2f} s",
    ])


def old_gates_option(value: str) -> str:
    """`build --gates VALUE`, --gate-profile's first name: said what it became, and refused
    when VALUE is a selection (gdr, -gdr,dmabuf), which --gates means in run and patch."""
    import re
    import sys

    from ..errors import UsageError

    if value != "auto" and re.fullmatch(r"[+-]?\w+(,[+-]?\w+)*", value) \
            and not Path(value).exists():
        raise UsageError(f"build --gates {value}: build takes no gate selection; the gates "
                         "are baked in with --gate-profile auto (or a profile file) and "
                         f"selected at run time: shimgen run --gates {value} -- COMMAND, or "
                         f"SHIMGEN_GATES={value}")
    print(f"shimgen: build: --gates is now --gate-profile (--gates selects gates in run and "
          f"patch); read as --gate-profile {value}", file=sys.stderr, flush=True)
    return value


def command(args) -> int:
    """`shimgen build`: make the shim, print the summary."""
    from ..options import driver_path

    if args.nvml is not None:
        return nvml_command(args)
    if args.old_gates is not None:
        args.gates = old_gates_option(args.old_gates)
    if args.allow_unproven_gates and args.gates is None:
        raise ShimgenError(f"{ALLOW_UNPROVEN} goes with --gate-profile")
    driver, root = driver_path(args.driver), out_root(args.out)
    progress.expect("build", f"into {root.absolute()} ({progress.BUILD_TAKES})")
    try:
        result = make_shim(driver, root, gates=args.gates,
                           allow_unproven=args.allow_unproven_gates, out_option=args.out,
                           user_hooks=tuple(args.hook or ()))
    finally:
        progress.clear()
    print(summary(result, args.gates))
    return 0


def nvml_command(args) -> int:
    """`shimgen build --nvml [PATH]`: the NVML shim alone (shim/nvml.py)."""
    from ..options import nvml_path
    from .nvml import make_nvml_shim
    from .nvml import summary as nvml_summary

    given = [o for o, v in (("--driver", args.driver), ("--gate-profile", args.gates),
                            ("--gates", args.old_gates), ("--hook", args.hook)) if v]
    if given:
        raise ShimgenError(f"build --nvml builds the NVML shim alone: {given[0]} is the "
                           "libcuda shim's")
    path, root = nvml_path(None if args.nvml is True else args.nvml), out_root(args.out)
    progress.expect("build", f"into {root.absolute()} ({progress.BUILD_TAKES})")
    try:
        result = make_nvml_shim(path, root, out_option=args.out)
    finally:
        progress.clear()
    print(nvml_summary(result))
    return 0


def out_root(value: str | None) -> Path:
    """build's -o: the output root (default ./build), a path meson can take."""
    root = path_option(value, "--out", "output directory", default_output_root)
    if "\\" in str(root.absolute()):
        raise ShimgenError(f"output directory {root.absolute()}: the path contains a "
                           "backslash, which meson reads as a path separator; choose a path "
                           "without one")
    return root
