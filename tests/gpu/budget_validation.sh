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
#      shows 20 GiB as the total (20480 MiB); NVML's compute processes (the public
#      nvmlDeviceGetComputeRunningProcesses_v3) give a holder its 3 GiB of the books
#      (nvidia-smi's own list, read through NVML's internal export table, is shown as it is).
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
# nvidia-smi's list of compute processes is shown as it is: nvidia-smi asks it through NVML's
# internal export table (nvmlInternalGetExportTable), which the NVML shim forwards untouched,
# so it has the driver's numbers (a context's own memory included). The check is of NVML's
# public function, as pynvml and the frameworks ask it.
python3 -m shimgen run -o "$OUT/run-smi-apps" --limit-group "$G" -- \
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>&1 \
  | tee "$OUT/apps.out" | tee -a "$LOG"
python3 -m shimgen run -o "$OUT/run-nvml-apps" --limit-group "$G" -- python3 - \
  >"$OUT/nvml-apps.out" 2>&1 <<'PY'
import ctypes
nvml = ctypes.CDLL("libnvidia-ml.so.1")
nvml.nvmlInit_v2()
dev = ctypes.c_void_p()
nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev))
class Proc(ctypes.Structure):  # nvmlProcessInfo_t of the _v3 function
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                ("gpu_instance", ctypes.c_uint), ("compute_instance", ctypes.c_uint)]
count, procs = ctypes.c_uint(64), (Proc * 64)()
rc = nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(count), procs)
print("rc", rc)
for p in procs[:count.value]:
    print(f"{p.pid}, {p.used >> 20}")
PY
cat "$OUT/nvml-apps.out" | tee -a "$LOG"
if grep -qE "^${holder:-none}, *3072$" "$OUT/nvml-apps.out"; then
  echo "PASS NVML's compute processes: the holder $holder with its 3072 MiB" | tee -a "$LOG"
else
  echo "FAIL NVML's compute processes: no line '${holder:-?}, 3072'" | tee -a "$LOG"; fail=1
fi
[ -n "$holder" ] && kill -9 "$holder"
wait
say "budget validation: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
