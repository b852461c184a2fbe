#!/usr/bin/env bash
# The GPU proof of the complete forwarding shim, in one command, from the repo root
# of a machine with an NVIDIA GPU and driver:
#
#     bash tests/gpu/run_validation.sh
#
# 1. installs carried wheels (.whl/*.whl, e.g. pyelftools) into /tmp/site when present;
# 2. builds the shim for the machine's driver (SHIMGEN_GPU_DRIVER, default
#    /usr/local/nvidia/lib64/libcuda.so.580.159.04, else the one /lib/libcuda.so.1 names);
# 3. compiles the CUPTI counter (tests/gpu/cupti_counter.c), the driver-API program
#    (tests/gpu/driver_api.c) and the CUDA-runtime entry-point check (tests/c/cudart_entry.c);
# 4. runs every workload (a) plainly and (b) under LD_PRELOAD=libcudashim.so with
#    SHIMGEN_TRACE=1 and the CUPTI counter injected (CUDA_INJECTION64_PATH); the training loop
#    also (c) under the shim with tracing off. Each must succeed with the same result, and
#    tests/gpu/compare_counts.py --strict must find, for every function CUPTI saw, shim >=
#    CUPTI under the exact same name (a family match of ABI variants fails), with zero
#    unmapped cuGetProcAddress answers; a comparison that cannot run fails;
#    the shim must export exactly the functions `nm -D` lists for the real driver; Triton
#    must run (cupy_kernel.py); NCCL runs with two ranks when two GPUs are visible;
#    A negative control (tests/gpu/bypass.c) calls the real driver around the shim and must
#    make the comparison fail;
# 5. prints a summary table, and leaves logs and JSON in $OUT (default build/gpu-validation):
#    summary.txt and validation.tar.gz.
# Exit status 0 only when everything passed.

set -u -o pipefail
export PYTHONUNBUFFERED=1

ROOT=$(pwd)
[ -f "$ROOT/tests/gpu/run_validation.sh" ] || { echo "run from the repo root" >&2; exit 2; }
# NVLink multicast off: the variables of shimgen/probe/child.py, the one list of them
MULTICAST_OFF=$(PYTHONPATH=$ROOT python3 -c \
  'from shimgen.probe.child import shell_exports as e; print(e())') \
  || { echo "cannot import shimgen.probe.child" >&2; exit 2; }
eval "$MULTICAST_OFF"
OUT=${OUT:-$ROOT/build/gpu-validation}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/shimgen-gpu.XXXXXX)
LOGS=$W/logs JSON=$W/json BIN=$W/bin RES=$W/results.tsv
mkdir -p "$LOGS" "$JSON" "$BIN"
: >"$RES"
T0=$(date +%s)
STEP_TIMEOUT=${STEP_TIMEOUT:-150}

log() { echo "[$(($(date +%s) - T0))s] $*"; }
die() {
    log "FATAL: $*"
    tar czf "$OUT/validation.tar.gz" -C "$W" logs json 2>/dev/null
    exit 1
}

# ---- facts about the machine ----
{
    echo "date: $(date -u +%FT%TZ)"
    uname -a
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
    nvcc --version 2>&1 | tail -2
    ls -liL /lib/libcuda.so.1 /usr/local/nvidia/lib64/libcuda.so.1 2>&1
    readlink -f /lib/libcuda.so.1 /usr/local/nvidia/lib64/libcuda.so.1 2>&1
    git -C "$ROOT" rev-parse HEAD 2>&1
    git -C "$ROOT" status --short 2>&1
} >"$LOGS/machine.txt" 2>&1
log "machine: $(sed -n 3p "$LOGS/machine.txt")"

# ---- 1. wheels ----
SITE=/tmp/site
if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "$ROOT"/.whl/*.whl >"$LOGS/pip.log" 2>&1 || die "wheel install failed"
fi
sg() { PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}" python3 -m shimgen "$@"; }

# ---- 2. the shim ----
DRIVER=${SHIMGEN_GPU_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.580.159.04}
[ -e "$DRIVER" ] || DRIVER=$(readlink -f /lib/libcuda.so.1)
[ -e "$DRIVER" ] || die "no libcuda found"
sg build --driver "$DRIVER" --out "$W/build" >"$LOGS/shim-build.txt" 2>&1 ||
    { cat "$LOGS/shim-build.txt"; die "shimgen build failed"; }
cat "$LOGS/shim-build.txt" | cut -c1-200
SHIM=$(awk '$1 == "shim" {print $2}' "$LOGS/shim-build.txt")
[ -f "$SHIM" ] || die "no shim library in the build summary"
# The functions the real driver exports, by binutils' nm (not shimgen's own reader), and
# the shim's: the same set, plus the dlopen wrapper. shimgen's list must agree too.
defined_functions() { nm -D --defined-only "$1" | awk '$2 ~ /^[TWi]$/ {print $3}' | sed 's/@.*//' | sort -u; }
defined_functions "$DRIVER" >"$JSON/exports.txt"
NEXPORTS=$(wc -l <"$JSON/exports.txt")
[ "$NEXPORTS" -gt 0 ] || die "nm -D lists no function of $DRIVER"
defined_functions "$SHIM" | grep -vx dlopen >"$JSON/shim-exports.txt"
NSHIM=$(wc -l <"$JSON/shim-exports.txt")
sg exports --driver "$DRIVER" 2>"$LOGS/exports.err" | sort -u >"$JSON/shimgen-exports.txt" ||
    die "shimgen exports failed"
EXPORTS_SAME=yes
diff "$JSON/exports.txt" "$JSON/shim-exports.txt" >"$LOGS/exports.diff" || EXPORTS_SAME=no
diff "$JSON/exports.txt" "$JSON/shimgen-exports.txt" >>"$LOGS/exports.diff" || EXPORTS_SAME=no
log "driver exports $NEXPORTS functions (nm -D); shim exports $NSHIM (+ dlopen); shimgen exports agrees; same set: $EXPORTS_SAME"

# ---- 3. programs ----
NVPY=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
CUPTI_INC="" CUPTI_LIB=""
for d in "${CUPTI_ROOT:-}" /usr/local/cuda/extras/CUPTI /usr/local/cuda ${NVPY:+"$NVPY/cu13" "$NVPY/cuda_cupti"}; do
    [ -n "$d" ] && [ -f "$d/include/cupti.h" ] || continue
    for l in "$d/lib64" "$d/lib" "$d/targets/x86_64-linux/lib"; do
        f=$(ls "$l"/libcupti.so "$l"/libcupti.so.* 2>/dev/null | head -1)
        if [ -n "$f" ]; then CUPTI_INC=$d/include CUPTI_LIB=$f; break 2; fi
    done
done
if [ -z "$CUPTI_LIB" ]; then # last resort: search
    h=$(find / -xdev -name cupti.h -path '*include*' 2>/dev/null | head -1)
    f=$(find / -xdev -name 'libcupti.so*' 2>/dev/null | head -1)
    [ -n "$h" ] && [ -n "$f" ] && CUPTI_INC=$(dirname "$h") CUPTI_LIB=$f
fi
[ -n "$CUPTI_LIB" ] || die "no CUPTI found"
log "CUPTI: include $CUPTI_INC, library $CUPTI_LIB"
CFLAGS=(-O2 -Wall -Wextra)
gcc "${CFLAGS[@]}" -shared -fPIC -o "$BIN/cupti_counter.so" tests/gpu/cupti_counter.c \
    -I"$CUPTI_INC" "$CUPTI_LIB" -Wl,-rpath,"$(dirname "$CUPTI_LIB")" >"$LOGS/cc-cupti.log" 2>&1 ||
    { cat "$LOGS/cc-cupti.log"; die "cupti_counter.c did not compile"; }
CUDA_INC=/usr/local/cuda/include
# Link against the driver itself: DT_NEEDED becomes its SONAME, libcuda.so.1.
gcc "${CFLAGS[@]}" -o "$BIN/driver_api" tests/gpu/driver_api.c -I"$CUDA_INC" "$DRIVER" >"$LOGS/cc-driver_api.log" 2>&1 ||
    { cat "$LOGS/cc-driver_api.log"; die "driver_api.c did not compile"; }
gcc "${CFLAGS[@]}" -o "$BIN/cudart_entry" tests/c/cudart_entry.c -ldl >"$LOGS/cc-cudart_entry.log" 2>&1 ||
    { cat "$LOGS/cc-cudart_entry.log"; die "cudart_entry.c did not compile"; }
CUDART=$( { [ -n "$NVPY" ] && find "$NVPY" -name 'libcudart.so.13*' 2>/dev/null; ls /usr/local/cuda/lib64/libcudart.so.13* 2>/dev/null; } | head -1)
[ -n "$CUDART" ] || die "no libcudart.so.13 found"
log "libcudart for the entry-point check: $CUDART"
readelf -d "$BIN/driver_api" | grep NEEDED >>"$LOGS/cc-driver_api.log"

# ---- 4. workloads ----
# run_one NAME MODE CHECK_REGEX cmd...   MODE: plain | shim (trace + CUPTI) | notrace
run_one() {
    local name=$1 mode=$2 check=$3
    shift 3
    local logf="$LOGS/$name.$mode.log" t rc
    t=$(date +%s)
    case $mode in
    plain) timeout -k 10 "$STEP_TIMEOUT" "$@" >"$logf" 2>&1 ;;
    notrace) env LD_PRELOAD="$SHIM" timeout -k 10 "$STEP_TIMEOUT" "$@" >"$logf" 2>&1 ;;
    shim) env LD_PRELOAD="$SHIM" SHIMGEN_TRACE=1 SHIMGEN_TRACE_FILE="$JSON/$name.shim.%p.json" \
        CUDA_INJECTION64_PATH="$BIN/cupti_counter.so" CUPTI_COUNTER_FILE="$JSON/$name.cupti.%p.json" \
        timeout -k 10 "$STEP_TIMEOUT" "$@" >"$logf" 2>&1 ;;
    esac
    rc=$?
    local ok=no
    [ $rc -eq 0 ] && grep -Eq "$check" "$logf" && ok=yes
    local warn
    # every line of the shim's but the one that says where the trace went
    warn=$(grep '^shimgen:' "$logf" | grep -vc '^shimgen: trace written to ')
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$mode" "$rc" "$ok" "$(($(date +%s) - t))" "$warn" >>"$RES"
    log "$name/$mode: rc $rc, check $ok, $(($(date +%s) - t)) s, shimgen warnings $warn"
    [ "$ok" = yes ] || tail -n 15 "$logf" | sed "s/^/    $name.$mode| /"
}

compare() {
    local name=$1 rc
    python3 tests/gpu/compare_counts.py --strict --label "$name" --shim "$JSON/$name.shim.*.json" \
        --cupti "$JSON/$name.cupti.*.json" --exports "$JSON/exports.txt" \
        --json-out "$JSON/$name.compare.json" >"$LOGS/$name.compare.log" 2>&1
    rc=$?
    # 3 (no CUPTI file, no cuInit) is a failure too: every workload here calls cuInit.
    local verdict=no
    [ $rc -eq 0 ] && verdict=yes
    printf '%s\tcompare\t%s\t%s\t0\t0\n' "$name" "$rc" "$verdict" >>"$RES"
    grep '^SUMMARY' "$LOGS/$name.compare.log" || tail -n 5 "$LOGS/$name.compare.log"
    grep 'FEWER-IN-SHIM\|  family  \|^process ' "$LOGS/$name.compare.log" | head -n 20
}

workload() { # NAME CHECK cmd...
    local name=$1 check=$2
    shift 2
    run_one "$name" plain "$check" "$@"
    run_one "$name" shim "$check" "$@"
    compare "$name"
}

workload driver_api 'DRIVER_API_OK' "$BIN/driver_api"
# cudart_entry prints, per route, the library its answer lies in: plainly the driver, under
# the shim the shim (checked below). "rc 0 call_rc 0" for both routes.
workload cudart_entry '^cudaGetDriverEntryPointByVersion rc 0 call_rc 0' "$BIN/cudart_entry" "$CUDART"
workload train 'FINAL_LOSS' python3 tests/gpu/train.py
run_one train notrace 'FINAL_LOSS' python3 tests/gpu/train.py
workload cupy_triton '^CUPY_TRITON_OK' python3 tests/gpu/cupy_kernel.py
# Two ranks, one per GPU, where two GPUs are visible; one rank otherwise (it says so, and
# checks collectives whose result a no-op would get wrong).
NRANKS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$NRANKS" -ge 2 ] && NRANKS=2 || NRANKS=1
log "NCCL ranks: $NRANKS"
MASTER_PORT=29511 run_one nccl_allreduce plain "^NCCL_OK world_size $NRANKS " \
    python3 tests/gpu/nccl_allreduce.py --nproc "$NRANKS"
MASTER_PORT=29512 run_one nccl_allreduce shim "^NCCL_OK world_size $NRANKS " \
    python3 tests/gpu/nccl_allreduce.py --nproc "$NRANKS"
compare nccl_allreduce

# Negative control: calls made around the shim (through an alias of the real driver, see
# tests/gpu/bypass.c) must make the comparison fail, naming cuDeviceGetCount.
mkdir -p "$W/alias"
ln -sf "$DRIVER" "$W/alias/libdriver-alias.so"
if gcc "${CFLAGS[@]}" -o "$BIN/bypass" tests/gpu/bypass.c -I"$CUDA_INC" "$DRIVER" -ldl >"$LOGS/cc-bypass.log" 2>&1; then
    # A bare name found through the search path: the one dlopen form the wrapper does not
    # resolve (a path to the driver's file, under any name, is redirected to the shim).
    LD_LIBRARY_PATH="$W/alias${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        run_one bypass shim 'BYPASS_DONE' "$BIN/bypass" libdriver-alias.so
    python3 tests/gpu/compare_counts.py --strict --label bypass --shim "$JSON/bypass.shim.*.json" \
        --cupti "$JSON/bypass.cupti.*.json" --exports "$JSON/exports.txt" \
        --json-out "$JSON/bypass.compare.json" >"$LOGS/bypass.compare.log" 2>&1
    rc=$?
    detected=no
    [ $rc -eq 1 ] && grep -q '^cuDeviceGetCount .*FEWER-IN-SHIM' "$LOGS/bypass.compare.log" && detected=yes
    printf 'bypass\tcontrol\t%s\t%s\t0\t0\n' "$rc" "$detected" >>"$RES"
    log "negative control: compare_counts rc $rc (1 expected), bypass detected: $detected"
    grep '^SUMMARY\|FEWER-IN-SHIM' "$LOGS/bypass.compare.log"
else
    cat "$LOGS/cc-bypass.log"
    printf 'bypass\tcontrol\tcc\tno\t0\t0\n' >>"$RES"
fi

# ---- 5. summary ----
python3 - "$W" "$SHIM" "$NEXPORTS" "$EXPORTS_SAME" "$LOGS/shim-build.txt" >"$W/summary.txt" <<'EOF'
import glob, json, re, sys
from pathlib import Path
W, shim, nexports, same, build = sys.argv[1:]
W = Path(W)
logs = W / "logs"
rows = [l.split("\t") for l in (W / "results.tsv").read_text().splitlines() if l]
res = {(r[0], r[1]): r for r in rows}
fails = []

def grab(name, mode, key):
    p = logs / f"{name}.{mode}.log"
    if not p.exists():
        return None
    m = re.findall(rf"^{key} (\S+)", p.read_text(errors="replace"), re.M)
    return m[-1] if m else None

print("== shim build")
print(Path(build).read_text().strip()[:1500])
print(f"driver exports {nexports} functions (nm -D); shim exports the same set: {same}")
if same != "yes":
    fails.append("exports")
print()
print(f"{'workload':16} {'plain':10} {'shim+trace+CUPTI':18} {'CUPTI vs shim':14} {'funcs':>5} {'CUPTI calls':>11} {'shim calls':>10} {'time s':>7}")
names = []
for r in rows:
    if r[0] not in names and r[0] != "bypass":
        names.append(r[0])
for n in names:
    p, s, c = res.get((n, "plain")), res.get((n, "shim")), res.get((n, "compare"))
    cj = W / "json" / f"{n}.compare.json"
    d = json.loads(cj.read_text()) if cj.exists() else {}
    def st(r):
        if r is None:
            return "-"
        return "ok" if r[3] == "yes" else (f"FAIL(rc {r[2]})" if r[2] != "0" else "FAIL(check)")
    cs = "-" if c is None else {"yes": "PASS"}.get(c[3], f"FAIL(rc {c[2]})")
    for r, what in ((p, "plain"), (s, "shim"), (res.get((n, "notrace")), "notrace")):
        if r is not None and r[3] != "yes":
            fails.append(f"{n}/{what}")
        if r is not None and what != "plain" and r[5] != "0":
            fails.append(f"{n}/{what}: {r[5]} shimgen warnings")
    if c is None or c[3] != "yes":
        fails.append(f"{n}/compare")
    t = sum(int(x[4]) for x in rows if x[0] == n)
    print(f"{n:16} {st(p):10} {st(s):18} {cs:14} {d.get('functions_compared', '-'):>5} "
          f"{d.get('cupti_calls', '-'):>11} {d.get('shim_calls', '-'):>10} {t:>7}")
    for f in d.get("failures", []):
        print(f"    fewer in shim: {f}")
    if d.get("family"):
        print(f"    compared by family: {', '.join(d['family'])}")

# The shim trace must show the workload went through the shim: cuInit (or, without cuInit,
# cuDriverGetVersion) counted, in every workload.
print()
for n in names:
    calls = {}
    for f in glob.glob(str(W / "json" / f"{n}.shim.*.json")):
        for k, v in json.loads(Path(f).read_text()).get("calls", {}).items():
            calls[k] = calls.get(k, 0) + v
    unm = sum(json.loads(Path(f).read_text()).get("unmapped_proc_addresses", 0)
              for f in glob.glob(str(W / "json" / f"{n}.shim.*.json")))
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:4]
    reached = calls.get("cuInit", 0) > 0 or calls.get("cuDriverGetVersion", 0) > 0
    if not reached:
        fails.append(f"{n}: no call reached the shim")
    if unm:
        fails.append(f"{n}: {unm} unmapped cuGetProcAddress answers")
    print(f"reached shim {n:14}: {'yes' if reached else 'NO'}; cuInit {calls.get('cuInit', 0)}, "
          f"{len(calls)} functions, unmapped proc addresses {unm}; top {top}")

# cudart_entry: the entry points handed out under the shim must lie in the shim.
sl = logs / "cudart_entry.shim.log"
if sl.exists():
    lines = [l for l in sl.read_text().splitlines() if l.startswith("cudaGetDriverEntryPoint")]
    # the library each answer lies in ("... lib FILE"), compared with the shim's whole path
    in_shim = len(lines) == 2 and all(
        Path(l.rsplit(" lib ", 1)[-1]).resolve() == Path(shim).resolve() for l in lines)
    print("cudart_entry under shim:", "; ".join(lines) or "no output")
    pl = logs / "cudart_entry.plain.log"
    print("cudart_entry plain     :", "; ".join(l for l in pl.read_text().splitlines() if l.startswith("cudaGetDriverEntryPoint")))
    if not in_shim:
        fails.append("cudart_entry: entry points not in the shim")

# Negative control: the oracle must see calls that go around the shim.
ctl = res.get(("bypass", "control"))
bj = W / "json" / "bypass.compare.json"
bd = json.loads(bj.read_text()) if bj.exists() else {}
print()
print(f"negative control (bypass.c, calls around the shim): run "
      f"{'ok' if res.get(('bypass', 'shim'), ['', '', '', 'no'])[3] == 'yes' else 'FAIL'}, "
      f"compare_counts rc {ctl[2] if ctl else '-'} (1 expected), detected: "
      f"{ctl[3] if ctl else 'no'}; failures reported: {bd.get('failures', [])}")
if not ctl or ctl[3] != "yes":
    fails.append("negative control: bypass not detected")

# NCCL: how many ranks ran, and what was checked.
for m in ("plain", "shim"):
    p = logs / f"nccl_allreduce.{m}.log"
    got = [l for l in p.read_text(errors="replace").splitlines()
           if l.startswith(("NCCL_OK", "rank0 "))] if p.exists() else []
    print(f"nccl_allreduce {m:5}: {'; '.join(got) or 'no NCCL_OK line'}")

# Same training result without and with the shim.
vals = {m: (grab("train", m, "FINAL_LOSS"), grab("train", m, "PARAM_SUM")) for m in ("plain", "shim", "notrace")}
print()
for m, (l, ps) in vals.items():
    print(f"train {m:8}: FINAL_LOSS {l}  PARAM_SUM {ps}")
if len(set(vals.values())) != 1 or vals["plain"][0] is None:
    fails.append("train: results differ between runs")
    print("train: results DIFFER")
else:
    print("train: identical loss and parameters in all three runs")
print()
print("RESULT:", "PASS" if not fails else "FAIL: " + "; ".join(fails))
EOF
STATUS=$?
cat "$W/summary.txt"
cp "$W/summary.txt" "$OUT/summary.txt"
cp "$LOGS/shim-build.txt" "$W/json/" 2>/dev/null
tar czf "$OUT/validation.tar.gz" -C "$W" logs json summary.txt results.tsv
log "done; logs and JSON in $OUT/validation.tar.gz"
grep -q '^RESULT: PASS' "$W/summary.txt" && [ $STATUS -eq 0 ]
