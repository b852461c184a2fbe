"""Compare the kernels `shimgen report --json` names (groups[0].kernels) with what CUPTI's
activity records name, through torch.profiler (tests/gpu/kernels_profiled.py), for the same
run: the same kernels launched, each launched as many times.
    python3 tests/gpu/compare_kernels.py REPORT.json PROFILED.json
Only kernels launched are compared: one with 0 launches is a handle the program got (a
library gets many at its load) and never launched, which CUPTI does not record. A name the
trace file cut (`cut`) cannot be the profiler's: it is a difference. Exits 1 on a
difference."""

import json
import sys

rep = json.load(open(sys.argv[1]))["groups"][0]["kernels"] or []
prof = json.load(open(sys.argv[2]))["kernels"]
ours: dict[str, int] = {}
for k in rep:
    if k["launches"]:
        ours[k["demangled"]] = ours.get(k["demangled"], 0) + k["launches"]
unlaunched = sum(1 for k in rep if not k["launches"])
cut = [k["demangled"] for k in rep if k["cut"] and k["launches"]]
theirs = dict(prof)
same = {n for n in ours if theirs.get(n) == ours[n]}
only_ours = {n: ours[n] for n in ours if n not in theirs}
differ = {n: (ours[n], theirs[n]) for n in ours if n in theirs and theirs[n] != ours[n]}
left = {n: c for n, c in theirs.items() if n not in ours}
print(f"shimgen: {len(ours)} kernels launched, {sum(ours.values())} launches ({len(cut)} "
      f"names cut; {unlaunched} handles never launched, not compared); profiler: "
      f"{len(theirs)} kernels, {sum(theirs.values())} launches; the same name and count: "
      f"{len(same)}")
for what, d in (("only shimgen", only_ours), ("counts differ (shimgen, profiler)", differ),
                ("only the profiler", left)):
    for n, v in list(d.items())[:20]:
        print(f"  {what}: {v} {n[:160]}{' (name cut)' if n in cut else ''}")
ok = not only_ours and not differ and not left
print("PASS" if ok else "FAIL", "names and counts as CUPTI's activity records")
sys.exit(0 if ok else 1)
