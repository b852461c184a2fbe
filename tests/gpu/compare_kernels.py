"""Compare the kernels `shimgen report --json` names (groups[0].kernels) with what CUPTI's
activity records name, through torch.profiler (tests/gpu/kernels_profiled.py), for the same
run: the same kernels, each launched as many times.
    python3 tests/gpu/compare_kernels.py REPORT.json PROFILED.json
A name the trace file cut (KERN_NAME_MAX bytes, its NUL included) is compared by the
profiler's names it can be the start of; the cut ones are counted apart. Exits 1 on a
difference."""

import json
import sys

from shimgen.runenv import KERN_NAME_MAX

rep = json.load(open(sys.argv[1]))["groups"][0]["kernels"] or []
prof = json.load(open(sys.argv[2]))["kernels"]
ours: dict[str, int] = {}
cut = 0
for k in rep:
    if len(k["name"]) >= KERN_NAME_MAX - 1:
        cut += k["launches"]
        continue
    ours[k["demangled"]] = ours.get(k["demangled"], 0) + k["launches"]
theirs = dict(prof)
same = {n for n in ours if theirs.get(n) == ours[n]}
only_ours = {n: ours[n] for n in ours if n not in theirs}
differ = {n: (ours[n], theirs[n]) for n in ours if n in theirs and theirs[n] != ours[n]}
left = {n: c for n, c in theirs.items() if n not in ours}
print(f"shimgen: {len(ours)} kernels, {sum(ours.values())} launches (+{cut} launches of names "
      f"cut at {KERN_NAME_MAX - 1} bytes); profiler: {len(theirs)} kernels, "
      f"{sum(theirs.values())} launches; the same name and count: {len(same)}")
for what, d in (("only shimgen", only_ours), ("counts differ (shimgen, profiler)", differ),
                ("only the profiler", left)):
    for n, v in list(d.items())[:20]:
        print(f"  {what}: {v} {n[:160]}")
ok = not only_ours and not differ and sum(left.values()) == cut
print("PASS" if ok else "FAIL", "names and counts as CUPTI's activity records")
sys.exit(0 if ok else 1)
