"""How exact the trace's times are: totals of short-lived processes and p50/p90/p99/max,
against CLOCK_MONOTONIC measured around every call (docs/performance.md, "Times and
percentiles a user can trust").

    python -m benchmarks.accuracy [--runs 50] [--json FILE]

The driver is the tests' FAKE one (tests/c/fake_errors_libcuda.c: cuFakeSpinNs lasts a
chosen number of nanoseconds) and the probe tests/c/errorfake.c, which measures each call
around it; both are compiled here with `cc -O2` into build/bench/. Each call's true length
lies between what it was asked to last and what the probe measured, and so does each order
statistic; the error given is the report's distance from the nearer of the two (0 when it
lies between them), relative to the measured value.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "build" / "bench"
QS = (0.5, 0.9, 0.99)
FN = "cuFakeSpinNs"


def _compile() -> tuple[Path, Path, Path]:
    from shimgen.shim.pipeline import make_shim

    BENCH.mkdir(parents=True, exist_ok=True)
    fake, probe = BENCH / "libfake_errors_libcuda.so", BENCH / "errorfake"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-fvisibility=hidden",
                    "-Wl,-soname,libcuda.so.1", "-o", str(fake),
                    str(ROOT / "tests/c/fake_errors_libcuda.c")], check=True)
    subprocess.run(["cc", "-O2", "-o", str(probe), str(ROOT / "tests/c/errorfake.c"), "-ldl"],
                   check=True)
    shim = make_shim(fake, BENCH / "shims", hooks=(), require_real=False).library
    return fake, probe, shim


def _run(tools, env: dict, calls: list[str]) -> list[int]:
    fake, probe, shim = tools
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SHIMGEN_", "LD_"))}
    env = dict(base, LD_PRELOAD=str(shim), SHIMGEN_DRIVER=str(fake), SHIMGEN_QUIET="1", **env)
    out = subprocess.run([str(probe), "libcuda.so.1", *calls], env=env, capture_output=True,
                         text=True, check=True).stdout
    return [int(line.split()[1]) for line in out.splitlines() if line.startswith("ns ")]


def _asked(calls: list[str]) -> list[int]:
    out = []
    for c in calls:
        kind, v, n = c.split(":")
        if kind == "ns":
            out += [int(v)] * int(n)
    return out


def _exact(values: list[int], q: float) -> float:
    s = sorted(values)
    return float(s[max(math.ceil(q * len(s)) - 1, 0)])


def _error(got: float, low: float, high: float) -> float:
    """Relative distance of `got` from [low, high] (0 inside)."""
    if got < low:
        return (got - low) / high
    if got > high:
        return (got - high) / high
    return 0.0


def _trace(d: Path, output: str) -> tuple[float, float, tuple]:
    if output == "json":
        t = json.loads((d / "trace.json").read_text())["time"][FN]
        return t["total_ns"], t["max_ns"], (t["p50_ns"], t["p90_ns"], t["p99_ns"])
    from shimgen.report.model import merge
    from shimgen.trace import binary as tracefile

    m = merge([tracefile.load(p) for p in d.glob("*.shimtrace")])[FN]
    return m.total_ns, m.max_ns, m.percentiles(*QS)


def _env(d: Path, output: str) -> dict:
    d.mkdir(parents=True, exist_ok=True)
    key = "SHIMGEN_TRACE_FILE" if output == "json" else "SHIMGEN_TRACE_DIR"
    return {"SHIMGEN_TRACE": "time", key: str(d / "trace.json" if output == "json" else d)}


def _rates(d: Path, output: str) -> tuple[float, float | None]:
    """ns per tick as the report uses it, and (binary traces) by pair a alone: what a
    process killed right after its first call would get."""
    if output == "json":
        return json.loads((d / "trace.json").read_text())["ns_per_tick"], None
    from shimgen.trace import binary as tracefile

    (f,) = d.glob("*.shimtrace")
    h = tracefile._header(f.read_bytes(), tracefile.VERSION)
    a = (h["calib_ns_a"] - h["calib_ns0"]) / (h["calib_ticks_a"] - h["calib_ticks0"])
    return tracefile.load(f).ns_per_tick, a


def reference_rate(tools, work: Path) -> float:
    """ns per tick over a process of 2 s: its readings' widths are 10^-7 of the span."""
    d = work / "reference"
    _run(tools, _env(d, "dir"), ["ret:0:1", "ns:2000000000:1"])
    return _rates(d, "dir")[0]


def short_processes(tools, work: Path, runs: int, ref: float) -> dict:
    """Processes of 4 calls of 200 us after one of another function (about 1 ms of life,
    no cuInit): the total's error, per output."""
    out = {}
    for output in ("dir", "json"):
        errs, raw, rate, rate_a, untimed = [], [], [], [], 0
        for i in range(runs):
            d = work / f"short-{output}-{i}"
            calls = ["ns:200000:4"]
            values = _run(tools, _env(d, output), ["ret:0:1", *calls])
            total, _, _ = _trace(d, output)
            if total is None:
                untimed += 1
                continue
            errs.append(_error(total, sum(_asked(calls)), sum(values)))
            raw.append(total / sum(values) - 1)
            k, ka = _rates(d, output)
            rate.append(k / ref - 1)
            if ka is not None:
                rate_a.append(ka / ref - 1)
        raw.sort()
        out[output] = {"runs": runs, "without_times": untimed,
                       "vs_measured": [raw[0], raw[len(raw) // 2], raw[-1]] if raw else None,
                       "rate_vs_reference": _spread(rate), "pair_a_vs_reference": _spread(rate_a),
                       "max_abs_error": max(map(abs, errs)) if errs else None,
                       "median_abs_error": sorted(map(abs, errs))[len(errs) // 2] if errs
                       else None}
    return out


def _spread(xs: list[float]) -> list[float] | None:
    xs = sorted(xs)
    return [xs[0], xs[len(xs) // 2], xs[-1]] if xs else None


def _pct3(x: list[float] | None) -> str:
    return "-" if x is None else " ".join(f"{100 * v:+.4f}%" for v in x)


def distributions() -> dict[str, list[str]]:
    rng = random.Random(20261202)
    return {"clusters": ["ns:20000:450", "ns:37000:400", "ns:300000:130", "ns:2300000:20"],
            "spread": [f"ns:{int(8000 * 190 ** rng.random())}:1" for _ in range(600)],
            "one call": ["ns:10180000:1"]}


def percentile_errors(tools, work: Path) -> dict:
    out = {}
    for name, calls in distributions().items():
        for output in ("dir", "json"):
            d = work / f"pct-{name.replace(' ', '')}-{output}"
            values = _run(tools, _env(d, output), ["ret:0:1", *calls])
            asked = _asked(calls)
            total, mx, ps = _trace(d, output)
            row = {f"p{round(q * 100)}": _error(p, _exact(asked, q), _exact(values, q))
                   for q, p in zip(QS, ps, strict=True)}
            row["max"] = _error(mx, max(asked), max(values))
            row["total"] = _error(total, sum(asked), sum(values))
            out[f"{name} ({output})"] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.accuracy")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    tools = _compile()
    with tempfile.TemporaryDirectory(prefix="accuracy-") as tmp:
        ref = reference_rate(tools, Path(tmp))
        short = short_processes(tools, Path(tmp), args.runs, ref)
        pct = percentile_errors(tools, Path(tmp))
    print(f"reference: {ref:.9f} ns per tick over a process of 2 s")
    print("short processes (4 calls of 200 us, about 1 ms of life), min median max:")
    for output, r in short.items():
        print(f"  {output:5} runs {r['runs']}, without times {r['without_times']}; "
              f"ns per tick against the reference {_pct3(r['rate_vs_reference'])}; "
              f"by pair a alone {_pct3(r['pair_a_vs_reference'])}; total against the time "
              f"measured around the calls {_pct3(r['vs_measured'])}; outside [asked, "
              f"measured] by at most {100 * r['max_abs_error']:.4f}%")
    print("percentiles: error against the exact values")
    cols = ("p50", "p90", "p99", "max", "total")
    print(f"  {'distribution':22}" + "".join(f"{c:>10}" for c in cols))
    for name, row in pct.items():
        print(f"  {name:22}" + "".join(f"{100 * row[c]:>9.3f}%" for c in cols))
    if args.json:
        args.json.write_text(json.dumps({"reference_ns_per_tick": ref, "short": short,
                                         "percentiles": pct,
                                         "command": " ".join(sys.argv)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
