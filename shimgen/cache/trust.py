"""What the shim cache of `shimgen run` (cache/store.py) relies on, opened and checked: the cache
root, `shims/`, an entry, and the files in an entry; and a bad entry taken away.

Every directory level shimgen relies on (the cache root, shims/, the entry) is opened
without following a symlink and checked on its descriptor by one function, open_dir, on the
cached path and when building alike: a directory, the user's own, that neither group nor
others can write. The cache root and shims/ failing it is an error (one line; what is there
is left alone); an entry failing it is rebuilt. The entry's shim.json and library are opened
with O_NOFOLLOW and checked the same way on their descriptors (open_file, owned.distrust).
A bad entry is moved aside and only what is the user's own in it is removed (discard):
nothing is followed through a symlink, nothing of another user's is removed or changed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from ..errors import ShimgenError
from ..files import ANOTHER_USER, NOT_A_DIRECTORY, NOT_A_FILE, OPEN_TO_OTHERS, distrust

SHIMS = "shims"  # under $XDG_CACHE_HOME/shimgen, beside the drivers the tests fetch
DISCARDED = ".shimgen-discarded-"  # a bad entry moved aside (not shim/build.py's staging prefix)

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


# ---- one check for every directory level, one for every file -----------------------------

def open_dir(name: str | Path, dir_fd: int | None = None) -> tuple[int, str]:
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


def cache_dirs(make: bool) -> tuple[int, int] | None:
    """Descriptors of the cache root and of shims/ (close both), each checked by open_dir;
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
                fd, why = open_dir(name, parent)
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


def close_all(fds: tuple[int, ...]) -> None:
    for fd in fds:
        os.close(fd)


class Unusable(Exception):
    """An entry that does not check out; the message says why."""


def open_file(dir_fd: int, name: str) -> tuple[int, os.stat_result]:
    """`name` in the directory `dir_fd` opened for reading, O_NOFOLLOW, and its descriptor's
    stat; Unusable when it is not a regular file of the user's that only the user can
    write."""
    try:
        fd = os.open(name, _O_FILE, dir_fd=dir_fd)
    except FileNotFoundError:
        raise Unusable(f"{name} is missing") from None
    except OSError as e:
        raise Unusable(f"{name}: {NOT_A_FILE if e.errno == errno.ELOOP else e.strerror}") \
            from None
    st = os.fstat(fd)
    why = distrust(st, kind=stat.S_ISREG)
    if why:
        os.close(fd)
        raise Unusable(f"{name}: {why}")
    return fd, st


def read_all(fd: int, size: int) -> bytes:
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


# ---- a bad entry taken away ----------------------------------------------------------------

def discard(shims_fd: int, name: str) -> str:
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
