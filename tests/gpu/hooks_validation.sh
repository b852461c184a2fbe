#!/usr/bin/env bash
# The GPU proof of user hooks, from the repo root of a machine with an NVIDIA GPU and PyTorch:
#
#     bash tests/gpu/hooks_validation.sh
#
# examples/hooks/memlimit.c at SHIMGEN_MEMLIMIT=2GiB under `shimgen run --hook`: PyTorch's
# torch.cuda.mem_get_info() reports a 2 GiB total (free at most that), a 1.5 GiB tensor is
# allocated, a 3 GiB one raises torch.cuda.OutOfMemoryError; the same with
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (cuMemCreate, cuMemRelease); without the
# hook the 3 GiB allocation works. Also examples/hooks/launchlog.c logs the launches of a
# small PyTorch step. Prints the lines for docs/hooks.md. Logs in $OUT (default ./gpu-out):
# hooks.log and the run directories. Exit 0 only when everything passed.
set -u -o pipefail
export PYTHONUNBUFFERED=1
. tests/gpu/common.sh hooks
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export XDG_CACHE_HOME=$OUT/xdg
rm -rf "$XDG_CACHE_HOME" "$OUT"/hooks-run-*
GIB=$((1 << 30))
SG=(python3 -m shimgen run --driver "$DRIVER")
check() { # NAME FILE PATTERN: PASS when FILE has a line matching PATTERN
  if grep -Eq "$3" "$2"; then say "PASS $1"; else say "FAIL $1 (no line /$3/ in $2)"; fail=1; fi
}
show() { sed 's/^/    /' "$1" | tee -a "$LOG"; }

say "driver $DRIVER; torch $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)')"

say "without the shim"
python3 tests/gpu/memlimit_check.py >"$OUT/hooks-plain.txt" 2>&1 || { say "FAIL the plain run"; fail=1; }
show "$OUT/hooks-plain.txt"
check "without the hook: 3 GiB works" "$OUT/hooks-plain.txt" '^ALLOC 3GiB ok$'

for conf in default expandable; do
  extra=(); [ $conf = expandable ] && extra=(env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
  run=$OUT/hooks-run-$conf
  say "memlimit.c, SHIMGEN_MEMLIMIT=2GiB, allocator $conf"
  SHIMGEN_MEMLIMIT=2GiB "${SG[@]}" --hook examples/hooks/memlimit.c -o "$run" -- \
    "${extra[@]}" python3 tests/gpu/memlimit_check.py >"$run.txt" 2>"$run.err"
  rc=$?; say "exit $rc; $(head -1 "$run.err")"
  [ $rc -eq 0 ] || { say "FAIL memlimit run ($conf) exit $rc"; fail=1; }
  show "$run.txt"
  check "$conf: mem_get_info total is 2 GiB" "$run.txt" "^MEM_GET_INFO total $((2 * GIB)) "
  total=$(sed -n 's/^MEM_GET_INFO total \([0-9]*\) free \([0-9]*\)$/\1 \2/p' "$run.txt")
  set -- $total
  if [ "${1:-0}" = $((2 * GIB)) ] && [ "${2:-$((3 * GIB))}" -le $((2 * GIB)) ]; then
    say "PASS $conf: total $1, free $2 (at most the limit)"
  else say "FAIL $conf: mem_get_info total ${1:-none} free ${2:-none}"; fail=1; fi
  check "$conf: 1.5 GiB works" "$run.txt" '^ALLOC 1.5GiB ok$'
  check "$conf: 3 GiB raises OutOfMemoryError" "$run.txt" '^ALLOC 3GiB OutOfMemoryError$'
  check "$conf: the limit is said in the notices" "$run/notices.log" \
    'shimgen: hook: memlimit: device memory limited to 2147483648 bytes'
  if [ $conf = expandable ]; then
    python3 -m shimgen report "$run" >"$run.report" 2>&1
    check "expandable: cuMemCreate was called (and counted)" "$run.report" 'cuMemCreate'
  fi
done

say "launchlog.c: a small PyTorch step"
run=$OUT/hooks-run-launchlog
SHIMGEN_LAUNCHLOG_MAX=20 "${SG[@]}" --hook examples/hooks/launchlog.c -o "$run" -- python3 -c \
  'import torch; x = torch.randn(512, 512, device="cuda"); (x @ x).relu().sum().item(); print("STEP ok")' \
  >"$run.txt" 2>"$run.err" || { say "FAIL launchlog run"; fail=1; }
check "launchlog: the step ran" "$run.txt" '^STEP ok$'
check "launchlog: launches logged with grid and block" "$run/notices.log" \
  'launchlog: cuLaunchKernel(_ptsz)? #1 grid [0-9]+x[0-9]+x[0-9]+ block [0-9]+x[0-9]+x[0-9]+'
grep -m5 'launchlog:' "$run/notices.log" | sed 's/^/    /' | tee -a "$LOG"

if [ $fail -eq 0 ]; then say "hooks validation: all PASS"; else say "hooks validation: FAIL"; fi
exit $fail
