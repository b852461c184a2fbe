#!/usr/bin/env bash
# The GPU proof of `shimgen run`, from the repo root of a machine with an NVIDIA GPU:
#
#     bash tests/gpu/run_command_validation.sh
#
# With a fresh shim cache ($OUT/xdg): the PyTorch training loop (tests/gpu/train.py) without
# the shim, then under `shimgen run` (the first run builds the shim, the second finds it
# cached), each with the same FINAL_LOSS and PARAM_SUM; `--trace time` and `--trace timeline`
# (one Chrome trace per process in the run directory's timeline/); `--gates -gdr,-dmabuf`
# (a gated shim built beside the plain one, the gates in effect); a SIGTERM sent to `run` in
# the middle of a long loop reaches the job, and `run` exits 143 with run.json saying so.
# Logs in $OUT (default ./gpu-out): run_command.log and the run directories. Exit 0 only when
# everything passed.
set -u -o pipefail
export PYTHONUNBUFFERED=1
. tests/gpu/common.sh run_command
export XDG_CACHE_HOME=$OUT/xdg TRAIN_STEPS=${TRAIN_STEPS:-60}
rm -rf "$XDG_CACHE_HOME" "$OUT"/run-*
SG=(python3 -m shimgen run --driver "$DRIVER")
result() { grep -E '^(FINAL_LOSS|PARAM_SUM) ' "$1"; }
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

say "driver $DRIVER; train.py, $TRAIN_STEPS steps, without the shim"
python3 tests/gpu/train.py >"$OUT/plain.txt" 2>&1 || { say "FAIL the plain run"; fail=1; }

for n in 1 2; do
  "${SG[@]}" -o "$OUT/run-$n" -- python3 tests/gpu/train.py >"$OUT/run-$n.txt" 2>"$OUT/run-$n.err"
  rc=$?; banner=$(head -1 "$OUT/run-$n.err")
  say "run $n: exit $rc; $banner"
  [ $rc -eq 0 ] || { say "FAIL run $n exit $rc"; fail=1; }
  want=$([ $n -eq 1 ] && echo "built in" || echo "(cached)")
  case "$banner" in *"$want"*) ;; *) say "FAIL run $n: the banner does not say $want"; fail=1;; esac
  if [ "$(result "$OUT/plain.txt")" != "$(result "$OUT/run-$n.txt")" ] || \
     [ -z "$(result "$OUT/plain.txt")" ]; then say "FAIL run $n: results differ"; fail=1; fi
  [ "$(field "$OUT/run-$n/run.json" 'd["exit"]["status"]')" = 0 ] || \
    { say "FAIL run $n: run.json exit"; fail=1; }
  say "run $n: traces/ holds $(ls "$OUT/run-$n/traces" | wc -l) files; notices: $(wc -l <"$OUT/run-$n/notices.log") lines"
done

for mode in time timeline; do
  "${SG[@]}" --trace $mode -o "$OUT/run-$mode" -- python3 tests/gpu/train.py \
    >"$OUT/run-$mode.txt" 2>"$OUT/run-$mode.err" || { say "FAIL --trace $mode"; fail=1; }
  [ "$(result "$OUT/plain.txt")" = "$(result "$OUT/run-$mode.txt")" ] || \
    { say "FAIL --trace $mode: results differ"; fail=1; }
done
tl=$(ls "$OUT"/run-timeline/timeline/*.json 2>/dev/null | wc -l)
say "--trace timeline: $tl timeline files"
[ "$tl" -ge 1 ] || { say "FAIL no timeline file in run-timeline/timeline/"; fail=1; }

"${SG[@]}" --gates -gdr,-dmabuf -o "$OUT/run-gates" -- python3 -m shimgen probe --child \
  >"$OUT/run-gates.txt" 2>"$OUT/run-gates.err"
rc=$?; say "--gates -gdr,-dmabuf: exit $rc; $(head -1 "$OUT/run-gates.err")"
[ $rc -eq 0 ] || { say "FAIL --gates run exit $rc"; fail=1; }
grep -qh "SHIMGEN_GATES=-gdr,-dmabuf armed" "$OUT/run-gates.err" "$OUT/run-gates/notices.log" \
  || { say "FAIL the gates are not said to be armed"; fail=1; }
[ "$(ls -d "$XDG_CACHE_HOME"/shimgen/shims/*/ | wc -l)" -eq 2 ] || \
  { say "FAIL the plain and the gated shim are not both in the cache"; fail=1; }

TRAIN_STEPS=1000000 "${SG[@]}" -o "$OUT/run-sigterm" -- python3 tests/gpu/train.py \
  >"$OUT/run-sigterm.txt" 2>"$OUT/run-sigterm.err" &
pid=$!
sleep 20; kill -TERM $pid; wait $pid; rc=$?
sig=$(field "$OUT/run-sigterm/run.json" 'd["exit"]["signal"]')
say "SIGTERM to run after 20 s: exit $rc, run.json signal $sig"
[ $rc -eq 143 ] && [ "$sig" = 15 ] || { say "FAIL SIGTERM was not passed on as it should"; fail=1; }

[ $fail -eq 0 ] && say "RESULT PASS" || say "RESULT FAIL"
exit $fail
