"""PyTorch training-step time with and without the shim, on a GPU (the H200 bar:
ratio at most 1.01, median of at least 5 interleaved runs each).

    python -m benchmarks.gpu_step --shim build/cudashim-<ver>-<bid>/libcudashim.so \\
        [--runs 5] [--steps 300] [--configs small,large] [--json PATH]

Without --shim, a shim is built first for the driver ldconfig finds (`shimgen build --out
build/bench/gpu`, emptied first; benchmarks/shims.py). Each run is a fresh Python process
(this file with --child) that builds a model, runs warm-up steps, then times --steps
training steps (forward, backward, AdamW step; eager mode, no CUDA graphs, so every kernel
launch goes through the driver).
Runs alternate: without the shim, with it (LD_PRELOAD, no tracing), the order swapped every
round. A child started with the shim must have it mapped, and one without must not.

Configs: `small` is launch-bound (a small transformer: the driver call path matters most);
`large` is compute-bound (what a real training job looks like). The ratio is
median(shim) / median(no shim); the median of per-round ratios is given too. The child
also reports the time from its start to the first finished CUDA operation, so the start-up
added by the shim in a CUDA process is measured as well.

This needs PyTorch with CUDA and a GPU. Anywhere else it says why it skips and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_BAR = 1.01

CONFIGS = {
    # name: (d_model, layers, heads, batch, seq)
    "small": (256, 4, 4, 32, 128),
    "large": (2048, 8, 16, 16, 1024),
}


# ---- child: one process, one measurement -------------------------------------------------

def child(config: str, steps: int, warmup: int) -> dict:
    t_spawn = float(os.environ.get("GPU_STEP_SPAWN_T", "nan"))
    import torch  # only the child imports torch

    if str(ROOT) not in sys.path:  # (the child runs as a script)
        sys.path.insert(0, str(ROOT))
    from shimgen.probe.child import mapped_libraries

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    startup_s = time.time() - t_spawn

    d_model, layers, heads, batch, seq = CONFIGS[config]
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0,
                                             batch_first=True)
    model = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).cuda()
    head = torch.nn.Linear(d_model, d_model).cuda()
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    x = torch.randn(batch, seq, d_model, device="cuda")
    y = torch.randn(batch, seq, d_model, device="cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = head(model(x))
        loss = torch.nn.functional.mse_loss(out.float(), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    return {
        "config": config,
        "ms_per_step": elapsed * 1e3 / steps,
        "startup_s": startup_s,
        "shim_mapped": mapped_libraries()["shim_mapped"],
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


# ---- parent: interleaved runs --------------------------------------------------------------

def why_skip() -> str | None:
    """None when PyTorch with a CUDA GPU is here, else why the benchmark cannot run."""
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed"
    probe = "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 3)"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=_env(None))
    if proc.returncode == 3:
        return "PyTorch sees no CUDA GPU (torch.cuda.is_available() is False)"
    if proc.returncode != 0:
        return f"importing torch failed: {proc.stderr.strip()[-300:]}"
    return None


def _env(shim: Path | None) -> dict[str, str]:
    from shimgen.probe.child import child_env  # the parent's only: the child runs by path

    return child_env(shim)


def build_shim() -> Path:
    from .native import BenchError
    from .shims import build

    try:
        shim, manifest, _wall = build(ROOT / "build" / "bench" / "gpu")
    except BenchError as e:
        raise SystemExit(f"gpu_step: {e}") from None
    print(f"gpu_step: built {shim} for {manifest['driver']}", file=sys.stderr)
    return shim


def run_child(shim: Path | None, config: str, steps: int, warmup: int,
              trace: str | None = None) -> dict:
    env = _env(shim)
    if shim is not None and trace:  # the shim traces into a directory of its own, then gone
        import tempfile

        from shimgen.runenv import ENV

        tracedir = tempfile.mkdtemp(prefix="gpu-step-trace-")
        env.update({ENV["TRACE"]: trace, ENV["TRACE_DIR"]: tracedir, ENV["QUIET"]: "1"})
    env["GPU_STEP_SPAWN_T"] = repr(time.time())
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", config,
           "--steps", str(steps), "--warmup", str(warmup)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    finally:
        if shim is not None and trace:
            import shutil

            shutil.rmtree(tracedir, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"gpu_step: run ({'shim' if shim else 'no shim'}, {config}) exited "
                         f"{proc.returncode}: {proc.stderr.strip()[-2000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if res["shim_mapped"] != (shim is not None):
        raise SystemExit(f"gpu_step: shim {'not ' if shim else ''}mapped in a run "
                         f"{'with' if shim else 'without'} LD_PRELOAD")
    return res


def _summary(vals: list[float]) -> dict:
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "runs": vals}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_step",
                                description=__doc__.split("\n")[0])
    p.add_argument("--shim", type=Path, help="libcudashim.so built for this machine's driver")
    p.add_argument("--runs", type=int, default=5, help="runs of each variant (at least 5)")
    p.add_argument("--steps", type=int, default=300, help="timed training steps per run")
    p.add_argument("--warmup", type=int, default=30, help="untimed steps first")
    p.add_argument("--configs", default="small,large", help=f"of {', '.join(CONFIGS)}")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--trace", choices=("counts", "time", "timeline", "calls"),
                   help="the shim's runs trace in this mode, into a trace directory")
    p.add_argument("--bar", type=float, default=GPU_BAR,
                   help=f"the ratio to meet (default {GPU_BAR}; calls mode's bar is 1.05)")
    p.add_argument("--child", metavar="CONFIG", help=argparse.SUPPRESS)
    return p


def measure_config(shim: Path, config: str, args: argparse.Namespace, results: dict) -> dict:
    """--runs interleaved runs of each variant of one config: its entry of results["configs"].
    The first run's device, torch and CUDA versions go into `results`."""
    times: dict[str, list[float]] = {"direct": [], "shim": []}
    startup: dict[str, list[float]] = {"direct": [], "shim": []}
    for r in range(args.runs):
        order = ["direct", "shim"] if r % 2 == 0 else ["shim", "direct"]
        for v in order:
            res = run_child(shim if v == "shim" else None, config, args.steps, args.warmup,
                            args.trace)
            times[v].append(res["ms_per_step"])
            startup[v].append(res["startup_s"])
            results.setdefault("device", res["device"])
            results.setdefault("torch", res["torch"])
            results.setdefault("cuda", res["cuda"])
            print(f"  {config} run {r + 1}/{args.runs} {v:<6} "
                  f"{res['ms_per_step']:.3f} ms/step", file=sys.stderr, flush=True)
    ratio = statistics.median(times["shim"]) / statistics.median(times["direct"])
    paired = [a / b for a, b in zip(times["shim"], times["direct"], strict=True)]
    return {
        "ms_per_step": {v: _summary(t) for v, t in times.items()},
        "ratio_of_medians": ratio,
        "median_paired_ratio": statistics.median(paired),
        "bar": args.bar,
        "met": ratio <= args.bar,
        "startup_to_first_cuda_op_s": {v: _summary(t) for v, t in startup.items()},
        "startup_added_s": statistics.median(startup["shim"])
        - statistics.median(startup["direct"]),
    }


def print_table(results: dict) -> None:
    """The table on stdout: one row per config."""
    print(f"device {results.get('device')}, torch {results.get('torch')}, "
          f"CUDA {results.get('cuda')}; {results['runs']} interleaved runs each, "
          f"{results['steps']} steps, the shim tracing {results['trace']}")
    print(f"{'config':<8}{'no shim ms/step':>18}{'shim ms/step':>15}{'ratio':>9}"
          f"{'paired':>9}{'bar':>7}  met   start-up added")
    for config, c in results["configs"].items():
        d, s = c["ms_per_step"]["direct"], c["ms_per_step"]["shim"]
        print(f"{config:<8}{d['median']:>18.3f}{s['median']:>15.3f}{c['ratio_of_medians']:>9.4f}"
              f"{c['median_paired_ratio']:>9.4f}{c['bar']:>7}  {'yes' if c['met'] else 'NO':<5} "
              f"{c['startup_added_s'] * 1e3:+.1f} ms")


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)

    if args.child:
        print(json.dumps(child(args.child, args.steps, args.warmup)))
        return 0

    reason = why_skip()
    if reason:
        print(f"gpu_step: skipped: {reason}. This benchmark runs on a GPU machine only.")
        if args.json:
            args.json.write_text(json.dumps({"skipped": reason}, indent=2) + "\n")
        return 0
    if args.runs < 5:
        print("gpu_step: note: the bar asks for at least 5 runs each", file=sys.stderr)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for c in configs:
        if c not in CONFIGS:
            p.error(f"unknown config {c}; known: {', '.join(CONFIGS)}")
    shim = args.shim.resolve() if args.shim else build_shim()
    if not shim.is_file():
        p.error(f"no shim at {shim}")

    results: dict = {"command": " ".join(["python", "-m", "benchmarks.gpu_step",
                                          *(argv if argv is not None else sys.argv[1:])]),
                     "shim": str(shim), "steps": args.steps, "warmup": args.warmup,
                     "runs": args.runs, "trace": args.trace or "off", "configs": {}}
    for config in configs:
        results["configs"][config] = measure_config(shim, config, args, results)
    print_table(results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
