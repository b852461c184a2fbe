"""The default driver of `shimgen run`, remembered in the shim cache's `shims/`
(`default-driver.json`): driver.default_driver()'s answer with the stat of the dynamic
loader's cache, asked again when that changes or the file is gone. Read and written through
the descriptors cache/trust.py checks, as the cache's entries are."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from ..errors import ShimgenError
from ..files import replacing
from .trust import Unusable, cache_dirs, close_all, open_file

DEFAULT_DRIVER = "default-driver.json"  # in the shims directory: the answer remembered


def _loader_cache_stamp() -> list[int] | None:
    from ..cuda import LD_SO_CACHE

    try:
        st = os.stat(LD_SO_CACHE)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def _read_memo(stamp: list[int] | None) -> Path | None:
    dirs = cache_dirs(make=False)
    if dirs is None:
        return None
    try:
        fd, _ = open_file(dirs[1], DEFAULT_DRIVER)
        with os.fdopen(fd, "rb") as fh:
            got = json.loads(fh.read(1 << 16))
        if stamp is not None and got["ld_so_cache"] == stamp and os.path.exists(got["driver"]):
            return Path(got["driver"])
    except (Unusable, OSError, ValueError, KeyError, TypeError):
        pass
    finally:
        close_all(dirs)
    return None


def default_driver() -> Path:
    """driver.default_driver(), remembered while the dynamic loader's cache is unchanged and
    the file is there: the answer costs an `ldconfig -p` (tens of milliseconds). The memo is
    read only from a shims/ that open_dir trusts, and only when it is the user's own."""
    stamp = _loader_cache_stamp()
    got = _read_memo(stamp)
    if got is not None:
        return got
    from ..driver import default_driver as search

    found = search()
    if stamp is not None:
        with contextlib.suppress(OSError, ShimgenError):
            dirs = cache_dirs(make=True)
            try:
                with replacing(DEFAULT_DRIVER, dir_fd=dirs[1], sync=False) as fh:  # a memo
                    fh.write(json.dumps({"ld_so_cache": stamp, "driver": str(found)}))
            finally:
                close_all(dirs)
    return found
