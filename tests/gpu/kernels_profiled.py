"""The training loop of tests/gpu/train.py (TRAIN_STEPS steps) inside torch.profiler with
CUDA activities (Kineto, over CUPTI's activity API): each kernel's name as CUPTI's activity
records give it (demangled), how many times it ran and its GPU time in all (the records'
start to end, ns), written as JSON to the file named.
    python3 tests/gpu/kernels_profiled.py OUT.json
tests/gpu/compare_kernels.py compares it with `shimgen report --json` of the same run."""

import json
import sys
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import train  # noqa: E402

with profile(activities=[ProfilerActivity.CUDA]) as prof:
    train.main()
    torch.cuda.synchronize()
kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
           and not e.name.startswith(("Memcpy", "Memset"))]
counts = Counter(e.name for e in kernels)
gpu_ns: Counter = Counter()
for e in kernels:
    gpu_ns[e.name] += round(e.time_range.elapsed_us() * 1e3)
with open(sys.argv[1], "w") as f:
    json.dump({"tool": "torch.profiler", "kernels": dict(counts), "gpu_ns": dict(gpu_ns)}, f,
              indent=1)
print(f"profiled {len(counts)} kernels, {sum(counts.values())} launches")
