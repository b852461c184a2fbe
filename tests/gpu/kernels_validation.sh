#!/usr/bin/env bash
# GPU proof of kernels by name and each stream's last launch (docs/validation.md, "Kernels"):
#  1. A PyTorch training loop (tests/gpu/train.py) under `shimgen run --trace time`: the
#     report's kernels section; every launch named (no unnamed kernel, none lost), and the
#     kernels' launches summed equal to the calls of the launch functions the time table
#     counted (the same process, two counts kept apart: no launch into a capture here).
#  2. A spinning kernel (torch.cuda._sleep) and the synchronize that waits for it, under
#     `run --stall 5`: the stall line, top and the report name the kernel (spin_kernel) the
#     stream last ran; after SIGKILL the report still does.
#  3. The loop again inside torch.profiler (CUDA activities: CUPTI's activity records): every
#     kernel the report names launched, with its launches, as the profiler names and counts
#     it, and no other (tests/gpu/kernels_profiled.py, tests/gpu/compare_kernels.py).
#  4. The same under `run --gpu-time`: each kernel's GPU time from the driver's events
#     against CUPTI's activity durations (tests/gpu/compare_gputime.py); then GPU time's
#     cost: train.py's wall time with and without --gpu-time (each once; a reading, no bar).
# Run from the repository root:  bash tests/gpu/kernels_validation.sh   (results in $OUT)
set -uo pipefail
. tests/gpu/common.sh kernels
R=$OUT/runs-kernels; rm -rf "$R"; mkdir -p "$R"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/shimgen-cache}
say "driver $DRIVER"

say "1. train.py (TRAIN_STEPS=20) under run --trace time"
TRAIN_STEPS=20 python3 -m shimgen run --driver "$DRIVER" --trace time -o "$R/train" -- \
  python3 tests/gpu/train.py >"$OUT/train.out" 2>"$OUT/train.err" || { say "FAIL run"; fail=1; }
python3 -m shimgen report "$R/train" | sed -n '/^kernels/,$p' | head -50 | tee -a "$LOG"
python3 -m shimgen report --json "$R/train" >"$OUT/train.json"
python3 - "$OUT/train.json" <<'PY' | tee -a "$LOG" || fail=1
import json, sys
g = json.load(open(sys.argv[1]))["groups"][0]
ks = g["kernels"] or []
launch_fns = ("cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
              "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz")
calls = sum(f["calls"] - (f["errors"] or 0) for f in g["functions"] if f["function"] in launch_fns)
named = sum(k["launches"] for k in ks if k["name"] and not k["name"].startswith("("))
unnamed = sum(k["launches"] for k in ks if not k["name"])
host = sum(k["launches"] for k in ks if k["name"].startswith("("))
print(f"kernels {len(ks)}; launches named {named}, unnamed {unnamed}; launch calls {calls}")
for k in ks[:10]:
    print(f"  {k['launches']:>8}  {k['demangled'][:120]}")
ok = ks and unnamed == 0 and named == calls
print("PASS" if ok else "FAIL", "every launch named and counted")
sys.exit(0 if ok else 1)
PY

say "2. a spinning kernel and a synchronize under run --stall 5, then SIGKILL"
python3 -m shimgen run --driver "$DRIVER" --stall 5 -o "$R/hang" -- python3 tests/gpu/hang.py 120 \
  >"$OUT/hang.out" 2>"$OUT/hang.err" &
RUNPID=$!
for i in $(seq 1 120); do grep -q synchronizing "$OUT/hang.out" 2>/dev/null && break; sleep 1; done
sleep 10
grep "has been inside" "$OUT/hang.err" | tee -a "$LOG"
grep -q "last ran .*spin_kernel" "$OUT/hang.err" || { say "FAIL the stall line names no spin_kernel"; fail=1; }
python3 -m shimgen top --once "$R/hang" 2>&1 | tee -a "$LOG"
python3 -m shimgen report "$R/hang" | grep "^in flight" | tee -a "$LOG"
P=$(python3 -m shimgen top --once --json "$R/hang" | python3 -c 'import json,sys; print(" ".join(str(c["pid"]) for c in json.load(sys.stdin)["processes"] if c["state"]=="running"))')
kill -KILL $P; wait $RUNPID
python3 -m shimgen report "$R/hang" | grep "^in flight" | tee "$OUT/hang-after.txt" | tee -a "$LOG"
grep -q "last ran .*spin_kernel" "$OUT/hang-after.txt" || { say "FAIL no spin_kernel after SIGKILL"; fail=1; }
say "3. names and counts against CUPTI's activity records (torch.profiler), the same run"
TRAIN_STEPS=20 python3 -m shimgen run --driver "$DRIVER" --trace time -o "$R/prof" -- \
  python3 tests/gpu/kernels_profiled.py "$OUT/profiled.json" >"$OUT/prof.out" 2>"$OUT/prof.err" \
  || { say "FAIL run"; fail=1; }
python3 -m shimgen report --json "$R/prof" >"$OUT/prof-report.json"
python3 tests/gpu/compare_kernels.py "$OUT/prof-report.json" "$OUT/profiled.json" 2>&1 \
  | tee -a "$LOG" || fail=1
say "4. GPU time per kernel against CUPTI's activity durations, the same run"
TRAIN_STEPS=20 python3 -m shimgen run --driver "$DRIVER" --trace time --gpu-time -o "$R/gpu" -- \
  python3 tests/gpu/kernels_profiled.py "$OUT/gpu-profiled.json" >"$OUT/gpu.out" 2>"$OUT/gpu.err" \
  || { say "FAIL run"; fail=1; }
python3 -m shimgen report "$R/gpu" | sed -n '/^kernels/,$p' | head -24 | tee -a "$LOG"
python3 -m shimgen report --json "$R/gpu" >"$OUT/gpu-report.json"
python3 tests/gpu/compare_gputime.py "$OUT/gpu-report.json" "$OUT/gpu-profiled.json" 2>&1 \
  | tee -a "$LOG" || fail=1
for how in "" "--gpu-time" "--gpu-time every=10"; do
  t0=$(date +%s.%N)
  TRAIN_STEPS=100 python3 -m shimgen run --driver "$DRIVER" --trace time $how -o "$R/cost$RANDOM" \
    -- python3 tests/gpu/train.py >/dev/null 2>&1 || { say "FAIL run $how"; fail=1; }
  say "train.py 100 steps under run --trace time ${how:-(no GPU time)}: $(python3 -c \
    "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f} s')" "$t0" "$(date +%s.%N)")"
done
say "done (fail=$fail)"
exit $fail
