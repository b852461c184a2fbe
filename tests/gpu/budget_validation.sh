#!/bin/bash
# The GPU proof of one memory budget for many processes (docs/memory.md, "One budget for
# many processes"), from the repository root of a machine with an NVIDIA GPU and PyTorch:
#   1. the baseline: the device's use with 4 idle PyTorch contexts of the group;
#   2. 4 PyTorch workers of random allocations and frees for STRESS_SECONDS (default 20)
#      under one `shimgen run --limit-group G --limit job-memory=20GiB`, while a process
#      outside the shim samples the device's use (torch.cuda.mem_get_info) every 50 ms: its
#      most never past 20 GiB and the 4 contexts' own (and SLACK_MIB, default 32, for the
#      kernels a context loads at their first use);
#   3. a process of the group holding 12 GiB killed by SIGKILL: another's 12 GiB, refused
#      while it held them, made within a second (timestamps);
#   4. `nvidia-smi --query-gpu=memory.total,memory.used` inside `shimgen run --limit-group G`
#      shows 20 GiB as the total (20480 MiB), and the compute processes of a holder.
# The checks of 1-3 are tests/gpu/budget_workers.py (DRY=1 runs its flow without a GPU).
# Some 2 minutes. Run: bash tests/gpu/budget_validation.sh   (OUT=dir for the output)
set -u
. tests/gpu/common.sh budget
export PYTHONUNBUFFERED=1 XDG_CACHE_HOME=$OUT/xdg
G=$OUT/budget-group
rm -rf "$G" "$OUT"/run-*
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader \
  | tee -a "$LOG"
say "0. the group made (its size 20 GiB), the shims built into the cache"
python3 -m shimgen run -o "$OUT/run-make" --limit-group "$G" --limit job-memory=20GiB -- true \
  2>&1 | tee -a "$LOG"
say "1-3. baseline, 4 workers sampled from outside, a holder killed"
python3 tests/gpu/budget_workers.py validate "$G" "$OUT" 2>&1 | tee -a "$LOG"
[ "${PIPESTATUS[0]}" = 0 ] || fail=1
say "4. nvidia-smi inside the group's run"
smi=$(python3 -m shimgen run -o "$OUT/run-smi" --limit-group "$G" -- \
  nvidia-smi --query-gpu=memory.total,memory.used --format=csv,noheader,nounits 2>&1)
echo "$smi" | tee -a "$LOG"
total=$(echo "$smi" | grep -E '^[0-9]+, *[0-9]+$' | head -1 | cut -d, -f1)
if [ "$total" = 20480 ]; then
  echo "PASS nvidia-smi under the group shows 20 GiB as total" | tee -a "$LOG"
else
  echo "FAIL nvidia-smi under the group shows ${total:-nothing} MiB as total, not 20480" \
    | tee -a "$LOG"; fail=1
fi
python3 -m shimgen run -o "$OUT/run-hold" --limit-group "$G" -- \
  python3 tests/gpu/budget_workers.py hold 3 >"$OUT/hold.out" 2>&1 &
for _ in $(seq 100); do grep -q HOLDING "$OUT/hold.out" && break; sleep 0.2; done
holder=$(awk '/^HOLDING/ {print $2}' "$OUT/hold.out")
python3 -m shimgen run -o "$OUT/run-smi-apps" --limit-group "$G" -- \
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>&1 \
  | tee "$OUT/apps.out" | tee -a "$LOG"
if grep -qE "^${holder:-none}, *3072$" "$OUT/apps.out"; then
  echo "PASS nvidia-smi's compute processes: the holder $holder with its 3072 MiB" | tee -a "$LOG"
else
  echo "FAIL nvidia-smi's compute processes: no line '${holder:-?}, 3072'" | tee -a "$LOG"; fail=1
fi
[ -n "$holder" ] && kill -9 "$holder"
wait
say "budget validation: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
