#!/usr/bin/env python3
"""Compare the shim's trace with the CUPTI counter: nothing may bypass the shim.

    python3 tests/gpu/compare_counts.py --shim 'trace.*.json' --cupti 'cupti.*.json' \
        [--exports exports.txt] [--label NAME] [--json-out result.json] [--strict] \
        [--allow-unmapped]

Both sides may be several per-process JSON files ({"pid": N, "calls": {name: count}}); glob
patterns are expanded here. The rule, for every function CUPTI saw: the shim's count is at
least CUPTI's. CUPTI starts counting only once the driver has loaded the injection library
(during cuInit) and its snapshot is written before the shim's (its atexit handler is
registered later, so it runs first), so the shim may count more, never fewer.

Name mapping (CUPTI's callback names vs the driver's export names), in this order:
  1. exact: the CUPTI name is compared with the shim's count of the export of the same name
     (CUPTI has separate callback ids for cuMemAlloc and cuMemAlloc_v2, for _ptds and _ptsz
     variants, so this is the normal case).
  2. family, only where the exact comparison fails or the name is no export: the name is
     reduced to its base (repeatedly stripping a trailing "_ptds", "_ptsz" or "_v<N>"), and
     the sum of the shim's counts over every export with that base is compared with the sum
     of CUPTI's counts over every CUPTI name with that base. Such rows are marked "family"
     and listed, so a reader sees every place where the mapping was needed. --strict turns a
     family match into a failure.
A process that CUPTI saw calling the driver must also have a shim trace with the same pid;
otherwise its calls are compared against zero (a whole process bypassing the shim fails).
Every cuGetProcAddress answer must have been one of the shim's trampolines: a trace with
unmapped_proc_addresses above zero fails (calls through such an answer are not counted),
unless --allow-unmapped. tests/gpu/run_validation.sh passes --strict.

Exit status: 0 when every function passes, 1 when any fails, 2 on bad or missing input, 3
when not applicable (no CUPTI file and no cuInit in the shim trace).
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

_SUFFIX = re.compile(r"(_ptds|_ptsz|_v\d+)$")


def base_name(name: str) -> str:
    prev = None
    while prev != name:
        prev = name
        name = _SUFFIX.sub("", name)
    return name


def expand(patterns: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in patterns:
        hits = sorted(glob.glob(p))
        out.extend(Path(h) for h in (hits or ([p] if Path(p).exists() else [])))
    return sorted(set(out))


def load(paths: list[Path]) -> dict[int, dict]:
    """pid -> {"calls": {name: count}, "files": [...], "unmapped": n}"""
    per_pid: dict[int, dict] = {}
    for i, path in enumerate(paths):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise SystemExit(f"compare_counts: cannot read {path}: {e}") from None
        pid = int(data.get("pid", -1 - i))
        entry = per_pid.setdefault(pid, {"calls": defaultdict(int), "files": [], "unmapped": 0})
        for name, count in data.get("calls", {}).items():
            entry["calls"][name] += int(count)
        entry["files"].append(str(path))
        entry["unmapped"] += int(data.get("unmapped_proc_addresses", 0))
    return per_pid


def compare_process(shim: dict[str, int], cupti: dict[str, int], exports: set[str] | None,
                    strict: bool) -> list[dict]:
    shim_family: dict[str, int] = defaultdict(int)
    shim_members: dict[str, set[str]] = defaultdict(set)
    for n, c in shim.items():
        shim_family[base_name(n)] += c
        shim_members[base_name(n)].add(n)
    cupti_family: dict[str, int] = defaultdict(int)
    for n, c in cupti.items():
        cupti_family[base_name(n)] += c

    rows = []
    for name, c in sorted(cupti.items()):
        s = shim.get(name, 0)
        is_export = exports is None or name in exports
        row = {"function": name, "cupti": c, "shim": s, "mode": "exact", "ok": True,
               "note": ""}
        if is_export and s >= c:
            rows.append(row)
            continue
        b = base_name(name)
        fam_s, fam_c = shim_family.get(b, 0), cupti_family[b]
        row.update(mode="family", shim=fam_s, cupti=fam_c,
                   note=f"base {b}: shim {'+'.join(sorted(shim_members.get(b, ()))) or '-'}"
                        f" vs CUPTI family total; exact shim count of {name} was {s}, CUPTI {c}"
                        + ("" if is_export else f"; {name} is no export of the driver"))
        row["ok"] = fam_s >= fam_c and not strict
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shim", nargs="+", required=True, help="shim trace JSON files or globs")
    ap.add_argument("--cupti", nargs="+", required=True, help="CUPTI counter JSON files or globs")
    ap.add_argument("--exports", help="file with the driver's exported function names, one a line")
    ap.add_argument("--label", default="workload")
    ap.add_argument("--json-out", help="write the comparison as JSON here")
    ap.add_argument("--strict", action="store_true", help="a family match counts as failure")
    ap.add_argument("--allow-unmapped", action="store_true",
                    help="do not fail on unmapped cuGetProcAddress answers")
    ap.add_argument("--rows", type=int, default=0,
                    help="print at most this many passing rows (0: all); failures and family "
                         "rows are always printed")
    a = ap.parse_args(argv)

    shim_files, cupti_files = expand(a.shim), expand(a.cupti)
    if not shim_files:
        print(f"compare_counts: {a.label}: no shim trace file matches {a.shim}", file=sys.stderr)
        return 2
    if not cupti_files:
        # The driver loads the injection library in cuInit: a program that never calls
        # cuInit has no CUPTI counts, which is no evidence either way.
        if not any(e["calls"].get("cuInit") for e in load(shim_files).values()):
            print(f"SUMMARY {a.label}: N/A; no CUPTI file and the shim saw no cuInit "
                  "(the driver loads CUPTI in cuInit)")
            return 3
        print(f"compare_counts: {a.label}: no CUPTI counter file matches {a.cupti}, although "
              "the shim saw cuInit (was the injection library loaded?)", file=sys.stderr)
        return 2
    exports = None
    if a.exports:
        exports = {ln.strip() for ln in Path(a.exports).read_text().splitlines() if ln.strip()}

    shim, cupti = load(shim_files), load(cupti_files)
    all_rows: list[dict] = []
    missing_pids = []
    for pid, centry in sorted(cupti.items()):
        if not centry["calls"]:
            continue
        sentry = shim.get(pid)
        if sentry is None:
            missing_pids.append(pid)
            scalls: dict[str, int] = {}
        else:
            scalls = sentry["calls"]
        for r in compare_process(scalls, centry["calls"], exports, a.strict):
            r["pid"] = pid
            all_rows.append(r)

    # Aggregate rows over processes for the printed table (a function fails if it fails in
    # any process).
    agg: dict[tuple[str, str], dict] = {}
    for r in all_rows:
        k = (r["function"], r["mode"])
        e = agg.setdefault(k, {"function": r["function"], "mode": r["mode"], "cupti": 0,
                               "shim": 0, "ok": True, "note": r["note"], "pids": 0})
        e["cupti"] += r["cupti"]
        e["shim"] += r["shim"]
        e["ok"] &= r["ok"]
        e["pids"] += 1
    rows = sorted(agg.values(), key=lambda e: (e["ok"], e["mode"] == "exact", -e["cupti"]))
    failures = [e for e in rows if not e["ok"]]
    family = [e for e in rows if e["mode"] == "family"]
    functions = {r["function"] for r in all_rows}

    print(f"== {a.label}: shim files {len(shim_files)}, CUPTI files {len(cupti_files)}")
    print(f"{'function':44} {'CUPTI':>10} {'shim':>10}  {'mode':6}  result")
    printed = 0
    for e in rows:
        if e["ok"] and e["mode"] == "exact" and a.rows and printed >= a.rows:
            continue
        if e["ok"] and e["mode"] == "exact":
            printed += 1
        print(f"{e['function']:44} {e['cupti']:>10} {e['shim']:>10}  {e['mode']:6}  "
              f"{'ok' if e['ok'] else 'FEWER-IN-SHIM'}"
              + (f"  ({e['note']})" if e["mode"] != "exact" else ""))
    hidden = sum(1 for e in rows if e["ok"] and e["mode"] == "exact") - printed
    if hidden > 0:
        print(f"... {hidden} more passing rows")
    for pid in missing_pids:
        print(f"process {pid}: CUPTI counted driver calls but no shim trace has this pid")

    cupti_total = sum(sum(c["calls"].values()) for c in cupti.values())
    shim_total = sum(sum(s["calls"].values()) for s in shim.values())
    unmapped = sum(s["unmapped"] for s in shim.values())
    summary = {
        "label": a.label,
        "functions_compared": len(functions),
        "exact": len(functions) - len({e["function"] for e in family}),
        "family": sorted({e["function"] for e in family}),
        "failures": [{k: e[k] for k in ("function", "cupti", "shim", "mode")} for e in failures],
        "processes_cupti": len([p for p, c in cupti.items() if c["calls"]]),
        "processes_shim": len(shim),
        "processes_without_shim_trace": missing_pids,
        "cupti_calls": cupti_total,
        "shim_calls": shim_total,
        "shim_functions": len({n for s in shim.values() for n in s["calls"]}),
        "unmapped_proc_addresses": unmapped,
        "strict": a.strict,
        "ok": not failures and not missing_pids and (unmapped == 0 or a.allow_unmapped),
    }
    if unmapped and not a.allow_unmapped:
        print(f"{unmapped} cuGetProcAddress answers were no export of the driver: calls "
              "through them bypassed the shim's counters")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(summary, indent=2) + "\n")
    print(f"SUMMARY {a.label}: {'PASS' if summary['ok'] else 'FAIL'}; "
          f"{summary['functions_compared']} functions compared "
          f"({summary['exact']} exact, {len(summary['family'])} by family); "
          f"{len(failures)} with fewer calls in the shim; CUPTI calls {cupti_total}, "
          f"shim calls {shim_total} ({summary['shim_functions']} functions); "
          f"processes {summary['processes_cupti']} (CUPTI) / {summary['processes_shim']} (shim); "
          f"unmapped cuGetProcAddress answers {unmapped}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
