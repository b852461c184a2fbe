"""NCCL all-reduce bus bandwidth with and without the shim, one process per GPU (issue 6's
bar: busbw with the shim at least 0.99 of without, per size, medians of interleaved runs).

    python -m benchmarks.allreduce --shim build/.../libcudashim.so \\
        [--nproc N] [--rounds 3] [--min-size 1M] [--max-size 1G] [--factor 4] \\
        [--trace] [--work DIR] [--json PATH] [--time-budget SECONDS]

Each launch is `torchrun --standalone --nproc_per_node=N --module benchmarks.allreduce
--worker ...` (run as `python -m torch.distributed.run`, torchrun's own entry point, so the
same interpreter is used; from the repository root). N is every GPU PyTorch sees (2 on the
2 x H200 machine) unless --nproc says otherwise. Every rank pins one GPU and joins an NCCL
process group. For each size (float32 tensors, 1 MiB to 1 GiB in steps of --factor) it
runs warm-up all-reduces, then --reps timed blocks of all-reduces, each block timed with
CUDA events after a barrier. It checks one all-reduce result exactly and writes
rank<r>.json into the launch's directory.

The driver alternates launches without and with the shim (LD_PRELOAD, no tracing), the
order swapped every round, at least 3 rounds each. For one launch and one size, the time of
a block is the slowest rank's (a collective is as slow as its slowest rank), the launch's
time is the median of its blocks, algbw = bytes / time and busbw = algbw * 2(n-1)/n (the
nccl-tests convention for all-reduce). Per size the report gives the median busbw of each
variant over the rounds and the ratio shim / no shim (bar: >= 0.99); the median of the
per-round ratios is given as well.

--trace adds one launch under the shim with SHIMGEN_TRACE=1 and
SHIMGEN_TRACE_FILE=<work>/trace/trace.%r.json ("%r" = the rank), and checks that each rank
wrote its own file (matched by pid), that the N files are distinct, and whether they are
named by rank. Its busbw is shown for information; the bar is for tracing off.

Every child gets NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 (NVLink multicast stays off). Needs PyTorch with CUDA and at least
2 GPUs; anywhere else it says why it skips and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BAR = 0.99
MiB = 1 << 20
CHILD_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
             "NVSHMEM_DISABLE_NVLS": "1"}
VARIANTS = ("direct", "shim")
LABEL = {"direct": "no shim", "shim": "shim", "trace": "shim + SHIMGEN_TRACE=1"}


# ---- pure functions (tested on the CPU) ---------------------------------------------------

def busbw_factor(n: int) -> float:
    """nccl-tests' all-reduce factor: each rank sends and receives 2(n-1)/n of the data."""
    if n < 1:
        raise ValueError(f"world size must be at least 1, got {n}")
    return 2 * (n - 1) / n


def algbw(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s)."""
    return size_bytes / seconds / 1e9


def busbw(size_bytes: int, seconds: float, n: int) -> float:
    return algbw(size_bytes, seconds) * busbw_factor(n)


def parse_size(text: str) -> int:
    """'1M', '256K', '1G', '1048576' -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 1M, 64M, 1G)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def sizes(min_bytes: int, max_bytes: int, factor: int = 4) -> list[int]:
    """min, min*factor, ... up to max (inclusive), each a multiple of 4 bytes (float32)."""
    if factor < 2 or min_bytes < 4 or min_bytes % 4 or max_bytes < min_bytes:
        raise ValueError(f"bad size range {min_bytes}..{max_bytes} x{factor}")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out


def human(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def iterations(size: int, block_bytes: int = 8 << 30, lo: int = 5, hi: int = 200) -> int:
    """All-reduces per timed block: about block_bytes of data, at least lo, at most hi."""
    return max(lo, min(hi, -(-block_bytes // size)))


def launch_stats(ranks: list[dict]) -> dict:
    """One launch's per-rank results -> {size: {seconds, algbw, busbw, blocks}}: the time of
    a block is the slowest rank's; the launch's time is the median of its blocks."""
    if not ranks:
        raise ValueError("no rank results")
    n = ranks[0]["world_size"]
    if len(ranks) != n or sorted(r["rank"] for r in ranks) != list(range(n)):
        raise ValueError(f"expected ranks 0..{n - 1}, got {sorted(r['rank'] for r in ranks)}")
    out = {}
    for key in ranks[0]["sizes"]:
        per_rank = [r["sizes"][key]["block_seconds"] for r in ranks]
        if len({len(b) for b in per_rank}) != 1:
            raise ValueError(f"size {key}: ranks timed different numbers of blocks")
        blocks = [max(col) for col in zip(*per_rank, strict=True)]
        sec = statistics.median(blocks)
        size = int(key)
        out[size] = {"seconds": sec, "algbw": algbw(size, sec), "busbw": busbw(size, sec, n),
                     "blocks": blocks, "iters": ranks[0]["sizes"][key]["iters"]}
    return out


def aggregate(launches: list[dict], bar: float = BAR) -> dict:
    """Launches ({variant, round, stats}) -> per size: median busbw of each variant, ratio
    shim / no shim, the median of the per-round ratios, and whether the bar is met."""
    by: dict[str, dict[int, dict[int, float]]] = {}
    for ln in launches:
        for size, s in ln["stats"].items():
            by.setdefault(ln["variant"], {}).setdefault(int(size), {})[ln["round"]] = s["busbw"]
    out: dict = {}
    for size in sorted(by.get("direct", {})):
        d = by["direct"][size]
        s = by.get("shim", {}).get(size, {})
        if not s:
            continue
        md, ms = statistics.median(d.values()), statistics.median(s.values())
        rounds = sorted(set(d) & set(s))
        paired = [s[r] / d[r] for r in rounds]
        row = {"busbw_direct": {"median": md, "min": min(d.values()), "max": max(d.values()),
                                "runs": [d[r] for r in sorted(d)]},
               "busbw_shim": {"median": ms, "min": min(s.values()), "max": max(s.values()),
                              "runs": [s[r] for r in sorted(s)]},
               "ratio": ms / md,
               "median_paired_ratio": statistics.median(paired) if paired else None,
               "bar": bar, "met": ms / md >= bar}
        t = by.get("trace", {}).get(size)
        if t:
            row["busbw_trace"] = statistics.median(t.values())
            row["ratio_trace"] = row["busbw_trace"] / md
        out[size] = row
    return out


def format_table(summary: dict) -> str:
    has_trace = any("busbw_trace" in r for r in summary.values())
    head = (f"{'size':>8}  {'busbw no shim':>13}  {'busbw shim':>10}  {'ratio':>6}  "
            f"{'paired':>6}  {'bar':>4}  met")
    if has_trace:
        head += "   traced  ratio"
    lines = [head]
    for size, r in sorted(summary.items()):
        p = r["median_paired_ratio"]
        line = (f"{human(size):>8}  {r['busbw_direct']['median']:>13.2f}  "
                f"{r['busbw_shim']['median']:>10.2f}  {r['ratio']:>6.4f}  "
                f"{'-' if p is None else format(p, '.4f'):>6}  {r['bar']:>4}  "
                f"{'yes' if r['met'] else 'NO':<3}")
        if has_trace:
            t = r.get("busbw_trace")
            line += (f"  {t:>7.2f}  {r['ratio_trace']:.4f}" if t is not None else "        -")
        lines.append(line.rstrip())
    lines.append("busbw in GB/s (1e9 bytes/s), median over rounds; ratio = median shim / "
                 "median no shim; paired = median of per-round ratios")
    return "\n".join(lines)


def check_traces(trace_dir: Path, ranks: list[dict]) -> dict:
    """Per-rank trace files of one traced launch: one file per rank (matched by the pid in
    the file), N distinct files, named trace.<rank>.json or not; merged call counts."""
    files = sorted(p for p in trace_dir.iterdir() if p.is_file()) if trace_dir.is_dir() else []
    by_pid: dict[int, list[Path]] = {}
    unreadable = []
    contents: dict[Path, dict] = {}
    for f in files:
        try:
            data = json.loads(f.read_text())
            contents[f] = data
            by_pid.setdefault(int(data["pid"]), []).append(f)
        except (OSError, ValueError, KeyError, TypeError):
            unreadable.append(f.name)
    per_rank: dict = {}
    merged: dict[str, int] = {}
    for r in sorted(ranks, key=lambda r: r["rank"]):
        matched = by_pid.get(int(r["pid"]), [])
        entry: dict = {"pid": r["pid"], "files": [f.name for f in matched]}
        if len(matched) == 1:
            calls = contents[matched[0]].get("calls", {})
            entry["calls"] = sum(calls.values())
            entry["functions"] = len(calls)
            entry["cuInit"] = calls.get("cuInit", 0)
            entry["top"] = sorted(calls.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
            for k, v in calls.items():
                merged[k] = merged.get(k, 0) + v
        per_rank[str(r["rank"])] = entry
    n = len(ranks)
    one_each = all(len(e["files"]) == 1 for e in per_rank.values())
    distinct = len({f for e in per_rank.values() for f in e["files"]})
    rank_named = one_each and all(e["files"][0] == f"trace.{rk}.json"
                                  for rk, e in per_rank.items())
    rank_pids = {int(r["pid"]) for r in ranks}
    others = [f.name for pid, fs in by_pid.items() if pid not in rank_pids for f in fs]
    ok = one_each and distinct == n and rank_named
    why = ("" if ok else
           "a rank wrote no trace file" if not all(e["files"] for e in per_rank.values()) else
           "a rank wrote more than one file" if not one_each else
           "files not distinct" if distinct != n else
           "files are per process but not named trace.<rank>.json")
    return {"ok": ok, "why": why, "world_size": n, "files": [f.name for f in files],
            "distinct_rank_files": distinct, "rank_named": rank_named, "per_rank": per_rank,
            "other_files": others, "unreadable": unreadable,
            "merged_calls": dict(sorted(merged.items(), key=lambda kv: (-kv[1], kv[0])))}


# ---- worker: one rank of one launch --------------------------------------------------------

def _shim_mapped() -> bool:
    try:
        return "libcudashim.so" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def worker(out: Path, size_list: list[int], reps: int, warmup: int) -> int:
    import datetime

    import torch
    import torch.distributed as dist

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
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

    res: dict = {"rank": rank, "local_rank": local, "world_size": n, "pid": os.getpid(),
                 "shim_mapped": _shim_mapped(), "device": torch.cuda.get_device_name(dev),
                 "torch": torch.__version__, "cuda": torch.version.cuda,
                 "nccl": ".".join(map(str, torch.cuda.nccl.version())), "check": check,
                 "sizes": {}}
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for size in size_list:
        t = buf[: size // 4]
        iters = iterations(size)
        for _ in range(max(warmup, iters // 5)):
            dist.all_reduce(t)
        blocks = []
        for _ in range(reps):
            torch.cuda.synchronize()
            dist.barrier(device_ids=[local])
            torch.cuda.synchronize()
            start.record()
            for _ in range(iters):
                dist.all_reduce(t)
            stop.record()
            stop.synchronize()
            blocks.append(start.elapsed_time(stop) / 1e3 / iters)
        res["sizes"][str(size)] = {"iters": iters, "block_seconds": blocks}
    dist.barrier(device_ids=[local])
    dist.destroy_process_group()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(res, indent=1) + "\n")
    return 0 if check == "ok" else 1


# ---- driver: interleaved launches ----------------------------------------------------------

def child_env(shim: Path | None, trace_file: str | None = None) -> dict[str, str]:
    """The environment of a launch: no SHIMGEN_*/LD_PRELOAD from the caller, multicast off;
    LD_PRELOAD=shim for the shim variants, tracing only when trace_file is given."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SHIMGEN_") and k != "LD_PRELOAD"}
    env.update(CHILD_ENV)
    env.setdefault("OMP_NUM_THREADS", "1")
    if shim is not None:
        env["LD_PRELOAD"] = str(shim)
    if trace_file is not None:
        env["SHIMGEN_TRACE"] = "1"
        env["SHIMGEN_TRACE_FILE"] = trace_file
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
    out = ROOT / "build" / "bench" / "gpu"
    proc = subprocess.run([sys.executable, "-m", "shimgen", "build", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, env=child_env(None))
    if proc.returncode != 0:
        raise SystemExit(f"allreduce: shimgen build failed: {proc.stderr.strip()}")
    for line in proc.stdout.splitlines():
        if line.startswith("shim "):
            return Path(line.split(None, 1)[1].strip())
    raise SystemExit("allreduce: shimgen build did not name the shim")


def launch(variant: str, shim: Path, nproc: int, out: Path, size_list: list[int], reps: int,
           warmup: int, timeout: float, trace_file: str | None = None) -> list[dict]:
    """One torchrun launch; returns the ranks' results (checked)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank*.json"):
        old.unlink()
    env = child_env(None if variant == "direct" else shim, trace_file)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", "--module", "benchmarks.allreduce", "--worker",
           "--out", str(out), "--sizes", ",".join(map(str, size_list)),
           "--reps", str(reps), "--warmup", str(warmup)]
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.allreduce",
                                description=__doc__.split("\n")[0])
    p.add_argument("--shim", type=Path, help="libcudashim.so built for this machine's driver "
                   "(default: build one with `shimgen build --out build/bench/gpu`)")
    p.add_argument("--nproc", type=int, help="ranks = GPUs (default: every GPU PyTorch sees)")
    p.add_argument("--rounds", type=int, default=3, help="launches of each variant (>= 3)")
    p.add_argument("--time-budget", type=float, help="seconds: rounds beyond the third are "
                   "only started while the budget allows another round")
    p.add_argument("--min-size", default="1M")
    p.add_argument("--max-size", default="1G")
    p.add_argument("--factor", type=int, default=4, help="size step (default 4x)")
    p.add_argument("--reps", type=int, default=10, help="timed blocks per size")
    p.add_argument("--warmup", type=int, default=5, help="untimed all-reduces per size (at "
                   "least a fifth of a block)")
    p.add_argument("--trace", action="store_true", help="one more launch with SHIMGEN_TRACE=1 "
                   "and per-rank trace files")
    p.add_argument("--work", type=Path, help="per-launch directories (rank JSON, logs, "
                   "traces); default build/allreduce")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--launch-timeout", type=float, default=240)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--sizes", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        return worker(args.out, [int(s) for s in args.sizes.split(",")], args.reps,
                      args.warmup)

    try:
        size_list = sizes(parse_size(args.min_size), parse_size(args.max_size), args.factor)
    except ValueError as e:
        p.error(str(e))
    if args.rounds < 3:
        print("allreduce: note: issue 6 asks for at least 3 rounds each", file=sys.stderr)
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
    info: dict = {}

    def run(variant: str, rnd: int, trace_file: str | None = None) -> list[dict]:
        ts = time.monotonic()
        ranks = launch(variant, shim, nproc, work / f"{variant}-{rnd}", size_list, args.reps,
                       args.warmup, args.launch_timeout, trace_file)
        for k in ("device", "torch", "cuda", "nccl"):
            info.setdefault(k, ranks[0][k])
        stats = launch_stats(ranks)
        launches.append({"variant": variant, "round": rnd, "stats": stats,
                         "wall_s": time.monotonic() - ts, "pids": [r["pid"] for r in ranks]})
        big = max(stats)
        print(f"  round {rnd + 1} {LABEL[variant]:<8} busbw {human(big)} "
              f"{stats[big]['busbw']:.1f} GB/s, {human(min(stats))} "
              f"{stats[min(stats)]['busbw']:.2f} GB/s ({time.monotonic() - ts:.0f} s)",
              file=sys.stderr, flush=True)
        return ranks

    rounds_done = 0
    for rnd in range(max(1, args.rounds)):
        if rnd >= 3 and args.time_budget is not None and rounds_done:
            per_round = (time.monotonic() - t0) / rounds_done
            if time.monotonic() - t0 + per_round > args.time_budget:
                print(f"allreduce: stopping after {rounds_done} rounds (time budget "
                      f"{args.time_budget:.0f} s)", file=sys.stderr)
                break
        for v in (VARIANTS if rnd % 2 == 0 else VARIANTS[::-1]):
            run(v, rnd)
        rounds_done += 1

    traces = None
    if args.trace:
        tdir = work / "trace"
        if tdir.exists():
            for f in tdir.iterdir():
                f.unlink()
        tdir.mkdir(parents=True, exist_ok=True)
        ranks = run("trace", 0, str(tdir / "trace.%r.json"))
        traces = check_traces(tdir, ranks)

    summary = aggregate(launches)
    results = {
        "command": " ".join(["python", "-m", "benchmarks.allreduce",
                             *(argv if argv is not None else sys.argv[1:])]),
        "shim": str(shim), "world_size": nproc, **info, "rounds": rounds_done,
        "reps": args.reps, "sizes": size_list, "bar": BAR,
        "met": bool(summary) and all(r["met"] for r in summary.values()),
        "summary": {str(k): v for k, v in summary.items()},
        "launches": [ln | {"stats": {str(k): v for k, v in ln["stats"].items()}}
                     for ln in launches],
        "traces": traces, "wall_s": time.monotonic() - t0, "work": str(work),
    }
    print(f"device {info.get('device')} x {nproc}, torch {info.get('torch')}, CUDA "
          f"{info.get('cuda')}, NCCL {info.get('nccl')}; {rounds_done} interleaved rounds, "
          f"{args.reps} timed blocks per size")
    print(format_table(summary))
    print(f"bar {BAR}: {'met at every size' if results['met'] else 'NOT met at every size'}")
    if traces is not None:
        print(f"traces: {'ok' if traces['ok'] else 'FAIL: ' + traces['why']}; "
              f"{traces['distinct_rank_files']} distinct files for {nproc} ranks: "
              f"{', '.join(f for e in traces['per_rank'].values() for f in e['files'])}")
        for rk, e in traces["per_rank"].items():
            if "calls" in e:
                print(f"  rank {rk} pid {e['pid']}: {e['calls']} calls to {e['functions']} "
                      f"functions, cuInit {e['cuInit']}; top "
                      + ", ".join(f"{k} {v}" for k, v in e["top"][:3]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
