"""The per-user shim cache of `shimgen run`: one built shim per key, under
`$XDG_CACHE_HOME/shimgen/shims/` (default `~/.cache/shimgen/shims/`).

A key is (the driver's GNU build-id, shimgen's version, the gate profile baked in: none,
`auto`, or a profile file's digest, and the user's hook files: none, or the digest of their
contents in order, userhooks.digest). Each key has a directory of its own, so a gated shim and
a plain one never replace each other. An entry is made by pipeline.make_shim (build.py:
staging directory, complete directory put in place with one rename) under an flock(2) of the
key's lock file, so two first runs build once; then sealed here: its shim.json gets the
SHA-256 of the library and the library's stat (_seal).

Trust. Every directory level shimgen relies on (the cache root, shims/, the entry) is
opened without following a symlink and checked on its descriptor by one function,
_open_dir, on the cached path and when building alike: a directory, the user's own, that
neither group nor others can write. The cache root and shims/ failing it is an error (one
line; what is there is left alone); an entry failing it is rebuilt. The entry's shim.json and
library are opened with O_NOFOLLOW and checked the same way on their descriptors
(owned.distrust).
An entry is used only when it checks out: its shim.json records this key, and the library
is the one sealed (below); anything else (a build killed half-way, a file changed or cut
short, a file of another user's) is rebuilt, and the banner says why. A bad entry is moved
aside and only what is the user's own in it is removed (_discard): nothing is followed
through a symlink, nothing of another user's is removed or changed.

The seal. The library's SHA-256 is verified before each use, except when its stat (device,
inode, size, mtime, ctime) is what was recorded right after the build: the kernel sets the
ctime to its own clock at every change of the file (a write, a truncate, utime, chmod, a
rename), and no unprivileged process can set it back, so a file whose ctime is the recorded
one has not changed since, provided the file system's clock had moved past that ctime
before the library was read for the digest (otherwise a write in the same clock tick would
leave the ctime as it was): _seal waits for that. Restoring the mtime (touch -d) does not
restore the ctime. What it cannot see: a clock set back by root, or raw writes to the disk,
which need privileges the cache does not defend against. So the cached path reads a few
descriptors' stat and imports no hashlib; a library whose stat differs (touched, copied,
changed) is hashed: the same bytes, the entry is used; others, it is rebuilt.

The cached path (an entry that checks out) imports no jinja2, pyelftools, meson or hashlib:
it reads the driver's build-id from its notes (elfnotes.read_build_id) and the entry's
shim.json.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import struct
from collections.abc import Iterator
from pathlib import Path

from . import __version__
from .elfnotes import EHDR, EM_X86_64, NT_GNU_BUILD_ID, PHDR, PT_NOTE, read_build_id
from .errors import ShimgenError
from .outfile import replacing
from .owned import ANOTHER_USER, NOT_A_DIRECTORY, NOT_A_FILE, OPEN_TO_OTHERS, distrust
from .runenv import SHIM_LIBRARY, SHIM_MANIFEST

SHIMS = "shims"  # under $XDG_CACHE_HOME/shimgen, beside the drivers the tests fetch
SHIM_NOTE = b"shimgen"  # the mark every shim carries (runtime/selfcheck.c)
DISCARDED = ".shimgen-discarded-"  # a bad entry moved aside (not build.py's staging prefix)

# What to do about a cache root or shims/ that is not trusted (an error, never repaired).
ADVICE = {NOT_A_DIRECTORY: "remove it", ANOTHER_USER: "remove it or set XDG_CACHE_HOME",
          OPEN_TO_OTHERS: "chmod go-w it (or remove it)"}

_O_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_O_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/shimgen`, or `~/.cache/shimgen` (a relative XDG_CACHE_HOME is
    ignored, as the XDG rules say)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "shimgen"


class Key:
    """What a cached shim is for. (Plain classes here, not dataclasses: creating those costs
    milliseconds at import, and this module is on the cached path.)"""

    __slots__ = ("build_id", "version", "gates", "hooks")

    def __init__(self, build_id: str, version: str, gates: str, hooks: str = "") -> None:
        self.build_id = build_id  # the driver's GNU build-id, or "sha256-<digest of the file>"
        self.version = version  # shimgen's
        self.gates = gates  # "" (no gates), "auto", or "profile-<digest of the profile file>"
        self.hooks = hooks  # "" (no user hooks), or the digest of the hook files' contents

    @property
    def name(self) -> str:
        hooks = f"-hooks-{self.hooks[:32]}" if self.hooks else ""
        return f"{self.build_id}-{self.version}-{self.gates or 'plain'}{hooks}"

    def as_dict(self) -> dict[str, str]:
        key = {"driver_build_id": self.build_id, "shimgen_version": self.version,
               "gates": self.gates}
        if self.hooks:  # absent without hooks: the entries made before hooks keep their key
            key["user_hooks"] = self.hooks
        return key


def _sha256(data: bytes) -> str:
    import hashlib  # not on the cached path: loading it costs milliseconds

    return hashlib.sha256(data).hexdigest()


def _digest(path: Path, what: str) -> str:
    try:
        with open(path, "rb") as fh:
            return _sha256(fh.read())
    except OSError as e:
        raise ShimgenError(f"{what} {path}: cannot read it ({e.strerror})") from None


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
        from .userhooks import file_digest

        hooked = file_digest(hooks)
    return Key(build_id, __version__, tag, hooked)


class Entry:
    """A cached shim that checks out."""

    __slots__ = ("key", "directory", "library", "gates", "how", "seconds")

    def __init__(self, key: Key, directory: Path, gates: tuple[str, ...], how: str,
                 seconds: float = 0.0) -> None:
        self.key = key
        self.directory = directory
        self.library = directory / SHIM_LIBRARY
        self.gates = gates  # the gate names baked in (SHIMGEN_GATES chooses among them)
        self.how = how  # "cached", "built" or "rebuilt (...why...)"
        self.seconds = seconds  # the build's, when built


# ---- trust: one check for every directory level, one for every file ----------------------

def _open_dir(name: str | Path, dir_fd: int | None = None) -> tuple[int, str]:
    """The check of every directory level of the cache that shimgen relies on (the cache
    root, shims/, an entry), the same on the cached path and when building: `name` (relative
    to `dir_fd`) opened O_PATH|O_DIRECTORY|O_NOFOLLOW, so never through a symlink, and its
    descriptor checked with fstat: a directory, the user's own, that neither group nor others
    can write. (descriptor, "") when it is, else (-1, why). FileNotFoundError when missing.
    Whatever is opened under the descriptor is where this check was made."""
    try:
        fd = os.open(name, _O_DIR, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.ELOOP):
            return -1, NOT_A_DIRECTORY
        raise
    st = os.fstat(fd)
    why = distrust(st)
    if why:
        os.close(fd)
        return -1, why
    return fd, ""


def _refused(path: Path, why: str) -> ShimgenError:
    return ShimgenError(f"shim cache {path}: {why}; {ADVICE[why]}")


def _cache_dirs(make: bool) -> tuple[int, int] | None:
    """Descriptors of the cache root and of shims/ (close both), each checked by _open_dir;
    made 0700 where missing when `make`, else None when one is missing. A level that is
    there and fails the check is a ShimgenError: it is never used, repaired or removed."""
    top = cache_root()
    if make and not os.path.lexists(top):
        try:
            with contextlib.suppress(FileExistsError):
                top.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with contextlib.suppress(FileExistsError):
                os.mkdir(top, 0o700)
        except OSError as e:
            raise ShimgenError(f"shim cache {top}: cannot make it ({e.strerror})") from None
    fds: list[int] = []
    try:
        for name, shown, at in ((top, top, None), (SHIMS, top / SHIMS, 0)):
            parent = None if at is None else fds[at]
            try:
                if make and at is not None:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o700, dir_fd=parent)
                fd, why = _open_dir(name, parent)
            except FileNotFoundError:
                if make:
                    raise ShimgenError(f"shim cache {shown}: it was removed while shimgen "
                                       "made it; run again") from None
                for fd in fds:
                    os.close(fd)
                return None
            except OSError as e:
                raise ShimgenError(f"shim cache {shown}: {e.strerror}") from None
            if why:
                raise _refused(shown, why)
            fds.append(fd)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds[0], fds[1]


def _close(fds: tuple[int, ...]) -> None:
    for fd in fds:
        os.close(fd)


class _Unusable(Exception):
    """An entry that does not check out; the message says why."""


def _open_file(dir_fd: int, name: str) -> tuple[int, os.stat_result]:
    """`name` in the directory `dir_fd` opened for reading, O_NOFOLLOW, and its descriptor's
    stat; _Unusable when it is not a regular file of the user's that only the user can
    write."""
    try:
        fd = os.open(name, _O_FILE, dir_fd=dir_fd)
    except FileNotFoundError:
        raise _Unusable(f"{name} is missing") from None
    except OSError as e:
        raise _Unusable(f"{name}: {NOT_A_FILE if e.errno == errno.ELOOP else e.strerror}") \
            from None
    st = os.fstat(fd)
    why = distrust(st, kind=stat.S_ISREG)
    if why:
        os.close(fd)
        raise _Unusable(f"{name}: {why}")
    return fd, st


def _read_all(fd: int, size: int) -> bytes:
    """The file open at `fd`, from its start: `size` bytes, or what it has when it is not
    that size (read up to one byte more, so a file that grew is seen)."""
    parts, got = [], 0
    while got <= size:
        part = os.pread(fd, size + 1 - got, got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


DEFAULT_DRIVER = "default-driver.json"  # in the shims directory: the answer remembered


def _loader_cache_stamp() -> list[int] | None:
    from .cuda import LD_SO_CACHE

    try:
        st = os.stat(LD_SO_CACHE)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def _read_memo(stamp: list[int] | None) -> Path | None:
    dirs = _cache_dirs(make=False)
    if dirs is None:
        return None
    try:
        fd, _ = _open_file(dirs[1], DEFAULT_DRIVER)
        with os.fdopen(fd, "rb") as fh:
            got = json.loads(fh.read(1 << 16))
        if stamp is not None and got["ld_so_cache"] == stamp and os.path.exists(got["driver"]):
            return Path(got["driver"])
    except (_Unusable, OSError, ValueError, KeyError, TypeError):
        pass
    finally:
        _close(dirs)
    return None


def default_driver() -> Path:
    """driver.default_driver(), remembered while the dynamic loader's cache is unchanged and
    the file is there: the answer costs an `ldconfig -p` (tens of milliseconds). The memo is
    read only from a shims/ that _open_dir trusts, and only when it is the user's own."""
    stamp = _loader_cache_stamp()
    got = _read_memo(stamp)
    if got is not None:
        return got
    from .driver import default_driver as search

    found = search()
    if stamp is not None:
        with contextlib.suppress(OSError, ShimgenError):
            dirs = _cache_dirs(make=True)
            try:
                with replacing(DEFAULT_DRIVER, dir_fd=dirs[1], sync=False) as fh:  # a memo
                    fh.write(json.dumps({"ld_so_cache": stamp, "driver": str(found)}))
            finally:
                _close(dirs)
    return found


# ---- entries -------------------------------------------------------------------------------

def _stat_seal(st: os.stat_result) -> list[int]:
    """What the seal records of the library: a change of the file changes at least its ctime."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _check(shims_fd: int, key: Key) -> tuple[tuple[str, ...], str]:
    """(gate names, "") when the entry for `key` checks out (or ((), "") when there is none),
    else ((), why)."""
    try:
        fd, why = _open_dir(key.name, shims_fd)
    except FileNotFoundError:
        return (), ""
    except OSError as e:
        return (), e.strerror or str(e)
    if why:
        return (), f"its directory: {why}"
    try:
        mfd, _ = _open_file(fd, SHIM_MANIFEST)
        with os.fdopen(mfd, "rb") as fh:
            manifest = json.loads(fh.read(1 << 20))
        if not isinstance(manifest, dict) or manifest.get("cache_key") != key.as_dict():
            return (), f"{SHIM_MANIFEST} records another key"
        gates = manifest.get("gates", [])
        if not isinstance(gates, list) or not all(isinstance(g, str) for g in gates):
            return (), f"{SHIM_MANIFEST}: gates is not a list of names"
        digest = manifest.get("library_sha256")
        if not isinstance(digest, str):
            return (), f"{SHIM_MANIFEST} records no digest of {SHIM_LIBRARY}"
        lfd, st = _open_file(fd, SHIM_LIBRARY)
        try:
            if st.st_size != manifest.get("library_size"):
                return (), f"{SHIM_LIBRARY} is not the size it was built"
            # The seal matches: unchanged since it was sealed (the module's docstring), no
            # need to read it. Otherwise the bytes are what counts, read from this descriptor.
            if _stat_seal(st) != manifest.get("library_seal") and \
                    _sha256(_read_all(lfd, st.st_size)) != digest:
                return (), f"{SHIM_LIBRARY} has changed since it was built"
        finally:
            os.close(lfd)
    except _Unusable as e:
        return (), str(e)
    except (OSError, ValueError) as e:
        return (), str(e)
    finally:
        os.close(fd)
    if bool(gates) != bool(key.gates):
        return (), "its gates are not the key's"
    return tuple(gates), ""


def _shim_identity(data: bytes) -> tuple[str, bool]:
    """(GNU build-id, carries the shim's mark) of the x86-64 ELF image `data`, from the notes
    its program headers point to (as elfnotes.read_notes reads a file's)."""
    build_id, marked = "", False
    try:
        fields = EHDR.unpack_from(data)
        phoff, phentsize, phnum = fields[5], fields[9], fields[10]
        if fields[0][:6] != b"\x7fELF\x02\x01" or fields[2] != EM_X86_64 or \
                phentsize != PHDR.size:
            return "", False
        for i in range(phnum):
            typ, _, off, _, _, size, _, _ = PHDR.unpack_from(data, phoff + i * PHDR.size)
            if typ != PT_NOTE:
                continue
            notes, at = data[off:off + size], 0
            while at + 12 <= len(notes):
                namesz, descsz, ntype = struct.unpack_from("<III", notes, at)
                name = notes[at + 12:at + 12 + namesz].rstrip(b"\0")
                desc_at = at + 12 + (namesz + 3 & ~3)
                if name == b"GNU" and ntype == NT_GNU_BUILD_ID:
                    build_id = notes[desc_at:desc_at + descsz].hex()
                marked = marked or name == SHIM_NOTE
                at = desc_at + (descsz + 3 & ~3)
    except struct.error:
        return "", False
    return build_id, marked


SEAL_WAIT_S = 2.0  # at most, for the file system's clock to pass the library's ctime


def _clock_past(fd: int, ns: int) -> bool:
    """Whether the file system's clock has passed `ns`, read as the ctime that the file open
    at `fd` (a new file of ours, beside the library) gets when touched; waited for."""
    import time

    deadline = time.monotonic() + SEAL_WAIT_S
    while os.fstat(fd).st_ctime_ns <= ns:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
        os.utime(fd)
    return True


def _seal(shims_fd: int, key: Key) -> None:
    """Record in the new entry's shim.json the SHA-256 of its library and the library's
    stat, read from one descriptor, once the file system's clock has passed the library's
    ctime (so that any later change of the library changes its ctime). Checks that those
    bytes are the shim that was built (its build-id and mark)."""
    fd, why = _open_dir(key.name, shims_fd)
    if why:
        raise ShimgenError(f"the shim built into {entry_dir(key)}: {why}")
    try:
        mfd, _ = _open_file(fd, SHIM_MANIFEST)
        with os.fdopen(mfd, "rb") as fh:
            manifest = json.loads(fh.read(1 << 20))
        lfd, before = _open_file(fd, SHIM_LIBRARY)
        try:
            with replacing(SHIM_MANIFEST, dir_fd=fd) as out:
                past = _clock_past(out.fileno(), before.st_ctime_ns)
                data = _read_all(lfd, before.st_size)
                if _stat_seal(os.fstat(lfd)) != _stat_seal(before) or \
                        len(data) != before.st_size:
                    raise ShimgenError(f"{entry_dir(key) / SHIM_LIBRARY} changed while "
                                       "shimgen read it; run again")
                if _shim_identity(data) != (manifest.get("library_build_id"), True):
                    raise ShimgenError(f"{entry_dir(key) / SHIM_LIBRARY} is not the shim "
                                       "that was built")
                manifest["library_sha256"] = _sha256(data)
                # without a clock past its ctime, no seal: each use hashes the library
                manifest["library_seal"] = _stat_seal(before) if past else None
                out.write(json.dumps(manifest, indent=2) + "\n")
        finally:
            os.close(lfd)
    except (_Unusable, OSError, ValueError) as e:
        raise ShimgenError(f"the shim built into {entry_dir(key)} cannot be sealed: "
                           f"{e}") from None
    finally:
        os.close(fd)


def entry_dir(key: Key) -> Path:
    """Where the entry for `key` is (or will be)."""
    return cache_root() / SHIMS / key.name


def lookup(key: Key) -> Entry | None:
    """The cached entry for `key` if it checks out, else None. Builds and locks nothing. A
    cache root or shims/ that _open_dir does not trust is a ShimgenError, as when building."""
    dirs = _cache_dirs(make=False)
    if dirs is None:
        return None
    try:
        gates, why = _check(dirs[1], key)
        if why or not _exists(dirs[1], key.name):
            return None
    finally:
        _close(dirs)
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
    dirs = _cache_dirs(make=True)
    root = cache_root() / SHIMS
    directory = root / key.name
    try:
        with _key_lock(dirs[1], key):
            got, why = _check(dirs[1], key)
            if not why and os.path.lexists(directory):  # another run built it meanwhile
                return Entry(key, directory, got, "cached")
            kept = _discard(dirs[1], key.name) if _exists(dirs[1], key.name) else ""
            seconds = _build(driver, key, gates, root, hooks)
            _seal(dirs[1], key)
            got, after = _check(dirs[1], key)
            if after or not _exists(dirs[1], key.name):
                raise ShimgenError(f"the shim built into {directory} does not check out: "
                                   f"{after}")
    finally:
        _close(dirs)
    how = f"rebuilt (the cached one was unusable: {why}{kept})" if why else "built"
    return Entry(key, directory, got, how, seconds)


def _discard(shims_fd: int, name: str) -> str:
    """Move the entry `name` (a directory, or whatever took its name) aside, to a new name
    in shims/, then remove what in it is the user's own (_remove_own). "" when all of it is
    gone, else what the banner says of what was left (another user's files)."""
    aside = f"{DISCARDED}{name}-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        os.rename(name, aside, src_dir_fd=shims_fd, dst_dir_fd=shims_fd)
    except OSError as e:
        raise ShimgenError(f"shim cache {cache_root() / SHIMS / name}: does not check out and "
                           f"cannot be moved aside ({e.strerror}); remove it") from None
    if _remove_own(shims_fd, aside):
        return ""
    return f"; not all of it was yours: left in {cache_root() / SHIMS / aside}"


def _remove_own(dir_fd: int, name: str, depth: int = 0) -> bool:
    """Remove `name` in the directory `dir_fd` and, for a directory, what is under it: only
    what is the user's own, never through a symlink (a symlink is removed, not followed), by
    descriptors (never a path that a rename could redirect). True when all of it is gone."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if st.st_uid != os.geteuid():
            return False  # another user's: left as it is
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=dir_fd)
            return True
        if depth > 16:
            return False
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=dir_fd)
        try:
            mine = os.fstat(fd)
            if (mine.st_dev, mine.st_ino, mine.st_uid) != (st.st_dev, st.st_ino, st.st_uid):
                return False
            os.fchmod(fd, 0o700)  # ours: nobody else may add to it now, and we may empty it
            gone = [_remove_own(fd, n, depth + 1) for n in os.listdir(fd)]
        finally:
            os.close(fd)
        if all(gone):
            os.rmdir(name, dir_fd=dir_fd)
        return all(gone)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _build(driver: Path, key: Key, gates: str | None, root: Path,
           hooks: tuple[str, ...] = ()) -> float:
    """Build the shim for `key` into `root/key.name` (owner-only files); its seconds. The
    hook files must still have the contents the key was made from."""
    from .pipeline import make_shim

    old = os.umask(0o077)
    try:
        return make_shim(driver, root, gates=gates, name=key.name, identity=key.as_dict(),
                         expect_build_id=key.build_id, user_hooks=tuple(hooks),
                         expect_hooks_digest=key.hooks or None).seconds
    finally:
        os.umask(old)
