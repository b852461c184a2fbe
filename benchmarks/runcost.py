"""What `shimgen run` adds to a command when its shim is cached: `/bin/true` alone and
`shimgen run -- /bin/true`, side by side, 20 pairs (docs/performance.md).

    python -m benchmarks.runcost [--pairs 20] [--driver PATH] [--editable]

The shim cache is a private temporary one, filled by one run before the timed ones. The
runs use bytecode caching as an installed shimgen has it, in a private pycache directory
(an environment with PYTHONDONTWRITEBYTECODE would otherwise compile shimgen's modules on
every start). Each pair runs its two commands in alternating order; the report gives the
median and the spread of each, and of the difference within each pair, and the CPU time
(user + system) of each, which a busy machine changes far less than the wall time.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .stats import summary

BUDGET_MS = 50.0  # what `run` may add to a command, median


ROOT = Path(__file__).resolve().parent.parent
# What the `shimgen` console script runs.
CONSOLE_SCRIPT = "import sys; from shimgen.__main__ import entry; sys.exit(entry())"


def _editable() -> list[str]:
    """The `shimgen` command beside this interpreter (in a development checkout, an editable
    install: every Python start also loads its import finder), else `python -m`."""
    script = Path(sys.executable).parent / "shimgen"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "shimgen"]


def _installed(work: Path) -> tuple[list[str], dict[str, str]]:
    """`shimgen` as a regular install runs it: a fresh virtual environment with nothing in
    its site-packages, shimgen's package on the path (the cached path needs only the
    standard library), and the console script's two lines."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return [str(venv / "bin" / "python"), "-c", CONSOLE_SCRIPT], {"PYTHONPATH": str(ROOT)}


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _timed(cmd: list[str], env: dict[str, str], cpu: list[float] | None = None) -> float:
    """Wall milliseconds of one run; its CPU milliseconds (user + system, with what it
    waited for) appended to `cpu`."""
    cpu0 = _cpu()
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    took = (time.perf_counter() - start) * 1000.0
    if cpu is not None:
        cpu.append((_cpu() - cpu0) * 1000.0)
    if proc.returncode != 0:
        raise SystemExit(f"runcost: {cmd[0]} failed ({proc.returncode}): "
                         f"{proc.stderr.decode(errors='replace').strip()}")
    return took


def measure(driver: Path, pairs: int, work: Path, installed: bool) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env.update(XDG_CACHE_HOME=str(work / "cache"), PYTHONPYCACHEPREFIX=str(work / "pyc"))
    true = shutil.which("true") or "/bin/true"
    base = [true]
    prefix = _editable()
    # builds the shim into the cache with this checkout's shimgen (ROOT first on the path:
    # an editable install of this environment may be another checkout's, whose cache key
    # differs) and the caller's PYTHONPATH, where the build's modules may be
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    _timed([sys.executable, "-m", "shimgen", "run", "--driver", str(driver), "-o",
            str(work / "build"), "--", true], dict(env, PYTHONPATH=path))
    if installed:
        prefix, more = _installed(work)
        env.update(more)

    def run_cmd(n: int) -> list[str]:
        return [*prefix, "run", "--driver", str(driver), "-o", str(work / f"run{n}"),
                "--", true]

    _timed(run_cmd(0), env)  # writes the bytecode
    _timed(run_cmd(1), env)
    python = [prefix[0], "-c", "pass"] if prefix[1:2] == ["-c"] else [sys.executable, "-c",
                                                                        "pass"]
    plain, shimmed, diff, cpu_plain, cpu_run, py, cpu_py = [], [], [], [], [], [], []
    for i in range(pairs):
        if i % 2:
            s = _timed(run_cmd(i + 2), env, cpu_run)
            p = _timed(base, env, cpu_plain)
        else:
            p = _timed(base, env, cpu_plain)
            s = _timed(run_cmd(i + 2), env, cpu_run)
        py.append(_timed(python, env, cpu_py))  # the interpreter's own start, for reference
        plain.append(p)
        shimmed.append(s)
        diff.append(s - p)
    return {"true": summary(plain, 2), "run": summary(shimmed, 2), "added": summary(diff, 2),
            "cpu_true": summary(cpu_plain, 2), "cpu_run": summary(cpu_run, 2),
            "python": summary(py, 2), "cpu_python": summary(cpu_py, 2)}


def _row(name: str, s: dict) -> str:
    return (f"{name:<28} median {s['median']:7.2f} ms   p25 {s['p25']:7.2f}   "
            f"p75 {s['p75']:7.2f}   min {s['min']:7.2f}   max {s['max']:7.2f}   n {s['n']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.runcost", description=__doc__)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--driver", help="libcuda (default: the first Debian build the tests use)")
    ap.add_argument("--editable", action="store_true",
                    help="time the `shimgen` of this environment (an editable install loads "
                         "its import finder at every start) instead of a regular install")
    args = ap.parse_args(argv)
    if args.driver:
        driver = Path(args.driver)
    else:
        from devtools.driverfetch import fetch_all

        driver = fetch_all()[0].libdir / "libcuda.so.1"
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="shimgen-runcost-") as tmp:
        res = measure(driver, args.pairs, Path(tmp), not args.editable)
    how = "this environment's editable install" if args.editable else "a regular install"
    print(f"shimgen run -- /bin/true with a cached shim ({how}), {args.pairs} side-by-side "
          "pairs")
    print(_row("/bin/true", res["true"]))
    print(_row("shimgen run -- /bin/true", res["run"]))
    print(_row("added (per pair)", res["added"]))
    print(_row("CPU of /bin/true", res["cpu_true"]))
    print(_row("CPU of shimgen run", res["cpu_run"]))
    print(_row("python -c pass (reference)", res["python"]))
    print(_row("CPU of python -c pass", res["cpu_python"]))
    print(f"load average before and after: {load[0]:.2f}, {os.getloadavg()[0]:.2f} "
          f"({os.cpu_count()} CPUs); wall times on a loaded machine include waiting for one")
    ok = res["added"]["median"] <= BUDGET_MS
    print(f"budget {BUDGET_MS:.0f} ms: {'within' if ok else 'OVER'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
