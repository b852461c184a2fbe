"""What tests/gpu/budget_validation.sh runs (docs/memory.md, "One budget for many processes"):
PyTorch processes of one shared memory budget (`shimgen run --limit-group G`), and, outside
the shim, the check of what the driver really holds. Modes (argv[1]):

  validate GROUP OUT   the checks, outside the shim: the baseline of 4 idle contexts, then 4
                       workers of random allocations for SECONDS (one run that starts them)
                       while the device's use is sampled every 50 ms (its most never above the
                       budget and the contexts' own), then a process killed by SIGKILL while
                       it holds memory and another's refused allocation made within a second
  idle                 a context (and the kernels the workers use) made, "READY", then waits
                       for its stdin to close
  stress N SECONDS     N workers started, each `work`; their lines printed
  work SECONDS SEED    random allocations (256 MiB to 3 GiB, at most 4 kept) and frees
  hold GIB             GIB held, "HOLDING pid time", then waits to be killed
  retry GIB            GIB asked for every 10 ms: "REFUSED pid time" at the first refusal,
                       "OK pid time" once made

DRY=1: no GPU, no shim: allocations are counted in this process alone (a `hold` blocks a
`retry` through a file) and the device's use is 0, to try the flow where there is no GPU.
Lines "PASS ..." and "FAIL ..." are the verdicts."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

GIB, MIB = 1 << 30, 1 << 20
DRY = os.environ.get("DRY") == "1"
BUDGET = int(os.environ.get("BUDGET_GIB", "20")) * GIB
SECONDS = os.environ.get("STRESS_SECONDS", "20")
# What a context may grow by after the baseline (kernels loaded lazily at their first use):
# the bound's allowance beyond the budget and the idle contexts (SLACK_MIB, default 32).
SLACK = int(os.environ.get("SLACK_MIB", "32")) * MIB
HOLD_FILE = os.environ.get("DRY_HOLD_FILE", "/tmp/budget-workers-dry-hold")


class Refused(Exception):
    pass


def alloc(nbytes: int):
    if DRY:
        try:  # (a holder there and not a zombie: refused)
            with open(f"/proc/{int(open(HOLD_FILE).read())}/stat") as f:
                there = f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, ValueError):
            there = False
        if nbytes > 8 * GIB and there:
            raise Refused()
        return bytearray(16)
    import torch
    try:
        t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        t.fill_(1)
        torch.cuda.synchronize()
        return t
    except torch.cuda.OutOfMemoryError:
        raise Refused() from None


def release() -> None:
    if not DRY:
        import torch
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # (back to the driver, and so to the budget)


def device_used() -> int:
    """What the driver says the device holds, for every process (outside the shim)."""
    if DRY:
        return 0
    import torch
    free, total = torch.cuda.mem_get_info()
    return total - free


def warm_up() -> None:
    del_me = alloc(MIB)
    del del_me
    release()


def work(seconds: float, seed: int) -> None:
    rng, held, allocs, refused = random.Random(seed), [], 0, 0
    warm_up()
    end = time.time() + seconds
    while time.time() < end:
        if held and (len(held) >= 4 or rng.random() < 0.4):
            held.pop(rng.randrange(len(held)))
            release()
        else:
            try:
                held.append(alloc(rng.randint(256, 3072) * MIB))
                allocs += 1
            except Refused:
                refused += 1
        time.sleep(rng.random() * 0.02)
    print(f"WORKER {os.getpid()} allocs {allocs} refused {refused}", flush=True)


def hold(gib: float) -> None:
    kept = alloc(int(gib * GIB))
    if DRY:
        with open(HOLD_FILE, "w") as f:
            f.write(str(os.getpid()))
    print(f"HOLDING {os.getpid()} {time.time():.6f}", flush=True)
    while kept is not None:
        time.sleep(3600)


def retry(gib: float) -> None:
    said = False
    while True:
        try:
            kept = alloc(int(gib * GIB))
            print(f"OK {os.getpid()} {time.time():.6f}", flush=True)
            del kept
            return
        except Refused:
            if not said:
                print(f"REFUSED {os.getpid()} {time.time():.6f}", flush=True)
                said = True
        time.sleep(0.01)


def verdict(ok: bool, what: str) -> bool:
    print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)
    return ok


def start(run: list[str], *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(run + [sys.executable, __file__, *args], stdout=subprocess.PIPE,
                            text=True, **kw)


class Sampler(threading.Thread):
    """The device's use every 50 ms, its most kept, until stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.most, self.samples, self.stop = 0, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.most = max(self.most, device_used())
            self.samples += 1
            time.sleep(0.05)


def validate(group: str, out: str) -> int:
    runs = iter(range(1000))

    def run(*limit: str) -> list[str]:
        if DRY:
            return []
        return [sys.executable, "-m", "shimgen", "run", "-o", f"{out}/run-{next(runs)}",
                "--limit-group", group, *limit, "--"]

    good = True
    base = device_used()
    idle = [start(run(), "idle", stdin=subprocess.PIPE) for _ in range(4)]
    ready = [p.stdout.readline().strip() for p in idle]
    contexts = device_used() - base
    for p in idle:
        p.stdin.close()
        p.wait(timeout=60)
    good &= verdict(ready == ["READY"] * 4, f"4 idle contexts under the group: {ready}")
    bound = base + contexts + BUDGET + SLACK
    print(f"baseline: device used {base / MIB:.0f} MiB alone, 4 idle contexts "
          f"{contexts / MIB:.0f} MiB; bound {bound / MIB:.0f} MiB (with {SLACK // MIB} MiB "
          "for kernels loaded later)", flush=True)

    sampler = Sampler()
    sampler.start()
    t0 = time.time()
    stress = start(run("--limit", f"job-memory={BUDGET}"), "stress", "4", SECONDS)
    lines = stress.communicate(timeout=int(SECONDS) + 120)[0].splitlines()
    sampler.stop.set()
    sampler.join()
    print("\n".join(lines), flush=True)
    workers = [ln.split() for ln in lines if ln.startswith("WORKER ")]
    refused = sum(int(w[5]) for w in workers)
    print(f"stress: {time.time() - t0:.1f} s, {sampler.samples} samples, max device used "
          f"{sampler.most / MIB:.0f} MiB (bound {bound / MIB:.0f} MiB, over the baseline "
          f"{(sampler.most - base - contexts) / MIB:.0f} MiB of the budget's "
          f"{BUDGET / MIB:.0f})", flush=True)
    good &= verdict(stress.returncode == 0 and len(workers) == 4,
                    f"4 workers ran (exit {stress.returncode})")
    good &= verdict(refused > 0 or DRY, f"the budget was reached: {refused} refusals")
    good &= verdict(sampler.most <= bound, "the device's use never past the budget and the "
                    "contexts' own")

    holder = start(run(), "hold", "12")
    held = holder.stdout.readline().split()
    waiter = start(run(), "retry", "12")
    first = waiter.stdout.readline().split()
    good &= verdict(held[:1] == ["HOLDING"] and first[:1] == ["REFUSED"],
                    f"12 GiB held {held}; a second 12 GiB refused {first}")
    killed_at = time.time()
    try:
        os.kill(int(held[1]) if held[1:] else holder.pid, signal.SIGKILL)
    except ProcessLookupError:  # (the holder never held: said above)
        pass
    timer = threading.Timer(10, waiter.kill)
    timer.start()
    made = waiter.stdout.readline().split()
    timer.cancel()
    holder.wait(timeout=30)
    waiter.wait(timeout=30)
    after = float(made[2]) - killed_at if made[:1] == ["OK"] else float("inf")
    print(f"killed {held[1:2]} at {killed_at:.6f}; the refused one made at "
          f"{made[2] if made[2:] else 'never'}: {after:.3f} s later", flush=True)
    good &= verdict(after < 1.0, "a refused allocation made within a second of the holder's "
                    "SIGKILL")
    return 0 if good else 1


def main() -> int:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "validate":
        return validate(args[0], args[1])
    if mode == "idle":
        warm_up()
        print("READY", flush=True)
        sys.stdin.read()
    elif mode == "stress":
        n = int(args[0])
        ps = [subprocess.Popen([sys.executable, __file__, "work", args[1], str(i)])
              for i in range(n)]
        return max(p.wait() for p in ps)
    elif mode == "work":
        work(float(args[0]), int(args[1]))
    elif mode == "hold":
        hold(float(args[0]))
    elif mode == "retry":
        retry(float(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
