"""The programs of tests/gpu/inject_validation.sh, run under `shimgen run --inject`:

    python3 tests/gpu/inject_torch.py oom      64 MiB allocations until one fails; the
                                               OutOfMemoryError caught, then work goes on
    python3 tests/gpu/inject_torch.py launch   small kernels; a failed launch's error caught,
                                               then what CUDA does after it
    python3 tests/gpu/inject_torch.py nccl     one rank of torch.distributed (nccl backend):
                                               init, all_reduce, destroy; an error caught

Each prints RESULT lines (what the program saw) and exits 0 when it survived: the error was
caught (or none came) and the process went on to its end.
"""

import os
import sys

import torch


def say(text: str) -> None:
    print(f"RESULT {text}", flush=True)


def after(what: str) -> None:
    """Whether CUDA still works after the error."""
    try:
        v = (torch.ones(1024, device="cuda") * 2).sum().item()
        torch.cuda.synchronize()
        say(f"after the {what}: CUDA still works (sum {v:.0f})")
    except Exception as e:  # noqa: BLE001 (what torch raises is what is reported)
        say(f"after the {what}: CUDA fails too: {type(e).__name__}: {str(e).splitlines()[0]}")


def oom() -> None:
    torch.cuda.init()
    kept = []
    for k in range(1, 9):
        try:
            kept.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
        except torch.cuda.OutOfMemoryError as e:
            say(f"allocation {k}: torch.cuda.OutOfMemoryError caught: {str(e).splitlines()[0]}")
            break
    else:
        say("no OutOfMemoryError: every allocation succeeded")
    say(f"allocations kept: {len(kept)}")
    after("out-of-memory error")


def launch() -> None:
    x = torch.ones(1 << 16, device="cuda")
    torch.cuda.synchronize()
    for k in range(1, 21):
        try:
            x = x + 1
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            say(f"step {k}: {type(e).__name__} caught: {str(e).splitlines()[0]}")
            break
    else:
        say("no error: every launch succeeded")
    after("launch failure")


def nccl() -> None:
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    torch.cuda.set_device(0)
    try:
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
        t = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        say(f"all_reduce done: {t[0].item():.0f}")
    except Exception as e:  # noqa: BLE001
        say(f"{type(e).__name__} caught: {str(e).splitlines()[0][:300]}")
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception as e:  # noqa: BLE001
                say(f"destroy_process_group: {type(e).__name__}: {str(e).splitlines()[0]}")
    after("NCCL error")


if __name__ == "__main__":
    {"oom": oom, "launch": launch, "nccl": nccl}[sys.argv[1]]()
    say("the program reached its end")
