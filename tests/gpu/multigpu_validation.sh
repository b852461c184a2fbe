#!/usr/bin/env bash
# Multi-GPU proof (issue 6) on a machine with 2 or more GPUs, in one command from the
# repository root:
#   bash tests/gpu/multigpu_validation.sh            (results under $OUT or ./gpu-out)
# 1. installs carried wheels (.whl/*.whl) into /tmp/site;
# 2. builds the shim for the machine's driver into build/gpu-multi;
# 3. `shimgen probe --p2p` equivalent (shimgen.p2p.report_p2p): every GPU pair, attributes,
#    measured peer and host-bounce copies, without and with LD_PRELOAD of the shim;
# 4. benchmarks/allreduce.py: torchrun NCCL all-reduce 1 MiB..1 GiB, interleaved launches
#    without/with the shim (3 to 5 rounds within a time budget), plus one traced launch
#    whose per-rank trace files (SHIMGEN_TRACE_FILE=.../trace.%r.json) are checked;
# 5. prints a short summary last. $OUT gets 8 files: multigpu.log, build.txt, p2p.txt,
#    p2p.json, allreduce.txt, allreduce.json, summary.txt and allreduce-work.tar.gz (rank
#    JSON, launch logs, trace files). Exit status 0 only when everything passed.
# Takes about 4 minutes on 2 x H200; hard limits (timeouts) keep it under 9.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
LOG=$OUT/multigpu.log; : >"$LOG"
say() { echo "== $*" | tee -a "$LOG"; }
fail=0; why=()
bad() { say "FAIL $*"; fail=1; why+=("$*"); }
T0=$SECONDS

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 || bad "installing .whl wheels"
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
DRIVER=${DRIVER:-$(readlink -f /usr/local/nvidia/lib64/libcuda.so.1 2>/dev/null || readlink -f /lib/libcuda.so.1)}

say "machine"
{ nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  nvidia-smi topo -m; } >>"$LOG" 2>&1
python3 -c "import torch, cuda.bindings; print('torch', torch.__version__, 'cuda', \
torch.version.cuda, 'gpus', torch.cuda.device_count(), 'cuda.bindings', \
cuda.bindings.__version__)" 2>&1 | tee -a "$LOG"

say "shimgen build --driver $DRIVER --out build/gpu-multi"
rm -rf build/gpu-multi
python3 -m shimgen build --driver "$DRIVER" --out build/gpu-multi >"$OUT/build.txt" 2>&1 \
  || bad "shimgen build"
grep -v '^data' "$OUT/build.txt" | tee -a "$LOG"
SHIM=$(ls build/gpu-multi/*/libcudashim.so 2>/dev/null | head -1)
[ -n "$SHIM" ] || { bad "no shim built"; SHIM=/nonexistent; }
SHIM=$(readlink -f "$SHIM")

say "p2p: every GPU pair, without and with the shim (128 MiB x 10 copies)"
timeout 100 python3 -c "
import sys; from pathlib import Path; from shimgen.p2p import report_p2p
print(report_p2p(Path(sys.argv[1]), json_out=Path(sys.argv[2])))" "$SHIM" "$OUT/p2p.json" \
  >"$OUT/p2p.txt" 2>&1 || bad "p2p report"
tee -a "$LOG" <"$OUT/p2p.txt"
grep -q "peer copy GB/s" "$OUT/p2p.txt" || bad "p2p: no pair was measured"
grep "data check" "$OUT/p2p.txt" | grep -vqE "data check +ok +ok *$" && bad "p2p: data check"
grep -q "<- changed" "$OUT/p2p.txt" && bad "p2p: an answer changed under the shim"

say "all-reduce: torchrun NCCL, no shim vs shim, interleaved; then one traced launch"
rm -rf build/gpu-multi/allreduce
timeout 380 python3 -m benchmarks.allreduce --shim "$SHIM" --rounds 5 --time-budget 240 \
  --trace --launch-timeout 150 --work build/gpu-multi/allreduce \
  --json "$OUT/allreduce.json" >"$OUT/allreduce.txt" 2>&1 || bad "allreduce benchmark exited $?"
tee -a "$LOG" <"$OUT/allreduce.txt"
tar czf "$OUT/allreduce-work.tar.gz" -C build/gpu-multi allreduce 2>>"$LOG"

say "summary"
python3 - "$OUT" "$SHIM" >"$OUT/summary.txt" 2>&1 <<'PY'
import json, re, sys
from pathlib import Path
out, shim = Path(sys.argv[1]), sys.argv[2]
print(f"shim {shim}")
for ln in (out / "build.txt").read_text().splitlines():
    if ln.startswith(("version", "forwarded")):
        print(ln)
p2p = (out / "p2p.txt").read_text().splitlines()
for ln in p2p:
    if re.match(r"^\d+ -> \d+ (peer copy GB/s|host-bounce GB/s|data check)|^dev \d", ln):
        print("p2p " + re.sub(r"\s{2,}", "  ", ln))
try:
    r = json.loads((out / "allreduce.json").read_text())
except (OSError, ValueError) as e:
    print(f"allreduce: no results ({e})")
    sys.exit(0)
if "skipped" in r:
    print(f"allreduce: SKIPPED: {r['skipped']}")
    sys.exit(0)
print(f"allreduce {r['device']} x {r['world_size']}, torch {r['torch']}, NCCL {r['nccl']}, "
      f"{r['rounds']} rounds, {r['wall_s']:.0f} s")
for size, s in r["summary"].items():
    mib = int(size) >> 20
    print(f"allreduce {mib:>5} MiB busbw no shim {s['busbw_direct']['median']:8.2f} shim "
          f"{s['busbw_shim']['median']:8.2f} GB/s ratio {s['ratio']:.4f} "
          f"{'met' if s['met'] else 'NOT MET'}")
print(f"allreduce bar {r['bar']}: {'met at every size' if r['met'] else 'NOT met'}")
t = r.get("traces") or {}
files = ", ".join(f for e in (t.get("per_rank") or {}).values() for f in e["files"])
print(f"traces {'ok' if t.get('ok') else 'FAIL: ' + str(t.get('why'))}: "
      f"{t.get('distinct_rank_files')} distinct files for {t.get('world_size')} ranks: {files}")
PY
python3 - "$OUT/allreduce.json" <<'PY' || bad "allreduce: bar or per-rank traces"
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if "skipped" not in r and r["met"] and (r.get("traces") or {}).get("ok") else 1)
PY
echo "wall $((SECONDS - T0)) s" >>"$OUT/summary.txt"
if [ $fail = 0 ]; then echo "RESULT: PASS" >>"$OUT/summary.txt"
else msg=${why[0]}; for w in "${why[@]:1}"; do msg+="; $w"; done
  echo "RESULT: FAIL: $msg" >>"$OUT/summary.txt"; fi
cat "$OUT/summary.txt" | tee -a "$LOG"
exit $fail
