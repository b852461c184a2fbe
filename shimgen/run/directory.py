"""The run directory of `shimgen run`: made and used through descriptors.

The run directory is opened once, and every file of the run is made relative to that
descriptor (never O_CREAT through a symlink), so a directory renamed or swapped while the
command runs cannot redirect a write. The default parent (./shimgen-runs, runenv.RUNS_DIR)
must be the user's own and writable by nobody else (files/owned.py, the cache's rule): in a
working directory that others share, another user could otherwise make it first, or rename
the run directory in it and put one of theirs in its place."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import time
from pathlib import Path

from ..errors import ShimgenError
from ..files import ANOTHER_USER, NOT_A_DIRECTORY, OPEN_TO_OTHERS, distrust
from ..runenv import HEARTBEAT, NOTICES, RUN_JSON, RUNS_DIR, TIMELINE, TRACES
from .replace import entry_ident, remove_if_same

RUNS_ADVICE = {NOT_A_DIRECTORY: "remove it", ANOTHER_USER: "it is not yours to use",
               OPEN_TO_OTHERS: "chmod go-w it"}
_O_PARENT = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_O_RUN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_O_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _command_tag(argv0: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(argv0))[:40].lstrip(".") or "cmd"


class RunDir:
    """A run directory of this run, held open (`fd`); what run made of it is remembered, so
    that `discard` removes that and nothing else."""

    __slots__ = ("path", "fd", "_parent_fd", "_made")

    def __init__(self, path: Path, fd: int, parent_fd: int,
                 made: list[tuple[int | None, str, tuple[int, int]]]) -> None:
        self.path = path  # as given to the command (its files are named by it)
        self.fd = fd
        self._parent_fd = parent_fd
        # (directory descriptor or None for an absolute name, name, (st_dev, st_ino)) of each
        # directory and file run made, in the order made
        self._made = made

    def mkdir(self, name: str) -> None:
        os.mkdir(name, 0o700, dir_fd=self.fd)
        self._made.append((self.fd, name, entry_ident(os.stat(name, dir_fd=self.fd,
                                                         follow_symlinks=False))))

    def create(self, name: str) -> None:
        """A new empty file `name`, 0600 (O_EXCL: nothing that was there is used)."""
        fd = os.open(name, _O_NEW_FILE, 0o600, dir_fd=self.fd)
        try:
            self._made.append((self.fd, name, entry_ident(os.fstat(fd))))
        finally:
            os.close(fd)

    def replaced(self, name: str, st: os.stat_result) -> None:
        """`name` is now the file of stat `st` (renamed over what was there)."""
        self._made = [m for m in self._made if (m[0], m[1]) != (self.fd, name)]
        self._made.append((self.fd, name, entry_ident(st)))

    def still_named(self) -> bool:
        """Whether its path still names this directory (it was not moved or replaced)."""
        try:
            return entry_ident(os.stat(self.path)) == entry_ident(os.fstat(self.fd))
        except OSError:
            return False

    def discard(self) -> None:
        """Remove what run made (files, directories, the run directory and its parents when
        run made them), newest first, each only while its name is still what run made, so
        nothing else is removed; a directory that is not empty stays."""

        for dir_fd, name, ident in reversed(self._made):
            remove_if_same(dir_fd, name, ident)
        self._made = []
        self.close()

    def close(self) -> None:
        for fd in (self.fd, self._parent_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fd = self._parent_fd = -1


def _mkdir_private(path: Path) -> list[tuple[None, str, tuple[int, int]]]:
    """Make `path` and any missing parents, each 0700; those made (for RunDir)."""
    missing = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    made = []
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        made.append((None, str(d), entry_ident(os.lstat(d))))
    return made


def open_run_dir(out: Path | None, argv0: str, now: float, me: dict | None = None,
                 force: bool = False) -> RunDir:
    """The run directory, made 0700 and empty, held open: `out` (missing, or an empty
    directory of ours; never a symlink, never one with files in it), or
    ./shimgen-runs/<time>-<command>[-N] in a runs directory of the user's own that nobody
    else can write. With `me` (this node's host, command and driver build id), `out` may be
    a run of another node of the same job, which this one joins (run/nodes.py): its part
    of it is returned. With `force`, `out` may hold a finished run of the user's, which is
    replaced (run/replace.py)."""
    try:
        if out is not None:
            return _named_run_dir(out, me, force)
        return _default_run_dir(argv0, now)
    except OSError as e:
        raise ShimgenError(f"run directory {e.filename or out}: {e.strerror}") from None


def make_run_dir(out: Path | None, argv0: str, now: float) -> Path:
    """open_run_dir's directory, by its path (closed again)."""
    rd = open_run_dir(out, argv0, now)
    rd.close()
    return rd.path


def _default_run_dir(argv0: str, now: float) -> RunDir:
    parent = Path(RUNS_DIR).absolute()
    made: list = []
    try:
        os.mkdir(RUNS_DIR, 0o700)
        made.append((None, str(parent), entry_ident(os.lstat(RUNS_DIR))))
    except FileExistsError:
        pass
    try:
        pfd = os.open(RUNS_DIR, _O_PARENT | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        pfd, why = -1, NOT_A_DIRECTORY
    else:
        why = distrust(os.fstat(pfd))
    if why:
        if pfd >= 0:
            os.close(pfd)
        raise ShimgenError(f"runs directory {parent}: {why}; {RUNS_ADVICE[why]}, or name the "
                           "run directory with -o DIR")
    try:
        base = f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}-{_command_tag(argv0)}"
        for n in range(1, 10000):
            name = base if n == 1 else f"{base}-{n}"
            try:
                os.mkdir(name, 0o700, dir_fd=pfd)
            except FileExistsError:
                continue
            fd = os.open(name, _O_RUN_DIR, dir_fd=pfd)
            made.append((pfd, name, entry_ident(os.fstat(fd))))
            return RunDir(parent / name, fd, pfd, made)
        raise ShimgenError(f"run directory: {parent} has too many runs named {base}")
    except BaseException:
        os.close(pfd)
        raise


def _claim_or_join(out: Path, fd: int, pfd: int, new: bool, me: dict | None,
                   made: list, force: bool = False) -> RunDir | None:
    """The top of `out` claimed for this run (run.json made empty, O_EXCL: None), or this
    node's part of another node's run there (run/nodes.py). With `force`, a finished run
    there is removed first (run/replace.py); without it, one is named in the refusal."""
    from .replace import finished_run, replace_run

    names = os.listdir(fd)
    if names and force:
        replace_run(fd, out)
        names = os.listdir(fd)
    elif names and not finished_run(fd)[0]:
        raise ShimgenError(f"run directory {out}: holds a finished run; name a new or empty "
                           "directory, or add --force to replace that run")
    if names and (me is None or RUN_JSON not in names):
        raise ShimgenError(f"run directory {out}: exists and is not empty; name a new "
                           "or empty directory (nothing is overwritten)")
    try:
        rfd = os.open(RUN_JSON, _O_NEW_FILE, 0o600, dir_fd=fd)
    except FileExistsError:
        if me is None:
            raise ShimgenError(f"run directory {out}: exists and is not empty; name a new "
                               "or empty directory (nothing is overwritten)") from None
        from .nodes import join

        nfd, name = join(fd, out, me)
        part = RunDir(out / name, nfd, fd, [])
        part._made.append((fd, name, entry_ident(os.fstat(nfd))))
        os.close(pfd)
        return part
    try:
        made.append((fd, RUN_JSON, entry_ident(os.fstat(rfd))))
    finally:
        os.close(rfd)
    return None


def _named_run_dir(out: Path, me: dict | None = None, force: bool = False) -> RunDir:
    out = out.absolute()
    if os.path.islink(out):
        raise ShimgenError(f"run directory {out}: is a symbolic link; name a directory")
    if out.parent == out:
        raise ShimgenError(f"run directory {out}: exists and is not empty; name a new or empty "
                           "directory (nothing is overwritten)")
    made: list = _mkdir_private(out.parent)
    pfd = os.open(out.parent, _O_PARENT)  # the directories above it: as the user named them
    try:
        try:
            os.mkdir(out.name, 0o700, dir_fd=pfd)
            new = True
        except FileExistsError:
            new = False
        try:
            fd = os.open(out.name, _O_RUN_DIR, dir_fd=pfd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise ShimgenError(f"run directory {out}: is a symbolic link; name a "
                                   "directory") from None
            raise OSError(e.errno, e.strerror, str(out)) from None
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid():
                raise ShimgenError(f"run directory {out}: owned by another user")
            if new:
                made.append((pfd, out.name, entry_ident(st)))
            part = _claim_or_join(out, fd, pfd, new, me, made, force)
            if part is not None:
                return part
            os.fchmod(fd, 0o700)
        except BaseException:
            os.close(fd)
            raise
    except BaseException:
        os.close(pfd)
        raise
    return RunDir(out, fd, pfd, made)


def write_json(run_dir: RunDir, data: dict) -> None:
    """run.json, written whole: a new file of ours in the run directory (by its descriptor)
    renamed over it (outfile.replacing). Not fsynced: it is written before the command starts
    and again after it ends, on every run's path."""
    from ..files import replacing

    with replacing(RUN_JSON, dir_fd=run_dir.fd, sync=False) as fh:
        st = os.fstat(fh.fileno())
        fh.write(json.dumps(data, indent=2) + "\n")
    run_dir.replaced(RUN_JSON, st)


def layout(run_dir: RunDir, trace: str) -> None:
    """What the shim writes into, made by run before the command starts (0700, 0600): so
    nothing of anyone else's can be there."""
    run_dir.mkdir(TRACES)
    if trace in ("timeline", "calls"):  # calls: written by run from the records at the end
        run_dir.mkdir(TIMELINE)
    run_dir.create(NOTICES)
    run_dir.create(HEARTBEAT)


# ---- the command's environment -----------------------------------------------------------
