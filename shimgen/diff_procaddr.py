"""`shimgen diff`'s cuGetProcAddress answers: each driver asked in a process of its own, and
the two step functions compared.

The querier is a small C program (diff_query.c), compiled once per user into
`$XDG_CACHE_HOME/shimgen/tools/` (named by the digest of its source, so a changed source gets
a new binary) and run once per driver: the real driver answers cuGetProcAddress without a
GPU. Two drivers never share a process, and a driver that crashes its process is trouble for
the command, not for shimgen. Both queriers run at once (`start`, then `Query.result`).

For a name, an API (1: cuGetProcAddress, 2: cuGetProcAddress_v2) and flags (0, 1, 2), the
answer is a step function of the CUDA version asked: the querier asks at every multiple of
10 from 0 to the driver's own cuDriverGetVersion + 10 and at FAR_VERSION, and finds by
bisection the exact first version of every new answer between two neighbouring points. Every
version CUDA has used is a multiple of 10 (major * 1000 + minor * 10), so no step is missed.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .cuda import base_name
from .errors import ShimgenError

FAR_VERSION = 99999  # the highest version asked: what a future runtime would ask
FLAGS = (0, 1, 2)  # CU_GET_PROC_ADDRESS_DEFAULT, _LEGACY_STREAM, _PER_THREAD_DEFAULT_STREAM
APIS = {1: "cuGetProcAddress", 2: "cuGetProcAddress_v2"}
QUERY_SECONDS = 120  # one driver's whole grid takes under a second
SOURCE = Path(__file__).with_name("diff_query.c")


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


# ---- the querier: compiled once, run per driver ------------------------------------------

def _private_dir(path: Path) -> bool:
    """Whether `path` is a real directory of this user that nobody else can write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & 0o022)


def _compile(source: bytes, out: Path) -> None:
    cc = shlex.split(os.environ.get("CC") or "cc")
    with tempfile.TemporaryDirectory(prefix=".diff-query-", dir=out.parent) as tmp:
        src, exe = Path(tmp) / "diff_query.c", Path(tmp) / "diff_query"
        src.write_bytes(source)
        try:
            proc = subprocess.run([*cc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                                   str(src), "-ldl"], capture_output=True, text=True,
                                  timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            raise ShimgenError(f"cannot compile the cuGetProcAddress querier with {cc[0]}: "
                               f"{e}") from None
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ShimgenError(f"cannot compile the cuGetProcAddress querier: {last}")
        os.rename(exe, out)  # whole, under its final name, or not at all


def querier(tmp: Path) -> Path:
    """The compiled querier: the cached one (`<cache>/tools/diff-query-<digest>`, made once,
    in a directory of this user's that nobody else can write), or, when the cache cannot be
    used, one compiled into `tmp`."""
    from .cache_trust import cache_root

    try:
        source = SOURCE.read_bytes()
    except OSError as e:
        raise ShimgenError(f"shimgen's {SOURCE.name} is missing ({e.strerror})") from None
    name = f"diff-query-{hashlib.sha256(source).hexdigest()[:16]}"
    tools = cache_root() / "tools"
    try:
        tools.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tools.mkdir(exist_ok=True, mode=0o700)
    except OSError:
        pass
    if _private_dir(tools.parent) and _private_dir(tools):
        exe = tools / name
        try:
            st = os.lstat(exe)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() \
                    and not st.st_mode & 0o022:
                return exe
        except FileNotFoundError:
            _compile(source, exe)
            return exe
        except OSError:
            pass
    exe = tmp / name
    _compile(source, exe)
    return exe


class Query:
    """One driver's querier process, started at once; `result()` waits for its steps."""

    def __init__(self, exe: Path, driver: Path, exports: list[str], names: list[str]) -> None:
        from .probe.child import child_env

        self.driver = driver
        have, asked = set(exports), set(names)
        lines = [("b " if n in have and n in asked else "e " if n in have else "q ") + n
                 for n in sorted(have | asked)]
        self._out = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen([str(exe), str(driver), "0", str(FAR_VERSION)],
                                          stdin=subprocess.PIPE, stdout=self._out,
                                          stderr=subprocess.PIPE, env=child_env())
        except OSError as e:
            self._out.close()
            raise ShimgenError(f"cannot run the cuGetProcAddress querier {exe}: "
                               f"{e.strerror}") from None
        self._input = ("\n".join(lines) + "\n").encode()
        self._asked = sorted(asked)

    def result(self) -> tuple[int, Steps]:
        """(the driver's cuDriverGetVersion, its steps), or a ShimgenError of one line."""
        try:
            _, err = self._proc.communicate(self._input, timeout=QUERY_SECONDS)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            raise ShimgenError(f"driver {self.driver}: its cuGetProcAddress answers took "
                               f"over {QUERY_SECONDS} s; stopped") from None
        rc = self._proc.returncode
        if rc != 0:
            why = (err.decode(errors="replace").strip().splitlines() or [""])[-1]
            what = f"died of signal {-rc}" if rc < 0 else f"failed ({why or f'exit {rc}'})"
            raise ShimgenError(f"driver {self.driver}: the process asking its "
                               f"cuGetProcAddress {what}")
        self._out.seek(0)
        version, steps = parse(self._out.read().decode(errors="replace"), self.driver)
        for name in self._asked:  # every name asked, by both APIs, with each flags
            if any((name, api, flags) not in steps for api in APIS for flags in FLAGS):
                raise ShimgenError(f"driver {self.driver}: the cuGetProcAddress querier gave "
                                   f"no answers for {name}")
        return version, steps

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._out.close()


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


# ---- the comparison -----------------------------------------------------------------------

def _at(steps: list[tuple[int, Answer]], version: int) -> Answer:
    """The answer at `version`: that of the last step at or below it."""
    got = steps[0][1]
    for v, a in steps:
        if v > version:
            break
        got = a
    return got


def spans(old: Steps, new: Steps) -> list[Span]:
    """Every run of versions where OLD and NEW answer differently, in name order."""
    out: list[Span] = []
    for key in sorted(set(old) | set(new)):
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
