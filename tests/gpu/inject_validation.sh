#!/usr/bin/env bash
# The GPU proof of fault injection (docs/inject.md), from the repo root of a machine with an
# NVIDIA GPU, PyTorch and NCCL:
#
#     bash tests/gpu/inject_validation.sh
#
# Each case runs tests/gpu/inject_torch.py under `shimgen run --inject RULE` and prints the
# command, what the program did (its RESULT lines) and the report's line for the injected
# function, ready to paste into docs/inject.md ("On the H200"):
#   1. PyTorch, cuMemAlloc_v2=CUDA_ERROR_OUT_OF_MEMORY,nth=3 (PyTorch's allocator may retry
#      a failed cudaMalloc once after freeing its cache: the line says what it did), then
#      after=2,times=2 (the retry fails too): an OutOfMemoryError caught, the script goes on;
#   2. PyTorch, cuLaunchKernel*=CUDA_ERROR_LAUNCH_FAILED,nth=5: the error torch raises;
#   3. NCCL, one rank (torch.distributed, nccl backend): first a run without a rule shows
#      which of cuMemCreate, cuMemAlloc_v2, cuStreamSynchronize the job calls; then one call
#      of the first it calls fails (nth=1).
# A case passes when the program survived (exit 0, "reached its end") and the report counts
# the injected failures. Logs and run directories in $OUT (default ./gpu-out). Exit 0 only
# when every case passed.
set -u -o pipefail
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. tests/gpu/common.sh inject
export XDG_CACHE_HOME=$OUT/xdg-inject
rm -rf "$OUT"/inject-*
SG=(python3 -m shimgen run --driver "$DRIVER")
PROG=tests/gpu/inject_torch.py

# case NAME MODE MIN_INJECTED RULE [MUST_SEE]: run, print, check
case_run() {
  local name=$1 mode=$2 min=$3 rule=$4 must=${5:-}
  local dir=$OUT/inject-$name
  say "case $name: ${SG[*]} --inject '$rule' -o $dir -- python3 $PROG $mode"
  timeout 600 "${SG[@]}" --inject "$rule" -o "$dir" -- python3 "$PROG" "$mode" \
    >"$dir.out" 2>"$dir.err"
  local rc=$?
  grep '^RESULT ' "$dir.out" | sed 's/^RESULT /   program: /' | tee -a "$LOG"
  local fn=${rule%%=*}
  python3 -m shimgen report "$dir" >"$dir.report" 2>&1
  sed -n '/^injected failures/,/^$/p' "$dir.report" | sed 's/^/   report: /' | tee -a "$LOG"
  local got
  got=$(python3 -m shimgen report --json "$dir" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(sum(r["count"] for g in d["groups"] for r in g["injected"]))')
  say "case $name: exit $rc, $got injected"
  if [ $rc -ne 0 ] || ! grep -q '^RESULT the program reached its end' "$dir.out"; then
    say "FAIL case $name: the program did not survive (exit $rc; $dir.err)"; fail=1
  elif [ "${got:-0}" -lt "$min" ]; then
    say "FAIL case $name: fewer than $min injected failures of $fn"; fail=1
  elif [ -n "$must" ] && ! grep -q "$must" "$dir.out"; then
    say "FAIL case $name: the program did not see: $must"; fail=1
  else
    say "PASS case $name"
  fi
}

say "driver $DRIVER; $(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))')"

case_run oom-nth3 oom 1 "cuMemAlloc_v2=CUDA_ERROR_OUT_OF_MEMORY,nth=3"
case_run oom-retry oom 2 "cuMemAlloc_v2=CUDA_ERROR_OUT_OF_MEMORY,after=2,times=2" \
  "OutOfMemoryError caught"
case_run launch launch 1 "cuLaunchKernel*=CUDA_ERROR_LAUNCH_FAILED,nth=5" " caught: "

# NCCL: which of the candidates the one-rank job calls, from a run without a rule
base=$OUT/inject-nccl-base
"${SG[@]}" --trace counts -o "$base" -- python3 "$PROG" nccl >"$base.out" 2>"$base.err" || \
  { say "FAIL the NCCL job without a rule (see $base.err)"; fail=1; }
pick=$(python3 -m shimgen report --json "$base" | python3 -c '
import json, sys
d = json.load(sys.stdin)
calls = {r["function"]: r["calls"] for g in d["groups"] for r in g["functions"]}
for f in ("cuMemCreate", "cuMemAlloc_v2", "cuStreamSynchronize", "cuStreamSynchronize_ptsz"):
    if calls.get(f):
        print(f, calls[f]); break')
say "NCCL job without a rule: $(grep '^RESULT ' "$base.out" | tail -1); first candidate called: ${pick:-none}"
if [ -n "$pick" ]; then
  case_run nccl nccl 1 "${pick%% *}=CUDA_ERROR_OUT_OF_MEMORY,nth=1"
else
  say "FAIL the NCCL job calls none of cuMemCreate, cuMemAlloc_v2, cuStreamSynchronize"; fail=1
fi

[ $fail -eq 0 ] && say "PASS inject validation" || say "FAIL inject validation"
exit $fail
