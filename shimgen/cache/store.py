"""The per-user shim cache of `shimgen run`: one built shim per key, under
`$XDG_CACHE_HOME/shimgen/shims/` (default `~/.cache/shimgen/shims/`).

A key is (the driver's GNU build-id, shimgen's version, the gate profile baked in: none,
`auto`, or a profile file's digest, and the user's hook files: none, or the digest of their
contents in order, userhooks.digest). Each key has a directory of its own, so a gated shim and
a plain one never replace each other. An entry is made by pipeline.make_shim (shim/build.py:
staging directory, complete directory put in place with one rename) under an flock(2) of the
key's lock file, so two first runs build once; then sealed (cache/seal.py): its shim.json
gets the SHA-256 of the library and the library's stat.

Every directory level and file of the cache is opened and checked as cache/trust.py says,
on the cached path and when building alike. An entry is used only when it checks out
(_check): its directory and files pass those checks, its shim.json records this key, and
the library is the one sealed; anything else (a build killed half-way, a file changed or cut
short, a file of another user's) is rebuilt, and the banner says why. A bad entry is moved
aside and only what is the user's own in it is removed (cache_trust.discard).

The cached path (an entry that checks out) imports no jinja2, pyelftools, meson or hashlib:
it reads the driver's build-id from its notes (elfnotes.read_build_id) and the entry's
shim.json.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from .. import __version__, progress
from ..driver import read_build_id
from ..errors import Interrupted, ShimgenError, signals_held
from ..runenv import NVML_SHIM_LIBRARY, SHIM_LIBRARY, SHIM_MANIFEST
from .seal import seal, sha256, stat_seal
from .trust import (
    SHIMS,
    Unusable,
    cache_dirs,
    cache_root,
    close_all,
    discard,
    open_dir,
    open_file,
    read_all,
)

# The gates field of an NVML shim's key (shim/nvml.py: it has no gates): one tag that says
# the entry is the NVML shim of the library with that build-id.
NVML_TAG = "nvml"


class Key:
    """What a cached shim is for. (Plain classes here, not dataclasses: creating those costs
    milliseconds at import, and this module is on the cached path.)"""

    __slots__ = ("build_id", "version", "gates", "hooks")

    def __init__(self, build_id: str, version: str, gates: str, hooks: str = "") -> None:
        self.build_id = build_id  # the driver's GNU build-id, or "sha256-<digest of the file>"
        self.version = version  # shimgen's, with the stamp of the sources a build reads
        self.gates = gates  # "" (no gates), "auto", or "profile-<digest of the profile file>"
        self.hooks = hooks  # "" (no user hooks), or the digest of the hook files' contents

    @property
    def name(self) -> str:
        hooks = f"-hooks-{self.hooks[:32]}" if self.hooks else ""
        return f"{self.build_id}-{self.version}-{self.gates or 'plain'}{hooks}"

    def _replace_gates(self, gates: str) -> Key:
        return Key(self.build_id, self.version, gates, self.hooks)

    @property
    def library(self) -> str:
        """The library file of the entry: the NVML shim's for an NVML key."""
        return NVML_SHIM_LIBRARY if self.gates == NVML_TAG else SHIM_LIBRARY

    def as_dict(self) -> dict[str, str]:
        key = {"driver_build_id": self.build_id, "shimgen_version": self.version,
               "gates": self.gates}
        if self.hooks:  # absent without hooks: the entries made before hooks keep their key
            key["user_hooks"] = self.hooks
        return key


def _digest(path: Path, what: str) -> str:
    try:
        with open(path, "rb") as fh:
            return sha256(fh.read())
    except OSError as e:
        raise ShimgenError(f"{what} {path}: cannot read it ({e.strerror})") from None


def key_for_nvml(library: Path) -> Key:
    """The key of the NVML shim (shim/nvml.py) for the libnvidia-ml file `library`."""
    return key_for(library, None)._replace_gates(NVML_TAG)


def key_for(driver: Path, gates: str | None, hooks: tuple[str, ...] = ()) -> Key:
    """The key of the shim for the driver file `driver` (symlinks resolved), with gates from
    `gates` (None: no gates; "auto"; or a profile file) and the user's hook files `hooks`
    (their contents, read now, in order)."""
    try:
        build_id = read_build_id(driver)
    except ShimgenError as e:
        raise ShimgenError(f"driver {e}") from None
    build_id = build_id or "sha256-" + _digest(driver, "driver")
    tag = ""
    if gates == "auto":
        tag = "auto"
    elif gates is not None:
        tag = "profile-" + _digest(Path(gates), "gate profile")[:32]
    hooked = ""
    if hooks:
        from ..shim import file_digest

        hooked = file_digest(hooks)
    from ..shim import sources_stamp

    return Key(build_id, f"{__version__}+src.{sources_stamp()}", tag, hooked)


class Entry:
    """A cached shim that checks out."""

    __slots__ = ("key", "directory", "library", "gates", "how", "seconds")

    def __init__(self, key: Key, directory: Path, gates: tuple[str, ...], how: str,
                 seconds: float = 0.0) -> None:
        self.key = key
        self.directory = directory
        self.library = directory / key.library
        self.gates = gates  # the gate names baked in (SHIMGEN_GATES chooses among them)
        self.how = how  # "cached", "built" or "rebuilt (...why...)"
        self.seconds = seconds  # the build's, when built


# ---- entries -------------------------------------------------------------------------------

def _check(shims_fd: int, key: Key) -> tuple[tuple[str, ...], str]:
    """(gate names, "") when the entry for `key` checks out (or ((), "") when there is none),
    else ((), why)."""
    try:
        fd, why = open_dir(key.name, shims_fd)
    except FileNotFoundError:
        return (), ""
    except OSError as e:
        return (), e.strerror or str(e)
    if why:
        return (), f"its directory: {why}"
    try:
        mfd, _ = open_file(fd, SHIM_MANIFEST)
        with os.fdopen(mfd, "rb") as fh:
            manifest = json.loads(fh.read(1 << 20))
        if not isinstance(manifest, dict) or manifest.get("cache_key") != key.as_dict():
            return (), f"{SHIM_MANIFEST} records another key"
        gates = manifest.get("gates", [])
        if not isinstance(gates, list) or not all(isinstance(g, str) for g in gates):
            return (), f"{SHIM_MANIFEST}: gates is not a list of names"
        digest = manifest.get("library_sha256")
        if not isinstance(digest, str):
            return (), f"{SHIM_MANIFEST} records no digest of {key.library}"
        lfd, st = open_file(fd, key.library)
        try:
            if st.st_size != manifest.get("library_size"):
                return (), f"{key.library} is not the size it was built"
            # The seal matches: unchanged since it was sealed (cache/seal.py's docstring), no
            # need to read it. Otherwise the bytes are what counts, read from this descriptor.
            if stat_seal(st) != manifest.get("library_seal") and \
                    sha256(read_all(lfd, st.st_size)) != digest:
                return (), f"{key.library} has changed since it was built"
        finally:
            os.close(lfd)
    except Unusable as e:
        return (), str(e)
    except (OSError, ValueError) as e:
        return (), str(e)
    finally:
        os.close(fd)
    if bool(gates) != bool(key.gates and key.gates != NVML_TAG):
        return (), "its gates are not the key's"
    return tuple(gates), ""


def entry_dir(key: Key) -> Path:
    """Where the entry for `key` is (or will be)."""
    return cache_root() / SHIMS / key.name


def lookup(key: Key) -> Entry | None:
    """The cached entry for `key` if it checks out, else None. Builds and locks nothing. A
    cache root or shims/ that open_dir does not trust is a ShimgenError, as when building."""
    dirs = cache_dirs(make=False)
    if dirs is None:
        return None
    try:
        gates, why = _check(dirs[1], key)
        if why or not _exists(dirs[1], key.name):
            return None
    finally:
        close_all(dirs)
    return Entry(key, entry_dir(key), gates, "cached")


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


@contextlib.contextmanager
def _key_lock(shims_fd: int, key: Key) -> Iterator[None]:
    """flock(2) on the key's lock file: one build per key at a time, across processes."""
    try:
        fd = os.open(f".{key.name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=shims_fd)
    except OSError as e:
        raise ShimgenError(f"shim cache {cache_root() / SHIMS}: cannot make its lock file "
                           f"({e.strerror})") from None
    try:
        with contextlib.suppress(OSError):  # no flock here (some network file systems)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ensure(driver: Path, key: Key, gates: str | None, hooks: tuple[str, ...] = ()) -> Entry:
    """The entry for `key`, from the cache or built now (for the driver file `driver`, with
    the gate profile `gates`: None, "auto" or a file, and the user's hook files `hooks`).
    Never returns an entry that does not check out."""
    found = lookup(key)
    if found is not None:
        return found
    dirs = cache_dirs(make=True)
    root = cache_root() / SHIMS
    directory = root / key.name
    try:
        with _key_lock(dirs[1], key):
            got, why = _check(dirs[1], key)
            if not why and os.path.lexists(directory):  # another run built it meanwhile
                return Entry(key, directory, got, "cached")
            kept = discard(dirs[1], key.name) if _exists(dirs[1], key.name) else ""
            progress.expect("run", "once: the next runs reuse it from the cache ("
                            + progress.BUILD_TAKES
                            + (", and the gates found and proven first; "
                               if gates == "auto" else "; ") + f"{directory})")
            try:
                seconds = _build(driver, key, gates, root, hooks)
            except Interrupted as e:
                if e.installed:  # it came while the build was put in place: sealed, so that
                    # the entry is usable (the next run uses it) as the interrupt's line says
                    with signals_held(), contextlib.suppress(ShimgenError):
                        seal(dirs[1], key.name, key.library)
                raise
            finally:
                progress.clear()
            seal(dirs[1], key.name, key.library)
            got, after = _check(dirs[1], key)
            if after or not _exists(dirs[1], key.name):
                raise ShimgenError(f"the shim built into {directory} does not check out: "
                                   f"{after}")
    finally:
        close_all(dirs)
    how = f"rebuilt (the cached one was unusable: {why}{kept})" if why else "built"
    return Entry(key, directory, got, how, seconds)


def _build(driver: Path, key: Key, gates: str | None, root: Path,
           hooks: tuple[str, ...] = ()) -> float:
    """Build the shim for `key` into `root/key.name` (owner-only files); its seconds. The
    hook files must still have the contents the key was made from."""
    from ..shim import make_shim

    old = os.umask(0o077)
    try:
        if key.gates == NVML_TAG:
            from ..shim import make_nvml_shim

            return make_nvml_shim(driver, root, name=key.name,
                                  identity=key.as_dict()).seconds
        return make_shim(driver, root, gates=gates, name=key.name, identity=key.as_dict(),
                         expect_build_id=key.build_id, user_hooks=tuple(hooks),
                         expect_hooks_digest=key.hooks or None).seconds
    finally:
        os.umask(old)
