"""One run directory for a job of several nodes: `shimgen run -o DIR` started once per
node (srun, mpirun, torchrun's per-node agents, on a shared file system). The first
`shimgen run` to claim DIR (run.json made with O_EXCL) has the top; every other one joins
it under its host name, DIR/<host>/, with its own run.json, traces, notices and heartbeat,
and touches no file of another node. A node joins only a run that has not ended, of the
same command and driver build, by the same user, from another host; anything else is
refused as a directory in use is (docs/multigpu.md).
"""

from __future__ import annotations

import json
import os
import re
import time

from ..errors import ShimgenError
from ..runenv import NOTICES, RUN_JSON, TEST_HOST, TIMELINE, TRACES

WAIT_FOR_TOP_S = 30.0  # how long a joining node waits for the top's run.json to be written
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def host_name() -> str:
    """This node's name: the machine's (uname), or SHIMGEN_TEST_HOST in tests that
    simulate nodes on one machine."""
    return os.environ.get(TEST_HOST) or os.uname().nodename


def _part_name(host: str, out) -> str:
    name = host.split(".", 1)[0] if not _NAME.fullmatch(host) else host
    if not _NAME.fullmatch(name) or name in (TRACES, TIMELINE, RUN_JSON, NOTICES):
        raise ShimgenError(f"run directory {out}: the host name {host!r} cannot name this "
                           "node's part of the run; set the host name, or give each node its "
                           "own directory")
    return name


def _top_record(fd: int, out) -> dict:
    """The top's run.json once written (the top made it empty first: wait for it)."""
    deadline = time.monotonic() + WAIT_FOR_TOP_S
    while True:
        try:
            rfd = os.open(RUN_JSON, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                          | os.O_CLOEXEC, dir_fd=fd)
        except OSError as e:
            raise ShimgenError(f"run directory {out}: its {RUN_JSON} cannot be read "
                               f"({e.strerror})") from None
        try:
            st = os.fstat(rfd)
            raw = os.read(rfd, 1 << 20)
        finally:
            os.close(rfd)
        if st.st_uid != os.geteuid():
            raise ShimgenError(f"run directory {out}: a run of another user")
        try:
            data = json.loads(raw)
            if isinstance(data, dict):
                return data
        except ValueError:
            pass
        if time.monotonic() > deadline:
            raise ShimgenError(f"run directory {out}: exists and is not empty ({RUN_JSON} is "
                               "no run's); name a new or empty directory (nothing is "
                               "overwritten)")
        time.sleep(0.05)


def check_join(top: dict, me: dict, out) -> None:
    """Whether this node may join the run whose run.json is `top`; ShimgenError if not."""
    driver = (top.get("driver") or {}).get("build_id") if isinstance(top.get("driver"),
                                                                      dict) else None
    why = ("it is a run of this host already" if top.get("host") == me["host"]
           else "its run has ended" if top.get("end") is not None
           else "it is a run of another command" if top.get("command") != me["command"]
           else "it is a run with another driver build" if driver != me["build_id"]
           else "")
    if why:
        raise ShimgenError(f"run directory {out}: exists and is not empty ({why}); name a new "
                           "or empty directory (nothing is overwritten)")


def join(fd: int, out, me: dict) -> tuple[int, str]:
    """This node's part of the run at `fd`, made (0700) and opened: (its descriptor, its
    name). ShimgenError when the run is not one to join, or this host joined it already."""
    check_join(_top_record(fd, out), me, out)
    name = _part_name(me["host"], out)
    try:
        os.mkdir(name, 0o700, dir_fd=fd)
    except FileExistsError:
        raise ShimgenError(f"run directory {out}: node {name} has joined this run already; "
                           "name a new or empty directory (nothing is overwritten)") from None
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                   dir_fd=fd), name
