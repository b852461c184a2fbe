#!/usr/bin/env bash
# GPU proof of a graph's launches by its kernel nodes (docs/validation.md, "Kernels"): a
# PyTorch CUDA graph of 5 kernels replayed 7 times (tests/gpu/graph_replay.py) under
# `shimgen run --trace time`: the report's row "a graph of 5 kernel nodes" has 7 launches,
# the elementwise kernel's 3 warm-up launches are counted and the 5 captured ones are not,
# and the stream track of the calls run's timeline holds the replays.
# Run from the repository root:  bash tests/gpu/graphs_validation.sh   (results in $OUT)
set -uo pipefail
. tests/gpu/common.sh graphs
R=$OUT/runs-graphs; rm -rf "$R"; mkdir -p "$R"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/shimgen-cache}
say "driver $DRIVER"
python3 -m shimgen run --driver "$DRIVER" --trace time -o "$R/time" -- \
  python3 tests/gpu/graph_replay.py >"$OUT/graphs.out" 2>"$OUT/graphs.err" || { say "FAIL run"; fail=1; }
cat "$OUT/graphs.out" | tee -a "$LOG"
python3 -m shimgen report "$R/time" | sed -n '/^kernels/,$p' | tee -a "$LOG"
python3 -m shimgen report --json "$R/time" >"$OUT/graphs.json"
python3 - "$OUT/graphs.json" <<'PY' | tee -a "$LOG" || fail=1
import json, sys
ks = json.load(open(sys.argv[1]))["groups"][0]["kernels"] or []
graphs = [(k["graph_kernel_nodes"], k["launches"]) for k in ks if k["kind"] == "graph"]
adds = [k["launches"] for k in ks if k["kind"] == "kernel" and "add" in k["demangled"].lower()]
print("graphs (kernel nodes, launches):", graphs, "; elementwise add launches:", adds)
ok = graphs == [(5, 7)] and sum(adds) == 3
print("PASS" if ok else "FAIL", "the graph's 5 kernel nodes, 7 launches; 3 adds outside it")
sys.exit(0 if ok else 1)
PY
python3 -m shimgen run --driver "$DRIVER" --trace calls -o "$R/calls" -- \
  python3 tests/gpu/graph_replay.py >>"$OUT/graphs.out" 2>>"$OUT/graphs.err" || { say "FAIL calls run"; fail=1; }
python3 - "$R"/calls/timeline/*.json <<'PY' | tee -a "$LOG" || fail=1
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
tracks = {e["tid"]: e["args"]["name"] for e in ev if e["name"] == "thread_name" and e["tid"] >= 1 << 30}
on = [(tracks[e["tid"]], e["name"]) for e in ev if e["tid"] in tracks and e["ph"] == "i"]
replays = [t for t, n in on if n == "cuGraphLaunch"]
print("stream tracks:", sorted(set(tracks.values())), "; cuGraphLaunch on them:", len(replays))
ok = len(replays) == 7 and len(set(replays)) == 1
print("PASS" if ok else "FAIL", "the 7 replays on one stream's track")
sys.exit(0 if ok else 1)
PY
say "$([ $fail = 0 ] && echo PASS || echo FAIL) graphs_validation"
exit $fail
