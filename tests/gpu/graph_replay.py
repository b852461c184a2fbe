"""A CUDA graph of 5 kernels (x.add_(1)), captured by PyTorch and replayed 7 times, for
tests/gpu/graphs_validation.sh: the report's row of the graph has 5 kernel nodes and 7
launches; the 3 warm-up adds are counted by kernel, the captured ones not."""

import torch

x = torch.zeros(1024, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        x.add_(1)
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    for _ in range(5):
        x.add_(1)
for _ in range(7):
    g.replay()
torch.cuda.synchronize()
print("x", x[0].item(), "(want 38.0)")
