"""A file that a command writes at a path the user named (`shimgen gates --json`): checked
before any work is done, and written whole or not at all.

`check_target` runs first: the directory must exist and be writable, the name must not be a
directory or a symbolic link, and an existing file is replaced only when `replaceable` says
it is the command's own kind of file (a previous profile); anything else is the user's and
is never clobbered. `write_whole` writes a temporary file (owner-only, created exclusively,
no symbolic link followed) beside the target and renames it over the target only once it is
complete, so a failure or an interrupt leaves the target as it was.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from .errors import ShimgenError

FILE_MODE = 0o600


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


def write_whole(path: Path, text: str) -> None:
    """`text` at `path`, mode 0600, through a temporary file renamed over it when complete."""
    directory = path.parent
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    tmp = None
    for n in range(100):
        candidate = directory / f".{path.name}.shimgen-{os.getpid()}-{n}.tmp"
        try:
            fd = os.open(candidate, flags, FILE_MODE)
        except FileExistsError:
            continue
        except OSError as e:
            raise ShimgenError(f"cannot write {path}: {e.strerror}") from None
        tmp = candidate
        break
    if tmp is None:
        raise ShimgenError(f"cannot write {path}: no free temporary name beside it")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ShimgenError(f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
