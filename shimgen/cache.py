"""The per-user shim cache of `shimgen run`: one built shim per key, under
`$XDG_CACHE_HOME/shimgen/shims/` (default `~/.cache/shimgen/shims/`).

A key is (the driver's GNU build-id, shimgen's version, the gate profile baked in: none,
`auto`, or a profile file's digest). Each key has a directory of its own, so a gated shim and
a plain one never replace each other. An entry is built by build.py (staging directory,
complete directory put in place with one rename) under an flock(2) of the key's lock file, so
two first runs build once. An entry is used only when it checks out: its shim.json records
this key, and the library is there, a regular file with the build-id that shim.json records,
the size it was built with, and the shim's own mark; anything else (a build killed half-way, a file
changed or cut short) is rebuilt. The directories are owner-only (0700).

The cached path (an entry that checks out) imports no jinja2, pyelftools or meson: it reads
the driver's build-id from its notes (elfnotes.read_build_id) and the entry's shim.json.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from . import __version__
from .elfnotes import read_build_id, read_notes
from .errors import ShimgenError

SHIMS = "shims"  # under $XDG_CACHE_HOME/shimgen, beside the drivers the tests fetch
LIBRARY = "libcudashim.so"  # what build.py installs (build.LIBRARY, which imports jinja2)
MANIFEST = "shim.json"
SHIM_NOTE = b"shimgen"  # the mark every shim carries (runtime/selfcheck.c)


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/shimgen`, or `~/.cache/shimgen` (a relative XDG_CACHE_HOME is
    ignored, as the XDG rules say)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "shimgen"


class Key:
    """What a cached shim is for. (Plain classes here, not dataclasses: creating those costs
    milliseconds at import, and this module is on the cached path.)"""

    __slots__ = ("build_id", "version", "gates")

    def __init__(self, build_id: str, version: str, gates: str) -> None:
        self.build_id = build_id  # the driver's GNU build-id, or "sha256-<digest of the file>"
        self.version = version  # shimgen's
        self.gates = gates  # "" (no gates), "auto", or "profile-<digest of the profile file>"

    @property
    def name(self) -> str:
        return f"{self.build_id}-{self.version}-{self.gates or 'plain'}"

    def as_dict(self) -> dict[str, str]:
        return {"driver_build_id": self.build_id, "shimgen_version": self.version,
                "gates": self.gates}


def _digest(path: Path, what: str) -> str:
    import hashlib  # not on the cached path: loading it costs milliseconds

    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError as e:
        raise ShimgenError(f"{what} {path}: cannot read it ({e.strerror})") from None


def key_for(driver: Path, gates: str | None) -> Key:
    """The key of the shim for the driver file `driver` (symlinks resolved), with gates from
    `gates` (None: no gates; "auto"; or a profile file)."""
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
    return Key(build_id, __version__, tag)


class Entry:
    """A cached shim that checks out."""

    __slots__ = ("key", "directory", "library", "gates", "how", "seconds")

    def __init__(self, key: Key, directory: Path, gates: tuple[str, ...], how: str,
                 seconds: float = 0.0) -> None:
        self.key = key
        self.directory = directory
        self.library = directory / LIBRARY
        self.gates = gates  # the gate names baked in (SHIMGEN_GATES chooses among them)
        self.how = how  # "cached", "built" or "rebuilt (...why...)"
        self.seconds = seconds  # the build's, when built


DEFAULT_DRIVER = "default-driver.json"  # in the shims directory: the answer remembered


def _loader_cache_stamp() -> list[int] | None:
    from .cuda import LD_SO_CACHE

    try:
        st = os.stat(LD_SO_CACHE)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def default_driver() -> Path:
    """driver.default_driver(), remembered while the dynamic loader's cache is unchanged and
    the file is there: the answer costs an `ldconfig -p` (tens of milliseconds)."""
    memo = cache_root() / SHIMS / DEFAULT_DRIVER
    stamp = _loader_cache_stamp()
    try:
        fd = os.open(memo, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            got = json.loads(fh.read(1 << 16))
        if stamp is not None and got["ld_so_cache"] == stamp and os.path.exists(got["driver"]):
            return Path(got["driver"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    from .driver import default_driver as search

    found = search()
    if stamp is not None:
        with contextlib.suppress(OSError, ShimgenError):
            _write_private(memo, json.dumps({"ld_so_cache": stamp, "driver": str(found)}))
    return found


def _write_private(path: Path, text: str) -> None:
    """`path` written whole (a temporary file of ours renamed over it), 0600."""
    top = cache_root()
    if not os.path.lexists(top):
        _private_dir(top)
    _private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _private_dir(path: Path) -> Path:
    """`path` as a directory of ours that nobody else can write: made 0700 when missing."""
    with contextlib.suppress(FileExistsError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        st = os.lstat(path)
    except OSError as e:
        raise ShimgenError(f"shim cache {path}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ShimgenError(f"shim cache {path}: not a directory (a symlink or a file); "
                           "remove it")
    if st.st_uid != os.getuid():
        raise ShimgenError(f"shim cache {path}: owned by another user; remove it or set "
                           "XDG_CACHE_HOME")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def _check(directory: Path, key: Key) -> tuple[tuple[str, ...], str]:
    """(gate names, "") when the entry at `directory` checks out for `key`, else ((), why)."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return (), ""
    except OSError as e:
        return (), e.strerror or str(e)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return (), "not a directory of ours"
    try:
        fd = os.open(directory / MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            manifest = json.loads(fh.read(1 << 20))
        lib = directory / LIBRARY
        if not stat.S_ISREG(os.lstat(lib).st_mode):
            return (), f"{LIBRARY} is not a regular file"
        if not isinstance(manifest, dict) or manifest.get("cache_key") != key.as_dict():
            return (), f"{MANIFEST} records another key"
        if os.stat(lib).st_size != manifest.get("library_size"):
            return (), f"{LIBRARY} is not the size it was built"
        notes = read_notes(lib)
        if read_build_id(lib) != manifest.get("library_build_id") or \
                not any(name == SHIM_NOTE for name, _, _ in notes):
            return (), f"{LIBRARY} is not the shim that was built"
        gates = manifest.get("gates", [])
        if not isinstance(gates, list) or not all(isinstance(g, str) for g in gates):
            return (), f"{MANIFEST}: gates is not a list of names"
    except FileNotFoundError as e:
        return (), f"{Path(e.filename).name} is missing"
    except (OSError, ValueError, ShimgenError) as e:
        return (), str(e)
    if bool(gates) != bool(key.gates):
        return (), "its gates are not the key's"
    return tuple(gates), ""


def entry_dir(key: Key) -> Path:
    """Where the entry for `key` is (or will be)."""
    return cache_root() / SHIMS / key.name


def lookup(key: Key) -> Entry | None:
    """The cached entry for `key` if it checks out, else None. Builds and locks nothing."""
    directory = entry_dir(key)
    gates, why = _check(directory, key)
    if why or not os.path.lexists(directory):
        return None
    return Entry(key, directory, gates, "cached")


@contextlib.contextmanager
def _key_lock(root: Path, key: Key) -> Iterator[None]:
    """flock(2) on the key's lock file: one build per key at a time, across processes."""
    try:
        fd = os.open(root / f".{key.name}.lock",
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise ShimgenError(f"shim cache {root}: cannot make its lock file ({e.strerror})") \
            from None
    try:
        with contextlib.suppress(OSError):  # no flock here (some network file systems)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ensure(driver: Path, key: Key, gates: str | None) -> Entry:
    """The entry for `key`, from the cache or built now (for the driver file `driver`, with
    the gate profile `gates`: None, "auto" or a file). Never returns an entry that does not
    check out."""
    found = lookup(key)
    if found is not None:
        return found
    top = cache_root()
    if not os.path.lexists(top):  # never loosen or tighten a directory someone else made
        _private_dir(top)
    root = _private_dir(top / SHIMS)
    directory = root / key.name
    with _key_lock(root, key):
        got, why = _check(directory, key)
        if not why and os.path.lexists(directory):  # another run built it meanwhile
            return Entry(key, directory, got, "cached")
        if os.path.lexists(directory):
            _discard(directory)
        seconds = _build(driver, key, gates, root)
        got, after = _check(directory, key)
        if after or not os.path.lexists(directory):
            raise ShimgenError(f"the shim built into {directory} does not check out: {after}")
    how = f"rebuilt (the cached one was unusable: {why})" if why else "built"
    return Entry(key, directory, got, how, seconds)


def _discard(directory: Path) -> None:
    """Remove an entry that does not check out (a directory, or whatever took its name)."""
    from .build import _rmtree

    if os.path.isdir(directory) and not os.path.islink(directory):
        _rmtree(directory)
    else:
        os.unlink(directory)


def _build(driver: Path, key: Key, gates: str | None, root: Path) -> float:
    """Build the shim for `key` into `root/key.name` (owner-only files); its seconds."""
    from .build import build
    from .driver import read_driver
    from .model import build_model

    image = read_driver(driver)
    if image.build_id and image.build_id != key.build_id:
        raise ShimgenError(f"driver {driver} changed while shimgen read it; run again")
    argv = ["shimgen", "build", "--driver", str(image.path)]
    plan = None
    if gates is not None:
        from .gates.plan import load_plan

        argv += ["--gates", gates]
        plan = load_plan(image, gates)
    model = build_model(image, argv, gates=plan)
    old = os.umask(0o077)
    try:
        return build(model, root, name=key.name, identity=key.as_dict()).seconds
    finally:
        os.umask(old)
