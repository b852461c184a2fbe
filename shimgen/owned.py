"""Whether a directory or file that shimgen relies on is the user's alone: the user's own,
and neither group nor others can write it. One rule, for the shim cache (cache_trust.py: every
level, and the library) and the runs directory of `shimgen run` (rundir.py); each says
what to do about it in its own words."""

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
