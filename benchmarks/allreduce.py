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
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import shims
from benchmarks.allreduce_stats import (
    VARIANTS,
    aggregate,
    all_met,
    call_budget,
    check_traces,
    format_table,
    human,
    iterations,
    launch_stats,
    parse_size,
    rank_cpus,
    round_order,
    sizes,
)
from benchmarks.native import BenchError
from shimgen.probe.child import child_env as probe_child_env
from shimgen.probe.child import mapped_libraries

ROOT = Path(__file__).resolve().parent.parent
MIN_ROUNDS = 5
# The measured cost of one traced call on the H200 host, the worst medians of the call
# benchmark in docs/performance.md: counting +2.39 ns, timing +49.6 ns (a busy host).
PER_CALL_NS = {"count": 2.39, "time": 49.6}


# ---- worker: one rank of one launch --------------------------------------------------------

def worker(out: Path, size_list: list[int], reps: int, warmup: int, pin: int = 0) -> int:
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    cpus = None
    if pin:  # before any thread exists: NCCL's and PyTorch's threads inherit the set
        cpus = rank_cpus(sorted(os.sched_getaffinity(0)), local,
                         int(os.environ["LOCAL_WORLD_SIZE"]), pin)
        os.sched_setaffinity(0, cpus)

    import datetime

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=180))
    n = dist.get_world_size()
    buf = torch.zeros(max(size_list) // 4, dtype=torch.float32, device=dev)

    # one exact result first: sum of (rank + 1) over ranks, on the largest size
    buf.fill_(rank + 1)
    dist.all_reduce(buf)
    torch.cuda.synchronize()
    want = n * (n + 1) / 2
    check = "ok" if bool((buf == want).all()) else f"FAIL: all_reduce result is not {want}"
    buf.zero_()
    allreduces = 1

    res: dict = {"rank": rank, "local_rank": local, "world_size": n, "pid": os.getpid(),
                 "shim_mapped": mapped_libraries()["shim_mapped"],
                 "device": torch.cuda.get_device_name(dev),
                 "torch": torch.__version__, "cuda": torch.version.cuda,
                 "nccl": ".".join(map(str, torch.cuda.nccl.version())), "check": check,
                 "cpus": cpus, "sizes": {}}
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for size in size_list:
        t = buf[: size // 4]
        iters = iterations(size)
        for _ in range(max(warmup, iters // 5)):
            dist.all_reduce(t)
        allreduces += max(warmup, iters // 5) + reps * iters
        blocks, host = [], []
        for _ in range(reps):
            torch.cuda.synchronize()
            dist.barrier(device_ids=[local])
            torch.cuda.synchronize()
            start.record()
            h0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            h1 = time.perf_counter()
            stop.record()
            stop.synchronize()
            blocks.append(start.elapsed_time(stop) / 1e3 / iters)
            host.append((h1 - h0) / iters)
        # host: the time to issue one all-reduce; close to the block's time = bound by the CPU
        res["sizes"][str(size)] = {"iters": iters, "block_seconds": blocks,
                                   "host_seconds": host}
    dist.barrier(device_ids=[local])
    dist.destroy_process_group()
    res["allreduces"] = allreduces
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(res, indent=1) + "\n")
    return 0 if check == "ok" else 1


# ---- driver: interleaved launches ----------------------------------------------------------

def child_env(shim: Path | None, trace: str | None = None,
              trace_file: str | None = None) -> dict[str, str]:
    """The environment of a launch (shimgen.probe.child): no SHIMGEN_*/LD_PRELOAD from the
    caller, multicast off; LD_PRELOAD=shim for the shim variants, SHIMGEN_TRACE=trace and
    its file when given; one OpenMP thread per rank unless the caller set otherwise."""
    variables = {}
    if trace is not None:
        variables["SHIMGEN_TRACE"] = trace
        if trace_file is not None:
            variables["SHIMGEN_TRACE_FILE"] = trace_file
    env = probe_child_env(shim, **variables)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def why_skip(nproc: int | None) -> tuple[str | None, int]:
    """(None, GPU count) when PyTorch sees at least 2 GPUs (and nproc of them), else why not."""
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed", 0
    probe = ("import torch,sys; print(torch.cuda.device_count() if torch.cuda.is_available() "
             "else 0)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=child_env(None))
    if proc.returncode != 0:
        return f"importing torch failed: {proc.stderr.strip()[-300:]}", 0
    count = int(proc.stdout.strip().splitlines()[-1])
    if count < 2:
        return f"PyTorch sees {count} CUDA GPU(s); an all-reduce between GPUs needs 2", count
    if nproc is not None and nproc > count:
        return f"--nproc {nproc} but PyTorch sees only {count} GPUs", count
    return None, count


def build_shim() -> Path:
    try:
        shim, _manifest, _wall = shims.build(ROOT / "build" / "bench" / "gpu")
    except BenchError as e:
        raise SystemExit(f"allreduce: {e}") from None
    return shim


def launch(variant: str, shim: Path, nproc: int, out: Path, size_list: list[int], reps: int,
           warmup: int, timeout: float, pin: int = 0) -> list[dict]:
    """One torchrun launch into `out` (rank JSON, launch.log, trace/ for the traced
    variants); returns the ranks' results (checked)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("rank*.json"), *out.glob("trace/*")]:
        old.unlink()
    trace = VARIANTS[variant][1]
    trace_file = None
    if trace is not None:
        (out / "trace").mkdir(exist_ok=True)
        trace_file = str(out / "trace" / "trace.%r.json")
    env = child_env(None if variant == "direct" else shim, trace, trace_file)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", "--module", "benchmarks.allreduce", "--worker",
           "--out", str(out), "--sizes", ",".join(map(str, size_list)),
           "--reps", str(reps), "--warmup", str(warmup), "--pin", str(pin)]
    log = out / "launch.log"
    with open(log, "w") as lf:
        lf.write(" ".join(cmd) + "\n")
        lf.flush()
        proc = subprocess.Popen(cmd, env=env, stdout=lf, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=ROOT)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise SystemExit(f"allreduce: {variant} launch timed out after {timeout:.0f} s; "
                             f"see {log}") from None
        except BaseException:  # SIGTERM (see main), Ctrl-C: take the launch down with us
            _kill_group(proc)
            raise
    if rc != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        raise SystemExit(f"allreduce: {variant} launch exited {rc}; {log}:\n" + "\n".join(tail))
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]
    for r in ranks:
        if r["check"] != "ok":
            raise SystemExit(f"allreduce: {variant} rank {r['rank']}: {r['check']}")
        if r["shim_mapped"] != (variant != "direct"):
            raise SystemExit(f"allreduce: {variant} rank {r['rank']}: shim "
                             f"{'not ' if variant != 'direct' else ''}mapped")
    return ranks


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the launch's own process group (torchrun and its workers), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _variants(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in names if v not in VARIANTS]
    if bad or "direct" not in names or len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"--variants: {text!r}: name direct and at least one of "
                         f"{', '.join(v for v in VARIANTS if v != 'direct')}, once each")
    return names


def main(argv: list[str] | None = None) -> int:
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

    t0 = time.monotonic()
    launches: list[dict] = []
    traces: dict[str, list[dict]] = {}
    info: dict = {}

    def run(variant: str, rnd: int) -> None:
        ts = time.monotonic()
        out = work / f"{variant}-{rnd}"
        ranks = launch(variant, shim, nproc, out, size_list, args.reps, args.warmup,
                       args.launch_timeout, args.pin)
        for k in ("device", "torch", "cuda", "nccl"):
            info.setdefault(k, ranks[0][k])
        stats = launch_stats(ranks)
        launches.append({"variant": variant, "round": rnd, "stats": stats,
                         "wall_s": time.monotonic() - ts, "pids": [r["pid"] for r in ranks]})
        if VARIANTS[variant][1] is not None:
            traces.setdefault(variant, []).append(check_traces(out / "trace", ranks))
        big, small = max(stats), min(stats)
        print(f"  round {rnd + 1} {VARIANTS[variant][0]:<26} busbw {human(big)} "
              f"{stats[big]['busbw']:.1f} GB/s, {human(small)} {stats[small]['busbw']:.2f} "
              f"GB/s ({time.monotonic() - ts:.0f} s)", file=sys.stderr, flush=True)

    def results(rounds_done: int) -> dict:
        summary = aggregate(launches)
        budget = call_budget({v: t[0] for v, t in traces.items()}, summary, per_call)
        return {
            "command": " ".join(["python", "-m", "benchmarks.allreduce",
                                 *(argv if argv is not None else sys.argv[1:])]),
            "shim": str(shim), "world_size": nproc, **info, "rounds": rounds_done,
            "variants": variants, "reps": args.reps, "sizes": size_list,
            "bars": {v: VARIANTS[v][2] for v in variants if v != "direct"},
            "met": all_met(summary),
            "summary": {str(k): v for k, v in summary.items()},
            "traces": {v: {"ok": all(t["ok"] for t in ts), "launches": len(ts),
                           "first": ts[0]} for v, ts in traces.items()},
            "call_budget": {v: b | {"expected_ratio": {str(k): r for k, r in
                                                       b["expected_ratio"].items()}}
                            for v, b in budget.items()},
            "launches": [ln | {"stats": {str(k): v for k, v in ln["stats"].items()}}
                         for ln in launches],
            "wall_s": time.monotonic() - t0, "work": str(work)}

    def save(r: dict) -> None:
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            tmp = args.json.with_name(args.json.name + ".tmp")
            tmp.write_text(json.dumps(r, indent=2) + "\n")
            tmp.replace(args.json)

    rounds_done = 0
    want = max(1, args.rounds)
    limit = max(want, args.max_rounds) if args.time_budget is not None else want
    for rnd in range(limit):
        if rnd >= want:
            per_round = (time.monotonic() - t0) / rounds_done
            if time.monotonic() - t0 + per_round > args.time_budget:
                break
        for v in round_order(rnd, variants):
            run(v, rnd)
        rounds_done += 1
        save(results(rounds_done))

    r = results(rounds_done)
    save(r)
    print(f"device {info.get('device')} x {nproc}, torch {info.get('torch')}, CUDA "
          f"{info.get('cuda')}, NCCL {info.get('nccl')}; {rounds_done} interleaved rounds of "
          f"{', '.join(variants)}; {args.reps} timed blocks per size")
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
    return 0  # bars missed are a result, not an error: multigpu_validation.sh judges them


if __name__ == "__main__":
    raise SystemExit(main())
