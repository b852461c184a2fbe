#!/usr/bin/env bash
# Multi-GPU proof on a machine with 2 or more GPUs, in one command from the
# repository root:
#   bash tests/gpu/multigpu_validation.sh            (results under $OUT or ./gpu-out)
# 1. installs carried wheels (.whl/*.whl) into /tmp/site;
# 2. builds the shim for the machine's driver into build/gpu-multi;
# 3. `shimgen probe --p2p` equivalent (shimgen.probe.p2p.report_p2p): every GPU pair, attributes,
#    measured peer and host-bounce copies, without and with LD_PRELOAD of the shim;
# 4. benchmarks/allreduce.py: torchrun NCCL all-reduce 1 MiB..1 GiB, 5 interleaved rounds of
#    four launches: no shim, shim, shim + SHIMGEN_TRACE=1, shim + SHIMGEN_TRACE=time; every
#    traced launch's per-rank trace files (SHIMGEN_TRACE_FILE=.../trace.%r.json) are checked;
# 5. prints a short summary last. $OUT gets 8 files: multigpu.log, build.txt, p2p.txt,
#    p2p.json, allreduce.txt, allreduce.json, summary.txt and allreduce-work.tar.gz (rank
#    JSON, launch logs, trace files). Exit status 0 only when everything passed.
# Takes about 4 minutes on 2 x H200 (230 s); hard limits (timeouts) keep it under 10.
set -uo pipefail
. tests/gpu/common.sh multigpu   # $OUT, wheels, PYTHONPATH, multicast off, $DRIVER, say, fail
why=()
bad() { say "FAIL $*"; fail=1; why+=("$*"); }
T0=$SECONDS

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
import sys; from pathlib import Path; from shimgen.probe.p2p import report_p2p
print(report_p2p(Path(sys.argv[1]), json_out=Path(sys.argv[2])))" "$SHIM" "$OUT/p2p.json" \
  >"$OUT/p2p.txt" 2>&1 || bad "p2p report"
tee -a "$LOG" <"$OUT/p2p.txt"
grep -q "peer copy GB/s" "$OUT/p2p.txt" || bad "p2p: no pair was measured"
grep "data check" "$OUT/p2p.txt" | grep -vqE "data check +ok +ok *$" && bad "p2p: data check"
grep -q "<- changed" "$OUT/p2p.txt" && bad "p2p: an answer changed under the shim"

say "all-reduce: torchrun NCCL; no shim, shim, counting, timing; 5 interleaved rounds"
rm -rf build/gpu-multi/allreduce
timeout 470 python3 -m benchmarks.allreduce --shim "$SHIM" --rounds 5 \
  --launch-timeout 100 --work build/gpu-multi/allreduce \
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
      f"{r['rounds']} rounds of {','.join(r['variants'])}, {r['wall_s']:.0f} s")
for size, row in r["summary"].items():
    mib = int(size) >> 20
    for v, s in row.items():
        if v == "direct":
            print(f"allreduce {mib:>5} MiB {'no shim':<6} busbw {s['median']:8.2f} GB/s "
                  f"[{s['min']:.2f}..{s['max']:.2f}]")
            continue
        p = s["paired"]
        verdict = ("met" if s["met"] else "NOT MET") if row["direct"]["resolved"] else \
            "undecided (no-shim range over 2%)"
        print(f"allreduce {mib:>5} MiB {v:<6} busbw {s['median']:8.2f} GB/s ratio "
              f"{s['ratio']:.4f} paired {p['median']:.4f} [{p['min']:.4f}..{p['max']:.4f}] "
              f"bar {s['bar']} {verdict}")
print(f"allreduce bars: {'met at every size that decides them' if r['met'] else 'NOT met'}")
for v, t in (r.get("traces") or {}).items():
    f = t["first"]
    files = ", ".join(x for e in f["per_rank"].values() for x in e["files"])
    cpa = ", ".join(f"rank {k} {e.get('calls_per_allreduce', 0):.2f}"
                    for k, e in f["per_rank"].items())
    print(f"traces {v}: {'ok' if t['ok'] else 'FAIL: ' + f['why']} in {t['launches']} "
          f"launches; first: {f['distinct_rank_files']} files for {f['world_size']} ranks "
          f"({files}); calls per all-reduce {cpa}")
for v, b in (r.get("call_budget") or {}).items():
    e = b["expected_ratio"]
    print(f"cost bound {v}: {b['calls_per_allreduce']:.2f} calls x {b['per_call_ns']} ns; "
          f"expected ratio 1 MiB {e[min(e, key=int)]:.5f}")
PY
python3 - "$OUT/allreduce.json" <<'PY' || bad "allreduce: a bar or the per-rank traces"
import json, sys
r = json.load(open(sys.argv[1]))
t = r.get("traces") or {}
sys.exit(0 if "skipped" not in r and r["met"] and t and all(x["ok"] for x in t.values())
         else 1)
PY
echo "wall $((SECONDS - T0)) s" >>"$OUT/summary.txt"
if [ $fail = 0 ]; then echo "RESULT: PASS" >>"$OUT/summary.txt"
else msg=${why[0]}; for w in "${why[@]:1}"; do msg+="; $w"; done
  echo "RESULT: FAIL: $msg" >>"$OUT/summary.txt"; fi
cat "$OUT/summary.txt" | tee -a "$LOG"
exit $fail
