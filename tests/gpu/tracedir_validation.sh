#!/usr/bin/env bash
# GPU proof of SHIMGEN_TRACE_DIR on a real workload (tests/gpu/train.py, PyTorch on the GPU):
# a normal run's binary trace file has the same counts as the JSON trace of the same run,
# and is complete, with times; a run killed with SIGKILL part-way leaves a file that loads,
# is not complete and holds the calls made up to the kill (cuLaunchKernel among them);
# then, where callgrind and the Debian drivers are available, the +instructions of the file's blocks (python -m benchmarks.tracedir).
# Run from the repository root:
#   bash tests/gpu/tracedir_validation.sh          (results under $OUT or ./gpu-out)
set -uo pipefail
. tests/gpu/common.sh tracedir

say "driver $DRIVER; shimgen build"
rm -rf build/gpu-tracedir
python3 -m shimgen build --driver "$DRIVER" --out build/gpu-tracedir 2>&1 | tee -a "$LOG"
SHIM=$(ls build/gpu-tracedir/*/libcudashim.so)
W=$(mktemp -d)

say "train.py, SHIMGEN_TRACE=time with SHIMGEN_TRACE_DIR and SHIMGEN_TRACE_FILE"
LD_PRELOAD=$SHIM SHIMGEN_TRACE=time SHIMGEN_TRACE_DIR=$W/full SHIMGEN_TRACE_FILE=$W/full.%p.json \
  SHIMGEN_NOTICE_FILE=$W/notices.log python3 tests/gpu/train.py >"$OUT/tracedir-train.txt" 2>&1 \
  || { say "FAIL traced run"; fail=1; }
python3 - "$W" <<'PY' 2>&1 | tee -a "$LOG" || fail=1
import glob, json, sys
from shimgen.trace.binary import load
w = sys.argv[1]
bad = 0
for f in sorted(glob.glob(f"{w}/full/*.shimtrace")):
    t = load(f)
    j = json.load(open(f"{w}/full.{t.pid}.json"))
    same = {n: s.calls for n, s in t.functions.items()} == j["calls"]
    print(f"{f}: pid {t.pid} complete {t.complete} calls {sum(s.calls for s in t.functions.values())}"
          f" ns/tick {t.ns_per_tick} same as JSON {same} driver {t.driver_version} notes {t.notes}")
    bad += not (same and t.complete and t.ns_per_tick)
print("ok   files agree with the JSON" if not bad else "FAIL files differ from the JSON")
sys.exit(1 if bad else 0)
PY

say "train.py (100000 steps), SHIMGEN_TRACE=1, killed with SIGKILL once past step 300"
TRAIN_STEPS=100000 LD_PRELOAD=$SHIM SHIMGEN_TRACE=1 SHIMGEN_TRACE_DIR=$W/killed \
  python3 tests/gpu/train.py >"$OUT/tracedir-killed.txt" 2>&1 &
PID=$!
for _ in $(seq 600); do grep -q "^step 300 " "$OUT/tracedir-killed.txt" && break; sleep 0.2; done
kill -KILL $PID
wait $PID
python3 - "$W" <<'PY' 2>&1 | tee -a "$LOG" || fail=1
import glob, sys
from shimgen.trace.binary import load
files = sorted(glob.glob(f"{sys.argv[1]}/killed/*.shimtrace"))
ok = bool(files)
for f in files:
    t = load(f)
    top = sorted(t.functions.items(), key=lambda kv: -kv[1].calls)[:5]
    print(f"{f}: complete {t.complete} end {t.end_ns} top {[(n, s.calls) for n, s in top]}")
    ok = ok and not t.complete and t.end_ns is None
ok = ok and any(n.startswith("cuLaunchKernel") for f in files for n in load(f).functions)
print("ok   the killed run's file loads, not complete, with its kernel launches" if ok
      else "FAIL the killed run's file")
sys.exit(0 if ok else 1)
PY

say "python -m benchmarks.tracedir (callgrind and the Debian drivers: informational only)"
python3 -m benchmarks.tracedir 2>&1 | tee -a "$LOG" || say "benchmarks.tracedir did not run here"
cp -r "$W" "$OUT/tracedir-files"
say "result: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
