"""One driver's cuGetProcAddress answers: the querier's process (`Query`, started at once;
`Query.result` waits for its steps), its output parsed, and the two step functions compared.

For a name, an API (1: cuGetProcAddress, 2: cuGetProcAddress_v2) and flags (0, 1, 2), the
answer is a step function of the CUDA version asked: the querier (query.c, compiled by
procaddr.py) asks at every multiple of 10 from 0 to the driver's own cuDriverGetVersion + 10
(never above FAR_VERSION) and at FAR_VERSION, and finds by bisection the exact first version
of every new answer between two neighbouring points. Every version CUDA has used is a
multiple of 10 (major * 1000 + minor * 10), so no step is missed. More than MAX_STEPS steps
for one query is not a driver's step function: the querier stops, so its work and output are
bounded by the names (the export lists), whatever the answers do. The querier runs the
driver's code: what it may reach and how long it may take are Query's.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..cudaversions import base_name
from ..errors import ShimgenError

FAR_VERSION = 99999  # the highest version asked: what a future runtime would ask
FLAGS = (0, 1, 2)  # CU_GET_PROC_ADDRESS_DEFAULT, _LEGACY_STREAM, _PER_THREAD_DEFAULT_STREAM
APIS = {1: "cuGetProcAddress", 2: "cuGetProcAddress_v2"}
QUERY_SECONDS = 120  # one driver's load and whole grid take under a second
MAX_STEPS = 64  # diff/query.c: the most steps of one name, api and flags (a driver has a few)


@dataclass(frozen=True, order=True)
class Answer:
    """One answer: the CUresult, the status of cuGetProcAddress_v2 (-1 for the first API)
    and the export at the address returned ("null", "-" when rc is not 0, "?": no export)."""

    rc: int
    status: int
    symbol: str

    @property
    def found(self) -> bool:
        return self.rc == 0 and self.symbol not in ("null", "-")

    def text(self) -> str:
        if self.found:
            return self.symbol if self.symbol != "?" else "an unexported function"
        if self.rc == 0 and self.status == 2:
            return "version not sufficient"
        if self.rc == 0 and self.status == 1 or self.rc == 500:
            return "not found"
        return f"error {self.rc}" + (f" status {self.status}" if self.status >= 0 else "")


@dataclass(frozen=True)
class Span:
    """Versions `low` to `high` (None: and every version above) of one (name, api, flags),
    where OLD and NEW answer differently."""

    name: str
    api: int
    flags: int
    low: int
    high: int | None
    old: Answer
    new: Answer

    @property
    def kind(self) -> str:
        """"fails" (OLD found it, NEW does not), "new" (the reverse), "moved" (another
        export), "changed" (another failure)."""
        if self.old.found and not self.new.found:
            return "fails"
        if self.new.found and not self.old.found:
            return "new"
        return "moved" if self.old.found else "changed"

    def versions(self) -> str:
        if self.high is None:
            return f"{self.low} and up"
        return str(self.low) if self.high == self.low else f"{self.low}-{self.high}"


Steps = dict[tuple[str, int, int], list[tuple[int, Answer]]]


def query_names(*exports: list[str]) -> list[str]:
    """Every exported function of either driver and every base name."""
    names = {n for ex in exports for n in ex}
    return sorted(names | {base_name(n) for n in names})


class Query:
    """One driver's querier process, started at once; `result()` waits for its steps.

    The querier runs the driver's code, so it gets no more than it needs: a process group
    of its own (killed whole by `stop`, with whatever the driver started), stdin and stderr
    /dev/null, no descriptor of shimgen's but the pipe it writes its answers to, and the
    names in a file it reads before it loads the driver. A thread reads the pipe as it comes,
    up to a cap that the number of names sets (MAX_STEPS lines per name, api and flags), so
    a driver that floods it is stopped, never held in memory. The time limit is on the
    querier's own exit: a process the driver left holding the pipe does not stall diff."""

    def __init__(self, exe: Path, driver: Path, exports: list[str], names: list[str],
                 work: Path, runner: list[str] | tuple[str, ...] = ()) -> None:
        from ..probe import child_env

        self.driver = driver
        have, asked = set(exports), set(names)
        lines = [("b " if n in have and n in asked else "e " if n in have else "q ") + n
                 for n in sorted(have | asked)]
        self.cap = output_cap(lines)
        fd, name = tempfile.mkstemp(prefix="names-", dir=work)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        listing = Path(name)
        self._asked = sorted(asked)
        self._reaped = False
        self._chunks: list[bytes] = []
        self._got = 0
        self._over = False
        self._done = threading.Event()
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        try:
            self._proc = subprocess.Popen(
                [*runner, str(exe), str(driver), "0", str(FAR_VERSION), str(listing)],
                stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.DEVNULL,
                close_fds=True, start_new_session=True, env=child_env())
        except OSError as e:
            os.close(read_end)
            raise ShimgenError(f"cannot run the cuGetProcAddress querier {exe}: "
                               f"{e.strerror}") from None
        finally:
            os.close(write_end)
        self._started = time.monotonic()
        self._reader = threading.Thread(target=self._read, args=(read_end,), daemon=True)
        self._reader.start()

    def _read(self, fd: int) -> None:
        """The pipe read as it comes, until EOF, the cap, or the querier's exit (then what it
        wrote before it exited, which is all in the pipe, and no more)."""
        try:
            os.set_blocking(fd, False)
            with selectors.DefaultSelector() as sel:
                sel.register(fd, selectors.EVENT_READ)
                while True:
                    exited = self._done.is_set()
                    if not exited:
                        sel.select(0.05)
                    try:
                        part = os.read(fd, 1 << 16)
                    except BlockingIOError:
                        if exited:
                            return
                        continue
                    if not part:
                        return
                    self._got += len(part)
                    if self._got > self.cap:
                        self._over = True  # result() stops it: only it kills, and reaps
                        return
                    self._chunks.append(part)
        finally:
            os.close(fd)

    def _kill(self) -> None:
        """SIGKILL to the querier's process group (itself and all the driver started in it),
        while the querier is not reaped: its id is still its own."""
        if not self._reaped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    def _end(self) -> None:
        self._kill()
        self._proc.wait()
        self._reaped = True
        self._done.set()
        self._reader.join()

    def _wait_exit(self, seconds: float) -> bool:
        """Whether the querier exited within `seconds`; it is left a zombie (not reaped), so
        its process group's id cannot be taken by another process before it is killed."""
        deadline = self._started + seconds
        while True:
            try:
                if os.waitid(os.P_PID, self._proc.pid,
                             os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:
                return True
            left = deadline - time.monotonic()
            if left <= 0 or self._over:
                return False
            time.sleep(min(0.01, left))

    def result(self) -> tuple[int, Steps]:
        """(the driver's cuDriverGetVersion, its steps), or a ShimgenError of one line."""
        exited = self._wait_exit(QUERY_SECONDS)
        self._end()
        if self._over:
            raise ShimgenError(f"driver {self.driver}: the process asking its cuGetProcAddress "
                               f"wrote more than {self.cap} bytes (the answers for its names "
                               "take far less); stopped")
        if not exited:
            raise ShimgenError(f"driver {self.driver}: the process asking its cuGetProcAddress "
                               f"(the driver's load and its answers) had not finished after "
                               f"{QUERY_SECONDS} s; stopped")
        text = b"".join(self._chunks).decode(errors="replace")
        rc = self._proc.returncode
        if rc != 0:
            said = [ln[2:] for ln in text.splitlines() if ln.startswith("x ")]
            why = said[-1] if said else ""
            what = f"died of signal {-rc}" if rc < 0 else f"failed ({why or f'exit {rc}'})"
            raise ShimgenError(f"driver {self.driver}: the process asking its "
                               f"cuGetProcAddress {what}")
        version, steps = parse(text, self.driver)
        present = apis(steps) or [1]
        for name in self._asked:  # every name asked, by each API the driver has, each flags
            if any((name, api, flags) not in steps for api in present for flags in FLAGS):
                raise ShimgenError(f"driver {self.driver}: the cuGetProcAddress querier gave "
                                   f"no answers for {name}")
        return version, steps

    def stop(self) -> None:
        """The querier's process group killed, the querier reaped, the reader ended."""
        self._end()


def output_cap(lines: list[str]) -> int:
    """The most the querier may write for these names: MAX_STEPS + 1 lines per name, api and
    flags, each at most the longest line a name can give (both numbers at their widest)."""
    longest = max((len(ln) for ln in lines), default=0)
    line = 2 * longest + 64
    return 64 + len(lines) * len(APIS) * len(FLAGS) * (MAX_STEPS + 1) * line


def parse(text: str, driver: Path) -> tuple[int, Steps]:
    """The querier's output: its version line, then one line per step."""
    lines = text.splitlines()
    if not lines or not re.fullmatch(r"v \d+", lines[0]):
        raise ShimgenError(f"driver {driver}: the cuGetProcAddress querier said nothing")
    steps: Steps = {}
    for line in lines[1:]:
        parts = line.split(" ")
        if len(parts) != 8 or parts[0] != "s":
            raise ShimgenError(f"driver {driver}: the querier wrote {line[:60]!r}")
        _, name, api, flags, version, rc, status, symbol = parts
        steps.setdefault((name, int(api), int(flags)), []).append(
            (int(version), Answer(int(rc), int(status), symbol)))
    return int(lines[0][2:]), steps


def _at(steps: list[tuple[int, Answer]], version: int) -> Answer:
    """The answer at `version`: that of the last step at or below it."""
    got = steps[0][1]
    for v, a in steps:
        if v > version:
            break
        got = a
    return got


def apis(steps: Steps) -> list[int]:
    """The APIs a driver was asked through: 1 and 2, or 1 alone on a driver without
    cuGetProcAddress_v2 (CUDA 11.x)."""
    return sorted({api for _, api, _ in steps})


def spans(old: Steps, new: Steps) -> list[Span]:
    """Every run of versions where OLD and NEW answer differently, in name order, through
    the APIs both drivers have."""
    out: list[Span] = []
    both = set(apis(old)) & set(apis(new))
    for key in sorted(k for k in set(old) | set(new) if k[1] in both):
        a, b = old.get(key), new.get(key)
        if not a or not b:
            raise ShimgenError(f"cuGetProcAddress: no answers for {key[0]} from one driver")
        points = sorted({v for v, _ in a} | {v for v, _ in b})
        runs: list[list] = []
        for i, v in enumerate(points):
            x, y = _at(a, v), _at(b, v)
            high = points[i + 1] - 1 if i + 1 < len(points) else None
            if x == y:
                continue
            if runs and runs[-1][1] == v - 1 and runs[-1][2:] == [x, y]:
                runs[-1][1] = high
            else:
                runs.append([v, high, x, y])
        out += [Span(key[0], key[1], key[2], lo, hi, x, y) for lo, hi, x, y in runs]
    return out
