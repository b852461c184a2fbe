"""The calls of a run traced with --trace calls compared with CUPTI's callback API
(tests/gpu/cupti_calls.c), process by process and thread by thread: the same functions in
the same order, the same bytesize of every cuMemAlloc_v2 and grid of every cuLaunchKernel.
CUPTI subscribes inside the first cuInit and writes its file at exit, so each thread's calls
are compared from the first call CUPTI saw on it (the first 20 of its calls found in the
shim's) to the last; cuGetExportTable (CUPTI reports none) and cuInit (the first one's
enter comes before CUPTI subscribes) are left out of both.

    python3 compare_calls.py RUN CUPTI_FILE_PREFIX
Prints one line per thread and a verdict; exit 0 when every thread matches."""

import glob
import json
import subprocess
import sys

SKIP = {"cuGetExportTable", "cuInit"}


def shim_threads(run):
    out = subprocess.run([sys.executable, "-m", "shimgen", "report", "--calls", "--json", run],
                         capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    per = {}
    for c in d["calls"]:
        if c["function"] in SKIP:
            continue
        a = c["args"]
        extra = ()
        if c["function"] == "cuMemAlloc_v2":
            extra = (a.get("bytesize"),)
        elif c["function"].startswith("cuLaunchKernel") and "gridDimX" in a:
            extra = (a["gridDimX"], a["gridDimY"], a["gridDimZ"])
        per.setdefault((c["pid"], c["tid"]), []).append((c["function"], extra))
    return per, d["processes"]


def cupti_threads(prefix):
    per, lost = {}, 0
    for f in glob.glob(prefix + ".*"):
        lines = open(f).read().splitlines()
        head = json.loads(lines[0])
        lost += head["lost"]
        for ln in lines[1:]:
            tid, name, a, b, c, d = json.loads(ln)
            if name in SKIP:
                continue
            extra = ()
            if name == "cuMemAlloc_v2":
                extra = (a,)
            elif d:
                extra = (a, b, c)
            per.setdefault((head["pid"], tid), []).append((name, extra))
    return per, lost


def main():
    run, prefix = sys.argv[1], sys.argv[2]
    shim, procs = shim_threads(run)
    cupti, lost = cupti_threads(prefix)
    dropped = sum(sum(p["dropped"].values()) for p in procs)
    print(f"shim: {sum(map(len, shim.values()))} calls in {len(shim)} threads "
          f"(dropped by the rings: {dropped}); CUPTI: {sum(map(len, cupti.values()))} calls "
          f"in {len(cupti)} threads (lost: {lost})")
    bad = 0
    allocs = launches = 0
    for key in sorted(cupti):
        c, s = cupti[key], shim.get(key, [])
        # the shim's calls on this thread from the first one CUPTI saw (CUPTI subscribes
        # inside the first cuInit, and writes its file at exit, before the last calls)
        k0 = min(len(c), 20)
        start = next((i for i in range(len(s)) if s[i:i + k0] == c[:k0]), None)
        same = start is not None and s[start:start + len(c)] == c
        s = s[start:] if start is not None else s
        allocs += sum(1 for n, _ in c if n == "cuMemAlloc_v2")
        launches += sum(1 for n, _ in c if n.startswith("cuLaunchKernel"))
        if not same:
            bad += 1
            k = next((i for i, (x, y) in enumerate(zip(s, c, strict=False)) if x != y),
                     min(len(s), len(c)))
            print(f"  pid {key[0]} tid {key[1]}: DIFFER at {k}: shim {s[k:k + 3]} "
                  f"cupti {c[k:k + 3]} (shim {len(s)}, cupti {len(c)})")
        else:
            print(f"  pid {key[0]} tid {key[1]}: same {len(c)} calls (the shim had {start} "
                  f"before CUPTI's first, {len(s) - len(c)} after CUPTI's last)")
    extra = [k for k in shim if k not in cupti]
    print(f"threads only the shim saw: {len(extra)} "
          f"({sum(len(shim[k]) for k in extra)} calls)")
    print(f"cuMemAlloc_v2 compared: {allocs}; cuLaunchKernel compared: {launches}")
    print("VERDICT " + ("MATCH" if not bad and cupti else "MISMATCH"))
    return 0 if not bad and cupti else 1


if __name__ == "__main__":
    sys.exit(main())
