"""NCCL collectives through torch.distributed (env:// init), one rank per GPU.

    python3 tests/gpu/nccl_allreduce.py [--nproc N]

--nproc 2 (where two GPUs are visible) starts two ranks, one per GPU, each checking that a
SUM all-reduce of (data + rank) gives 2 * data + 1 and that a broadcast from rank 0 reaches
rank 1. --nproc 1 (the default) runs one rank and says so: with one rank a SUM all-reduce
changes nothing, so it checks collectives whose result a no-op would get wrong instead: an
all-reduce with PREMUL_SUM (multiplies by 3), and an all-gather into a buffer filled with
NaN. MASTER_ADDR defaults to 127.0.0.1 and MASTER_PORT to 29511. Prints
`NCCL_OK world_size N ...` when every rank passed. Keeps NVLink multicast off
(NCCL_NVLS_ENABLE=0 etc.) even when the caller forgot.
"""

import argparse
import datetime
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: shimgen
from shimgen.probe.child import MULTICAST_OFF  # noqa: E402

os.environ.update(MULTICAST_OFF)
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29511")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def fail(rank: int, what: str) -> None:
    raise SystemExit(f"FAIL rank {rank}: {what}")


def one_rank_checks(dev: torch.device) -> str:
    t = torch.arange(1 << 20, dtype=torch.float32, device=dev)
    premul = getattr(dist, "_make_nccl_premul_sum", None)
    if premul is None:
        fail(0, "this torch has no PREMUL_SUM: one rank cannot check an all-reduce")
    r = t.clone()
    dist.all_reduce(r, op=premul(3.0))
    torch.cuda.synchronize()
    if not torch.equal(r, t * 3.0):
        fail(0, "all_reduce(PREMUL_SUM 3) result")
    out = torch.full((1 << 20,), float("nan"), device=dev)
    dist.all_gather_into_tensor(out, t)
    torch.cuda.synchronize()
    if not torch.equal(out, t):
        fail(0, "all_gather_into_tensor result")
    return "one rank (one GPU): PREMUL_SUM all-reduce and all-gather checked"


def two_rank_checks(rank: int, ws: int, dev: torch.device) -> str:
    t = torch.arange(1 << 20, dtype=torch.float32, device=dev)
    for _ in range(5):
        r = t + rank
        dist.all_reduce(r, op=dist.ReduceOp.SUM)
    torch.cuda.synchronize()
    if not torch.equal(r, t * ws + sum(range(ws))):
        fail(rank, "all_reduce(SUM) result")
    b = torch.full((1024,), 7.0 if rank == 0 else -1.0, device=dev)
    dist.broadcast(b, src=0)
    torch.cuda.synchronize()
    if not bool((b == 7.0).all()):
        fail(rank, "broadcast result")
    return f"{ws} ranks: SUM all-reduce and broadcast checked"


def rank_main(rank: int, ws: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(ws), LOCAL_RANK=str(rank))
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method="env://", device_id=dev,
                            timeout=datetime.timedelta(seconds=120))
    if dist.get_world_size() != ws:
        fail(rank, f"world size {dist.get_world_size()}, expected {ws}")
    what = one_rank_checks(dev) if ws == 1 else two_rank_checks(rank, ws, dev)
    dist.barrier()
    torch.cuda.synchronize()
    dist.destroy_process_group()
    if rank == 0:
        nccl_version = ".".join(map(str, torch.cuda.nccl.version()))
        print(f"rank0 {what}; nccl {nccl_version}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nproc", type=int, default=1, choices=(1, 2))
    a = ap.parse_args()
    if a.nproc > torch.cuda.device_count():
        print(f"FAIL --nproc {a.nproc}: only {torch.cuda.device_count()} GPUs visible",
              file=sys.stderr)
        return 1
    if a.nproc == 1:
        rank_main(0, 1)
    else:
        mp.spawn(rank_main, args=(a.nproc,), nprocs=a.nproc, join=True)
    print(f"NCCL_OK world_size {a.nproc} "
          + ("(one rank: one GPU visible)" if a.nproc == 1 else "(one rank per GPU)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
