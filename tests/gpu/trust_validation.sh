#!/usr/bin/env bash
# GPU proof of the report a user can trust (strict: any miss fails the run):
#  1. Short programs: 20 processes of 100 cuDriverGetVersion calls and no cuInit, each
#     under SHIMGEN_TRACE_DIR: every one has times, and its ticks-to-ns rate is within 0.5%
#     of that of a long process (tests/gpu/timedcalls.c).
#  2. Percentiles: cuInit and 400 host-to-device copies of 4 KiB to 64 MiB under
#     `shimgen run` (its default mode): p50, p90, p99 and max of each function within 3% of
#     the exact percentiles of CLOCK_MONOTONIC measured around the same calls.
#  3. Errors in the default mode: `shimgen run` of a program whose cuDeviceGet fails before
#     cuInit (3) and with a bad ordinal (101): both in the report's errors, by name.
#  4. Exec: 5 children that fork and exec a traced program (tests/c/spawnexec.c) under
#     `shimgen run`: 6 processes, 6 complete, 5 execs.
#  5. The timing path's cost: `python3 -m benchmarks --quick` on this driver.
# Run from the repository root:  bash tests/gpu/trust_validation.sh   (results in $OUT)
set -uo pipefail
. tests/gpu/common.sh trust
R=$OUT/runs; rm -rf "$R"; mkdir -p "$R"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/shimgen-cache}
B=$(mktemp -d /tmp/shimgen-trust.XXXXXX)
cc -O2 -o "$B/timedcalls" tests/gpu/timedcalls.c -ldl -lm || { say "FAIL compile"; exit 1; }
cc -O2 -o "$B/spawnexec" tests/c/spawnexec.c -ldl || { say "FAIL compile"; exit 1; }
say "driver $DRIVER"

say "2. cuInit and 400 copies under shimgen run (default mode)"
python3 -m shimgen run --driver "$DRIVER" -o "$R/copies" -- "$B/timedcalls" copies 400 7 \
  >"$OUT/copies.out" 2>"$OUT/copies.err" || { say "FAIL run copies"; fail=1; }
tail -25 "$OUT/copies.err" | tee -a "$LOG"
SHIM=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["shim"]["path"])' \
  "$R/copies/run.json")
python3 -m shimgen report --json "$R/copies" >"$OUT/copies.json" || fail=1
python3 - "$OUT/copies.out" "$OUT/copies.json" <<'PY' 2>&1 | tee -a "$LOG" || fail=1
import json, math, sys
calls = {}
for line in open(sys.argv[1]):
    _, fn, ns = line.split()
    calls.setdefault(fn, []).append(int(ns))
rows = {f["function"]: f for f in json.load(open(sys.argv[2]))["groups"][0]["functions"]}
bad = 0
for fn, vals in calls.items():
    s = sorted(vals)
    exact = {f"p{round(q * 100)}": s[max(math.ceil(q * len(s)) - 1, 0)] for q in (.5, .9, .99)}
    exact["max"] = s[-1]
    for k, want in exact.items():
        got = rows[fn][k + "_ns"]
        err = got / want - 1
        ok = abs(err) <= 0.03
        bad += not ok
        print(f"{fn:18} {k:4} exact {want / 1e3:12.3f} us report {got / 1e3:12.3f} us "
              f"error {100 * err:+.3f}% {'ok' if ok else 'FAIL'}")
sys.exit(1 if bad else 0)
PY

say "1. 20 short processes (no cuInit) and one long reference"
for i in $(seq 1 20); do
  LD_PRELOAD=$SHIM SHIMGEN_DRIVER=$DRIVER SHIMGEN_TRACE=time SHIMGEN_TRACE_DIR=$R/short \
    "$B/timedcalls" short 100 >/dev/null || fail=1
done
LD_PRELOAD=$SHIM SHIMGEN_DRIVER=$DRIVER SHIMGEN_TRACE=time SHIMGEN_TRACE_DIR=$R/long \
  sh -c '"$0" short 1 && sleep 2 && "$0" short 1' "$B/timedcalls" >/dev/null || fail=1
python3 - "$R/short" "$R/long" <<'PY' 2>&1 | tee -a "$LOG" || fail=1
import glob, sys
from shimgen.trace import binary as tracefile
# the reference rate: from the first reading of one process to the last of another that
# ran 2 s later (the same time-stamp counter)
a, b = sorted((tracefile.load(p) for p in glob.glob(sys.argv[2] + "/*.shimtrace")),
              key=lambda t: t.start_ns)
def hdr(p):
    return tracefile.header(p)
ha, hb = hdr(a.path), hdr(b.path)
ref = (hb["calib_ns1"] - ha["calib_ns0"]) / (hb["calib_ticks1"] - ha["calib_ticks0"])
print(f"reference {ref:.9f} ns per tick over {(hb['calib_ns1'] - ha['calib_ns0']) / 1e9:.2f} s")
errs, none = [], 0
for p in sorted(glob.glob(sys.argv[1] + "/*.shimtrace")):
    t = tracefile.load(p)
    f = t.functions["cuDriverGetVersion"]
    if t.ns_per_tick is None or f.total_ns is None:
        none += 1
        continue
    errs.append(t.ns_per_tick / ref - 1)
errs.sort()
print(f"short processes: {len(errs)} with times, {none} without; rate against the reference "
      f"min {100 * errs[0]:+.4f}% median {100 * errs[len(errs) // 2]:+.4f}% "
      f"max {100 * errs[-1]:+.4f}%")
sys.exit(0 if not none and len(errs) == 20 and max(map(abs, errs)) <= 0.005 else 1)
PY

say "3. errors in the default mode"
python3 -m shimgen run --driver "$DRIVER" -o "$R/errors" -- "$B/timedcalls" errors \
  >"$OUT/errors.out" 2>"$OUT/errors.err" || { say "FAIL run errors"; fail=1; }
cat "$OUT/errors.out" "$OUT/errors.err" | tee -a "$LOG"
grep -Eq "cuDeviceGet +3 +CUDA_ERROR_NOT_INITIALIZED" "$OUT/errors.err" \
  && grep -Eq "cuDeviceGet +101 +CUDA_ERROR_INVALID_DEVICE" "$OUT/errors.err" \
  || { say "FAIL errors not in the default report"; fail=1; }

say "4. 5 children that fork and exec a traced program"
python3 -m shimgen run --driver "$DRIVER" -o "$R/execs" -- "$B/spawnexec" execs libcuda.so.1 5 \
  >"$OUT/execs.out" 2>"$OUT/execs.err" || { say "FAIL run execs"; fail=1; }
head -12 "$OUT/execs.err" | tee -a "$LOG"
ls "$R/execs/traces" | wc -l | sed 's/^/trace files: /' | tee -a "$LOG"
python3 -m shimgen report --json "$R/execs" | python3 -c '
import json, sys
g = json.load(sys.stdin)["groups"][0]
print("processes", g["processes"], "complete", g["complete"], "execs", g["execs"])
sys.exit(0 if (g["processes"], g["complete"], g["execs"]) == (6, 6, 5) else 1)' 2>&1 \
  | tee -a "$LOG" || { say "FAIL exec counted"; fail=1; }

say "5. the timing path's cost on this driver"
timeout 300 python3 -m benchmarks --quick --drivers "$DRIVER" --pin 7 2>/dev/null \
  | tee "$OUT/bench-quick.txt" | grep -E "cuDriverGetVersion|rc 0|rc 3|count|time|clock floor" \
  | head -12 | tee -a "$LOG"

[ "$fail" = 0 ] && say "RESULT PASS" || say "RESULT FAIL"
exit "$fail"
