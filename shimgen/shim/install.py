"""A build's output directory: checked before any work, locked, and the new build put in
place whole (build.py's top says how: one rename or one swap, else file by file, the library
last; the staging directories of killed builds removed)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..arches import ARCHES, host
from ..errors import ShimgenError
from ..runenv import SHIM_LIBRARY, SHIM_MANIFEST
from .model import ShimModel, output_name

STAGING_PREFIX = ".shimgen-staging-"
INSTALLED = ("src", SHIM_MANIFEST, "build.log", SHIM_LIBRARY)


@contextlib.contextmanager
def dir_lock(path: Path, blocking: bool = True) -> Iterator[bool]:
    """flock(2) on a directory. Yields False if `blocking` is off and another process holds
    it. A file system without flock (some network file systems) yields True unlocked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise ShimgenError(f"output directory {path}: {e.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        except OSError:
            pass
        yield True
    finally:
        os.close(fd)


def rmtree(path: Path) -> None:
    """Remove a tree, making read-only directories in it writable first."""

    def retry(func, p, _exc) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
            func(p)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=retry)


def check_writable(root: Path) -> None:
    """The output root made if missing, and checked to be a directory this user can write."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ShimgenError(f"output directory {root}: not a directory") from None
    except OSError as e:
        raise ShimgenError(f"output directory {root}: {e.strerror}") from None
    if not root.is_dir():
        raise ShimgenError(f"output directory {root}: not a directory")
    if not os.access(root, os.W_OK | os.X_OK):
        raise ShimgenError(f"output directory {root}: not writable")


def remove_stale_staging(root: Path) -> None:
    """Staging directories of builds that were killed: nobody holds their lock."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(STAGING_PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        with contextlib.suppress(ShimgenError), dir_lock(Path(entry.path), False) as free:
            if free:
                rmtree(Path(entry.path))


def cleanup(staging: Path | None, staging_fd: int) -> None:
    if staging is not None:
        rmtree(staging)
    if staging_fd >= 0:
        os.close(staging_fd)


FSYNC_THREADS = 16


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Flush the new build to disk before it replaces the old one: every file, by
    FSYNC_THREADS threads at once (the file system commits fsyncs that wait together in one
    journal write: on the CPU machine, ext4, 88 files took 140 to 290 ms one after the
    other, 11 to 35 ms so), the first error raised once all are done."""
    from concurrent.futures import ThreadPoolExecutor

    paths = [os.path.join(dirpath, f) for dirpath, _dirs, files in os.walk(root) for f in files]
    with ThreadPoolExecutor(FSYNC_THREADS) as pool:
        for _ in pool.map(_fsync_file, paths):
            pass


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories atomically (renameat2 RENAME_EXCHANGE). False where the kernel or
    the file system cannot."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    fa, fb = os.fsencode(a), os.fsencode(b)
    if hasattr(libc, "renameat2"):
        rc = libc.renameat2(_AT_FDCWD, fa, _AT_FDCWD, fb, _RENAME_EXCHANGE)
    else:
        number = ARCHES[host()].sys_renameat2 if host() in ARCHES else None
        if number is None:
            return False
        rc = libc.syscall(number, _AT_FDCWD, fa, _AT_FDCWD, fb, _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def check_output(model: ShimModel, out_root: Path, name: str | None = None) -> Path:
    """Where `model` is built (`out_root/name`, default output_name), checked before any
    work: the root usable, the name free or a directory (an earlier build)."""
    out_root = out_root.absolute()
    check_writable(out_root)
    final = out_root / (name or output_name(model.driver, model.gates is not None,
                                            model.user is not None))
    if os.path.lexists(final) and (final.is_symlink() or not final.is_dir()):
        raise ShimgenError(f"output {final} exists and is not a directory")
    return final


def put_in_place(new: Path, final: Path, staging: Path) -> None:
    """Put the complete build `new` at `final`; the previous build ends up inside `staging`."""
    if not os.path.lexists(final):
        os.rename(new, final)
        return
    if final.is_symlink() or not final.is_dir():
        raise ShimgenError(f"output {final} exists and is not a directory")
    if _exchange(new, final):
        return
    # No directory swap here: move complete files in one by one, the library last.
    trash = Path(tempfile.mkdtemp(prefix="old-", dir=staging))
    if (final / "src").exists():
        os.replace(final / "src", trash / "src")
    for item in INSTALLED:
        os.replace(new / item, final / item)
