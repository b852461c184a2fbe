"""What `shimgen run` adds to a command when its shim is cached: `/bin/true` alone and
`shimgen run -- /bin/true`, side by side, 20 pairs (docs/performance.md).

    python -m benchmarks.runcost [--pairs 20] [--driver PATH]

The shim cache is a private temporary one, filled by one run before the timed ones. The
runs use bytecode caching as an installed shimgen has it, in a private pycache directory
(an environment with PYTHONDONTWRITEBYTECODE would otherwise compile shimgen's modules on
every start). Each pair runs its two commands in alternating order; the report gives the
median and the spread of each, and of the difference within each pair.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .stats import summary

BUDGET_MS = 50.0  # what `run` may add to a command, median


def _shimgen() -> list[str]:
    """The `shimgen` command as installed beside this interpreter, else `python -m`."""
    script = Path(sys.executable).parent / "shimgen"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "shimgen"]


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    took = (time.perf_counter() - start) * 1000.0
    if proc.returncode != 0:
        raise SystemExit(f"runcost: {cmd[0]} failed ({proc.returncode}): "
                         f"{proc.stderr.decode(errors='replace').strip()}")
    return took


def measure(driver: Path, pairs: int, work: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(XDG_CACHE_HOME=str(work / "cache"), PYTHONPYCACHEPREFIX=str(work / "pyc"))
    true = shutil.which("true") or "/bin/true"
    base = [true]

    def run_cmd(n: int) -> list[str]:
        return [*_shimgen(), "run", "--driver", str(driver), "-o", str(work / f"run{n}"),
                "--", true]

    _timed(run_cmd(0), env)  # builds the shim, writes the bytecode
    _timed(run_cmd(1), env)
    plain, shimmed, diff = [], [], []
    for i in range(pairs):
        if i % 2:
            s = _timed(run_cmd(i + 2), env)
            p = _timed(base, env)
        else:
            p = _timed(base, env)
            s = _timed(run_cmd(i + 2), env)
        plain.append(p)
        shimmed.append(s)
        diff.append(s - p)
    return {"true": summary(plain, 2), "run": summary(shimmed, 2), "added": summary(diff, 2)}


def _row(name: str, s: dict) -> str:
    return (f"{name:<28} median {s['median']:7.2f} ms   p25 {s['p25']:7.2f}   "
            f"p75 {s['p75']:7.2f}   min {s['min']:7.2f}   max {s['max']:7.2f}   n {s['n']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.runcost", description=__doc__)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--driver", help="libcuda (default: the first Debian build the tests use)")
    args = ap.parse_args(argv)
    if args.driver:
        driver = Path(args.driver)
    else:
        from devtools.driverfetch import fetch_all

        driver = fetch_all()[0].libdir / "libcuda.so.1"
    with tempfile.TemporaryDirectory(prefix="shimgen-runcost-") as tmp:
        res = measure(driver, args.pairs, Path(tmp))
    print(f"shimgen run -- /bin/true with a cached shim, {args.pairs} side-by-side pairs")
    print(_row("/bin/true", res["true"]))
    print(_row("shimgen run -- /bin/true", res["run"]))
    print(_row("added (per pair)", res["added"]))
    ok = res["added"]["median"] <= BUDGET_MS
    print(f"budget {BUDGET_MS:.0f} ms: {'within' if ok else 'OVER'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
