# Set-up shared by the GPU scripts; sourced from the repository root:
#   . tests/gpu/common.sh NAME
# NVLink multicast off, $OUT (default ./gpu-out), carried wheels (.whl/*.whl) installed
# into /tmp/site and put on PYTHONPATH with the repository, the machine's driver in
# $DRIVER (unless set), the log $OUT/NAME.log, say() to print and log a line, fail=0.
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || { echo "carried wheels did not install" >&2; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
# NVLink multicast off: the variables of shimgen/probe/child.py, the one list of them
MULTICAST_OFF=$(python3 -c 'from shimgen.probe.child import shell_exports as e; print(e())') \
  || { echo "cannot import shimgen.probe.child" >&2; exit 1; }
eval "$MULTICAST_OFF"
DRIVER=${DRIVER:-$(readlink -f /usr/local/nvidia/lib64/libcuda.so.1 2>/dev/null || readlink -f /lib/libcuda.so.1)}
LOG=$OUT/$1.log; : >"$LOG"
say() { echo "== $*" | tee -a "$LOG"; }
fail=0
