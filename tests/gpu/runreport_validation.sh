#!/usr/bin/env bash
# GPU proof of `shimgen run` and `shimgen report` (strict: any mismatch fails the run):
#  1. PyTorch training under `shimgen run`: its counts equal those of a JSON-trace run of
#     the same script under LD_PRELOAD, function by function.
#  2. The DMA-BUF loader (tests/gpu/dmabuf_loader.c) under `shimgen run --trace time`, plain
#     and with --gates -gdr,-dmabuf: the masked run's errors section has
#     cuMemGetHandleForAddressRange 801 CUDA_ERROR_NOT_SUPPORTED, and `shimgen report` of
#     the two runs shows exactly that error as what changed.
#  3. A PyTorch job killed with SIGKILL mid-training: run exits 137 and its run directory
#     gives a readable report that says the process died.
#  4. With two GPUs: torchrun with two ranks (the NCCL all-reduce worker of
#     benchmarks/allreduce.py, its result checked) under `shimgen run`; `report --by rank`
#     gives ranks 0 and 1, each with its kernel launches.
# Run from the repository root:  bash tests/gpu/runreport_validation.sh   (results in $OUT)
set -uo pipefail
. tests/gpu/common.sh runreport
R=$OUT/runs; rm -rf "$R"; mkdir -p "$R"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/shimgen-cache}
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
say "driver $DRIVER, $ngpu GPUs"

say "1. train.py under shimgen run (counts), and under LD_PRELOAD with a JSON trace"
export TRAIN_STEPS=100
/usr/bin/time -f "first run (builds the shim) wall %e s" python3 -m shimgen run --driver "$DRIVER" \
  -o "$R/train" -- python3 tests/gpu/train.py >"$OUT/train-run.txt" 2>&1 \
  || { say "FAIL shimgen run train.py"; fail=1; }
tail -3 "$OUT/train-run.txt" | tee -a "$LOG"
SHIM=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["shim"]["path"])' \
  "$R/train/run.json" 2>/dev/null)
[ -f "$SHIM" ] || { say "FAIL no shim path in run.json"; say "RESULT FAIL"; exit 1; }
say "shim $SHIM"
rm -f "$OUT"/train-json.*.json
LD_PRELOAD=$SHIM SHIMGEN_TRACE=1 SHIMGEN_TRACE_FILE="$OUT/train-json.%p.json" \
  python3 tests/gpu/train.py >"$OUT/train-json.txt" 2>&1 || { say "FAIL JSON-trace run"; fail=1; }
python3 -m shimgen report --json "$R/train" >"$OUT/train-run.json" \
  && python3 -m shimgen report --json "$OUT"/train-json.*.json >"$OUT/train-json.json" \
  || { say "FAIL shimgen report of the train runs"; fail=1; }
python3 - "$OUT/train-run.json" "$OUT/train-json.json" <<'PY' 2>&1 | tee -a "$LOG" || fail=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ca = {f["function"]: f["calls"] for f in a["groups"][0]["functions"]}
cb = {f["function"]: f["calls"] for f in b["groups"][0]["functions"]}
diff = {k: (ca.get(k), cb.get(k)) for k in set(ca) | set(cb) if ca.get(k) != cb.get(k)}
print(f"run: {sum(ca.values())} calls to {len(ca)} functions; JSON trace: "
      f"{sum(cb.values())} calls to {len(cb)} functions; different: {len(diff)}")
for k, v in sorted(diff.items()):
    print(f"  {k}: run {v[0]} json {v[1]}")
launches = sum(v for k, v in ca.items() if k.startswith("cuLaunchKernel"))
print(f"kernel launches in the run's trace: {launches}")
sys.exit(1 if diff or launches == 0 or not ca else 0)
PY
[ "${PIPESTATUS[0]}" -eq 0 ] && say "train counts: equal" || { say "FAIL train counts differ"; fail=1; }
grep -q "^FINAL_LOSS" "$OUT/train-run.txt" || { say "FAIL train.py under run did not finish"; fail=1; }

say "cached: a second run builds nothing"
/usr/bin/time -f "second run wall %e s" python3 -m shimgen run --driver "$DRIVER" -o "$R/true" \
  -- /bin/true >"$OUT/true-run.txt" 2>&1 || { say "FAIL run /bin/true"; fail=1; }
tail -1 "$OUT/true-run.txt" | tee -a "$LOG"

say "2. DMA-BUF loader: plain and masked (--gates -gdr,-dmabuf), --trace time"
cc -O2 -o "$OUT/dmabuf_loader" tests/gpu/dmabuf_loader.c -ldl || { say "FAIL cc"; fail=1; }
python3 -m shimgen run --driver "$DRIVER" --trace time -o "$R/base" -- "$OUT/dmabuf_loader" \
  >"$OUT/base.txt" 2>&1 || { say "FAIL run base"; fail=1; }
python3 -m shimgen run --driver "$DRIVER" --trace time --gates -gdr,-dmabuf -o "$R/masked" \
  -- "$OUT/dmabuf_loader" >"$OUT/masked.txt" 2>&1 || { say "FAIL run masked"; fail=1; }
grep -E "^(attribute|dmabuf)" "$OUT/base.txt" "$OUT/masked.txt" | tee -a "$LOG"
grep -q "^dmabuf export rc 0 fd valid" "$OUT/base.txt" || { say "FAIL base export"; fail=1; }
grep -q "^dmabuf export rc 801" "$OUT/masked.txt" || { say "FAIL masked export not 801"; fail=1; }
for a in 110 116 124; do
  grep -q "^attribute $a = 1 " "$OUT/base.txt" || { say "FAIL base attribute $a"; fail=1; }
  grep -q "^attribute $a = 0 " "$OUT/masked.txt" || { say "FAIL masked attribute $a"; fail=1; }
done
python3 -m shimgen report "$R/masked" >"$OUT/report-masked.txt" 2>&1 || fail=1
grep -E "cuMemGetHandleForAddressRange +801 +CUDA_ERROR_NOT_SUPPORTED +1" "$OUT/report-masked.txt" \
  | tee -a "$LOG" | grep -q . || { say "FAIL errors section lacks the 801"; fail=1; }
python3 -m shimgen report "$R/base" "$R/masked" >"$OUT/report-compare.txt" 2>&1 || fail=1
python3 -m shimgen report --json "$R/base" "$R/masked" >"$OUT/report-compare.json" 2>&1 || fail=1
cat "$OUT/report-compare.txt" >>"$LOG"
python3 - "$OUT/report-compare.json" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
c = json.load(open(sys.argv[1]))
errs = [e for e in c["errors"] if e.get("count_a") != e.get("count_b")]
print("errors that changed:", json.dumps(errs))
want = [e for e in errs if e["function"] == "cuMemGetHandleForAddressRange" and e["code"] == 801]
calls = [f for f in c["functions"] if f.get("calls_a") != f.get("calls_b")]
print("functions whose calls changed:", [f["function"] for f in calls])
ok = len(errs) == 1 and len(want) == 1 and not calls
print("compare: exactly the 801 changed" if ok else "compare: FAIL")
sys.exit(0 if ok else 1)
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || { say "FAIL compare"; fail=1; }

say "3. PyTorch killed with SIGKILL mid-training"
TRAIN_STEPS=100000 python3 -m shimgen run --driver "$DRIVER" -o "$R/killed" \
  -- python3 tests/gpu/train.py >"$OUT/killed.txt" 2>&1 &
runpid=$!
for _ in $(seq 60); do ls "$R"/killed/traces/*.shimtrace >/dev/null 2>&1 && break; sleep 1; done
sleep 15
child=$(pgrep -P "$runpid" | head -1)
say "killing python pid $child with SIGKILL"
kill -KILL "$child"
wait "$runpid"; rc=$?
say "run exit status $rc"
[ "$rc" -eq 137 ] || { say "FAIL run exit status $rc, expected 137"; fail=1; }
python3 -m shimgen report "$R/killed" >"$OUT/report-killed.txt" 2>&1 \
  || { say "FAIL report of the killed run"; fail=1; }
head -12 "$OUT/report-killed.txt" | tee -a "$LOG"
grep -qi "died" "$OUT/report-killed.txt" || { say "FAIL the report does not say it died"; fail=1; }
grep -qE "cuLaunchKernel" "$OUT/report-killed.txt" || { say "FAIL no launches in the killed run"; fail=1; }

if [ "$ngpu" -ge 2 ]; then
  say "4. torchrun, two ranks, under shimgen run; report --by rank"
  TR=$(command -v torchrun || echo "python3 -m torch.distributed.run")
  rm -rf "$OUT/ddp-work"; mkdir -p "$OUT/ddp-work"
  # shellcheck disable=SC2086
  python3 -m shimgen run --driver "$DRIVER" -o "$R/ddp" -- $TR --standalone --nproc_per_node=2 \
    --module benchmarks.allreduce --worker --out "$OUT/ddp-work" --sizes 16777216 --reps 5 \
    --warmup 2 --pin 0 >"$OUT/ddp.txt" 2>&1 || { say "FAIL run torchrun"; fail=1; }
  for r in 0 1; do
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d["check"] != "ok")' \
      "$OUT/ddp-work/rank$r.json" && say "rank $r all-reduce check ok" \
      || { say "FAIL rank $r all-reduce check"; fail=1; }
  done
  python3 -m shimgen report --by rank --json "$R/ddp" >"$OUT/report-ddp.json" || fail=1
  python3 -m shimgen report --by rank "$R/ddp" >"$OUT/report-ddp.txt" 2>&1 || fail=1
  python3 - "$OUT/report-ddp.json" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
r = json.load(open(sys.argv[1]))
by = {g["group"]: g for g in r["groups"]}
ok = True
for rank in ("0", "1"):
    g = by.get(rank)
    launches = sum(f["calls"] for f in g["functions"] if f["function"].startswith("cuLaunch")) if g else 0
    print(f"rank {rank}: {'absent' if not g else str(g['processes']) + ' process(es)'}, launches {launches}")
    ok = ok and g is not None and launches > 0
print("groups:", sorted(map(str, by)))
sys.exit(0 if ok else 1)
PY
  [ "${PIPESTATUS[0]}" -eq 0 ] || { say "FAIL report --by rank"; fail=1; }
else
  say "4. skipped: one GPU here (torchrun with two ranks needs two)"
fi

[ "$fail" -eq 0 ] && say "RESULT PASS" || say "RESULT FAIL"
exit "$fail"
