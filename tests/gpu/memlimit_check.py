"""What tests/gpu/hooks_validation.sh runs under examples/hooks/memlimit.c (or without it):
torch.cuda.mem_get_info(), then a 1.5 GiB allocation, then a 3 GiB one; one line each:
  MEM_GET_INFO total <bytes> free <bytes>
  ALLOC 1.5GiB ok | ALLOC 1.5GiB OutOfMemoryError
  ALLOC 3GiB ok | ALLOC 3GiB OutOfMemoryError
"""

import torch

GIB = 1 << 30


def alloc(label: str, nbytes: int) -> None:
    try:
        t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        t.fill_(1)
        torch.cuda.synchronize()
        print(f"ALLOC {label} ok", flush=True)
        del t
    except torch.cuda.OutOfMemoryError:
        print(f"ALLOC {label} OutOfMemoryError", flush=True)
    torch.cuda.empty_cache()


free, total = torch.cuda.mem_get_info()
print(f"MEM_GET_INFO total {total} free {free}", flush=True)
alloc("1.5GiB", 3 * GIB // 2)
alloc("3GiB", 3 * GIB)
