#!/usr/bin/env bash
# GPU check of the mixed-generation P2P gate (p2p-mixed) on a machine of one GPU: found and
# proven on the machine's driver, and the changed code doing no harm. `shimgen gates` finds
# and proves the checks; `shimgen patch --gates p2p-mixed` makes the copy; a shim gets the
# profile. Then, in three ways (the driver as installed; the copy on LD_LIBRARY_PATH, no shim;
# the shim with SHIMGEN_GATES=p2p-mixed SHIMGEN_GATE_METHOD=init), the peer queries
# (tests/gpu/p2p_queries.py) must answer exactly alike, the code at the branch bytes must be
# the file's, the copy's and the changed bytes respectively, and the five workloads of
# docs/validation.md must pass with the same result lines. Two GPUs of different generations
# are needed to show what the gate enables; this script cannot. Run from the repo root:
#   bash tests/gpu/p2p_validation.sh            (results under $OUT or ./gpu-out)
# The summary at the end (lines "| ...") is what goes into docs/validation.md.
set -euo pipefail
. tests/gpu/common.sh p2p
PY=python3
export PYTHONDONTWRITEBYTECODE=1
STEP_TIMEOUT=${STEP_TIMEOUT:-150}

say "driver $DRIVER ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1))"
SHA0=$(sha256sum "$DRIVER" | cut -d' ' -f1)
/usr/bin/time -f "gates wall %e s" $PY -m shimgen gates --driver "$DRIVER" \
  --json "$OUT/p2p-profile.json" >"$OUT/p2p-gates.txt" 2>&1 \
  || { cat "$OUT/p2p-gates.txt"; say "FAIL shimgen gates"; exit 1; }
grep -E "^p2p-mixed |^ +check 0x|^proof|p2p-mixed check|gates wall" "$OUT/p2p-gates.txt" | tee -a "$LOG"

# The field, each check's compare and branch bytes, and every byte to change.
read -r FIELD CHECKS BYTES < <($PY - "$OUT/p2p-profile.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
(g,) = [g for g in p["gates"] if g["name"] == "p2p-mixed"]
assert g["status"] == "found" and g["proof"]["ok"] is True, g["why"]
checks = [f"{k['compare']['vaddr']}:{k['branch']['bytes']}" for k in g["checks"]]
changes = [c["vaddr"] for k in g["checks"] for c in k["changes"]]
print(g["offset"], ",".join(checks), " ".join(changes))
PY
) || { say "FAIL the profile has no proven p2p-mixed gate"; exit 1; }
say "p2p-mixed: field $FIELD; checks (compare:branch bytes) $CHECKS; bytes changed $BYTES"
echo "| found | field $FIELD | checks $CHECKS |" >>"$LOG"
if [ "$(basename "$DRIVER")" = libcuda.so.580.159.04 ]; then
  # what the analysis of a copy of this file found away from the GPU (docs/gates.md)
  WANT="0x2c2273:7444,0x2c236e:7445,0x480639:746a,0x48b324:0f848f000000"
  [ "$FIELD:$CHECKS" = "0xc40:$WANT" ] && say "the same checks as found away from the GPU" \
    || { say "FAIL checks differ from docs/gates.md's 580.159.04 row ($WANT)"; fail=1; }
fi

rm -rf "$OUT/p2p-copy"
$PY -m shimgen patch --driver "$DRIVER" --gates p2p-mixed --profile "$OUT/p2p-profile.json" \
  -o "$OUT/p2p-copy" | tee -a "$LOG"
COPY=$(readlink -f "$OUT/p2p-copy/libcuda.so.1")
n=$(cmp -l "$DRIVER" "$COPY" | wc -l || true)
m=$($PY -c "import json,sys; print(len(json.load(open(sys.argv[1]))['changes']))" \
  "$OUT/p2p-copy/shimgen-patch.json")
[ "$n" = "$m" ] && say "cmp -l: $n bytes differ, the manifest lists $m" \
  || { say "FAIL cmp -l: $n bytes differ, the manifest lists $m"; fail=1; }

rm -rf build/gpu-p2p
$PY -m shimgen build --driver "$DRIVER" --gates "$OUT/p2p-profile.json" --out build/gpu-p2p \
  >"$OUT/p2p-build.txt" 2>&1 || { cat "$OUT/p2p-build.txt"; say "FAIL shimgen build"; exit 1; }
SHIM=$(ls build/gpu-p2p/*/libcudashim.so | head -1)
COPYLP="$OUT/p2p-copy${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# mode NAME: the environment of each way to run (plain, copy, shim)
mode() {
  case $1 in
  plain) echo "env -u LD_PRELOAD" ;;
  copy) echo "env -u LD_PRELOAD LD_LIBRARY_PATH=$COPYLP" ;;
  shim) echo "env LD_PRELOAD=$SHIM SHIMGEN_GATES=p2p-mixed SHIMGEN_GATE_METHOD=init" ;;
  esac
}

say "peer queries, and the code at the changed bytes, in each way"
for w in plain copy shim; do
  $(mode $w) $PY tests/gpu/p2p_queries.py $BYTES >"$OUT/p2p-queries-$w.json" \
    2>"$OUT/p2p-queries-$w.err" || { cat "$OUT/p2p-queries-$w.err"; say "FAIL queries $w"; fail=1; }
  grep "^shimgen" "$OUT/p2p-queries-$w.err" | tee -a "$LOG" || true
done
grep -q "p2p-mixed set at its init site (changed before cuInit)" "$OUT/p2p-queries-shim.err" \
  || { say "FAIL the shim did not change the branches"; fail=1; }
$PY - "$OUT" "$DRIVER" "$COPY" "$OUT/p2p-copy/shimgen-patch.json" <<'PY' | tee -a "$LOG" || fail=1
import json, os, sys
out, driver, copy, manifest = sys.argv[1:]
r = {w: json.loads(open(f"{out}/p2p-queries-{w}.json").read().strip().splitlines()[-1])
     for w in ("plain", "copy", "shim")}
changes = json.load(open(manifest))["changes"]
old = {c["vaddr"]: int(c["old"], 16) for c in changes}
new = {c["vaddr"]: int(c["new"], 16) for c in changes}
ok = True
for w, lib, want in (("plain", driver, old), ("copy", copy, new), ("shim", driver, new)):
    got = r[w]
    files = [os.path.realpath(f) for f in got["libcuda"]]
    same = {k: got[k] for k in ("cuInit", "cuDeviceGetCount", "pairs", "enable_peer_self")
            if k in got} == {k: r["plain"][k] for k in ("cuInit", "cuDeviceGetCount", "pairs",
                                                          "enable_peer_self") if k in r["plain"]}
    mine = files == [os.path.realpath(lib)] and got.get("bytes") == want
    ok = ok and same and mine and got["cuInit"] == 0
    pairs = "; ".join(f"{p['pair']}: can {p['can_access']}, attrs {p['attributes']}"
                      for p in got["pairs"])
    print(f"| queries {w} | cuInit {got['cuInit']}, {got['cuDeviceGetCount']} count rc | "
          f"{pairs} | enable self {got.get('enable_peer_self')} | answers as plain: {same} | "
          f"loaded {files}, branch bytes as expected: {mine} |")
print(f"{'PASS' if ok else 'FAIL'} peer queries")
sys.exit(0 if ok else 1)
PY

say "the five workloads of docs/validation.md, in each way"
set +e
W=$(mktemp -d /tmp/shimgen-p2p.XXXXXX)
CUDA_INC=/usr/local/cuda/include
gcc -O2 -Wall -Wextra -o "$W/driver_api" tests/gpu/driver_api.c -I"$CUDA_INC" "$DRIVER" \
  || { say "FAIL driver_api.c did not compile"; fail=1; }
gcc -O2 -Wall -Wextra -o "$W/cudart_entry" tests/c/cudart_entry.c -ldl \
  || { say "FAIL cudart_entry.c did not compile"; fail=1; }
NVPY=$($PY -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
CUDART=$( { [ -n "$NVPY" ] && find "$NVPY" -name 'libcudart.so.13*' 2>/dev/null; ls /usr/local/cuda/lib64/libcudart.so.13* 2>/dev/null; } | head -1)
NRANKS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$NRANKS" -ge 2 ] && NRANKS=2 || NRANKS=1
# workload NAME LINES_REGEX cmd...: the lines LINES_REGEX picks must be there and the same
# in each way (driver_api's device line and train's loss and sums included; a path to the
# library an entry point lies in left out)
workload() {
  local name=$1 lines=$2; shift 2
  local port=29620 res=()
  for w in plain copy shim; do
    port=$((port + 1))
    MASTER_PORT=$port timeout -k 10 "$STEP_TIMEOUT" $(mode $w) "$@" >"$W/$name.$w.log" 2>&1
    local rc=$?
    # the library an answer lies in names the copy in its way: compared without it
    grep -E "$lines" "$W/$name.$w.log" | sed -E 's/ lib .*$//' >"$W/$name.$w.lines" || true
    res+=("$w rc $rc, $(wc -l <"$W/$name.$w.lines") lines")
    [ $rc = 0 ] && [ -s "$W/$name.$w.lines" ] || { tail -n 15 "$W/$name.$w.log"; fail=1; }
  done
  local same=yes
  cmp -s "$W/$name.plain.lines" "$W/$name.copy.lines" || same=no
  cmp -s "$W/$name.plain.lines" "$W/$name.shim.lines" || same=no
  [ $same = yes ] || fail=1
  echo "| $name | ${res[*]} | same result lines: $same | $(head -c 120 "$W/$name.plain.lines" | tr '\n' ' ') |" | tee -a "$LOG"
}
workload driver_api '^(DRIVER_API_OK|driver )' "$W/driver_api"
workload cudart_entry '^cudaGetDriverEntryPoint(ByVersion)? rc 0 call_rc 0' "$W/cudart_entry" "$CUDART"
workload train '^(FINAL_LOSS|PARAM_SUM|TRAIN_ACC)' $PY tests/gpu/train.py
workload cupy_triton '^CUPY_TRITON_OK' $PY tests/gpu/cupy_kernel.py
workload nccl_allreduce "^NCCL_OK world_size $NRANKS" $PY tests/gpu/nccl_allreduce.py --nproc "$NRANKS"
set -e
cp "$W"/*.log "$OUT/" 2>/dev/null || true

SHA1=$(sha256sum "$DRIVER" | cut -d' ' -f1)
[ "$SHA0" = "$SHA1" ] && say "the installed driver is untouched (sha256 $SHA0)" \
  || { say "FAIL the installed driver's sha256 changed"; fail=1; }
say "summary for docs/validation.md"
grep -E "^\| " "$LOG"
say "RESULT $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
