"""`shimgen run -o DIR --force`: DIR replaced when it holds a finished run of this user made
by `shimgen run`, and never anything else. A finished run is a directory that holds only
what a run makes (run.json, traces/, timeline/, notices.log, heartbeat), each of this user,
not a symbolic link, traces/ and timeline/ holding only regular files; whose run.json is a
run's record with its end and exit written. The directory itself stays (it is held open by
its descriptor, which every check and removal goes through); what is in it is removed, each
entry only while its name is still the file that was checked, run.json last (a removal cut
short leaves a run that --force still recognises)."""

from __future__ import annotations

import contextlib
import json
import os
import stat

from ..errors import ShimgenError
from ..runenv import HEARTBEAT, NOTICES, RUN_JSON, TIMELINE, TRACES

RUN_FILES = (NOTICES, HEARTBEAT)
RUN_DIRS = (TRACES, TIMELINE)
MAX_RECORD = 1 << 20
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

#: said after a refusal of a directory that is not empty
WHAT_FORCE_DOES = "--force replaces only a finished run of yours made by `shimgen run`"


def entry_ident(st: os.stat_result) -> tuple[int, int]:
    """What tells a directory entry from one put in its place: its device and inode."""
    return st.st_dev, st.st_ino


def _mine(st: os.stat_result, kind) -> bool:
    return kind(st.st_mode) and st.st_uid == os.geteuid()


def finished_run(fd: int) -> tuple[str, list]:
    """Whether the directory at `fd` holds a finished run of this user made by `shimgen run`:
    ("", the entries to remove: (directory fd or None for `fd`, name, identity), innermost
    first, run.json last) or (why not, [])."""
    names = sorted(os.listdir(fd))
    other = [n for n in names if n not in (RUN_JSON, *RUN_FILES, *RUN_DIRS)]
    if other:
        return f"it holds {other[0]!r}, which `shimgen run` does not make", []
    if RUN_JSON not in names:
        return f"it has no {RUN_JSON}", []
    remove: list = []
    for name in names:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if name in RUN_DIRS:
            if not _mine(st, stat.S_ISDIR):
                return f"{name} is not a directory of yours", []
            with _opened(fd, name) as sub:
                if entry_ident(os.fstat(sub)) != entry_ident(st):
                    return f"{name} changed while it was read", []
                for inner in sorted(os.listdir(sub)):
                    ist = os.stat(inner, dir_fd=sub, follow_symlinks=False)
                    if not _mine(ist, stat.S_ISREG):
                        return f"{name}/{inner} is not a file of yours", []
                    remove.append(((name, entry_ident(st)), inner, entry_ident(ist)))
            remove.append((None, name, entry_ident(st)))
        elif not _mine(st, stat.S_ISREG):
            return f"{name} is not a file of yours", []
        elif name != RUN_JSON:
            remove.append((None, name, entry_ident(st)))
    why, st = _record_ended(fd)
    if why:
        return why, []
    return "", remove + [(None, RUN_JSON, entry_ident(st))]


@contextlib.contextmanager
def _opened(fd: int, name: str):
    sub = os.open(name, _O_DIR, dir_fd=fd)
    try:
        yield sub
    finally:
        os.close(sub)


def _record_ended(fd: int) -> tuple[str, os.stat_result | None]:
    """run.json: a run's record whose end and exit are written ("", its stat), or why not."""
    rfd = os.open(RUN_JSON, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                  dir_fd=fd)
    try:
        st = os.fstat(rfd)
        raw = os.read(rfd, MAX_RECORD + 1) if _mine(st, stat.S_ISREG) else b""
    finally:
        os.close(rfd)
    try:
        data = json.loads(raw) if 0 < len(raw) <= MAX_RECORD else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or not {"command", "start", "shimgen_version"} <= set(data):
        return f"its {RUN_JSON} is not a run's record", None
    if data.get("end") is None or data.get("exit") is None:
        return "its run has not ended (or `shimgen run` was killed before it wrote the end)", None
    return "", st


def replace_run(fd: int, out) -> None:
    """Empty the directory at `fd`, a finished run (finished_run); ShimgenError, nothing
    removed, when it is not one."""
    try:
        why, remove = finished_run(fd)
    except OSError as e:
        why = f"{e.filename or out}: {e.strerror}"
    if why:
        raise ShimgenError(f"run directory {out}: not replaced: {why}; {WHAT_FORCE_DOES}; "
                           "name a new or empty directory")
    for where, name, ident in remove:
        if where is None:
            remove_if_same(fd, name, ident)
            continue
        with contextlib.suppress(OSError), _opened(fd, where[0]) as sub:
            if entry_ident(os.fstat(sub)) == where[1]:
                remove_if_same(sub, name, ident)


def remove_if_same(dir_fd: int, name: str, ident: tuple[int, int]) -> None:
    """`name` removed while it is still the entry checked (else left: the run's claim,
    which follows, refuses a directory that is not empty)."""
    with contextlib.suppress(OSError):
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if entry_ident(st) != ident:
            return
        if stat.S_ISDIR(st.st_mode):
            os.rmdir(name, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)
