"""One launch of the all-reduce benchmark (benchmarks/allreduce.py runs them): the launch's
environment, the torchrun command and its checks, and the worker that each rank runs
(`python -m benchmarks.allreduce --worker`, from torchrun)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import shims
from benchmarks.allreduce_stats import VARIANTS, iterations, rank_cpus
from benchmarks.native import BenchError
from shimgen.probe.child import child_env as probe_child_env
from shimgen.probe.child import mapped_libraries

ROOT = Path(__file__).resolve().parent.parent


# ---- worker: one rank of one launch --------------------------------------------------------

def worker(out: Path, size_list: list[int], reps: int, warmup: int, pin: int = 0) -> int:
    """One rank: pin, join the NCCL group, check one all-reduce exactly, time every size,
    write rank<r>.json into `out`. 0 when the check passed."""
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
    check = _exact_check(buf, rank, n)
    allreduces = 1

    res: dict = {"rank": rank, "local_rank": local, "world_size": n, "pid": os.getpid(),
                 "shim_mapped": mapped_libraries()["shim_mapped"],
                 "device": torch.cuda.get_device_name(dev),
                 "torch": torch.__version__, "cuda": torch.version.cuda,
                 "nccl": ".".join(map(str, torch.cuda.nccl.version())), "check": check,
                 "cpus": cpus, "sizes": {}}
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for size in size_list:
        iters = iterations(size)
        res["sizes"][str(size)] = _time_size(buf[: size // 4], iters, reps, warmup, local,
                                             (start, stop))
        allreduces += max(warmup, iters // 5) + reps * iters
    dist.barrier(device_ids=[local])
    dist.destroy_process_group()
    res["allreduces"] = allreduces
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(res, indent=1) + "\n")
    return 0 if check == "ok" else 1


def _exact_check(buf, rank: int, n: int) -> str:
    """One exact result first: the sum of (rank + 1) over ranks, on the whole buffer (the
    largest size); "ok" or what failed. The buffer is zeroed after."""
    import torch
    import torch.distributed as dist

    buf.fill_(rank + 1)
    dist.all_reduce(buf)
    torch.cuda.synchronize()
    want = n * (n + 1) / 2
    check = "ok" if bool((buf == want).all()) else f"FAIL: all_reduce result is not {want}"
    buf.zero_()
    return check


def _time_size(t, iters: int, reps: int, warmup: int, local: int, events) -> dict:
    """Warm-up all-reduces of `t`, then `reps` blocks of `iters` all-reduces, each timed with
    the CUDA events (start, stop) after a barrier, and on the host."""
    import torch
    import torch.distributed as dist

    start, stop = events
    for _ in range(max(warmup, iters // 5)):
        dist.all_reduce(t)
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
    return {"iters": iters, "block_seconds": blocks, "host_seconds": host}


# ---- driver: one launch ----------------------------------------------------------------

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
        except BaseException:  # SIGTERM (see allreduce.main), Ctrl-C: take the launch down with us
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
