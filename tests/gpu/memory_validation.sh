#!/usr/bin/env bash
# The GPU proof of the device memory ledger and `--limit memory` (docs/memory.md), from the
# repository root of a machine with an NVIDIA GPU, PyTorch, JAX, CuPy and NCCL, with
# shimgen importable (PYTHONPATH):
#
#     bash tests/gpu/memory_validation.sh          (ONLY=pools: the pool and graph runs alone)
#
# Each workload of tests/gpu/memory_workloads.py under `shimgen run`: PyTorch (its default
# allocator, then PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), JAX (no preallocation),
# CuPy, NCCL (a single-process all-reduce): the ledger's bytes against the memory really
# taken (cuMemGetInfo before and after), and the report's `memory` object; then PyTorch and
# JAX under --limit memory=2GiB. Results in $OUT (default ./gpu-out): memory.log, each
# run's directory and its report JSON, results.jsonl.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export XDG_CACHE_HOME=$OUT/xdg
LOG=$OUT/memory.log; : >"$LOG"; : >"$OUT/results.jsonl"
say() { echo "== $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$LOG"
one() { # NAME [ENV=V ...] -- [shimgen run options] : runs one workload, keeps its lines
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift; local work=$1; shift
  local dir=$OUT/run-$name
  rm -rf "$dir"
  env "${envs[@]}" timeout 75 python3 -m shimgen run -o "$dir" "$@" -- \
    python3 tests/gpu/memory_workloads.py "$work" >"$OUT/$name.out" 2>"$OUT/$name.err"
  say "$name: exit $?"
  grep '^RESULT ' "$OUT/$name.out" | sed "s/^RESULT {/{\"name\": \"$name\", /" \
    | tee -a "$OUT/results.jsonl" | tee -a "$LOG"
  python3 -m shimgen report --json "$dir" >"$OUT/$name.report.json" 2>>"$OUT/$name.err"
  python3 - "$OUT/$name.report.json" <<'PY' | tee -a "$LOG"
import json, sys
g = json.load(open(sys.argv[1]))["groups"]
m = g[0]["memory"] if g else None
calls = {f["function"]: f["calls"] for f in g[0]["functions"]} if g else {}
routes = {k: v for k, v in calls.items() if k.startswith(("cuMem", "cuArray"))}
print("   report:", json.dumps({k: m[k] for k in ("peak_bytes", "at_exit_bytes", "by_function",
      "leaked", "limit_bytes", "refused", "untracked", "reserved_peak_bytes", "reserved")}
      if m else None))
print("   routes:", json.dumps(routes))
PY
  tail -3 "$OUT/$name.err" | sed 's/^/   stderr: /' | tee -a "$LOG"
}
# Pools and graphs (the ledger's reservations): ONLY=pools runs these alone.
one torch-pool PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync -- torch-pool
one torch-graph PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync -- torch-graph
one cupy-pool -- cupy-pool
one cupy-graph -- cupy-graph
one torch-pool-limit PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync -- torch-limit --limit memory=2GiB
if [ "${ONLY:-}" != pools ]; then
one torch-default -- torch
one torch-expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- torch
one jax XLA_PYTHON_CLIENT_PREALLOCATE=false -- jax
one cupy -- cupy
one nccl -- nccl
one torch-limit -- torch-limit --limit memory=2GiB
one torch-limit-expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- torch-limit --limit memory=2GiB
one torch-plain -- torch-limit
one jax-limit -- jax-limit --limit memory=2GiB
fi
say "done"
