"""The shim model: what gets generated for one driver, independent of how it is rendered."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..cuda import returns_result
from ..cudaversions import cuda_of_driver, cuda_text
from ..driver import DriverImage, known_version
from ..errors import ShimgenError
from ..gates import GatePlan
from .hooks import FEATURES, HOOKS, Hook
from .memroutes import ROUTES, WATCHES

# Exported by the shim besides the driver's functions. `dlopen` is wrapped so that a
# program opening libcuda by another name (perftest's "libcuda.so", or the real file's
# absolute path) gets the shim instead of the real library the shim already loaded.
LOADER_EXPORTS: tuple[str, ...] = ("dlopen",)

# Appended to the output directory's name of a shim built with gates, and with user hooks.
GATED_SUFFIX = "-gates"
HOOKED_SUFFIX = "-hooks"

# The shim's SONAME: the name every program and library loads the driver by.
SONAME = "libcuda.so.1"


@dataclass(frozen=True)
class Function:
    index: int  # slot index, also the order of the generated tables
    name: str
    hook: Hook | None
    returns_result: bool  # its non-zero eax is a CUresult error (cuda.returns_result)
    user_hook: int | None = None  # the UserHooks.files index of the file that hooks it


@dataclass(frozen=True)
class UserHookFile:
    """One `--hook FILE.c`, read once: its bytes are what is digested, checked and built."""

    path: Path  # absolute, as given
    data: bytes
    sha256: str
    hooks: tuple[str, ...] = ()  # the exports it defines SHIMGEN_HOOK for
    calls: tuple[str, ...] = ()  # the exports it calls through SHIMGEN_REAL
    mode: int = 0o600  # its permission bits: a copy is never more readable than the file


@dataclass(frozen=True)
class UserHooks:
    """The user's hook files of a build (shimgen/shim/userhooks.py), in the order given."""

    files: tuple[UserHookFile, ...]

    @property
    def real_names(self) -> list[str]:
        """Every export that needs a SHIMGEN_REAL trampoline: hooked or called, each once."""
        names = {n for f in self.files for n in f.hooks + f.calls}
        return sorted(names)


@dataclass(frozen=True)
class ShimModel:
    driver: DriverImage
    functions: tuple[Function, ...]
    command: str  # the command line that regenerates this shim
    gates: GatePlan | None = None
    extra_exports: tuple[str, ...] = field(default=LOADER_EXPORTS)
    user: UserHooks | None = None  # the user's hook files (--hook), None without
    # The hooks of functions this driver is too old to have (Hook.since), in table order
    predates: tuple[Hook, ...] = ()

    @property
    def user_hooked(self) -> list[Function]:
        return [f for f in self.functions if f.user_hook is not None]

    @property
    def unwrappable(self) -> list[str]:
        """The exports shimgen hooks itself and a user hook may not wrap."""
        return [f.name for f in self.hooked if f.hook is not None and not f.hook.wrappable]

    @property
    def hooked(self) -> list[Function]:
        return [f for f in self.functions if f.hook is not None]

    @property
    def hook_sources(self) -> list[str]:
        """The runtime/ files that define this shim's hooks, each once."""
        seen: list[str] = []
        for f in self.hooked:
            assert f.hook is not None
            if f.hook.source not in seen:
                seen.append(f.hook.source)
        return seen

    @property
    def memory_routes(self) -> list[tuple[str, str, int]]:
        """(kind, name, index) of each memory route this driver has (shim/memroutes.py)."""
        have = {f.name for f in self.hooked}
        return [(r.kind, r.name, i) for i, r in enumerate(ROUTES) if r.name in have]

    @property
    def memory_watches(self) -> list[tuple[str, str]]:
        """(kind, name) of each function the ledger watches that this driver has."""
        have = {f.name for f in self.hooked}
        return [(w.kind, w.name) for w in WATCHES if w.name in have]

    def exported_names(self) -> list[str]:
        return [f.name for f in self.functions] + list(self.extra_exports)


def check_not_a_shim(driver: DriverImage) -> None:
    """Refuse a library that exports what only the shim does (a shim given as the driver,
    `build`, `run` and `diff` alike)."""
    clash = [n for n in LOADER_EXPORTS if n in set(driver.function_names())]
    if clash:
        raise ShimgenError(f"driver {driver.path} exports {clash[0]}, which the shim needs")


def build_model(
    driver: DriverImage,
    argv: list[str],
    hooks: tuple[Hook, ...] = HOOKS,
    gates: GatePlan | None = None,
) -> ShimModel:
    names = driver.function_names()
    known = set(names)
    by_name: dict[str, Hook] = {}
    predates: list[Hook] = []
    for hook in hooks:
        if hook.name not in known:
            if hook.optional and not (hook.since and driver_predates(driver, hook)):
                continue
            if driver_predates(driver, hook):
                predates.append(hook)
                continue
            raise ShimgenError(
                f"hook table names {hook.name}, which driver {driver.path} does not export"
                + _since_note(driver, hook))
        if hook.name in by_name:
            raise ShimgenError(f"hook table names {hook.name} twice")
        if hook.feature not in FEATURES:
            raise ShimgenError(f"hook table: {hook.name} has unknown feature {hook.feature!r}")
        by_name[hook.name] = hook
    check_not_a_shim(driver)
    functions = tuple(Function(i, n, by_name.get(n), returns_result(n))
                      for i, n in enumerate(names))
    return ShimModel(driver=driver, functions=functions, command=shlex.join(argv), gates=gates,
                     predates=tuple(predates))


def driver_predates(driver: DriverImage, hook: Hook) -> bool:
    """True when the hooked function is newer than the driver: the hook says which CUDA
    version added it, and the driver's version is known to carry an older one."""
    cuda = cuda_of_driver(known_version(driver))
    return hook.since > 0 and cuda is not None and cuda < hook.since


def _since_note(driver: DriverImage, hook: Hook) -> str:
    """Why a missing function with a CUDA version is still an error."""
    if not hook.since:
        return ""
    version = known_version(driver)
    cuda = cuda_of_driver(version)
    if cuda is None:
        return (f" (CUDA {cuda_text(hook.since)} added it, and the driver's version, "
                f"{version}, says no CUDA version)")
    return (f" (CUDA {cuda_text(hook.since)} added it; driver {version} is CUDA "
            f"{cuda_text(cuda)}, which has it)")


def output_name(driver: DriverImage, gated: bool = False, hooked: bool = False) -> str:
    """Directory name under the output root: version plus a short build-id, `-gates` for
    a shim with gates baked in and `-hooks` for one with user hooks, so that a gated build,
    a hooked one and a plain one never replace each other."""
    bid = driver.build_id[:12] or "nobuildid"
    return (f"cudashim-{driver.version}-{bid}{GATED_SUFFIX if gated else ''}"
            f"{HOOKED_SUFFIX if hooked else ''}")


def default_output_root() -> Path:
    return Path.cwd() / "build"
