#!/bin/bash
# SHIMGEN_TRACE=calls on the GPU (docs/validation.md, "Decoded calls"):
#   1. a PyTorch training run (tests/gpu/train.py, 20 steps) under `shimgen run --trace calls`
#      with CUPTI's callback API recording the same calls (tests/gpu/cupti_calls.c, injected
#      by the driver); tests/gpu/compare_calls.py compares them thread by thread: the same
#      functions in the same order, every cuMemAlloc_v2's bytesize, every cuLaunchKernel's grid;
#   2. a few decoded lines of the run (`report --calls`);
#   3. the training loop (300 steps) plain and in calls mode, 3 interleaved rounds: the ratio
#      of the medians of the wall times.
#   2b. the run's timeline (timeline/<pid>.json): as many call events as records, and each
#      cuMemAlloc_v2's bytesize and cuLaunchKernel's grid in the events' args as in --json;
# Run from the repository root: bash tests/gpu/calls_validation.sh   (OUT=dir for the output;
# NO_OVERHEAD=1 leaves out step 3)
set -u
. tests/gpu/common.sh calls
export PYTHONPATH=$PYTHONPATH:/tmp/site  # what the caller installed there
if ls wheels/*.whl >/dev/null 2>&1; then  # pycparser, where the machine lacks it
  python3 -m pip install -q --no-index --no-deps --target /tmp/site wheels/*.whl
fi
python3 -c 'import pycparser' 2>/dev/null || say "no pycparser: calls are recorded raw"
NVPY=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
CUPTI_INC="" CUPTI_LIB=""
for d in /usr/local/cuda/extras/CUPTI /usr/local/cuda ${NVPY:+"$NVPY/cu13" "$NVPY/cuda_cupti"}; do
  [ -f "$d/include/cupti.h" ] || continue
  for l in "$d/lib64" "$d/lib" "$d/targets/x86_64-linux/lib"; do
    f=$(ls "$l"/libcupti.so "$l"/libcupti.so.* 2>/dev/null | head -1)
    if [ -n "$f" ]; then CUPTI_INC=$d/include CUPTI_LIB=$f; break 2; fi
  done
done
say "driver $DRIVER; CUPTI ${CUPTI_LIB:-none}"
gcc -O2 -Wall -Wextra -shared -fPIC -o "$OUT/cupti_calls.so" tests/gpu/cupti_calls.c \
  -I"$CUPTI_INC" "$CUPTI_LIB" -Wl,-rpath,"$(dirname "$CUPTI_LIB")" 2>&1 | tee -a "$LOG"
say "1. train.py 20 steps, calls mode, CUPTI injected"
rm -rf "$OUT/run-calls"
TRAIN_STEPS=20 CUDA_INJECTION64_PATH=$OUT/cupti_calls.so CUPTI_CALLS_FILE=$OUT/cupti \
  python3 -m shimgen run --trace calls --calls-ring 262144 -o "$OUT/run-calls" \
  -- python3 tests/gpu/train.py 2>&1 | tail -8 | tee -a "$LOG"
python3 tests/gpu/compare_calls.py "$OUT/run-calls" "$OUT/cupti" 2>&1 | tee -a "$LOG" | tail -25
say "2. decoded lines"
python3 -m shimgen report --calls "$OUT/run-calls" --function 'cuMemAlloc*' 2>&1 | head -6 | tee -a "$LOG"
python3 -m shimgen report --calls "$OUT/run-calls" --function 'cuLaunchKernel*' --last 1 2>&1 | head -6 | tee -a "$LOG"
python3 -m shimgen report --calls "$OUT/run-calls" --function 'cuDeviceGetAttribute' 2>&1 | head -6 | tee -a "$LOG"
python3 -m shimgen report --calls "$OUT/run-calls" --errors 2>&1 | head -8 | tee -a "$LOG"
say "2b. the run's timeline (Chrome trace JSON): each call's decoded arguments in args"
python3 - "$OUT/run-calls" <<'PY' 2>&1 | tee -a "$LOG"
import glob, json, subprocess, sys
run = sys.argv[1]
events = []
for f in sorted(glob.glob(f"{run}/timeline/*.json")):
    events += [e for e in json.load(open(f))["traceEvents"] if e.get("ph") in ("X", "B")]
rep = json.loads(subprocess.run([sys.executable, "-m", "shimgen", "report", "--calls", "--json",
                                 run], capture_output=True, text=True, check=True).stdout)
recs = rep["calls"]
alloc_t = sorted(e["args"]["args"]["bytesize"] for e in events if e["name"] == "cuMemAlloc_v2")
alloc_r = sorted(r["args"]["bytesize"] for r in recs if r["function"] == "cuMemAlloc_v2")
grid_t = sorted((e["args"]["args"]["gridDimX"], e["args"]["args"]["gridDimY"])
                for e in events if e["name"] == "cuLaunchKernel")
grid_r = sorted((r["args"]["gridDimX"], r["args"]["gridDimY"])
                for r in recs if r["function"] == "cuLaunchKernel")
print(f"timeline: {len(events)} call events, report: {len(recs)} records")
print(f"cuMemAlloc_v2 bytesizes equal: {alloc_t == alloc_r} ({len(alloc_t)} calls)")
print(f"cuLaunchKernel grids equal: {grid_t == grid_r} ({len(grid_t)} calls)")
ex = next((e for e in events if e["name"] == "cuMemAlloc_v2"), None)
print("an event:", json.dumps(ex)[:400])
ok = len(events) == len(recs) and alloc_t == alloc_r and grid_t == grid_r and alloc_t
print("TIMELINE:", "PASS" if ok else "FAIL")
PY
if [ -n "${NO_OVERHEAD:-}" ]; then exit 0; fi
say "3. overhead: train.py 300 steps, plain and calls mode, 3 interleaved rounds"
python3 - "$OUT" <<'PY' | tee -a "$LOG"
import shutil, statistics, subprocess, sys, time
out = sys.argv[1]
plain, calls = [], []
for r in range(3):
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "tests/gpu/train.py"], capture_output=True, check=True)
    t1 = time.perf_counter()
    shutil.rmtree(f"{out}/run-o{r}", ignore_errors=True)
    subprocess.run([sys.executable, "-m", "shimgen", "run", "--trace", "calls", "-o",
                    f"{out}/run-o{r}", "--", sys.executable, "tests/gpu/train.py"],
                   capture_output=True, check=True)
    t2 = time.perf_counter()
    shutil.rmtree(f"{out}/run-o{r}", ignore_errors=True)
    plain.append(t1 - t0)
    calls.append(t2 - t1)
    print(f"round {r + 1}: plain {plain[-1]:.3f} s, calls {calls[-1]:.3f} s", flush=True)
p, c = statistics.median(plain), statistics.median(calls)
print(f"median plain {p:.3f} s, calls {c:.3f} s, ratio {c / p:.3f} (process wall times, "
      "shimgen run's own start included)")
PY
