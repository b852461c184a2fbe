"""Check a SHIMGEN_TRACE=timeline output against the trace summary of the same run.

    python3 tests/gpu/check_timeline.py TIMELINE.json SUMMARY.json

Checks: the file is Chrome trace JSON; every event is a complete ("X") event of an
exported function with ts, dur >= 0; events kept + overwritten = calls timed (the
summary's calls minus untimed_calls); when no ring overflowed, each function has as many
events as the summary has calls; the events of each thread nest (a call made inside
another ends before it); the summary's histograms hold every timed call and its error
returns are of called functions, at most their calls. Prints a line per check, the busiest
threads and the functions with the most time, and exits 1 if a check fails.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict

EPS_US = 0.0015  # ts and dur carry three decimals of a microsecond


def nesting_violations(events: list[dict], name: str | None = None) -> tuple[int, int]:
    """For the events of one thread: (events that end after the call that encloses their
    start, deepest nesting). With `name`, the deepest chain counts only `name` events.
    tests/runtime/test_timing.py uses this too."""
    stack: list[dict] = []
    bad = deepest = 0
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - EPS_US:
            stack.pop()
        if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + EPS_US:
            bad += 1
        stack.append(e)
        depth = len(stack) if name is None else sum(x["name"] == name for x in stack)
        deepest = max(deepest, depth)
    return bad, deepest


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    tl = json.load(open(argv[0]))
    summary = json.load(open(argv[1]))
    ok = True

    def check(what: str, cond: bool) -> None:
        nonlocal ok
        ok &= bool(cond)
        print(f"{'ok  ' if cond else 'FAIL'} {what}")

    events = [e for e in tl["traceEvents"] if e.get("ph") == "X"]
    other = tl["otherData"]
    timed = sum(summary["calls"].values()) - summary.get("untimed_calls", 0)
    print(f"events {len(events)}, kept {other['events_kept']}, overwritten "
          f"{other['events_overwritten']}, exited-thread events dropped "
          f"{other['events_of_exited_threads_dropped']}; calls timed {timed}")
    check("every event is complete, with ts and dur >= 0",
          all(e["ts"] >= 0 and e["dur"] >= 0 for e in events))
    check("events written = events kept", len(events) == other["events_kept"])
    check("kept + overwritten + dropped = calls timed",
          other["events_kept"] + other["events_overwritten"]
          + other["events_of_exited_threads_dropped"] == timed)
    names = Counter(e["name"] for e in events)
    if other["events_overwritten"] == 0 and other["events_of_exited_threads_dropped"] == 0:
        diff = {n: (names[n], c) for n, c in summary["calls"].items() if names[n] != c}
        # Only functions whose calls went past the shadow stack can have fewer events.
        check("events per function = calls per function"
              + (f" (untimed calls {summary.get('untimed_calls', 0)})" if diff else ""),
              not diff or sum(c - e for e, c in diff.values()) == summary.get("untimed_calls", 0))
    # The summary's histograms and error returns (docs/design.md, "Error returns and latency
    # histograms"): one histogram count per timed call; errors only of called functions,
    # never more than their calls; the mode said.
    untimed = summary.get("untimed_calls", 0)
    short = {n: (sum(t["hist"]), t["calls"]) for n, t in summary["time"].items()
             if sum(t["hist"]) != t["calls"]}
    check("histogram counts = calls per function" + (f" (untimed {untimed})" if short else ""),
          sum(c - h for h, c in short.values()) == untimed
          and all(h <= c for h, c in short.values()))
    errors = summary.get("errors", {})
    check(f"error returns of {len(errors)} functions, each at most its calls",
          all(sum(codes.values()) <= summary["calls"].get(n, 0) for n, codes in errors.items())
          and all(int(c) != 0 for codes in errors.values() for c in codes))
    check("mode timeline, ns_per_tick > 0",
          summary.get("mode") == "timeline" and summary.get("ns_per_tick", 0) > 0)
    for n, codes in sorted(errors.items()):
        print(f"  errors {n}: {codes}")
    by_tid: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        by_tid[e["tid"]].append(e)
    nest = [nesting_violations(evs) for evs in by_tid.values()]
    check(f"events nest on each of {len(by_tid)} threads (deepest "
          f"{max((d for _, d in nest), default=0)})", sum(b for b, _ in nest) == 0)
    for m in tl["traceEvents"]:
        if m.get("ph") == "M" and m.get("name") == "thread_name":
            a = m["args"]
            print(f"  ring of thread {m['tid']}: recorded {a['calls_recorded']}, "
                  f"kept {a['calls_kept']}")
    print("  " + json.dumps(other))
    busiest = sorted(by_tid.items(), key=lambda kv: -len(kv[1]))[:4]
    for tid, evs in busiest:
        span = max(e["ts"] + e["dur"] for e in evs) - min(e["ts"] for e in evs)
        print(f"  thread {tid}: {len(evs)} calls over {span / 1e3:.1f} ms")
    total = Counter()
    for e in events:
        total[e["name"]] += e["dur"]
    for name, us in total.most_common(8):
        print(f"  {us / 1e3:10.3f} ms  {names[name]:8d} calls  {name}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
