"""A shared memory budget for `shimgen run` (docs/memory.md, "One budget for many
processes"): `--limit job-memory=SIZE` holds the processes of one run together, per device,
its books in the run directory; `--limit-group NAME` (or SHIMGEN_LIMIT_GROUP: run/main.py)
shares one budget across runs and containers of the machine, its books in the group's
directory. The group's size is fixed by its first run (runenv.BUDGET_SIZE, made whole or
not at all); a run that gives another is refused in one line. The group's directory is
checked as the runs directory is (files/owned.py: the user's own, writable by nobody
else), every level of it that shimgen makes or relies on."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import ShimgenError
from ..files import distrust
from ..runenv import BUDGET_BOOKS, BUDGET_SIZE, GROUPS_DIR

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def group_dir(group: str) -> Path:
    """Where a group's books are: a directory given by its path (with a '/'), or
    $XDG_RUNTIME_DIR/shimgen/groups/NAME (/tmp/shimgen-UID/... without XDG_RUNTIME_DIR)."""
    if "/" in group:
        return Path(group)
    if not _NAME.fullmatch(group):
        raise ShimgenError(f"--limit-group {group!r}: give a name of letters, digits, '.', '_'"
                           " and '-' (64 at most), or a directory's path")
    base = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/shimgen-{os.geteuid()}"
    return Path(base) / GROUPS_DIR / group


def _private_dir(path: Path, make: bool) -> int:
    """`path` opened, made 0700 when missing (and `make`), and checked: the user's own,
    writable by nobody else, not a symlink."""
    if make:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    fd = os.open(path, _O_DIR)
    why = distrust(os.fstat(fd))
    if why:
        os.close(fd)
        raise ShimgenError(f"--limit-group: {path}: {why}")
    return fd


def _open_group(where: Path, named: bool) -> int:
    """The group's directory, held open: for a name, each level under the base made and
    checked; a path given is made when its parent is there, and checked."""
    if not named:
        return _private_dir(where, True)
    part = where.parents[len(Path(GROUPS_DIR).parts)]
    os.close(_private_dir(part, True))
    for name in Path(GROUPS_DIR).parts + (where.name,):
        part = part / name
        os.close(_private_dir(part, True))
    return _private_dir(where, False)


def _fixed_size(fd: int, size: int | None, group: str) -> int:
    """The group's size: the one its first run fixed, or `size` fixed now (written whole
    under a name of its own, then linked in place: a second first run finds it whole)."""
    try:
        return _read_size(fd, group, size)
    except FileNotFoundError:
        pass
    if size is None:
        raise ShimgenError(f"--limit-group {group}: the group has no size yet; its first run "
                           "gives it with --limit job-memory=SIZE")
    tmp = f"{BUDGET_SIZE}.new.{os.getpid()}"
    new = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                  0o600, dir_fd=fd)
    try:
        os.write(new, f"{size}\n".encode())
        try:
            os.link(tmp, BUDGET_SIZE, src_dir_fd=fd, dst_dir_fd=fd)
        except FileExistsError:
            pass
    finally:
        os.close(new)
        os.unlink(tmp, dir_fd=fd)
    return _read_size(fd, group, size)


def _read_size(fd: int, group: str, size: int | None) -> int:
    f = os.open(BUDGET_SIZE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    try:
        text = os.read(f, 64).decode("ascii", "replace").strip()
    finally:
        os.close(f)
    if not text.isdigit():
        raise ShimgenError(f"--limit-group {group}: its {BUDGET_SIZE} is not a size; remove "
                           "the group's directory to start the group again")
    fixed = int(text)
    if size is not None and size != fixed:
        raise ShimgenError(f"--limit job-memory={size} bytes: group {group}'s budget is {fixed} "
                           "bytes per device, fixed by its first run")
    return fixed


def budget(limits: dict[str, int], group: str) -> tuple[str, int]:
    """(the books' file, the size per device) of a group, its directory made and its size
    fixed or checked. (--limit job-memory alone: the books are the run directory's.)"""
    where = group_dir(group)
    try:
        fd = _open_group(where, "/" not in group)
        try:
            size = _fixed_size(fd, limits.get("job-memory"), group)
        finally:
            os.close(fd)
    except OSError as e:
        raise ShimgenError(f"--limit-group {group}: {e.filename or where}: {e.strerror}") from None
    return str(where.absolute() / BUDGET_BOOKS), size
