"""Reading a file named by the user or the environment, safely: opened without blocking (a
FIFO or a device named by mistake is refused at once, never waited on), checked on the open
descriptor to be a regular file, optionally never through a symbolic link, and read up to a
limit. Light: on `shimgen run`'s path."""

from __future__ import annotations

import errno
import os
import stat


class NotRegular(OSError):
    """The path is not a regular file (a directory, FIFO, device or socket)."""


def describe(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | os.PathLike, *, follow: bool = True) -> int:
    """A read-only descriptor of the regular file at `path` (blocking again once open).
    OSError as the system gives it; NotRegular (strerror saying what it is) otherwise."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    fd = os.open(path, flags | (0 if follow else os.O_NOFOLLOW))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular(errno.EINVAL, f"{describe(mode)}, not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike, limit: int, *, follow: bool = True) -> bytes:
    """At most `limit` + 1 bytes of the regular file at `path` (more than `limit` tells the
    caller the file is too large)."""
    fd = open_regular(path, follow=follow)
    with os.fdopen(fd, "rb") as f:
        return f.read(limit + 1)
