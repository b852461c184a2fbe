#!/usr/bin/env bash
# GPU proof of the gates on a data-centre GPU: discovery on the machine's driver,
# then the shim masks GPUDirect RDMA / DMA-BUF (-gdr,-dmabuf) so the H200 looks like a
# consumer GPU, and a tampered identity writes nothing. Run from the repository root:
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
python3 -m shimgen build --driver "$DRIVER" --gates auto --out build/gpu-gates 2>&1 \
  | grep -v '^data' | tee -a "$LOG"
SHIM=$(ls build/gpu-gates/*/libcudashim.so)

say "probe: plain vs shim with no selection"
python3 -m shimgen probe --shim "$SHIM" 2>&1 | tee "$OUT/probe-noselection.txt" | tee -a "$LOG"
say "probe: plain vs shim with SHIMGEN_GATES=-gdr,-dmabuf"
SHIMGEN_GATES=-gdr,-dmabuf python3 -m shimgen probe --shim "$SHIM" 2>&1 \
  | tee "$OUT/probe-masked.txt" | tee -a "$LOG"
for a in 110 116 124; do
  grep -qE "^dev 0 $a .* 1 +0 +<- changed" "$OUT/probe-masked.txt" \
    || { say "FAIL attribute $a not masked"; fail=1; }
done
grep -qE "DMA-BUF export.*ok +CUDA_ERROR_NOT_SUPPORTED \(801\)" "$OUT/probe-masked.txt" \
  || { say "FAIL DMA-BUF export not refused under the mask"; fail=1; }

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
grep -q "changed" "$OUT/probe-tampered.txt" && { say "FAIL tampered driver was modified"; fail=1; }
grep -q "ignored" "$OUT/probe-tampered.txt" || { say "FAIL no refusal message"; fail=1; }

say "tampered profile file is refused at build time"
python3 - "$OUT/gates-profile.json" /tmp/tampered-profile.json <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); b = p["driver"]["build_id"]
p["driver"]["build_id"] = ("0" if b[0] != "0" else "1") + b[1:]
json.dump(p, open(sys.argv[2], "w"))
PY
if python3 -m shimgen build --driver "$DRIVER" --gates /tmp/tampered-profile.json \
     --out build/gpu-gates-bad >>"$LOG" 2>&1; then
  say "FAIL tampered profile accepted"; fail=1
else
  say "tampered profile refused: $(tail -1 "$LOG")"
fi

say "SHIMGEN_TRACE=attrs and an override under PyTorch"
SHIMGEN_TRACE=attrs SHIMGEN_ATTR_OVERRIDE=124=0 LD_PRELOAD=$SHIM python3 -c "
import torch; x = torch.ones(4, device='cuda'); print('torch ok', float(x.sum()))
" >"$OUT/attrs.txt" 2>&1
grep -c "shimgen attr:" "$OUT/attrs.txt" | sed 's/^/attr lines: /' | tee -a "$LOG"
grep "shimgen attr:" "$OUT/attrs.txt" | awk '{print $NF}' | sort | uniq -c | tee -a "$LOG"
grep -E "SHIMGEN_ATTR_OVERRIDE|torch ok" "$OUT/attrs.txt" | tee -a "$LOG"

say "RESULT $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
