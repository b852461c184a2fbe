#!/usr/bin/env bash
# GPU proof of the set site and of the init method gate by gate, on the machine's driver:
#  1. `shimgen gates` chooses and proves (by emulation) gdr's set site;
#  2. `shimgen patch --gates gdr` makes a copy whose init sets the bit; on a GPU whose driver
#     sets it already (a data-centre part) the copy must do no harm: the probe's attributes
#     and DMA-BUF export as plain, and four workloads (driver API in C, PyTorch training,
#     CuPy and Triton, NCCL) giving the same results as with the installed driver;
#  3. SHIMGEN_GATE_METHOD=init with each selection (-gdr, -dmabuf, -gdr,-dmabuf, gdr), each
#     gate applied by the best method it has, as the shim's one line says; =init-all refusing
#     a selection with a gate that has no init site. Strict: any mismatch fails.
# Run from the repository root:
#   bash tests/gpu/setsite_validation.sh          (results under $OUT or ./gpu-out)
# The summary at the end (lines "| ...") is what goes into docs/validation.md.
set -euo pipefail
. tests/gpu/common.sh setsite
PY=python3
export PYTHONDONTWRITEBYTECODE=1

say "driver $DRIVER"
$PY -m shimgen gates --driver "$DRIVER" --json "$OUT/setsite-profile.json" \
  >"$OUT/setsite-gates.txt" 2>&1 || { cat "$OUT/setsite-gates.txt"; say "FAIL gates"; exit 1; }
grep -E "^proof|init site:" "$OUT/setsite-gates.txt" | tee -a "$LOG"
grep -qE "init site: gdr set .* OK$" "$OUT/setsite-gates.txt" \
  || { say "FAIL gdr has no proven set site"; exit 1; }

say "the set copy: shimgen patch --gates gdr"
rm -rf "$OUT/setsite-copy"
$PY -m shimgen patch --driver "$DRIVER" --gates gdr --profile "$OUT/setsite-profile.json" \
  -o "$OUT/setsite-copy" | tee -a "$LOG"
COPY=$(readlink -f "$OUT/setsite-copy/libcuda.so.1")
n=$(cmp -l "$DRIVER" "$COPY" | wc -l || true)
cmp -l "$DRIVER" "$COPY" | tee -a "$LOG" || true
m=$($PY -c "import json,sys; print(len(json.load(open(sys.argv[1]))['changes']))" \
  "$OUT/setsite-copy/shimgen-patch.json")
[ "$n" = "$m" ] && say "cmp -l: $n bytes differ, the manifest lists $m" \
  || { say "FAIL cmp -l: $n bytes differ, the manifest lists $m"; fail=1; }
COPYENV="LD_LIBRARY_PATH=$OUT/setsite-copy${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# probe NAME ENV...: the probe child's JSON in $OUT/setsite-NAME.json, no inherited shim
probe() {
  local name=$1; shift
  env -u LD_PRELOAD "$@" $PY -m shimgen probe --child >"$OUT/setsite-$name.json" \
    2>"$OUT/setsite-$name.err" || { cat "$OUT/setsite-$name.err"; say "FAIL probe $name"; exit 1; }
  grep "^shimgen" "$OUT/setsite-$name.err" | tee -a "$LOG" || true
}
# verdict NAME A110 A116 A124 EXPORT: every device reads these and its export gives EXPORT
verdict() {
  $PY - "$OUT/setsite-$1.json" "$@" <<'PY' | tee -a "$LOG"
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
name, want, export = sys.argv[2], [int(x) for x in sys.argv[3:6]], int(sys.argv[6])
ok = bool(r["devices"]) and r["cuInit"] == 0
for d in r["devices"]:
    a = d["attributes"]
    got = [a.get(k) for k in ("110", "116", "124")]
    ok = ok and got == want and d["dmabuf_export"] == export
    print(f"| {name} | dev {d['ordinal']} | 110/116/124 = {got} | DMA-BUF export "
          f"{d['dmabuf_export']} | cuMemCreate(gdr) {d['gdr_cuMemCreate']} |")
print(f"{'PASS' if ok else 'FAIL'} {name}: want {want}, export {export}")
sys.exit(0 if ok else 1)
PY
}

say "plain and the set copy: the probe"
probe plain
verdict plain 1 1 1 0 || fail=1
probe copy-set "$COPYENV"
verdict copy-set 1 1 1 0 || fail=1
loaded=$(env -u LD_PRELOAD "$COPYENV" $PY -c "import ctypes, os, re; ctypes.CDLL('libcuda.so.1'); m = [l.rstrip('\n').split(None, 5)[5:] for l in open('/proc/self/maps')]; print(*sorted({f[0] for f in m if f and re.fullmatch(r'libcuda\.so(\.[0-9]+)*', os.path.basename(f[0]))}))")
[ "$loaded" = "$COPY" ] && say "the copy is what loads: $loaded" \
  || { say "FAIL the copy is not what loads ($loaded)"; fail=1; }

say "plain and the set copy: the workloads"
BIN=$OUT/setsite-bin; mkdir -p "$BIN"
gcc -O2 -o "$BIN/driver_api" tests/gpu/driver_api.c -I/usr/local/cuda/include "$DRIVER"
# workload NAME CHECK CMD...: the lines with CHECK, plain and with the copy, must be equal
workload() {
  local name=$1 check=$2; shift 2
  local a b
  a=$(env -u LD_PRELOAD "$@" 2>"$OUT/setsite-$name-plain.err" | grep -E "$check" || true)
  b=$(env -u LD_PRELOAD "$COPYENV" "$@" 2>"$OUT/setsite-$name-copy.err" | grep -E "$check" || true)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then
    echo "| $name | plain = copy | $(echo "$a" | tr '\n' ' ')|" | tee -a "$LOG"
  else
    echo "| $name | DIFFER | plain: $(echo "$a" | tr '\n' ' ') copy: $(echo "$b" | tr '\n' ' ')|" \
      | tee -a "$LOG"
    fail=1
  fi
}
workload driver_api 'DRIVER_API_OK' "$BIN/driver_api"
workload train 'FINAL_LOSS|PARAM_SUM' $PY tests/gpu/train.py
workload cupy_triton 'CUPY_TRITON_OK' $PY tests/gpu/cupy_kernel.py
workload nccl 'NCCL_OK' $PY tests/gpu/nccl_allreduce.py --nproc 1

say "the init method, gate by gate (a shim with the gates baked in)"
rm -rf build/gpu-setsite
$PY -m shimgen build --driver "$DRIVER" --gate-profile "$OUT/setsite-profile.json" \
  --out build/gpu-setsite >"$OUT/setsite-build.txt" 2>&1 \
  || $PY -m shimgen build --driver "$DRIVER" --gates "$OUT/setsite-profile.json" \
  --out build/gpu-setsite >"$OUT/setsite-build.txt" 2>&1 \
  || { cat "$OUT/setsite-build.txt"; say "FAIL shimgen build"; exit 1; }
SHIM=$(ls build/gpu-setsite/*/libcudashim.so | head -1)
# initcase NAME METHOD SELECTION A110 A116 A124 EXPORT WORDS: the probe under the shim, its
# attributes, and the shim's notice must hold WORDS
initcase() {
  local name=$1 method=$2 sel=$3 words=$8
  probe "$name" LD_PRELOAD="$SHIM" SHIMGEN_GATES="$sel" SHIMGEN_GATE_METHOD="$method"
  verdict "$name" "$4" "$5" "$6" "$7" || fail=1
  grep -qF -- "$words" "$OUT/setsite-$name.err" && say "notice holds: $words" \
    || { say "FAIL $name: the notice lacks: $words"; fail=1; }
}
initcase init-mask-gdr init -gdr 0 0 0 801 "gdr masked at its init site"
initcase init-mask-dmabuf init -dmabuf 1 1 0 801 "dmabuf masked in the device structs"
initcase init-mask-both init -gdr,-dmabuf 0 0 0 801 \
  "gdr masked at its init site (changed before cuInit), dmabuf masked in the device structs"
initcase init-set-gdr init gdr 1 1 1 0 "gdr set at its init site"
initcase init-all-both init-all -gdr,-dmabuf 1 1 1 0 "nothing is written"

say "summary for docs/validation.md"
grep -E "^\| " "$LOG" | sort -u
say "RESULT $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
