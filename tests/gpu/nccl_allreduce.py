"""One-GPU NCCL all-reduce through torch.distributed (world size 1, env:// init).

MASTER_ADDR defaults to 127.0.0.1 and MASTER_PORT to 29511. Prints NCCL_OK on success.
Keeps NVLink multicast off (NCCL_NVLS_ENABLE=0 etc.) even when the caller forgot.
"""

import datetime
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: shimgen
from shimgen.probe.child import MULTICAST_OFF  # noqa: E402

os.environ.update(MULTICAST_OFF)
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29511")
os.environ.setdefault("RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main() -> int:
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    dist.init_process_group("nccl", init_method="env://", device_id=dev,
                            timeout=datetime.timedelta(seconds=120))
    ws = dist.get_world_size()
    t = torch.arange(1 << 20, dtype=torch.float32, device=dev)
    want = t * ws
    for _ in range(5):
        r = t.clone()
        dist.all_reduce(r, op=dist.ReduceOp.SUM)
    torch.cuda.synchronize()
    if not torch.equal(r, want):
        print("FAIL all_reduce result", file=sys.stderr)
        return 1
    b = torch.full((1024,), 7.0, device=dev)
    dist.broadcast(b, src=0)
    dist.barrier()
    torch.cuda.synchronize()
    if not bool((b == 7.0).all()):
        print("FAIL broadcast result", file=sys.stderr)
        return 1
    nccl_version = ".".join(map(str, torch.cuda.nccl.version()))
    dist.destroy_process_group()
    print(f"NCCL_OK world_size {ws} nccl {nccl_version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
