"""The C programs of the suite (benchmarks/c/), compiled with plain `cc -O2` into
build/bench/, and the ways they are run: timed, under callgrind, and as whole processes."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from shimgen.probe.child import child_env

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
C_DIR = HERE / "c"
PROGRAMS = ("callbench", "clockfloor", "spawnbench", "startnop", "startcall")


class BenchError(RuntimeError):
    """A measurement that could not be made; the message says which and why."""


@dataclass(frozen=True)
class Programs:
    callbench: Path
    clockfloor: Path
    spawnbench: Path
    startnop: Path
    startcall: Path
    compiler: str


def compile_programs(out: Path) -> Programs:
    """Compile each program whose binary is missing or older than its source."""
    cc = shlex.split(os.environ.get("CC", "cc"))
    if shutil.which(cc[0]) is None:
        raise BenchError(f"no C compiler ({cc[0]}); set CC")
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in PROGRAMS:
        src = C_DIR / f"{name}.c"
        exe = out / name
        if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
            cmd = cc + ["-O2", "-Wall", "-Wextra", "-o", str(exe), str(src), "-ldl",
                        "-lpthread"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise BenchError(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()}")
        paths[name] = exe
    version = subprocess.run(cc + ["--version"], capture_output=True, text=True)
    first = version.stdout.splitlines()[0] if version.stdout else cc[0]
    return Programs(compiler=first, **paths)


def _run(cmd: list[str], env: dict[str, str], what: str, timeout: float = 600,
         cpu: int | None = None) -> subprocess.CompletedProcess:
    """Run a program; with `cpu`, the process may run on that CPU only."""
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    proc = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=pin)
    if proc.returncode != 0:
        raise BenchError(f"{what} exited {proc.returncode}: {proc.stderr.strip()[-1500:]}")
    return proc


def callbench(progs: Programs, lib: str, func: str, iters: int, reps_or_threads: str,
              env: dict[str, str], cpu: int | None = None, direct: Path | None = None
              ) -> tuple[dict, str]:
    """Run callbench once (on `cpu` alone, when given; paired with the real driver at
    `direct`, when given); its JSON result and its stderr."""
    extra = [] if direct is None else [direct]
    proc = _run([progs.callbench, lib, func, str(iters), reps_or_threads, *extra], env,
                f"callbench {func}", cpu=cpu)
    return json.loads(proc.stdout), proc.stderr


def clockfloor(progs: Programs, driver_path: Path, iters: int, reps: int,
               cpu: int | None = None) -> dict:
    """The real driver's cuDriverGetVersion called directly: alone, and bracketed by two
    inline rdtsc (benchmarks/c/clockfloor.c)."""
    proc = _run([progs.clockfloor, driver_path, str(iters), str(reps)], child_env(),
                "clockfloor", cpu=cpu)
    return json.loads(proc.stdout)


def callgrind_instructions(progs: Programs, lib: str, func: str, iters: int,
                           env: dict[str, str], workdir: Path) -> int:
    """Instructions executed by `iters` calls in callbench's bench_loop (callees included),
    counted by callgrind; nothing outside bench_loop is counted."""
    out = workdir / f"callgrind.{func}.{iters}.{os.getpid()}.out"
    cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
           "--toggle-collect=bench_loop", f"--callgrind-out-file={out}",
           progs.callbench, lib, func, str(iters), "1"]
    _run(cmd, env, f"callgrind on callbench {func}", timeout=900)
    text = out.read_text()
    out.unlink()
    m = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
    if not m:
        raise BenchError(f"no instruction total in callgrind's output for {func}")
    return int(m.group(1))


def callgrind_available() -> str | None:
    """None when callgrind can be used, else why not."""
    if shutil.which("valgrind") is None:
        return "valgrind is not installed"
    proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           "true"], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"valgrind --tool=callgrind does not run here: {proc.stderr.strip()[-300:]}"
    return None


def valgrind_version() -> str | None:
    if shutil.which("valgrind") is None:
        return None
    return subprocess.run(["valgrind", "--version"], capture_output=True,
                          text=True).stdout.strip()


def perf_instructions_available() -> str | None:
    """None when `perf stat -e instructions` counts here, else why not."""
    if shutil.which("perf") is None:
        return "perf is not installed"
    proc = subprocess.run(["perf", "stat", "-x,", "-e", "instructions", "true"],
                          capture_output=True, text=True)
    if proc.returncode != 0 or "not supported" in proc.stderr or "<not" in proc.stderr:
        return "perf stat -e instructions: <not supported> (no hardware counters here)"
    return None


def spawn_times(progs: Programs, rounds: int, shim: Path, libdir: Path
                ) -> dict[str, list[float]]:
    """Whole-process wall times in ms of startnop and startcall, each without and with the
    shim preloaded, interleaved by spawnbench."""
    env = child_env(libdir=libdir)
    proc = _run([progs.spawnbench, str(rounds), shim, progs.startnop, progs.startcall], env,
                "spawnbench")
    names = ("nop", "call")
    times: dict[str, list[float]] = {f"{n}_{w}": [] for n in names for w in ("direct", "shim")}
    for line in proc.stdout.splitlines():
        p, with_shim, ns = line.split()
        key = f"{names[int(p)]}_{'shim' if with_shim == '1' else 'direct'}"
        times[key].append(float(ns) / 1e6)
    return times
