"""A kernel that spins for SECONDS (torch.cuda._sleep), then a synchronize that waits for it:
the process sits inside the driver's synchronize for that long.
    python3 hang.py SECONDS [python]
With `python` as second word, rank 1 of a torchrun job sleeps in Python instead (RANK)."""
import os
import sys
import time

import torch

seconds = float(sys.argv[1])
torch.cuda.init()
x = torch.ones(1, device="cuda")  # the context and a first launch
torch.cuda.synchronize()
if len(sys.argv) > 2 and os.environ.get("RANK") == "1":
    print(f"rank 1 pid {os.getpid()}: sleeping in Python", flush=True)
    time.sleep(seconds)
else:
    clock_hz = 2.0e9  # spin cycles: the H200's SM clock is under 2 GHz, so at least SECONDS
    torch.cuda._sleep(int(seconds * clock_hz))
    print(f"pid {os.getpid()}: kernel launched, synchronizing", flush=True)
    torch.cuda.synchronize()
print("done", flush=True)
