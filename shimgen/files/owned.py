"""Whether a directory or file that shimgen relies on is the user's alone: the user's own,
and neither group nor others can write it. One rule, for the shim cache (cache/trust.py: every
level, and the library) and the runs directory of `shimgen run` (run/directory.py); each says
what to do about it in its own words. For a file that is code run as the user (a hook file,
a driver that diff loads), distrust_code also checks every directory above it."""

from __future__ import annotations

import os
import stat

NOT_A_DIRECTORY = "not a directory (a symbolic link or a file)"
NOT_A_FILE = "not a regular file (a symbolic link, a directory or a device)"
ANOTHER_USER = "owned by another user"
OPEN_TO_OTHERS = "group or others can write it"


def distrust(st: os.stat_result, *, kind=stat.S_ISDIR) -> str:
    """Why what `st` describes (an fstat of a descriptor opened without following a
    symlink) is not to be used: "" when it is of the `kind` asked (a directory, or with
    kind=stat.S_ISREG a regular file), the user's own, and neither group nor others can
    write it."""
    if not kind(st.st_mode):
        return NOT_A_DIRECTORY if kind is stat.S_ISDIR else NOT_A_FILE
    if st.st_uid != os.geteuid():
        return ANOTHER_USER
    if st.st_mode & 0o022:
        return OPEN_TO_OTHERS
    return ""


def distrust_code(fd: int, path: str | os.PathLike) -> str:
    """Why the file open at `fd` (reached by `path`) is not to be run as this user, the rule
    of OpenSSH's StrictModes for a file that is code (a hook file, a driver that diff loads):
    "" when the file and every directory above it are this user's or root's, the file
    writable by neither group nor others, and no directory writable by them unless it is
    sticky (where others cannot rename or remove what is not theirs). Anyone else who could
    change the file, or swap it through a directory, could run code as this user."""
    me = os.geteuid()
    st = os.fstat(fd)
    if st.st_uid not in (me, 0):
        return f"{ANOTHER_USER} (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return OPEN_TO_OTHERS
    real = os.path.realpath(path)
    try:
        same = os.stat(real)
    except OSError:
        return "it was moved while it was read"
    if (same.st_dev, same.st_ino) != (st.st_dev, st.st_ino):
        return "it was replaced while it was read"
    here = os.path.dirname(real)
    while True:
        try:
            d = os.stat(here)
        except OSError as e:
            return f"its directory {here} cannot be checked ({e.strerror})"
        if d.st_uid not in (me, 0):
            return f"its directory {here} is {ANOTHER_USER} (uid {d.st_uid})"
        if d.st_mode & 0o022 and not d.st_mode & stat.S_ISVTX:
            return f"its directory {here} can be written by group or others (and is not sticky)"
        parent = os.path.dirname(here)
        if parent == here:
            return ""
        here = parent
