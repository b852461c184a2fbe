#!/usr/bin/env bash
# GPU proof of the init-site method on a data-centre GPU, where the driver sets the gate bit
# itself: the inverse experiment. `shimgen gates` proves the init sites on the machine's
# driver by emulation; then the mask is applied (1) in memory, SHIMGEN_GATE_METHOD=init,
# and (2) as a `shimgen patch --mask` copy on LD_LIBRARY_PATH with no shim. Each must make
# attributes 110, 116 and 124 read 0 and the DMA-BUF export fail with 801, where the run
# without either reads 1 and exports. Then each chosen mask site alone, to say which one the
# driver runs for this GPU. Strict: any mismatch fails. Run from the repository root:
#   bash tests/gpu/initsite_validation.sh          (results under $OUT or ./gpu-out)
# The summary at the end (lines "| ...") is what goes into docs/validation.md.
set -euo pipefail
. tests/gpu/common.sh initsite
PY=python3
export PYTHONDONTWRITEBYTECODE=1

say "driver $DRIVER"
/usr/bin/time -f "gates wall %e s" $PY -m shimgen gates --driver "$DRIVER" \
  --json "$OUT/initsite-profile.json" >"$OUT/initsite-gates.txt" 2>&1 \
  || { cat "$OUT/initsite-gates.txt"; say "FAIL shimgen gates"; exit 1; }
grep -E "^(gdr|dmabuf) |proof|init site|gates wall" "$OUT/initsite-gates.txt" | tee -a "$LOG"

# The gates whose mask has a chosen, proven init site; and the sites of each.
read -r MASKED SITES < <($PY - "$OUT/initsite-profile.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
gates, sites = [], []
for g in p["gates"]:
    for x in g.get("init_patches", []):
        if x["direction"] == "mask" and x["status"] == "chosen" and x["proven"]:
            gates.append(g["name"])
            sites += [i["vaddr"] for i in x["insns"]]
print(",".join(gates) or "-", ",".join(sites) or "-")
PY
)
say "gates with a proven mask init site: $MASKED; sites: $SITES"
[ "$MASKED" != "-" ] || { say "FAIL no gate has a proven mask init site on this driver"; exit 1; }
SPEC=$(echo "$MASKED" | sed 's/\(^\|,\)/\1-/g')

rm -rf build/gpu-initsite
$PY -m shimgen build --driver "$DRIVER" --gates "$OUT/initsite-profile.json" \
  --out build/gpu-initsite >"$OUT/initsite-build.txt" 2>&1 \
  || { cat "$OUT/initsite-build.txt"; say "FAIL shimgen build"; exit 1; }
SHIM=$(ls build/gpu-initsite/*/libcudashim.so | head -1)

# probe NAME ENV...: the probe child's JSON in $OUT/initsite-NAME.json, no inherited shim
probe() {
  local name=$1; shift
  env -u LD_PRELOAD "$@" $PY -m shimgen probe --child >"$OUT/initsite-$name.json" \
    2>"$OUT/initsite-$name.err" || { cat "$OUT/initsite-$name.err"; say "FAIL probe $name"; exit 1; }
  grep "^shimgen" "$OUT/initsite-$name.err" | tee -a "$LOG" || true
}
# verdict NAME WANT: every device reads WANT (1: gate on, 0: masked) in 110/116/124 and the
# DMA-BUF export gives 0 (WANT 1) or 801 (WANT 0); prints one summary row
verdict() {
  $PY - "$OUT/initsite-$1.json" "$1" "$2" <<'PY' | tee -a "$LOG"
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
name, want = sys.argv[2], int(sys.argv[3])
devs = r["devices"]
ok = bool(devs) and r["cuInit"] == 0
for d in devs:
    a = d["attributes"]
    got = [a.get(k) for k in ("110", "116", "124")]
    ok = ok and got == [want] * 3 and d["dmabuf_export"] == (0 if want else 801)
    print(f"| {name} | dev {d['ordinal']} | 110/116/124 = {got} | DMA-BUF export "
          f"{d['dmabuf_export']} | cuMemCreate(gdr) {d['gdr_cuMemCreate']} |")
print(f"{'PASS' if ok else 'FAIL'} {name}: want {want}")
sys.exit(0 if ok else 1)
PY
}

say "without the shim or a copy: the driver's own answer"
probe plain
verdict plain 1 || fail=1

say "mask in memory: SHIMGEN_GATES=$SPEC SHIMGEN_GATE_METHOD=init"
probe init-mask LD_PRELOAD="$SHIM" SHIMGEN_GATES="$SPEC" SHIMGEN_GATE_METHOD=init
grep -q "at its init site (changed before cuInit)" "$OUT/initsite-init-mask.err" \
  || { say "FAIL the shim did not change the init sites"; fail=1; }
verdict init-mask 0 || fail=1

say "the shim with the init method but no selection changes nothing"
probe init-none LD_PRELOAD="$SHIM" SHIMGEN_GATE_METHOD=init
verdict init-none 1 || fail=1

say "a --mask copy on LD_LIBRARY_PATH, no shim"
rm -rf "$OUT/initsite-copy"
$PY -m shimgen patch --driver "$DRIVER" --gates "$MASKED" --mask --profile \
  "$OUT/initsite-profile.json" -o "$OUT/initsite-copy" | tee -a "$LOG"
COPY=$(readlink -f "$OUT/initsite-copy/libcuda.so.1")
n=$(cmp -l "$DRIVER" "$COPY" | wc -l || true)
m=$($PY -c "import json,sys; print(len(json.load(open(sys.argv[1]))['changes']))" \
  "$OUT/initsite-copy/shimgen-patch.json")
[ "$n" = "$m" ] && say "cmp -l: $n bytes differ, the manifest lists $m" \
  || { say "FAIL cmp -l: $n bytes differ, the manifest lists $m"; fail=1; }
loaded=$(env -u LD_PRELOAD LD_LIBRARY_PATH="$OUT/initsite-copy${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  $PY -c "import ctypes, os, re; ctypes.CDLL('libcuda.so.1'); m = [l.rstrip('\n').split(None, 5)[5:] for l in open('/proc/self/maps')]; print(*sorted({f[0] for f in m if f and re.fullmatch(r'libcuda\.so(\.[0-9]+)*', os.path.basename(f[0]))}))")
say "libcuda.so.1 on LD_LIBRARY_PATH loads: $loaded"
[ "$loaded" = "$COPY" ] || { say "FAIL the copy is not what loads"; fail=1; }
probe copy-mask LD_LIBRARY_PATH="$OUT/initsite-copy${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
verdict copy-mask 0 || fail=1

say "which mask site does this GPU's driver run: one site at a time (copies, no shim)"
live=""
for s in ${SITES//,/ }; do
  rm -rf "$OUT/initsite-site-$s"
  $PY -m shimgen patch --driver "$DRIVER" --gates "$MASKED" --mask --site "$s" --profile \
    "$OUT/initsite-profile.json" -o "$OUT/initsite-site-$s" >/dev/null
  probe "site-$s" LD_LIBRARY_PATH="$OUT/initsite-site-$s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if verdict "site-$s" 0 >/dev/null; then live="$live $s"; say "site $s alone masks the gate"
  else say "site $s alone does not mask the gate"; fi
done
say "live mask init site(s) on $(basename "$DRIVER"):${live:- none alone}"

say "summary for docs/validation.md"
grep -E "^\| " "$LOG" | sort -u
say "RESULT $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
