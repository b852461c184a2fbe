"""The NVML shim in `shimgen run`: with any memory limit set (--limit memory, --limit
job-memory, --limit-group: runenv.LIMITS), the shim of libnvidia-ml (shim/nvml.py),
from the shim cache or built once, is preloaded beside the libcuda shim, so that NVML's
answers (nvidia-smi, pynvml) show the limit. Which libnvidia-ml: the one beside the driver,
else NVML's usual places; none, or one whose shim cannot be made, is said in one line and
the run goes on (the libcuda shim still holds the limit)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import ShimgenError


def find_nvml(driver: Path, given: Path | None = None) -> Path | None:
    """The libnvidia-ml of the driver `driver`: beside it, as given (`given`: --driver) or
    its real file
    (libnvidia-ml.so.1, or the file of its version), else the first of NVML's usual places
    that is a file."""
    from ..driver import nvml, version_from_name

    real = driver.resolve()
    version = version_from_name(real)
    places = ([given.absolute().parent] if given is not None else []) + [
        driver.absolute().parent, real.parent]
    beside = [d / name for d in dict.fromkeys(places)
              for name in (nvml.SONAME, f"libnvidia-ml.so.{version}")[:1 + (version != "unknown")]]
    for cand in beside + [Path(p) for p in nvml.SEARCH_PATHS]:
        if cand.is_file():
            return cand
    return None


def nvml_shim(limits: dict, driver: Path,
              given: Path | None = None) -> tuple[Path | None, str | None]:
    """(the NVML shim's library to preload, None), or (None, the one line to say why there
    is none) with a limit set (any of runenv.LIMITS; a group's is its job-memory); (None,
    None) without one."""
    if not limits:
        return None, None
    from ..driver import nvml

    library = find_nvml(driver, given)
    if library is None:
        return None, (f"shimgen: run: no {nvml.SONAME} beside the driver or in NVML's usual "
                      "places: NVML's answers (nvidia-smi) do not show the limit")
    from ..cache import ensure, entry_dir, key_for_nvml, lookup
    from .child import check_preload_path

    try:
        key = key_for_nvml(library)
        check_preload_path(entry_dir(key))
        entry = lookup(key) or ensure(library, key, None)
    except ShimgenError as e:
        return None, (f"shimgen: run: no NVML shim ({e}): NVML's answers (nvidia-smi) do not "
                      "show the limit")
    return entry.library, None


def nvml_preload(opts, driver: Path) -> Path | None:
    """run's NVML shim for `opts` (run.RunOptions) and the driver's real path `driver`;
    when there is none with a limit set, why is said on stderr, once."""
    library, said = nvml_shim(opts.limits, driver, opts.driver)
    if said is not None:
        print(said, file=sys.stderr, flush=True)
    return library
