"""A small, deterministic PyTorch training loop (CNN on synthetic data) for the GPU proof.

Prints "FINAL_LOSS <repr>" (full float precision) and "PARAM_SUM <repr>" so that a run
without the shim and a run under LD_PRELOAD can be compared for equality.
"""

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from torch import nn  # noqa: E402

STEPS = int(os.environ.get("TRAIN_STEPS", "300"))


def main() -> int:
    torch.manual_seed(1234)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", 0)

    # Synthetic classification data, made on the CPU so it does not depend on GPU RNG.
    g = torch.Generator().manual_seed(42)
    x = torch.randn(4096, 1, 16, 16, generator=g)
    w_true = torch.randn(256, 10, generator=g)
    y = (x.flatten(1) @ w_true).argmax(1)
    x, y = x.to(dev), y.to(dev)

    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(),
        nn.Linear(32 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, 10),
    ).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    batch = 256
    loss = torch.zeros((), device=dev)
    for step in range(STEPS):
        i = (step * batch) % x.shape[0]
        xb, yb = x[i:i + batch], y[i:i + batch]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item()!r}", flush=True)
    torch.cuda.synchronize()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
        psum = sum(p.double().abs().sum().item() for p in model.parameters())
    print(f"FINAL_LOSS {loss.item()!r}")
    print(f"PARAM_SUM {psum!r}")
    print(f"TRAIN_ACC {acc!r}")
    print(f"device {torch.cuda.get_device_name(0)} torch {torch.__version__} "
          f"cuda {torch.version.cuda} steps {STEPS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
