"""NCCL all-reduce bus bandwidth without the shim, through it, and through it with counting and
timing on, one process per GPU, in interleaved rounds.

    python -m benchmarks.allreduce --shim build/.../libcudashim.so \\
        [--nproc N] [--rounds 5] [--variants direct,shim,count,time] [--min-size 1M] \\
        [--max-size 1G] [--factor 4] [--work DIR] [--json PATH] [--time-budget SECONDS]

Each launch is `torchrun --standalone --nproc_per_node=N --module benchmarks.allreduce
--worker ...` (run as `python -m torch.distributed.run`, torchrun's own entry point, so the
same interpreter is used; from the repository root). N is every GPU PyTorch sees unless
--nproc says otherwise. Every rank pins one GPU and joins an NCCL process group. For each
size (float32 tensors, 1 MiB to 1 GiB in steps of --factor) it runs warm-up all-reduces,
then --reps timed blocks of all-reduces, each block timed with CUDA events after a barrier.
It checks one all-reduce result exactly and writes rank<r>.json into the launch's directory.

Variants: `direct` (no shim), `shim` (LD_PRELOAD, tracing off), `count` (SHIMGEN_TRACE=1)
and `time` (SHIMGEN_TRACE=time); the traced variants write one trace per rank to
<launch>/trace/trace.%r.json ("%r" = the rank), and each such launch is checked for one
distinct file per rank. Every round launches each variant once, the order rotated by one
place per round; --rounds (at least 5) rounds always run, more only while --time-budget
allows. For one launch and one size, the time of a block is the slowest rank's (a
collective is as slow as its slowest rank), the launch's time is the median of its blocks,
algbw = bytes / time and busbw = algbw * 2(n-1)/n (the nccl-tests convention). Per size and
variant the report gives the median busbw over the rounds with its range, the ratio to the
median without the shim (bars: shim and count 0.99, time 0.98) and the per-round paired
ratios (median, min, max). From the traced launches it gives the driver calls per
all-reduce (an upper bound: set-up and other threads' calls are included) and what they can
cost at the measured per-call price (--per-call-ns).

Every child gets NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 (NVLink multicast stays off). Needs PyTorch with CUDA and at least
2 GPUs; anywhere else it says why it skips and exits 0. The JSON is rewritten after every
round, so a run stopped by a time limit keeps the rounds it finished.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from benchmarks.allreduce_launch import ROOT, build_shim, child_env, launch, why_skip, worker
from benchmarks.allreduce_stats import (
    VARIANTS,
    aggregate,
    all_met,
    call_budget,
    check_traces,
    format_table,
    human,
    launch_stats,
    parse_size,
    round_order,
    sizes,
)

# One launch (the environment, torchrun, the rank's worker) is in allreduce_launch.py; its
# names are this module's too: main calls launch and why_skip by these names.
__all__ = ["Rounds", "child_env", "launch", "main", "print_report", "why_skip", "worker"]

MIN_ROUNDS = 5
# The measured cost of one traced call on the H200 host, the worst medians of the call
# benchmark in docs/performance.md: counting +2.39 ns, timing +49.6 ns (a busy host).
PER_CALL_NS = {"count": 2.39, "time": 49.6}


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _variants(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in names if v not in VARIANTS]
    if bad or "direct" not in names or len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"--variants: {text!r}: name direct and at least one of "
                         f"{', '.join(v for v in VARIANTS if v != 'direct')}, once each")
    return names


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.allreduce",
                                description=__doc__.split("\n")[0])
    p.add_argument("--shim", type=Path, help="libcudashim.so built for this machine's driver "
                   "(default: build one with `shimgen build --out build/bench/gpu`)")
    p.add_argument("--nproc", type=int, help="ranks = GPUs (default: every GPU PyTorch sees)")
    p.add_argument("--rounds", type=int, default=MIN_ROUNDS,
                   help=f"rounds, each launching every variant once (at least {MIN_ROUNDS})")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help="comma-separated, from " + ", ".join(VARIANTS))
    p.add_argument("--time-budget", type=float, help="seconds: rounds beyond --rounds are "
                   "started while the budget allows another round")
    p.add_argument("--max-rounds", type=int, default=MIN_ROUNDS,
                   help="with --time-budget: at most this many rounds")
    p.add_argument("--min-size", default="1M")
    p.add_argument("--max-size", default="1G")
    p.add_argument("--factor", type=int, default=4, help="size step (default 4x)")
    p.add_argument("--reps", type=int, default=10, help="timed blocks per size")
    p.add_argument("--warmup", type=int, default=5, help="untimed all-reduces per size (at "
                   "least a fifth of a block)")
    p.add_argument("--pin", type=int, default=0, metavar="K",
                   help="pin each rank and its threads to K CPUs of its own (0: no pinning)")
    p.add_argument("--per-call-ns", default=",".join(f"{k}={v}" for k, v in
                                                     PER_CALL_NS.items()),
                   help="the measured cost of one traced call, per variant")
    p.add_argument("--work", type=Path, help="per-launch directories (rank JSON, logs, "
                   "traces); default build/allreduce")
    p.add_argument("--json", type=Path, help="write the results here (after every round)")
    p.add_argument("--launch-timeout", type=float, default=240)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--sizes", help=argparse.SUPPRESS)
    return p


def _write_json(path: Path, r: dict) -> None:
    """Replace `path` with `r` as JSON, whole: a run stopped mid-write keeps the last one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(r, indent=2) + "\n")
    tmp.replace(path)


class Rounds:
    """The interleaved launches of one run: what each launch measured, the traces checked,
    and the results built from them."""

    def __init__(self, args: argparse.Namespace, argv: list[str] | None, shim: Path, nproc: int,
                 work: Path, size_list: list[int], variants: list[str],
                 per_call: dict[str, float]) -> None:
        self.args, self.argv, self.shim, self.nproc, self.work = args, argv, shim, nproc, work
        self.size_list, self.variants, self.per_call = size_list, variants, per_call
        self.t0 = time.monotonic()
        self.launches: list[dict] = []
        self.traces: dict[str, list[dict]] = {}
        self.info: dict = {}

    def run_all(self) -> dict:
        """--rounds rounds, then more while --time-budget allows another (at most
        --max-rounds); the JSON is rewritten after every round. The final results."""
        args = self.args
        rounds_done = 0
        want = max(1, args.rounds)
        limit = max(want, args.max_rounds) if args.time_budget is not None else want
        for rnd in range(limit):
            if rnd >= want:
                per_round = (time.monotonic() - self.t0) / rounds_done
                if time.monotonic() - self.t0 + per_round > args.time_budget:
                    break
            for v in round_order(rnd, self.variants):
                self.run(v, rnd)
            rounds_done += 1
            self.save(self.results(rounds_done))
        r = self.results(rounds_done)
        self.save(r)
        return r

    def run(self, variant: str, rnd: int) -> None:
        """One launch of `variant` in round `rnd`: its stats, its traces checked, one line."""
        args = self.args
        ts = time.monotonic()
        out = self.work / f"{variant}-{rnd}"
        ranks = launch(variant, self.shim, self.nproc, out, self.size_list, args.reps,
                       args.warmup, args.launch_timeout, args.pin)
        for k in ("device", "torch", "cuda", "nccl"):
            self.info.setdefault(k, ranks[0][k])
        stats = launch_stats(ranks)
        self.launches.append({"variant": variant, "round": rnd, "stats": stats,
                              "wall_s": time.monotonic() - ts,
                              "pids": [r["pid"] for r in ranks]})
        if VARIANTS[variant][1] is not None:
            self.traces.setdefault(variant, []).append(check_traces(out / "trace", ranks))
        big, small = max(stats), min(stats)
        print(f"  round {rnd + 1} {VARIANTS[variant][0]:<26} busbw {human(big)} "
              f"{stats[big]['busbw']:.1f} GB/s, {human(small)} {stats[small]['busbw']:.2f} "
              f"GB/s ({time.monotonic() - ts:.0f} s)", file=sys.stderr, flush=True)

    def results(self, rounds_done: int) -> dict:
        """Everything measured so far, as the JSON written."""
        argv, variants = self.argv, self.variants
        summary = aggregate(self.launches)
        budget = call_budget({v: t[0] for v, t in self.traces.items()}, summary, self.per_call)
        return {
            "command": " ".join(["python", "-m", "benchmarks.allreduce",
                                 *(argv if argv is not None else sys.argv[1:])]),
            "shim": str(self.shim), "world_size": self.nproc, **self.info,
            "rounds": rounds_done, "variants": variants, "reps": self.args.reps,
            "sizes": self.size_list,
            "bars": {v: VARIANTS[v][2] for v in variants if v != "direct"},
            "met": all_met(summary),
            "summary": {str(k): v for k, v in summary.items()},
            "traces": {v: {"ok": all(t["ok"] for t in ts), "launches": len(ts),
                           "first": ts[0]} for v, ts in self.traces.items()},
            "call_budget": {v: b | {"expected_ratio": {str(k): r for k, r in
                                                       b["expected_ratio"].items()}}
                            for v, b in budget.items()},
            "launches": [ln | {"stats": {str(k): v for k, v in ln["stats"].items()}}
                         for ln in self.launches],
            "wall_s": time.monotonic() - self.t0, "work": str(self.work)}

    def save(self, r: dict) -> None:
        if self.args.json:
            _write_json(self.args.json, r)


def print_report(r: dict, launches: list[dict]) -> None:
    """The results on stdout: the table, the bars, the traces and the cost bound."""
    nproc = r["world_size"]
    print(f"device {r.get('device')} x {nproc}, torch {r.get('torch')}, CUDA "
          f"{r.get('cuda')}, NCCL {r.get('nccl')}; {r['rounds']} interleaved rounds of "
          f"{', '.join(r['variants'])}; {r['reps']} timed blocks per size")
    print(format_table(aggregate(launches)))
    print("bars: " + ", ".join(f"{VARIANTS[v][0]} {b}" for v, b in r["bars"].items())
          + f": {'met at every size' if r['met'] else 'NOT met at every size'}")
    for v, t in r["traces"].items():
        first = t["first"]
        print(f"traces ({VARIANTS[v][0]}): {'ok' if t['ok'] else 'FAIL: ' + first['why']} in "
              f"{t['launches']} launches; first launch: {first['distinct_rank_files']} "
              f"distinct files for {nproc} ranks: "
              f"{', '.join(f for e in first['per_rank'].values() for f in e['files'])}")
        for rk, e in first["per_rank"].items():
            if "calls" in e:
                print(f"  rank {rk} pid {e['pid']}: {e['calls']} calls to {e['functions']} "
                      f"functions, cuInit {e['cuInit']}, "
                      f"{e.get('calls_per_allreduce', 0):.2f} calls per all-reduce; top "
                      + ", ".join(f"{k} {n}" for k, n in e["top"][:4]))
    for v, b in r["call_budget"].items():
        exp = ", ".join(f"{human(int(k))} {x:.5f}" for k, x in b["expected_ratio"].items())
        print(f"cost bound ({VARIANTS[v][0]}): {b['calls_per_allreduce']:.2f} calls per "
              f"all-reduce x {b['per_call_ns']} ns -> expected ratio at most 1 - cost: {exp}")


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)

    if args.worker:
        return worker(args.out, [int(s) for s in args.sizes.split(",")], args.reps,
                      args.warmup, args.pin)

    try:
        size_list = sizes(parse_size(args.min_size), parse_size(args.max_size), args.factor)
        variants = _variants(args.variants)
        per_call = {k: float(v) for k, v in (kv.split("=", 1) for kv in
                                             args.per_call_ns.split(",") if kv)}
    except ValueError as e:
        p.error(str(e))
    if args.rounds < MIN_ROUNDS:
        print(f"allreduce: note: fewer than {MIN_ROUNDS} rounds give no spread worth "
              "reporting", file=sys.stderr)
    reason, count = why_skip(args.nproc)
    if reason:
        print(f"allreduce: skipped: {reason}. This benchmark runs on a multi-GPU machine only.")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"skipped": reason}, indent=2) + "\n")
        return 0
    nproc = args.nproc or count
    signal.signal(signal.SIGTERM, _terminate)  # e.g. `timeout`: stop the running launch too
    shim = args.shim.resolve() if args.shim else build_shim()
    if not shim.is_file():
        p.error(f"no shim at {shim}")
    work = (args.work or ROOT / "build" / "allreduce").resolve()
    work.mkdir(parents=True, exist_ok=True)

    rounds = Rounds(args, argv, shim, nproc, work, size_list, variants, per_call)
    print_report(rounds.run_all(), rounds.launches)
    return 0  # bars missed are a result, not an error: multigpu_validation.sh judges them


if __name__ == "__main__":
    raise SystemExit(main())
