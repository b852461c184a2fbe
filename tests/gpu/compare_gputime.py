"""Compare each kernel's GPU time as `shimgen run --gpu-time` measured it (`shimgen report
--json`, groups[0].kernels[].gpu_total_ns: the driver's events around each launch) with
CUPTI's activity records of the same run (tests/gpu/kernels_profiled.py, torch.profiler):
    python3 tests/gpu/compare_gputime.py REPORT.json PROFILED.json
Prints the GPU busy time both saw over the kernels both name, their ratio, and the kernels
that took the most GPU time, each with both totals and means. PASS when every launch was
timed and the busy time, and each kernel's total that is 5% of it or more, are within a
ratio of 0.8 to 1.5 of CUPTI's (the events bracket a launch on its stream: a kernel's time
plus the events' own, which a kernel of a few microseconds feels most). Exits 1 otherwise."""

import json
import sys

report = json.load(open(sys.argv[1]))["groups"][0]
rep = report["kernels"] or []
prof = json.load(open(sys.argv[2]))
ours: dict[str, list[int]] = {}
for k in rep:
    if k["launches"] and k["gpu_timed"]:
        o = ours.setdefault(k["demangled"], [0, 0, 0])
        o[0] += k["gpu_total_ns"]
        o[1] += k["gpu_timed"]
        o[2] += k["launches"]
theirs = {n: (ns, prof["kernels"][n]) for n, ns in prof["gpu_ns"].items()}
both = sorted(set(ours) & set(theirs), key=lambda n: -theirs[n][0])
busy_ours = sum(ours[n][0] for n in both)
busy_theirs = sum(theirs[n][0] for n in both)
untimed = sum(k["launches"] - (k["gpu_timed"] or 0) for k in rep)
gpu = report.get("gpu_time") or {}
print(f"kernels: shimgen {len(ours)}, profiler {len(theirs)}, both {len(both)}; launches not "
      f"timed: {untimed} ({gpu.get('not_timed')}, pending {gpu.get('pending')})")
ratio = busy_ours / busy_theirs if busy_theirs else 0.0
print(f"GPU busy over the kernels both name: shimgen {busy_ours / 1e3:,.1f} us, CUPTI "
      f"{busy_theirs / 1e3:,.1f} us, ratio {ratio:.3f}")
bad = []
print(f"  {'shimgen us':>12} {'CUPTI us':>12} {'ratio':>6} {'mean us':>9} {'CUPTI mean':>10}"
      f"  kernel")
for n in both:
    (a, na, _), (b, nb) = ours[n], theirs[n]
    r = a / b if b else 0.0
    big = b >= 0.05 * busy_theirs
    if big and not 0.8 <= r <= 1.5:
        bad.append(n)
    if big or both.index(n) < 12:
        print(f"  {a / 1e3:>12,.1f} {b / 1e3:>12,.1f} {r:>6.3f} {a / na / 1e3:>9.2f} "
              f"{b / nb / 1e3:>10.2f}  {n[:100]}{' *' if big else ''}")
ok = both and untimed == 0 and 0.8 <= ratio <= 1.5 and not bad
print("PASS" if ok else "FAIL", "GPU time per kernel within 0.8 to 1.5 of CUPTI's (* : 5% or more "
      "of the busy time)")
sys.exit(0 if ok else 1)
