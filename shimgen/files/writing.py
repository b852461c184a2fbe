"""Files written whole or not at all, and a file that a command writes at a path the user
named (`shimgen gates --json`), checked before any work is done.

`replacing` is the one way shimgen writes a file whole (run.json, the shim cache's manifests
and memo, `write_whole`): a temporary file beside the target (owner-only, created
exclusively, no symbolic link followed), optionally relative to a directory descriptor,
flushed to disk and renamed over the target only once it is complete, so a failure or an
interrupt leaves the target as it was. Only the target is replaced, and only the temporary
file it made is removed: nothing else in the directory is touched.

`check_target` runs first for a path the user named: the directory must exist and be
writable, the name must not be a directory or a symbolic link, and an existing file is
replaced only when `replaceable` says it is the command's own kind of file (a previous
profile); anything else is the user's and is never clobbered. `write_whole` then writes it
through `replacing`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import ShimgenError

TYPE_CHECKING = False  # typing is not imported at run time: `shimgen run` imports this module
if TYPE_CHECKING:
    from typing import IO

FILE_MODE = 0o600
_O_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP_NAMES = 100  # tried beside the target before giving up


def check_target(path: Path, option: str, replaceable: Callable[[Path], bool]) -> None:
    """Refuse, in one line naming `option`, a target that cannot be written or must not be."""
    directory = path.parent
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        raise ShimgenError(f"{option} {path}: directory {directory} does not exist") from None
    except OSError as e:
        raise ShimgenError(f"{option} {path}: directory {directory}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ShimgenError(f"{option} {path}: {directory} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ShimgenError(f"{option} {path}: directory {directory} is not writable")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise ShimgenError(f"{option} {path}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise ShimgenError(f"{option} {path}: is a symbolic link; not following it")
    if stat.S_ISDIR(st.st_mode):
        raise ShimgenError(f"{option} {path}: is a directory")
    if not stat.S_ISREG(st.st_mode) or not replaceable(path):
        raise ShimgenError(f"{option} {path}: exists and is not a file this command wrote; "
                           "not overwriting it (remove it or choose another name)")


@contextlib.contextmanager
def replacing(name: str | Path, *, dir_fd: int | None = None, mode: int = FILE_MODE,
              sync: bool = True) -> Iterator[IO[str]]:
    """A text file to write in place of `name` (relative to `dir_fd` when given): a new
    temporary file beside it, `mode` (0600), made with O_EXCL|O_NOFOLLOW (nothing that was
    there is used, no symbolic link is followed), renamed over `name` when the block ends,
    after its data is flushed to disk (fsync; `sync` off skips only that, for a file whose
    loss in a crash costs nothing and whose writer is timed: an fsync costs milliseconds).
    When the block raises, the temporary file is removed and `name` is as it was. Errors
    are the system's OSError."""
    head, tail = os.path.split(os.fspath(name))
    for n in range(_TEMP_NAMES):
        tmp = os.path.join(head, f".{tail}.shimgen-{os.getpid()}-{n}.tmp")
        try:
            fd = os.open(tmp, _O_NEW, mode, dir_fd=dir_fd)
        except FileExistsError:
            continue
        break
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name beside it", os.fspath(name))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def write_whole(path: Path, text: str) -> None:
    """`text` at `path`, mode 0600, through a temporary file renamed over it when complete."""
    try:
        with replacing(path) as fh:
            fh.write(text)
    except OSError as e:
        raise ShimgenError(f"cannot write {path}: {e.strerror or e}") from None
