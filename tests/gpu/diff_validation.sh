#!/usr/bin/env bash
# `shimgen diff` as an upgrade guide: Debian's 555.58.02 (fetched as the tests fetch it,
# devtools/driverfetch.py; a copy in $SHIMGEN_DRIVER_CACHE is reused) against the machine's
# installed driver (shimgen's default driver search). Prints the text output and the gate
# offsets of both, for docs/diff.md. Checks: exit 1 (they differ) and no stderr; the JSON's
# exports equal `nm -D --defined-only`'s function sets; the JSON and text agree; the
# installed driver compared with itself gives exit 0; the whole diff under 10 s. Run from the
# repository root:
#   bash tests/gpu/diff_validation.sh          (results under $OUT or ./gpu-out)
set -uo pipefail
. tests/gpu/common.sh diff
PY=python3
export PYTHONDONTWRITEBYTECODE=1
pass() { say "PASS $*"; }
failed() { say "FAIL $*"; fail=1; }

# NEW: the installed driver as shimgen finds it (DIFF_NEW=PATH overrides, to try the script)
NEW=${DIFF_NEW:-$($PY -c 'from shimgen.driver import default_driver as d; print(d().resolve())')} \
  || { say "FAIL no installed driver found by shimgen's default search"; exit 1; }
[ -n "$NEW" ] || { say "FAIL no installed driver found"; exit 1; }
# OLD: Debian's 555.58.02 (DIFF_OLD=PATH gives a copy, for a machine without the network)
OLD=${DIFF_OLD:-$($PY -m devtools.driverfetch 2>"$OUT/diff-fetch.err" \
  | awk '$1 == "555.58.02" {print $2}')}
if [ -z "$OLD" ]; then
  cat "$OUT/diff-fetch.err"
  say "FAIL cannot fetch Debian's 555.58.02 (copy ~/.cache/shimgen/drivers from a machine"
  say "     that has it and set SHIMGEN_DRIVER_CACHE to it)"
  exit 1
fi
say "OLD $OLD"
say "NEW $NEW"

start=$(date +%s%N)
$PY -m shimgen diff "$OLD" "$NEW" >"$OUT/diff.txt" 2>"$OUT/diff.err"; rc=$?
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
cat "$OUT/diff.txt" | tee -a "$LOG"
[ "$rc" = 1 ] && [ ! -s "$OUT/diff.err" ] && pass "diff exit 1, nothing on stderr" \
  || { cat "$OUT/diff.err"; failed "diff exit $rc (want 1) or stderr not empty"; }
[ "$took_ms" -lt 10000 ] && pass "diff took $took_ms ms (under 10 s)" \
  || failed "diff took $took_ms ms (10 s allowed)"

$PY -m shimgen diff --json "$OLD" "$NEW" >"$OUT/diff.json" 2>>"$OUT/diff.err"; rc=$?
[ "$rc" = 1 ] || failed "diff --json exit $rc (want 1)"
$PY - "$OLD" "$NEW" "$OUT/diff.json" "$OUT/diff.txt" <<'PY' | tee -a "$LOG"
import json, subprocess, sys
old, new, js, txt = sys.argv[1:]
d = json.load(open(js))
text = open(txt).read()

def nm(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                         text=True, check=True).stdout
    return {p[2] for p in (l.split() for l in out.splitlines()) if len(p) == 3 and p[1] in "TWi"}

a, b = nm(old), nm(new)
ok = d["exports"]["added"] == sorted(b - a) and d["exports"]["removed"] == sorted(a - b)
print(("PASS" if ok else "FAIL") + f" exports: +{len(b - a)} -{len(a - b)} as nm lists them")
names = {s["name"] for s in d["proc_address"]}
ok2 = (f"{len(names)} names answer differently" in text) if names else \
    ("procaddr  no differences" in text)
print(("PASS" if ok2 else "FAIL") + f" procaddr: {len(names)} names in the JSON and the text")
g = d["gates"]
print(f"gates compared {g['compared']}, differ {g['differ']}; OLD error: "
      f"{d['old']['gates_error']}; NEW error: {d['new']['gates_error']}")
for x in g["gates"]:
    for side in ("old", "new"):
        s = x[side]
        if s is None:
            print(f"  {x['name']:<7} {side.upper()}: no such gate")
            continue
        fields = ", ".join(f"[{f['offset']}]&{f['mask']}" for f in s["fields"])
        init = "; ".join(f"{i['direction']} {i['status']}: " + (", ".join(
            f"file {c['file_offset']} {c['old']}->{c['new']}" for c in i["changes"]) or "-")
            for i in s["init"])
        print(f"  {x['name']:<7} {side.upper()}: struct {fields}, proof "
              f"{'passed' if s['proven'] else 'FAILED'}; {init}")
sys.exit(0 if ok and ok2 else 1)
PY
[ "${PIPESTATUS[0]}" = 0 ] || fail=1

$PY -m shimgen diff "$NEW" "$NEW" >"$OUT/diff-self.txt" 2>&1; rc=$?
[ "$rc" = 0 ] && grep -q "no differences" "$OUT/diff-self.txt" \
  && pass "the installed driver against itself: exit 0, no differences" \
  || { cat "$OUT/diff-self.txt"; failed "self-diff exit $rc"; }

[ "$fail" = 0 ] && say "PASS diff validation" || say "FAIL diff validation"
exit "$fail"
