#!/usr/bin/env bash
# GPU proof of SHIMGEN_TRACE=timeline on a real workload: the PyTorch training
# loop of tests/gpu/train.py gives the same loss with and without the timeline, and the
# timeline agrees with the trace summary of the same run (tests/gpu/check_timeline.py).
# Run from the repository root:
#   bash tests/gpu/timeline_validation.sh          (results under $OUT or ./gpu-out)
set -uo pipefail
. tests/gpu/common.sh timeline

say "driver $DRIVER; shimgen build"
rm -rf build/gpu-timeline
python3 -m shimgen build --driver "$DRIVER" --out build/gpu-timeline 2>&1 | tee -a "$LOG"
SHIM=$(ls build/gpu-timeline/*/libcudashim.so)

say "train.py without the shim"
python3 tests/gpu/train.py >"$OUT/train-plain.txt" 2>&1 || { say "FAIL plain run"; fail=1; }
say "train.py under SHIMGEN_TRACE=timeline"
W=$(mktemp -d)
LD_PRELOAD=$SHIM SHIMGEN_TRACE=timeline SHIMGEN_TRACE_FILE=$W/summary.json \
  SHIMGEN_TIMELINE_FILE=$W/timeline.json python3 tests/gpu/train.py \
  >"$OUT/train-timeline.txt" 2>&1 || { say "FAIL timeline run"; fail=1; }
grep -E "FINAL_LOSS|PARAM_SUM|^shimgen" "$OUT/train-plain.txt" "$OUT/train-timeline.txt" | tee -a "$LOG"
if [ "$(grep -E 'FINAL_LOSS|PARAM_SUM' "$OUT/train-plain.txt")" = \
     "$(grep -E 'FINAL_LOSS|PARAM_SUM' "$OUT/train-timeline.txt")" ] &&
   grep -q FINAL_LOSS "$OUT/train-plain.txt"; then
  say "ok   identical loss and parameters"
else
  say "FAIL loss or parameters differ"; fail=1
fi
say "check_timeline.py"
python3 tests/gpu/check_timeline.py "$W/timeline.json" "$W/summary.json" 2>&1 | tee -a "$LOG" \
  || fail=1
ls -la "$W/timeline.json" | tee -a "$LOG"
gzip -c "$W/timeline.json" >"$OUT/train-timeline.json.gz"
cp "$W/summary.json" "$OUT/train-timeline-summary.json"
say "result: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
