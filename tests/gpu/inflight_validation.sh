#!/usr/bin/env bash
# GPU proof of what a job is doing now (docs/validation.md, "In flight"):
#  1. A kernel that spins (torch.cuda._sleep) and a synchronize that waits for it, under
#     `shimgen run --stall 5`: the stall line; `shimgen top --once`; the report while it
#     hangs (running, in flight inside the synchronize); SIGKILL; the report after it
#     (died inside the synchronize after N s); `top --once --json`.
#  2. `torchrun --nproc-per-node 2`: rank 0 waits in the driver on its spinning kernel, rank
#     1 sleeps in Python: report --by rank and top --once say which rank waits where.
# Run from the repository root:  bash tests/gpu/inflight_validation.sh   (results in $OUT)
set -uo pipefail
. tests/gpu/common.sh inflight
R=$OUT/runs; rm -rf "$R"; mkdir -p "$R"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/shimgen-cache}
say "driver $DRIVER"
pids_of() { python3 -c 'import json,sys; print(" ".join(str(c["pid"]) for c in json.load(sys.stdin)["processes"] if c["state"]=="running"))'; }

say "1. one process: a spinning kernel, then torch.cuda.synchronize, under run --stall 5"
python3 -m shimgen run --driver "$DRIVER" --stall 5 -o "$R/hang" -- python3 tests/gpu/hang.py 120 \
  >"$OUT/hang.out" 2>"$OUT/hang.err" &
RUNPID=$!
for i in $(seq 1 120); do grep -q synchronizing "$OUT/hang.out" 2>/dev/null && break; sleep 1; done
sleep 12
say "1a. the stall notice (run --stall 5), on stderr"
grep "has been inside" "$OUT/hang.err" | tee -a "$LOG"
say "1b. shimgen top --once $R/hang"
python3 -m shimgen top --once "$R/hang" 2>&1 | tee -a "$LOG"
say "1c. shimgen report $R/hang (while it hangs)"
python3 -m shimgen report "$R/hang" 2>&1 | head -30 | tee -a "$LOG"
P=$(python3 -m shimgen top --once --json "$R/hang" | pids_of)
say "1d. kill -KILL $P"
kill -KILL $P
wait $RUNPID
say "1e. shimgen report $R/hang (after SIGKILL)"
python3 -m shimgen report "$R/hang" 2>&1 | head -30 | tee -a "$LOG"
say "1f. shimgen top --once --json $R/hang (after SIGKILL)"
python3 -m shimgen top --once --json "$R/hang" 2>&1 | tee "$OUT/hang-top.json" | head -40 | tee -a "$LOG"
grep -q "died inside cuCtxSynchronize" <(python3 -m shimgen report "$R/hang") || { say "FAIL no died inside"; fail=1; }

say "2. torchrun --nproc-per-node 2: rank 0 waits in the driver, rank 1 sleeps in Python"
python3 -m shimgen run --driver "$DRIVER" --stall 5 -o "$R/two" -- \
  torchrun --nproc-per-node 2 tests/gpu/hang.py 120 python >"$OUT/two.out" 2>"$OUT/two.err" &
RUNPID=$!
for i in $(seq 1 120); do grep -q synchronizing "$OUT/two.out" 2>/dev/null && break; sleep 1; done
sleep 10
say "2a. shimgen top --once $R/two"
python3 -m shimgen top --once "$R/two" 2>&1 | tee -a "$LOG"
say "2b. shimgen report --by rank $R/two"
python3 -m shimgen report --by rank "$R/two" 2>&1 | grep -v "^ *[0-9.]* *[0-9.]* *[0-9]* *[0-9]" | head -60 | tee -a "$LOG"
python3 -m shimgen report --json "$R/two" >"$OUT/two.json"
P=$(python3 -m shimgen top --once --json "$R/two" | pids_of)
say "2c. kill -KILL $P"
kill -KILL $P
wait $RUNPID
say "2d. stall lines of run --stall 5"
grep "has been inside\|left " "$OUT/two.err" | tee -a "$LOG"
say "done (fail=$fail)"
exit $fail
