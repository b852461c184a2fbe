#!/usr/bin/env bash
# GPU proof of the gates on a data-centre GPU: discovery on the machine's driver,
# then the shim masks GPUDirect RDMA / DMA-BUF (-gdr,-dmabuf) so the H200 looks like a
# consumer GPU, and a tampered identity writes nothing. Every claim of docs/validation.md is
# checked here: the probe without a selection identical in every row, the masked rows, the
# tampered driver identical in every row, tampered profiles (build-id, one instruction
# byte) refused, and the attribute trace under PyTorch. Run from the repository root:
#   bash tests/gpu/gates_validation.sh            (results under $OUT or ./gpu-out)
set -uo pipefail
. tests/gpu/common.sh gates

say "driver $DRIVER"
say "shimgen gates"
/usr/bin/time -f "gates wall %e s" python3 -m shimgen gates --driver "$DRIVER" \
  --json "$OUT/gates-profile.json" >>"$LOG" 2>&1 || { say "FAIL shimgen gates"; fail=1; }
grep -E "^(gdr|dmabuf) |^reader|^device|proof|gates wall" "$LOG" | head -20

say "shimgen build --gates auto"
rm -rf build/gpu-gates
python3 -m shimgen build --driver "$DRIVER" --gates auto --out build/gpu-gates \
  >"$OUT/build.txt" 2>&1 || { say "FAIL shimgen build --gates auto"; fail=1; }
grep -v '^data' "$OUT/build.txt" | tee -a "$LOG"
SHIM=$(ls build/gpu-gates/*/libcudashim.so 2>/dev/null | head -1)
[ -f "$SHIM" ] || { say "FAIL no shim built"; say "RESULT FAIL"; exit 1; }

# rows ROWS_FILE: the probe's rows (attributes, DMA-BUF, cuMemCreate), each "dev N ..."
rows() { grep -E '^dev [0-9]+ ' "$1"; }
# identical FILE WHAT: every row reads the same without and with the shim
identical() {
  local n c
  n=$(rows "$1" | wc -l); c=$(rows "$1" | grep -c '<- changed')
  if [ "$n" -ge 9 ] && [ "$c" -eq 0 ]; then say "$2: identical in all $n rows"
  else say "FAIL $2: $c of $n rows changed (9 or more rows expected)"; fail=1; fi
}

say "probe: plain vs shim with no selection"
python3 -m shimgen probe --shim "$SHIM" 2>&1 | tee "$OUT/probe-noselection.txt" | tee -a "$LOG"
identical "$OUT/probe-noselection.txt" "no selection"
say "probe: plain vs shim with SHIMGEN_GATES=-gdr,-dmabuf"
SHIMGEN_GATES=-gdr,-dmabuf python3 -m shimgen probe --shim "$SHIM" 2>&1 \
  | tee "$OUT/probe-masked.txt" | tee -a "$LOG"
for a in 110 116 124; do
  grep -qE "^dev 0 $a .* 1 +0 +<- changed" "$OUT/probe-masked.txt" \
    || { say "FAIL attribute $a not masked"; fail=1; }
done
grep -qE "DMA-BUF export.*ok +CUDA_ERROR_NOT_SUPPORTED \(801\)" "$OUT/probe-masked.txt" \
  || { say "FAIL DMA-BUF export not refused under the mask"; fail=1; }
# the rows the mask does not reach read as without the shim
changed=$(rows "$OUT/probe-masked.txt" | grep '<- changed' \
  | grep -vE '^dev [0-9]+ (110|116|124) |DMA-BUF export|cuMemCreate gpuDirectRDMACapable')
[ -z "$changed" ] || { say "FAIL rows changed by the mask that it should not reach: $changed"; fail=1; }

say "tampered identity: a copy of the driver with one build-id byte changed"
cp "$DRIVER" /tmp/libcuda-tampered.so
python3 - "$OUT/gates-profile.json" /tmp/libcuda-tampered.so <<'PY'
import json, sys
bid = bytes.fromhex(json.load(open(sys.argv[1]))["driver"]["build_id"])
data = bytearray(open(sys.argv[2], "rb").read())
at = data.find(bid); data[at] ^= 0xff
open(sys.argv[2], "wb").write(data)
PY
SHIMGEN_DRIVER=/tmp/libcuda-tampered.so SHIMGEN_GATES=-gdr,-dmabuf \
  python3 -m shimgen probe --shim "$SHIM" 2>&1 | tee "$OUT/probe-tampered.txt" | tee -a "$LOG"
identical "$OUT/probe-tampered.txt" "tampered driver"
grep -q "SHIMGEN_GATES=-gdr,-dmabuf ignored: .*nothing is written" "$OUT/probe-tampered.txt" \
  || { say "FAIL no refusal message"; fail=1; }

say "tampered profile file is refused at build time"
python3 - "$OUT/gates-profile.json" /tmp/tampered-profile.json <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); b = p["driver"]["build_id"]
p["driver"]["build_id"] = ("0" if b[0] != "0" else "1") + b[1:]
json.dump(p, open(sys.argv[2], "w"))
PY
python3 - "$OUT/gates-profile.json" /tmp/tampered-bytes-profile.json <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
def insns(n):
    if isinstance(n, dict):
        if isinstance(n.get("bytes"), str) and "vaddr" in n:
            yield n
        for v in n.values():
            yield from insns(v)
    elif isinstance(n, list):
        for v in n:
            yield from insns(v)
found = list(insns(p))
last = max((i["vaddr"] for i in found), key=lambda v: int(v, 16))
for i in found:
    if i["vaddr"] == last:
        b = bytearray.fromhex(i["bytes"]); b[0] ^= 1; i["bytes"] = b.hex()
json.dump(p, open(sys.argv[2], "w"))
PY
refused() { # PROFILE NEEDLE
  rm -rf build/gpu-gates-bad
  if python3 -m shimgen build --driver "$DRIVER" --gates "$1" --out build/gpu-gates-bad \
       >"$OUT/refused.txt" 2>&1; then
    say "FAIL tampered profile $1 accepted"; fail=1
  elif grep -q "$2" "$OUT/refused.txt" && [ ! -e build/gpu-gates-bad/*/libcudashim.so ]; then
    say "tampered profile refused: $(tail -1 "$OUT/refused.txt")"
  else
    say "FAIL tampered profile $1: $(tail -1 "$OUT/refused.txt")"; fail=1
  fi
}
refused /tmp/tampered-profile.json "gate profile is for build-id"
refused /tmp/tampered-bytes-profile.json "gate profile does not match .*: bytes at 0x"

say "SHIMGEN_TRACE=attrs and an override under PyTorch"
SHIMGEN_TRACE=attrs SHIMGEN_ATTR_OVERRIDE=124=0 LD_PRELOAD=$SHIM python3 -c "
import torch; x = torch.ones(4, device='cuda'); print('torch ok', float(x.sum()))
" >"$OUT/attrs.txt" 2>&1
attrs_rc=$?
nattr=$(grep -c "shimgen attr:" "$OUT/attrs.txt")
say "attr lines: $nattr"
grep "shimgen attr:" "$OUT/attrs.txt" | awk '{print $NF}' | sort | uniq -c | tee -a "$LOG"
grep -E "SHIMGEN_ATTR_OVERRIDE|torch ok" "$OUT/attrs.txt" | tee -a "$LOG"
[ "$attrs_rc" -eq 0 ] && grep -qx "torch ok 4.0" "$OUT/attrs.txt" \
  || { say "FAIL PyTorch under SHIMGEN_TRACE=attrs: exit $attrs_rc"; fail=1; }
[ "$nattr" -gt 0 ] || { say "FAIL no attribute query was logged"; fail=1; }
[ "$(grep -c 'SHIMGEN_ATTR_OVERRIDE in effect: 124=0' "$OUT/attrs.txt")" -eq 1 ] \
  || { say "FAIL the override banner was not printed once"; fail=1; }
# every logged query of attribute 124 reads the override
bad124=$(grep "shimgen attr: dev [0-9]* 124 " "$OUT/attrs.txt" | grep -v "= 0 ")
[ -z "$bad124" ] || { say "FAIL attribute 124 not overridden: $bad124"; fail=1; }

say "RESULT $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
