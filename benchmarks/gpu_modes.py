"""A launch-bound PyTorch training step in every trace mode, interleaved, on a GPU: what each
mode costs where the driver call path matters most (hundreds of calls in a step of a few ms).

    python -m benchmarks.gpu_modes [--shim build/.../libcudashim.so] [--rounds 5]
        [--steps 300] [--config small] [--modes plain,shim,counts,time,calls] [--json PATH]

Without --shim, a shim is built first for the driver ldconfig finds (as benchmarks.gpu_step
does). Each run is a fresh Python process (benchmarks/gpu_step.py's child: warm-up steps,
then --steps timed training steps, eager mode, no CUDA graphs). A round runs every variant
once, in an order rotated each round: `plain` (no shim), `shim` (the shim, no tracing),
`counts`, `time`, `calls` (SHIMGEN_TRACE, into a trace directory of the run's own, on the
disk of --trace-root). Per variant: the median step time with its spread (min, max, every
round), the ratio of medians to `plain` and the median of per-round ratios; the child's
page faults and CPU time (getrusage of the child); for the tracing modes the trace
directory's size on disk. Before the rounds, two counts runs of --steps and 2 x --steps
steps give the driver calls per step (the difference of their traces' call totals, over
--steps), which the table states first: the bar for calls mode (1.03 of plain) holds for a
step of 500 or more calls in 2 to 3 ms.

This needs PyTorch with CUDA and a GPU. Anywhere else it says why it skips and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import gpu_step

MODES = {"plain": None, "shim": "", "counts": "counts", "time": "time", "calls": "calls",
         "gputime": "time"}
#: a mode's other variables of the shim (runenv.ENV's keys): gputime is time mode with
#: every launch's GPU time (`run --gpu-time`)
EXTRA = {"gputime": {"GPU_TIME": "1"}}


def _disk_use(top: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in top.rglob("*") if p.is_file())


def run_one(shim: Path | None, mode: str | None, args: argparse.Namespace, steps: int,
            keep: Path | None = None, extra: dict | None = None) -> dict:
    """One child: its step time, rusage, and (tracing) the trace's calls and size on disk."""
    from shimgen.runenv import ENV

    env = gpu_step._env(shim)
    tracedir = None
    if shim is not None and mode:
        tracedir = Path(tempfile.mkdtemp(prefix="gpu-modes-", dir=args.trace_root))
        env.update({ENV["TRACE"]: mode, ENV["TRACE_DIR"]: str(tracedir), ENV["QUIET"]: "1"})
        env.update({ENV[k]: v for k, v in (extra or {}).items()})
    env["GPU_STEP_SPAWN_T"] = repr(time.time())
    cmd = [sys.executable, str(Path(gpu_step.__file__).resolve()), "--child", args.config,
           "--steps", str(steps), "--warmup", str(args.warmup)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode(errors="replace")
    try:
        if proc.returncode != 0:
            raise SystemExit(f"gpu_modes: run ({mode or 'plain'}) exited {proc.returncode}: "
                             f"{stderr.strip()[-2000:]}")
        res = json.loads(stdout.strip().splitlines()[-1])
        if res["shim_mapped"] != (shim is not None):
            raise SystemExit("gpu_modes: the shim is mapped in a run without LD_PRELOAD, or "
                             "missing in one with it")
        res.update(minflt=ru.ru_minflt, majflt=ru.ru_majflt,
                   cpu_s=ru.ru_utime + ru.ru_stime, sys_s=ru.ru_stime)
        if tracedir is not None:
            res["trace_bytes"] = _disk_use(tracedir)
            if keep is not None or mode == "counts":
                from shimgen.trace.binary import load

                res["calls"] = sum(f.calls for p in tracedir.glob("*.shimtrace")
                                   for f in load(p).functions.values())
    finally:
        if tracedir is not None:
            shutil.rmtree(tracedir, ignore_errors=True)
    return res


def _spread(vals: list[float]) -> dict:
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "rounds": vals}


def calls_per_step(shim: Path, args: argparse.Namespace) -> float:
    """(calls of a counts run of 2 x steps - those of one of steps) / steps."""
    a = run_one(shim, "counts", args, args.steps)["calls"]
    b = run_one(shim, "counts", args, 2 * args.steps)["calls"]
    return (b - a) / args.steps


def measure(shim: Path, args: argparse.Namespace, modes: list[str]) -> dict:
    per = calls_per_step(shim, args)
    print(f"gpu_modes: {per:.0f} driver calls per step ({args.config})", file=sys.stderr,
          flush=True)
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for r in range(args.rounds):
        order = modes[r % len(modes):] + modes[:r % len(modes)]
        for m in order:
            res = run_one(None if m == "plain" else shim, MODES[m], args, args.steps,
                          extra=EXTRA.get(m))
            runs[m].append(res)
            print(f"  round {r + 1}/{args.rounds} {m:<6} {res['ms_per_step']:.3f} ms/step",
                  file=sys.stderr, flush=True)
    base = [x["ms_per_step"] for x in runs[modes[0]]]
    out = {"calls_per_step": per, "baseline": modes[0], "variants": {}}
    for m in modes:
        ms = [x["ms_per_step"] for x in runs[m]]
        v = {"ms_per_step": _spread(ms),
             "ratio_of_medians": statistics.median(ms) / statistics.median(base),
             "median_paired_ratio": statistics.median(a / b for a, b in zip(ms, base,
                                                                              strict=True)),
             "minflt": _spread([x["minflt"] for x in runs[m]]),
             "cpu_s": _spread([x["cpu_s"] for x in runs[m]]),
             "sys_s": _spread([x["sys_s"] for x in runs[m]])}
        if "trace_bytes" in runs[m][0]:
            v["trace_bytes"] = _spread([x["trace_bytes"] for x in runs[m]])
        out["variants"][m] = v
    first = runs[modes[0]][0]
    out.update(device=first["device"], torch=first["torch"], cuda=first["cuda"])
    return out


def print_table(res: dict, args: argparse.Namespace) -> None:
    print(f"device {res['device']}, torch {res['torch']}, CUDA {res['cuda']}; config "
          f"{args.config}: {res['calls_per_step']:.0f} driver calls per step; "
          f"{args.rounds} interleaved rounds of {args.steps} steps; load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'variant':<8}{'ms/step median':>16}{'[min..max]':>20}{'ratio':>8}{'paired':>8}"
          f"{'minflt':>10}{'CPU s':>8}{'sys s':>7}{'trace MiB':>11}")
    for m, v in res["variants"].items():
        s = v["ms_per_step"]
        tb = v.get("trace_bytes")
        spread = "[{:.3f}..{:.3f}]".format(s["min"], s["max"])
        mib = "{:.1f}".format(tb["median"] / 2**20) if tb else "-"
        print(f"{m:<8}{s['median']:>16.3f}{spread:>20}"
              f"{v['ratio_of_medians']:>8.4f}{v['median_paired_ratio']:>8.4f}"
              f"{v['minflt']['median']:>10.0f}{v['cpu_s']['median']:>8.2f}"
              f"{v['sys_s']['median']:>7.2f}{mib:>11}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_modes",
                                description=__doc__.split("\n")[0])
    p.add_argument("--shim", type=Path, help="libcudashim.so built for this machine's driver")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--steps", type=int, default=300, help="timed training steps per run")
    p.add_argument("--warmup", type=int, default=30, help="untimed steps first")
    p.add_argument("--config", default="small", choices=sorted(gpu_step.CONFIGS))
    p.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}; the "
                   "first is the baseline of the ratios")
    p.add_argument("--trace-root", type=Path, default=None,
                   help="where the tracing runs' directories go (default: the temp dir)")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        p.error(f"--modes: of {', '.join(MODES)}")
    reason = gpu_step.why_skip()
    if reason:
        print(f"gpu_modes: skipped: {reason}. This benchmark runs on a GPU machine only.")
        return 0
    shim = args.shim.resolve() if args.shim else gpu_step.build_shim()
    if not shim.is_file():
        p.error(f"no shim at {shim}")
    res = measure(shim, args, modes)
    res["command"] = " ".join(["python", "-m", "benchmarks.gpu_modes",
                               *(argv if argv is not None else sys.argv[1:])])
    print_table(res, args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
